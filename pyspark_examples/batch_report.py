"""A batch report over a slice of a log topic: how many lines per service and level.

The slice is an offset range (Spark's startingOffsets / endingOffsets, "earliest", "latest" or
per-partition JSON) or a time range (startingTimestamp / endingTimestamp, milliseconds since the
epoch, looked up per partition by the broker's ListOffsets). The report goes to stdout, or with
--output-topic to a topic through Spark's Kafka sink, one record per (service, level) keyed by
service. See README.md beside this file for the commands.

`summarize` and `to_kafka_records` are plain DataFrame functions, tested without Kafka.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

try:
    from pyspark_examples.log_aggregation import build_session, parse_log_lines
except ImportError:  # run as a script (spark-submit pyspark_examples/batch_report.py): its folder is on sys.path
    from log_aggregation import build_session, parse_log_lines  # type: ignore[no-redef]


def summarize(logs: DataFrame) -> DataFrame:
    """service, level, lines: one row per pair, in a stable order. A missing level counts as UNKNOWN."""
    return (
        logs.select("service", F.coalesce(F.col("level"), F.lit("UNKNOWN")).alias("level"))
        .groupBy("service", "level")
        .agg(F.count(F.lit(1)).alias("lines"))
        .orderBy("service", "level")
    )


def to_kafka_records(summary: DataFrame) -> DataFrame:
    return summary.select(
        F.col("service").alias("key"),
        F.to_json(F.struct("service", "level", "lines")).alias("value"),
    )


def read_topic(spark: SparkSession, bootstrap_servers: str, topic: str, *,
               starting_offsets: str | None = None, ending_offsets: str | None = None,
               starting_timestamp: int | None = None, ending_timestamp: int | None = None) -> DataFrame:
    """The records of `topic` in the given range, as Spark's Kafka source returns them.

    Offsets and timestamps are alternatives for each end (Spark refuses both at once). An ending
    offset is exclusive; a starting timestamp starts each partition at its first record at or after
    it, an ending timestamp ends it before the first record at or after it.
    """
    if starting_offsets is not None and starting_timestamp is not None:
        raise ValueError("give the start as offsets or as a timestamp, not both")
    if ending_offsets is not None and ending_timestamp is not None:
        raise ValueError("give the end as offsets or as a timestamp, not both")
    reader = (
        spark.read.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap_servers)
        .option("subscribe", topic)
    )
    if starting_timestamp is not None:
        reader = reader.option("startingTimestamp", str(starting_timestamp))
    else:
        reader = reader.option("startingOffsets", starting_offsets or "earliest")
    if ending_timestamp is not None:
        reader = reader.option("endingTimestamp", str(ending_timestamp))
    else:
        reader = reader.option("endingOffsets", ending_offsets or "latest")
    return reader.load()


def write_topic(records: DataFrame, bootstrap_servers: str, topic: str) -> None:
    (
        records.write.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap_servers)
        .option("topic", topic)
        .save()
    )


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bootstrap-servers", default="127.0.0.1:9092")
    parser.add_argument("--topic", default="logs")
    parser.add_argument("--starting-offsets", help='earliest (default), latest, or e.g. \'{"logs":{"0":10,"1":-2}}\'')
    parser.add_argument("--ending-offsets", help='latest (default), or e.g. \'{"logs":{"0":50,"1":-1}}\' (exclusive)')
    parser.add_argument("--starting-timestamp", type=int, metavar="MS", help="epoch milliseconds")
    parser.add_argument("--ending-timestamp", type=int, metavar="MS", help="epoch milliseconds (exclusive)")
    parser.add_argument("--output-topic", help="write the report to this topic instead of stdout")
    args = parser.parse_args(argv)
    if args.starting_offsets and args.starting_timestamp is not None:
        parser.error("--starting-offsets and --starting-timestamp are alternatives")
    if args.ending_offsets and args.ending_timestamp is not None:
        parser.error("--ending-offsets and --ending-timestamp are alternatives")
    return args


def run(spark: SparkSession, args: argparse.Namespace) -> list[dict[str, object]]:
    """The report of `args`, computed on `spark`: written to --output-topic if given, and returned."""
    records = read_topic(
        spark, args.bootstrap_servers, args.topic,
        starting_offsets=args.starting_offsets, ending_offsets=args.ending_offsets,
        starting_timestamp=args.starting_timestamp, ending_timestamp=args.ending_timestamp,
    )
    # Cached: the report is both collected and written, and each action would read Kafka again.
    summary = summarize(parse_log_lines(records)).cache()
    try:
        if args.output_topic:
            write_topic(to_kafka_records(summary), args.bootstrap_servers, args.output_topic)
        return [row.asDict() for row in summary.collect()]
    finally:
        summary.unpersist()


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    spark = build_session("kbroker-batch-report")
    rows = run(spark, args)
    if not args.output_topic:
        for row in rows:
            print(json.dumps(row))
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
