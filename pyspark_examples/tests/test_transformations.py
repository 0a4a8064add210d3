"""The pipelines' transformations on a local Spark, without Kafka: exact rows for parsing, windowed
error counts (batch and streaming, with the watermark's late-data rule) and the report."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from pyspark_examples.tests.conftest import require_spark

require_spark()

from pyspark.sql import DataFrame, SparkSession  # noqa: E402
from pyspark.sql import functions as F  # noqa: E402

from pyspark_examples import batch_report, log_aggregation  # noqa: E402
from pyspark_examples.log_aggregation import error_counts, parse_log_lines, pipeline, to_kafka_records  # noqa: E402


def lines_df(spark: SparkSession, lines: list[str | dict]) -> DataFrame:
    values = [line if isinstance(line, str) else json.dumps(line) for line in lines]
    return spark.createDataFrame([(v,) for v in values], "value string")


def parsed_rows(df: DataFrame) -> list[tuple]:
    # Times as UTC strings: collect() would turn them into naive datetimes in the local zone.
    out = parse_log_lines(df).select(
        "service", "level", "message", F.date_format("ts", "yyyy-MM-dd'T'HH:mm:ss.SSS").alias("ts")
    )
    return [tuple(row) for row in out.collect()]


def ordered(rows: list[tuple[str, dict]]) -> list[tuple[str, dict]]:
    return sorted(rows, key=json.dumps)


def records(df: DataFrame) -> list[tuple[str, dict]]:
    """(key, parsed value) of to_kafka_records rows, sorted."""
    return ordered([(row.key, json.loads(row.value)) for row in df.collect()])


def count(service: str, start: str, end: str, errors: int) -> tuple[str, dict]:
    return service, {"service": service, "window_start": f"2024-05-01T{start}:00Z",
                     "window_end": f"2024-05-01T{end}:00Z", "errors": errors}


LINES = [
    {"ts": "2024-05-01T12:00:03Z", "service": "web", "level": "ERROR", "message": "upstream timeout"},
    {"ts": "2024-05-01T14:00:03.250+02:00", "service": "db", "level": "error ", "message": "deadlock"},
    {"ts": "2024-05-01 12:00:04", "service": " api ", "level": "warn", "other": [1, 2]},
    {"ts": "2024-05-01T12:00:05Z", "level": "ERROR", "message": "no service"},
    {"ts": "2024-05-01T12:00:05Z", "service": "", "level": "ERROR"},
    {"ts": "yesterday", "service": "web", "level": "INFO", "message": "bad time"},
    {"service": "web", "level": "INFO", "message": "no time"},
    "not json",
    "[1, 2]",
    "",
]


def test_parse_keeps_valid_lines_and_drops_the_rest(spark: SparkSession) -> None:
    assert parsed_rows(lines_df(spark, LINES)) == [
        ("web", "ERROR", "upstream timeout", "2024-05-01T12:00:03.000"),
        ("db", "ERROR", "deadlock", "2024-05-01T12:00:03.250"),
        ("api", "WARN", None, "2024-05-01T12:00:04.000"),
    ]


def test_parse_reads_kafka_binary_values_and_falls_back_to_the_record_timestamp(spark: SparkSession) -> None:
    # The shape of Spark's Kafka source: binary value, record timestamp.
    kafka_rows = lines_df(spark, LINES).select(
        F.col("value").cast("binary").alias("value"),
        F.lit("2024-05-01 13:00:00").cast("timestamp").alias("timestamp"),
    )
    assert parsed_rows(kafka_rows) == [
        ("web", "ERROR", "upstream timeout", "2024-05-01T12:00:03.000"),
        ("db", "ERROR", "deadlock", "2024-05-01T12:00:03.250"),
        ("api", "WARN", None, "2024-05-01T12:00:04.000"),
        ("web", "INFO", "bad time", "2024-05-01T13:00:00.000"),
        ("web", "INFO", "no time", "2024-05-01T13:00:00.000"),
    ]


def log(ts: str, service: str, level: str = "ERROR") -> dict:
    return {"ts": f"2024-05-01T{ts}Z", "service": service, "level": level, "message": "m"}


def test_error_counts_per_service_and_minute(spark: SparkSession) -> None:
    lines = [
        log("12:00:00", "web"), log("12:00:59.999", "web"), log("12:01:00", "web"),  # window edges
        log("12:00:10", "web", "WARN"), log("12:00:20", "db"), log("12:00:30", "db", "INFO"),
        log("12:03:00", "db", "error"), log("12:03:30", "cache", "FATAL"),
    ]
    counts = error_counts(parse_log_lines(lines_df(spark, lines)))
    assert records(to_kafka_records(counts)) == ordered([
        count("web", "12:00", "12:01", 2),
        count("web", "12:01", "12:02", 1),
        count("db", "12:00", "12:01", 1),
        count("db", "12:03", "12:04", 1),
    ])
    counts = error_counts(parse_log_lines(lines_df(spark, lines)), levels=("FATAL",))
    assert records(to_kafka_records(counts)) == [count("cache", "12:03", "12:04", 1)]


def write_json_lines(directory: Path, name: str, lines: list[dict]) -> None:
    # Renamed into place: the file source must never list a half-written file.
    staged = directory.parent / f".{name}"
    staged.write_text("".join(json.dumps(line) + "\n" for line in lines))
    os.replace(staged, directory / name)


def test_streaming_windows_are_final_once_the_watermark_passes(spark: SparkSession, tmp_path: Path) -> None:
    """Three runs of the pipeline with availableNow on one checkpoint, over a directory of JSON
    files (a replayable source, like a topic): each window is written once, when the watermark
    (newest event time - 2 min) passes its end; a line later than that is dropped."""
    source_dir = tmp_path / "in"
    source_dir.mkdir()
    checkpoint = str(tmp_path / "checkpoint")
    batches: list[list[tuple[str, dict]]] = []

    def run() -> list[tuple[str, dict]]:
        start = len(batches)
        stream = spark.readStream.format("text").load(str(source_dir))
        query = (
            pipeline(stream).writeStream.outputMode("append")
            .foreachBatch(lambda df, _batch_id: batches.append(records(df)))
            .option("checkpointLocation", checkpoint)
            .trigger(availableNow=True)
            .start()
        )
        assert query.awaitTermination(120), "availableNow query did not finish"
        assert query.exception() is None
        return [row for batch in batches[start:] for row in batch]

    write_json_lines(source_dir, "1.json", [
        log("12:00:05", "web"), log("12:00:20", "web", "INFO"), log("12:00:50", "web"), log("12:02:10", "db"),
    ])
    assert run() == [], "watermark 12:00:10: no window is final yet"

    write_json_lines(source_dir, "2.json", [log("12:00:30", "web"), log("12:04:30", "cache", "INFO")])
    # 12:00:30 was late but not too late (its window ends after the watermark, 12:00:10): counted.
    # The INFO line moved the watermark to 12:02:30 (lines of every level tell the time).
    assert run() == [count("web", "12:00", "12:01", 3)]

    write_json_lines(source_dir, "3.json", [
        log("12:00:40", "web"), log("12:02:50", "db"), log("12:03:10", "web"), log("12:10:00", "web", "INFO"),
    ])
    # 12:00:40's window was final: dropped, and nothing is emitted twice. 12:02:50's was not yet.
    assert ordered(run()) == ordered([count("db", "12:02", "12:03", 2), count("web", "12:03", "12:04", 1)])


def test_streaming_kafka_shaped_rows_with_a_processing_time_trigger(spark: SparkSession) -> None:
    """The whole pipeline() on rows shaped like Spark's Kafka source (binary JSON value, record
    timestamp, no `ts` in the JSON), from the rate-micro-batch source: 8 rows per micro-batch,
    event time 30 s further each micro-batch, so every minute holds values 16k..16k+15."""
    start_ms = 1714564800000  # 2024-05-01T12:00:00Z
    rate = (
        spark.readStream.format("rate-micro-batch")
        .option("rowsPerBatch", 8).option("advanceMillisPerBatch", 30_000).option("startTimestamp", start_ms)
        .load()
    )
    service = F.element_at(F.array(*(F.lit(s) for s in ("web", "web", "db", "cache"))), (F.col("value") % 4 + 1).cast("int"))
    level = F.when(service == "cache", F.lit("INFO")).otherwise(F.lit("ERROR"))
    kafka_like = rate.select(
        F.to_json(F.struct(service.alias("service"), level.alias("level"))).cast("binary").alias("value"),
        F.col("timestamp"),
    )
    emitted: list[tuple[str, dict]] = []
    query = (
        pipeline(kafka_like).writeStream.outputMode("append")
        .foreachBatch(lambda df, _batch_id: emitted.extend(records(df)))
        .trigger(processingTime="0 seconds")
        .start()
    )
    expected = [count(s, f"12:0{m}", f"12:0{m + 1}", n) for m in (0, 1) for s, n in (("web", 8), ("db", 4))]
    try:
        wait_for(lambda: all(e in emitted for e in expected), 90, lambda: f"emitted so far: {emitted}")
    finally:
        query.stop()
    assert query.exception() is None
    # However far the source ran before stop(), every emitted window is complete and emitted once.
    assert len(emitted) == len(set(map(json.dumps, emitted)))
    for key, value in emitted:
        assert value["errors"] == {"web": 8, "db": 4}[key], emitted


def wait_for(condition: Callable[[], bool], timeout_s: float, describe: Callable[[], str]) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"not reached in {timeout_s} s; {describe()}")
        time.sleep(0.2)


def test_report_counts_lines_per_service_and_level(spark: SparkSession) -> None:
    logs = parse_log_lines(lines_df(spark, [
        log("12:00:00", "web"), log("12:00:01", "web"), log("12:00:02", "web", "info"),
        log("12:00:03", "db", "WARN"), {"ts": "2024-05-01T12:00:04Z", "service": "db"},
    ]))
    summary = batch_report.summarize(logs)
    assert [tuple(row) for row in summary.collect()] == [
        ("db", "UNKNOWN", 1), ("db", "WARN", 1), ("web", "ERROR", 2), ("web", "INFO", 1),
    ]
    assert [(row.key, json.loads(row.value)) for row in batch_report.to_kafka_records(summary).collect()] == [
        ("db", {"service": "db", "level": "UNKNOWN", "lines": 1}),
        ("db", {"service": "db", "level": "WARN", "lines": 1}),
        ("web", {"service": "web", "level": "ERROR", "lines": 2}),
        ("web", {"service": "web", "level": "INFO", "lines": 1}),
    ]


def test_command_lines() -> None:
    args = log_aggregation.parse_args(["--checkpoint", "/tmp/cp"])
    assert (args.bootstrap_servers, args.input_topic, args.output_topic, args.trigger, args.available_now) == (
        "127.0.0.1:9092", "logs", "error-counts", 10.0, False)
    args = log_aggregation.parse_args(["--checkpoint", "/tmp/cp", "--available-now", "--input-topic", "in"])
    assert args.available_now and args.input_topic == "in"
    with pytest.raises(SystemExit):
        log_aggregation.parse_args(["--checkpoint", "/tmp/cp", "--available-now", "--trigger", "5"])
    with pytest.raises(SystemExit):
        log_aggregation.parse_args([])  # no checkpoint: a streaming job must be restartable

    args = batch_report.parse_args(["--starting-offsets", '{"logs":{"0":5}}', "--ending-timestamp", "1714564800000"])
    assert (args.starting_offsets, args.ending_timestamp, args.output_topic) == ('{"logs":{"0":5}}', 1714564800000, None)
    with pytest.raises(SystemExit):
        batch_report.parse_args(["--starting-offsets", "earliest", "--starting-timestamp", "1"])
    with pytest.raises(SystemExit):
        batch_report.parse_args(["--ending-offsets", "latest", "--ending-timestamp", "1"])


def test_read_topic_refuses_two_bounds_for_one_end(spark: SparkSession) -> None:
    # Spark would refuse them too, but only once the connector is there; this says which option clashed.
    with pytest.raises(ValueError, match="start"):
        batch_report.read_topic(spark, "127.0.0.1:9", "logs", starting_offsets="earliest", starting_timestamp=1)
    with pytest.raises(ValueError, match="end"):
        batch_report.read_topic(spark, "127.0.0.1:9", "logs", ending_offsets="latest", ending_timestamp=1)
