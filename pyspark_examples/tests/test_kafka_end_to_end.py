"""The examples end to end over a real kbroker, through Spark's own format("kafka") source and sink
(kafka-clients 3.9): batch reads by offset range and by timestamps, batch write, streaming with
availableNow and with a processing-time trigger, and a checkpointed streaming write restarted
mid-stream. Test data goes in, and results come out, through confluent-kafka, a client independent
of Spark's, and every check is exact.

They need Spark's Kafka connector, which is not on PyPI: without it they skip and say how to
provide it (see connector.py and pyspark_examples/README.md).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from pyspark_examples.tests.conftest import require_spark

require_spark()

from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402
from pyspark.sql import SparkSession  # noqa: E402
from pyspark.sql import functions as F  # noqa: E402
from pyspark.sql.streaming import StreamingQuery  # noqa: E402

from kbroker.partitioner import partition_for_key  # noqa: E402
from pyspark_examples import batch_report, log_aggregation  # noqa: E402
from tests.brokers import BrokerProcess  # noqa: E402
from tests.conftest import create_topic  # noqa: E402

BASE_MS = 1714564800000  # 2024-05-01T12:00:00Z
WAIT_S = 90.0
# For topics whose records carry BASE_MS-based timestamps: far older than any retention.ms, so the
# broker's retention (first run log.initial.task.delay.ms = 30 s after its start, as in Kafka) would
# delete them before a slow run reads them back. Historic data is kept as a user keeps it.
KEEP_FOREVER = {"retention.ms": "-1"}


@pytest.fixture(scope="module")
def broker(kafka_spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    # Depends on kafka_spark so that a missing connector skips before a broker is started.
    process = BrokerProcess(tmp_path_factory.mktemp("spark-broker")).start()
    yield process
    if process.alive:
        assert process.stop() == 0, process.log_text()


@pytest.fixture
def topic(broker: BrokerProcess, request: pytest.FixtureRequest) -> Callable[..., str]:
    counter = iter(range(100))

    def make(suffix: str, partitions: int = 1, configs: dict[str, str] | None = None) -> str:
        return create_topic(broker.bootstrap, f"spark-{request.node.name}-{suffix}-{next(counter)}", partitions,
                            configs)

    return make


@dataclass(frozen=True)
class Line:
    """One log line to produce: where it goes and what it says."""

    partition: int
    ts: str  # event time in the JSON, HH:MM:SS on 2024-05-01 (UTC)
    service: str
    level: str = "ERROR"
    record_ms: int | None = None  # the Kafka record's own timestamp (CreateTime)

    def value(self) -> bytes:
        return json.dumps({"ts": f"2024-05-01T{self.ts}Z", "service": self.service, "level": self.level,
                           "message": f"{self.level.lower()} at {self.ts}"}).encode()


def produce(bootstrap: str, topic: str, lines: list[Line]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for line in lines:
        kwargs = {} if line.record_ms is None else {"timestamp": line.record_ms}
        producer.produce(topic, line.value(), key=line.service.encode(), partition=line.partition,
                         headers=[("source", b"test")], **kwargs)
    assert producer.flush(30) == 0


@dataclass(frozen=True)
class Record:
    partition: int
    offset: int
    key: str | None
    value: dict


def end_offsets(bootstrap: str, topic: str) -> dict[int, int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "spark-tests-offsets"})
    try:
        partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        return {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in partitions}
    finally:
        consumer.close()


def read_all(bootstrap: str, topic: str) -> list[Record]:
    """Every record of `topic`, up to its end offsets now, ordered by partition and offset."""
    ends = end_offsets(bootstrap, topic)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "spark-tests-reader", "enable.auto.commit": False})
    records: list[Record] = []
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p, end in ends.items() if end > 0])
        remaining = {p for p, end in ends.items() if end > 0}
        deadline = time.monotonic() + 30
        while remaining:
            assert time.monotonic() < deadline, f"could not read {topic} to {ends}; got {records}"
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            if msg.offset() < ends[msg.partition()]:
                key = msg.key()
                records.append(Record(msg.partition(), msg.offset(), key.decode() if key is not None else None,
                                      json.loads(msg.value())))
            if msg.offset() + 1 >= ends[msg.partition()]:
                remaining.discard(msg.partition())
    finally:
        consumer.close()
    return sorted(records, key=lambda r: (r.partition, r.offset))


def wait_for_records(bootstrap: str, topic: str, count: int, timeout_s: float = WAIT_S) -> list[Record]:
    deadline = time.monotonic() + timeout_s
    while True:
        records = read_all(bootstrap, topic)
        if len(records) >= count or time.monotonic() > deadline:
            return records
        time.sleep(0.5)


def window_count(service: str, minute: int, errors: int) -> dict:
    return {"service": service, "window_start": f"2024-05-01T12:{minute:02d}:00Z",
            "window_end": f"2024-05-01T12:{minute + 1:02d}:00Z", "errors": errors}


def canonical(values: list[dict]) -> list[str]:
    return sorted(json.dumps(v, sort_keys=True) for v in values)


# ---- batch ----------------------------------------------------------------------------------------


def test_batch_read_by_offset_range(kafka_spark: SparkSession, broker: BrokerProcess, topic) -> None:
    logs = topic("logs", partitions=2, configs=KEEP_FOREVER)
    p0 = [Line(0, f"12:00:0{i}", "web" if i % 2 else "db", "ERROR" if i < 4 else "INFO") for i in range(6)]
    p1 = [Line(1, f"12:00:1{i}", "api", "WARN", record_ms=BASE_MS + i) for i in range(4)]
    produce(broker.bootstrap, logs, p0 + p1)

    # p0 from offset 2 to 5 (exclusive); p1 from earliest (-2) to latest (-1).
    starting = json.dumps({logs: {"0": 2, "1": -2}})
    ending = json.dumps({logs: {"0": 5, "1": -1}})
    df = (
        batch_report.read_topic(kafka_spark, broker.bootstrap, logs, starting_offsets=starting, ending_offsets=ending)
    )
    rows = df.select(
        "topic", "partition", "offset", F.col("key").cast("string").alias("key"), "value", "timestampType",
        F.col("timestamp").cast("long").alias("seconds"),
    ).orderBy("partition", "offset").collect()
    expected = [(0, offset, p0[offset]) for offset in (2, 3, 4)] + [(1, offset, p1[offset]) for offset in range(4)]
    assert [(r.topic, r.partition, r.offset, r.key, bytes(r.value), r.timestampType) for r in rows] == [
        (logs, partition, offset, line.service, line.value(), 0) for partition, offset, line in expected
    ]
    assert [r.seconds for r in rows if r.partition == 1] == [BASE_MS // 1000] * 4  # CreateTime kept

    # Headers come through when asked for.
    headers = (
        kafka_spark.read.format("kafka").option("kafka.bootstrap.servers", broker.bootstrap)
        .option("subscribe", logs).option("includeHeaders", "true").load()
        .select(F.col("headers")[0]["key"].alias("k"), F.col("headers")[0]["value"].cast("string").alias("v"))
        .distinct().collect()
    )
    assert [(h.k, h.v) for h in headers] == [("source", "test")]

    # The report over the same slice.
    args = batch_report.parse_args(["--bootstrap-servers", broker.bootstrap, "--topic", logs,
                                    "--starting-offsets", starting, "--ending-offsets", ending])
    assert batch_report.run(kafka_spark, args) == [
        {"service": "api", "level": "WARN", "lines": 4},
        {"service": "db", "level": "ERROR", "lines": 1},  # offset 2
        {"service": "db", "level": "INFO", "lines": 1},  # offset 4
        {"service": "web", "level": "ERROR", "lines": 1},  # offset 3
    ]


def test_batch_read_by_timestamps(kafka_spark: SparkSession, broker: BrokerProcess, topic) -> None:
    """startingTimestamp / endingTimestamp: the broker's ListOffsets by timestamp picks each
    partition's first record at or after the time; an end past a partition's last record is its end."""
    logs = topic("logs", partitions=2, configs=KEEP_FOREVER)
    p0 = [Line(0, f"12:00:{i:02d}", "web", record_ms=BASE_MS + 1000 * i) for i in range(10)]
    p1 = [Line(1, f"12:00:{i:02d}", "db", "WARN", record_ms=BASE_MS + 1000 * i) for i in range(4)]
    produce(broker.bootstrap, logs, p0 + p1)

    start_ms, end_ms = BASE_MS + 2000, BASE_MS + 5500
    df = batch_report.read_topic(kafka_spark, broker.bootstrap, logs, starting_timestamp=start_ms,
                                 ending_timestamp=end_ms)
    offsets = [(r.partition, r.offset) for r in df.select("partition", "offset").orderBy("partition", "offset").collect()]
    # p0: 2..5 (offset 6 is the first at or after 5.5 s, and the end is exclusive); p1: 2..3, its end.
    assert offsets == [(0, 2), (0, 3), (0, 4), (0, 5), (1, 2), (1, 3)]

    args = batch_report.parse_args(["--bootstrap-servers", broker.bootstrap, "--topic", logs,
                                    "--starting-timestamp", str(start_ms), "--ending-timestamp", str(end_ms)])
    assert batch_report.run(kafka_spark, args) == [
        {"service": "db", "level": "WARN", "lines": 2},
        {"service": "web", "level": "ERROR", "lines": 4},
    ]


def test_batch_write(kafka_spark: SparkSession, broker: BrokerProcess, topic) -> None:
    logs = topic("logs")
    report = topic("report", partitions=3)
    services = ["web", "db", "api", "cache", "queue"]
    lines = [Line(0, f"12:00:{i:02d}", services[i % 5], ("ERROR", "WARN", "INFO")[i % 3]) for i in range(30)]
    produce(broker.bootstrap, logs, lines)

    args = batch_report.parse_args(["--bootstrap-servers", broker.bootstrap, "--topic", logs, "--output-topic", report])
    summary = batch_report.run(kafka_spark, args)
    assert len(summary) == 15 and sum(row["lines"] for row in summary) == 30

    written = read_all(broker.bootstrap, report)
    assert canonical([r.value for r in written]) == canonical(summary)
    for record in written:
        assert record.key == record.value["service"]
        # Spark's producer placed each key as the Java client does (murmur2 over the 3 partitions
        # it learned from kbroker's metadata).
        assert record.partition == partition_for_key(record.key.encode(), 3), record


# ---- streaming ------------------------------------------------------------------------------------


def stream_args(broker: BrokerProcess, logs: str, out: str, checkpoint: Path, *extra: str):
    return log_aggregation.parse_args([
        "--bootstrap-servers", broker.bootstrap, "--input-topic", logs, "--output-topic", out,
        "--checkpoint", str(checkpoint), "--query-name", f"q_{out.replace('-', '_')}",
        # Strict offsets: a record missing where kbroker said it would be fails the query.
        "--fail-on-data-loss", *extra,
    ])


def run_available_now(spark: SparkSession, args) -> StreamingQuery:
    query = log_aggregation.start(spark, args)
    assert query.awaitTermination(WAIT_S), "the availableNow query did not finish"
    assert query.exception() is None, query.exception()
    return query


# Each wave is a body, then a closer: one line whose event time moves the watermark (newest event
# time - 2 min) far enough to make the body's windows final. A streaming test produces the closer
# only once the query has read the body: Spark's micro-batches may read the partitions unevenly,
# and a closer read before the end of the body would make the rest of it late.
FIRST_BODY = [
    Line(0, "12:00:01", "web"), Line(1, "12:00:02", "db"), Line(0, "12:00:30", "web"),
    Line(1, "12:00:40", "web", "INFO"), Line(0, "12:01:05", "web"), Line(1, "12:01:59", "db"),
    Line(0, "12:02:10", "api", "WARN"), Line(1, "12:02:20", "db"),
]
FIRST_CLOSER = [Line(0, "12:05:00", "web", "INFO")]  # watermark 12:03: 12:00, 12:01, 12:02 are final
FIRST_COUNTS = [window_count("web", 0, 2), window_count("db", 0, 1), window_count("web", 1, 1),
                window_count("db", 1, 1), window_count("db", 2, 1)]
SECOND_BODY = [
    Line(1, "12:02:30", "db"),  # too late: its window is final (and was written); dropped
    Line(0, "12:04:10", "api"), Line(1, "12:04:50", "api"), Line(0, "12:05:30", "web"),
]
SECOND_CLOSER = [Line(1, "12:08:00", "web", "INFO")]  # watermark 12:06: 12:04 and 12:05 are final
SECOND_COUNTS = [window_count("api", 4, 2), window_count("web", 5, 1)]
ALL_LINES = FIRST_BODY + FIRST_CLOSER + SECOND_BODY + SECOND_CLOSER


def test_streaming_available_now(kafka_spark: SparkSession, broker: BrokerProcess, topic, tmp_path: Path) -> None:
    logs, out = topic("logs", partitions=2), topic("counts", partitions=2)
    args = stream_args(broker, logs, out, tmp_path / "checkpoint", "--available-now")

    produce(broker.bootstrap, logs, FIRST_BODY + FIRST_CLOSER)
    run_available_now(kafka_spark, args)
    first = read_all(broker.bootstrap, out)
    assert canonical([r.value for r in first]) == canonical(FIRST_COUNTS)
    assert all(r.key == r.value["service"] for r in first)

    # A second run on the same checkpoint reads only what came since, with the window state kept.
    produce(broker.bootstrap, logs, SECOND_BODY + SECOND_CLOSER)
    query = run_available_now(kafka_spark, args)
    assert canonical([r.value for r in read_all(broker.bootstrap, out)]) == canonical(FIRST_COUNTS + SECOND_COUNTS)
    per_partition = {str(p): sum(1 for line in ALL_LINES if line.partition == p) for p in (0, 1)}
    assert last_end_offsets(query) == {logs: per_partition}


def last_end_offsets(query: StreamingQuery) -> dict:
    progress = query.lastProgress
    assert progress is not None
    # From the progress's JSON: pyspark 4's SourceProgress.endOffset is str() of a dict, not JSON.
    raw = progress.json if hasattr(progress, "json") else json.dumps(progress)
    return json.loads(raw)["sources"][0]["endOffset"]


def wait_caught_up(query: StreamingQuery, logs: str, ends: dict[int, int], timeout_s: float = WAIT_S) -> None:
    """Until the query has read `logs` to `ends` and has no micro-batch running."""
    want = {logs: {str(p): offset for p, offset in ends.items()}}
    deadline = time.monotonic() + timeout_s
    while True:
        assert query.exception() is None, query.exception()
        if query.lastProgress is not None and last_end_offsets(query) == want and not query.status["isTriggerActive"]:
            return
        assert time.monotonic() < deadline, f"query not caught up with {want}: {query.status} {query.lastProgress}"
        time.sleep(0.2)


def produce_and_catch_up(query: StreamingQuery, bootstrap: str, logs: str, lines: list[Line]) -> None:
    produce(bootstrap, logs, lines)
    wait_caught_up(query, logs, end_offsets(bootstrap, logs))


def test_streaming_processing_time_trigger(kafka_spark: SparkSession, broker: BrokerProcess, topic,
                                           tmp_path: Path) -> None:
    logs, out = topic("logs", partitions=2), topic("counts")
    query = log_aggregation.start(kafka_spark, stream_args(broker, logs, out, tmp_path / "checkpoint", "--trigger", "1"))
    try:
        # Lines produced while the query runs are picked up by the next micro-batches.
        produce_and_catch_up(query, broker.bootstrap, logs, FIRST_BODY)
        produce(broker.bootstrap, logs, FIRST_CLOSER)
        first = wait_for_records(broker.bootstrap, out, len(FIRST_COUNTS))
        assert canonical([r.value for r in first]) == canonical(FIRST_COUNTS)
        produce_and_catch_up(query, broker.bootstrap, logs, SECOND_BODY)
        produce(broker.bootstrap, logs, SECOND_CLOSER)
        both = wait_for_records(broker.bootstrap, out, len(FIRST_COUNTS) + len(SECOND_COUNTS))
        wait_caught_up(query, logs, end_offsets(broker.bootstrap, logs))
    finally:
        query.stop()
    assert query.exception() is None
    assert canonical([r.value for r in both]) == canonical(FIRST_COUNTS + SECOND_COUNTS)
    # Nothing more came after: every window was written once.
    assert len(read_all(broker.bootstrap, out)) == len(FIRST_COUNTS) + len(SECOND_COUNTS)


def committed_batches(checkpoint: Path) -> tuple[list[int], list[int]]:
    """Batch ids in the checkpoint's offsets log (planned) and commits log (done)."""
    def ids(folder: str) -> list[int]:
        return sorted(int(p.name) for p in (checkpoint / folder).iterdir() if p.name.isdigit())

    return ids("offsets"), ids("commits")


