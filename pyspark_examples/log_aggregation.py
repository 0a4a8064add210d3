"""Log aggregation with Spark Structured Streaming over kbroker: error counts per service per minute.

JSON log lines are read from a topic with Spark's built-in Kafka source, ERROR lines are counted per
service in one-minute event-time windows, and each window's final count is written to another topic
with Spark's Kafka sink, keyed by service. See README.md beside this file for the commands.

The transformations (`parse_log_lines`, `error_counts`, `to_kafka_records`) take and return
DataFrames and know nothing of Kafka, so they are tested on their own with local sources; `main()`
only wires them between `readStream.format("kafka")` and `writeStream.format("kafka")`.

A log line looks like:

    {"ts": "2024-05-01T12:00:03Z", "service": "web", "level": "ERROR", "message": "upstream timeout"}

and an output record has key `web` and value:

    {"service":"web","window_start":"2024-05-01T12:00:00Z","window_end":"2024-05-01T12:01:00Z","errors":3}
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery
from pyspark.sql.types import StringType, StructField, StructType

# What a log line may carry. Fields not listed are ignored; a listed field that is missing is null.
LOG_LINE_SCHEMA = StructType([
    # A string, converted below: a bad time must cost that line its time, not the whole line.
    StructField("ts", StringType()),
    StructField("service", StringType()),
    StructField("level", StringType()),
    StructField("message", StringType()),
])

OUTPUT_TIMESTAMP_FORMAT = "yyyy-MM-dd'T'HH:mm:ssXXX"

WINDOW = "1 minute"
# How late (in event time) a line may arrive and still be counted: a window's count is final, and
# written once, when the newest event time seen is this far past the window's end.
WATERMARK = "2 minutes"


def _value_as_string(df: DataFrame) -> Column:
    # Kafka's source gives `value` as binary; a text file or a test's DataFrame gives a string.
    value_type = df.schema["value"].dataType
    return F.col("value") if isinstance(value_type, StringType) else F.col("value").cast("string")


def parse_log_lines(df: DataFrame) -> DataFrame:
    """service, level, message, ts from the JSON in `value` (binary or string).

    Lines that are not JSON objects, or lack a service, are dropped rather than failing the job:
    one bad producer must not stop the pipeline. A line without its own `ts` takes the Kafka
    record's timestamp when the input has one (the `timestamp` column of Spark's Kafka source).
    Levels are upper-cased and trimmed ("error " and "ERROR" are the same level).
    """
    parsed = F.from_json(_value_as_string(df), LOG_LINE_SCHEMA)
    # Cast semantics: ISO-8601 in its common spellings ("2024-05-01T12:00:03Z", "...03.25+02:00",
    # "2024-05-01 12:00:03"); without an offset the session time zone applies, which
    # build_session() pins to UTC. try_: under ANSI mode (Spark 4's default) a plain cast of a bad
    # string fails the query.
    ts = F.try_to_timestamp(parsed["ts"])
    if "timestamp" in df.columns:
        ts = F.coalesce(ts, F.col("timestamp"))
    result = df.select(
        F.trim(parsed["service"]).alias("service"),
        F.upper(F.trim(parsed["level"])).alias("level"),
        parsed["message"].alias("message"),
        ts.alias("ts"),
    )
    return result.where(F.col("service").isNotNull() & (F.col("service") != "") & F.col("ts").isNotNull())


def error_counts(logs: DataFrame, window: str = WINDOW, watermark: str = WATERMARK,
                 levels: Sequence[str] = ("ERROR",)) -> DataFrame:
    """Per service and event-time window, how many lines had one of `levels`.

    The watermark bounds the state a stream keeps and makes each window final: in append mode a
    window is emitted once, when the watermark passes its end, and lines later than that are
    dropped. On a batch DataFrame the watermark is ignored and every window is counted.
    """
    # Every line, whatever its level, tells how far event time has got: a quiet minute without
    # errors must still close the windows before it. So lines are not filtered out before the
    # aggregation but counted conditionally. (A filter on the level would not do, even written
    # after withWatermark: Spark's optimizer pushes filters that do not read the event-time column
    # below the watermark, which then only sees errors.)
    is_counted = F.col("level").isin(*levels)
    counted = (
        logs.withWatermark("ts", watermark)
        .groupBy(F.window("ts", window).alias("window"), F.col("service"))
        .agg(F.count(F.when(is_counted, True)).alias("errors"))
        .where(F.col("errors") > 0)
    )
    return counted.select(
        F.col("service"),
        F.col("window.start").alias("window_start"),
        F.col("window.end").alias("window_end"),
        F.col("errors"),
    )


def to_kafka_records(counts: DataFrame) -> DataFrame:
    """The key and value columns Spark's Kafka sink writes: key = service, value = the row as JSON."""
    value = F.to_json(
        F.struct("service", "window_start", "window_end", "errors"),
        {"timestampFormat": OUTPUT_TIMESTAMP_FORMAT},
    )
    return counts.select(F.col("service").alias("key"), value.alias("value"))