def test_streaming_write_survives_a_restart(kafka_spark: SparkSession, broker: BrokerProcess, topic,
                                            tmp_path: Path) -> None:
    """Stopped mid-stream and started again on its checkpoint, the query neither re-reads what it
    had read (no window counted twice, nothing written twice) nor skips what came meanwhile, and
    a window open across the restart counts lines from both sides of it.

    The query is stopped between micro-batches, where Spark's guarantee is exactly this. (Its Kafka
    sink is at-least-once: killed in the middle of a micro-batch, it would write that micro-batch
    again on restart; that is Spark's behaviour with any broker and not what this test is about.)
    """
    logs, out = topic("logs", partitions=2), topic("counts")
    checkpoint = tmp_path / "checkpoint"
    args = stream_args(broker, logs, out, checkpoint, "--trigger", "1", "--max-offsets-per-trigger", "3")

    query = log_aggregation.start(kafka_spark, args)
    try:
        produce_and_catch_up(query, broker.bootstrap, logs, FIRST_BODY)
        produce(broker.bootstrap, logs, FIRST_CLOSER)
        wait_for_records(broker.bootstrap, out, len(FIRST_COUNTS))
        wait_caught_up(query, logs, end_offsets(broker.bootstrap, logs))
    finally:
        query.stop()
    assert query.exception() is None
    planned, done = committed_batches(checkpoint)
    assert planned == done and len(planned) >= 3, "several micro-batches (3 offsets each), all committed"
    assert canonical([r.value for r in read_all(broker.bootstrap, out)]) == canonical(FIRST_COUNTS)

    # While it is down: more lines, among them 12:04 errors whose window stays open across the
    # restart, and one that only the restored watermark (12:03) knows to be too late.
    produce(broker.bootstrap, logs, SECOND_BODY[:3])
    query = log_aggregation.start(kafka_spark, args)
    try:
        wait_caught_up(query, logs, end_offsets(broker.bootstrap, logs))
        produce_and_catch_up(query, broker.bootstrap, logs, SECOND_BODY[3:])
        produce(broker.bootstrap, logs, SECOND_CLOSER)
        wait_for_records(broker.bootstrap, out, len(FIRST_COUNTS) + len(SECOND_COUNTS))
        wait_caught_up(query, logs, end_offsets(broker.bootstrap, logs))
    finally:
        query.stop()
    assert query.exception() is None
    written = read_all(broker.bootstrap, out)
    assert canonical([r.value for r in written]) == canonical(FIRST_COUNTS + SECOND_COUNTS)
    planned_after, done_after = committed_batches(checkpoint)
    assert planned_after == done_after and planned_after[: len(planned)] == planned