def pipeline(source: DataFrame, window: str = WINDOW, watermark: str = WATERMARK) -> DataFrame:
    """Kafka source rows in, Kafka sink rows out."""
    return to_kafka_records(error_counts(parse_log_lines(source), window, watermark))


# ---- IO -------------------------------------------------------------------------------------------


def read_logs_stream(spark: SparkSession, bootstrap_servers: str, topic: str,
                     starting_offsets: str = "earliest", max_offsets_per_trigger: int | None = None,
                     fail_on_data_loss: bool = False) -> DataFrame:
    reader = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap_servers)
        .option("subscribe", topic)
        # Only used on the very first run: a restarted query resumes from its checkpoint.
        .option("startingOffsets", starting_offsets)
        # By default records deleted by retention before they were read are a gap Spark logs, not
        # one it stops on: a log pipeline that was down for longer than the retention goes on.
        .option("failOnDataLoss", str(fail_on_data_loss).lower())
    )
    if max_offsets_per_trigger is not None:
        reader = reader.option("maxOffsetsPerTrigger", str(max_offsets_per_trigger))
    return reader.load()


def start_query(records: DataFrame, bootstrap_servers: str, topic: str, checkpoint: str,
                trigger_seconds: float | None = None, available_now: bool = False,
                query_name: str | None = None) -> StreamingQuery:
    """Write `records` (key, value) to `topic` with Spark's Kafka sink.

    The checkpoint holds the source offsets and the window state, so a restarted query carries
    on where it stopped. Spark's Kafka sink is at-least-once: a micro-batch interrupted after
    writing and before committing is written again on restart; one stopped between micro-batches
    is not.
    """
    writer = (
        records.writeStream.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap_servers)
        .option("topic", topic)
        .option("checkpointLocation", checkpoint)
        .outputMode("append")
    )
    if query_name:
        writer = writer.queryName(query_name)
    if available_now:
        writer = writer.trigger(availableNow=True)
    elif trigger_seconds is not None:
        writer = writer.trigger(processingTime=f"{trigger_seconds} seconds")
    return writer.start()


def build_session(app_name: str) -> SparkSession:
    # Windows are cut in UTC whatever the machine's zone, and timestamps without an offset are UTC.
    return (
        SparkSession.builder.appName(app_name)
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bootstrap-servers", default="127.0.0.1:9092")
    parser.add_argument("--input-topic", default="logs")
    parser.add_argument("--output-topic", default="error-counts")
    parser.add_argument("--checkpoint", required=True,
                        help="checkpoint directory; keep it to restart the query where it stopped")
    trigger = parser.add_mutually_exclusive_group()
    trigger.add_argument("--trigger", type=float, metavar="SECONDS", default=10.0,
                         help="run a micro-batch every SECONDS (default 10) until stopped")
    trigger.add_argument("--available-now", action="store_true",
                         help="process what the topic holds now, then stop")
    parser.add_argument("--starting-offsets", default="earliest",
                        help="earliest, latest or Spark's per-partition JSON; first run only")
    parser.add_argument("--max-offsets-per-trigger", type=int, default=None)
    parser.add_argument("--fail-on-data-loss", action="store_true",
                        help="stop when records were deleted before they were read (default: skip them)")
    parser.add_argument("--window", default=WINDOW)
    parser.add_argument("--watermark", default=WATERMARK)
    parser.add_argument("--query-name", default="error_counts")
    return parser.parse_args(argv)


def start(spark: SparkSession, args: argparse.Namespace) -> StreamingQuery:
    """The pipeline of `args` on `spark`, started: Kafka source, transformations, Kafka sink."""
    source = read_logs_stream(spark, args.bootstrap_servers, args.input_topic, args.starting_offsets,
                              args.max_offsets_per_trigger, args.fail_on_data_loss)
    return start_query(
        pipeline(source, args.window, args.watermark), args.bootstrap_servers, args.output_topic,
        args.checkpoint, trigger_seconds=None if args.available_now else args.trigger,
        available_now=args.available_now, query_name=args.query_name,
    )


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    spark = build_session("kbroker-log-aggregation")
    query = start(spark, args)
    try:
        query.awaitTermination()
    except KeyboardInterrupt:
        # Stopping between micro-batches loses and repeats nothing; see start_query().
        query.stop()
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
