"""Spark's own Kafka source (format("kafka"), kafka-clients 3.9) reading a filtered view of kbroker
(docs/views.md): a batch read from earliest to latest and a streaming read with availableNow give
exactly the committed records the view's filter keeps, at their source offsets.

The source topic (two partitions) is written by confluent-kafka: records tagged with a `tag`
header, in each codec (none, lz4, zstd, gzip), a committed and an aborted transaction (tagged
records in both), and last a run of records the view does not keep. So a partition's last offsets
are not the view's: Spark's reader, which reads each partition's offset range up to the end
offset it planned (the high watermark), must find the end of the range through the gap marker
the broker ends the view's answer with, and the streaming query, cut into micro-batches by
maxOffsetsPerTrigger, starts and ends ranges on offsets the view filtered out.

At scale (slow): the million-record source of tests/views_million.py (10 tags over four
partitions, every codec, aborted transactions) and a view per tag, all ten read by one batch
query (subscribePattern, earliest to latest, read_committed, failOnDataLoss): per view and
partition exactly the expected offsets, and the values, compared through a SHA-256 over them in
offset order, computed by Spark.

They need Spark's Kafka connector, as test_kafka_end_to_end.py does: without it they skip and say
how to provide it (see connector.py and pyspark_examples/README.md).
"""

from __future__ import annotations

import hashlib
import json
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from pyspark_examples.tests.conftest import require_spark

require_spark()

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition  # noqa: E402
from pyspark.sql import DataFrame, SparkSession  # noqa: E402
from pyspark.sql import functions as F  # noqa: E402

from protocol.errors import ErrorCode  # noqa: E402
from protocol.record_batch import decode_batches  # noqa: E402
from tests import views_million  # noqa: E402
from tests.brokers import BrokerProcess  # noqa: E402
from tests.conftest import create_topic  # noqa: E402
from tests.rawclient import RawClient  # noqa: E402

WAIT_S = 120.0
PARTITIONS = 2
TAGS = ("paid", "refunded", "created")
VIEW_TAG = "paid"
FETCH = 1

# Every read of a view here: read_committed (aborted records are never the view's), and strict
# about offsets: a record missing where the source's offsets say one is fails the query, so the
# view's gaps must look to Spark as the gaps transactions leave (invisible, not lost).
VIEW_OPTIONS = {"kafka.isolation.level": "read_committed", "failOnDataLoss": "true", "includeHeaders": "true"}


@pytest.fixture(scope="module")
def broker(kafka_spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    # Depends on kafka_spark so that a missing connector skips before a broker is started.
    process = BrokerProcess(tmp_path_factory.mktemp("spark-views-broker"), overrides={
        "offsets.topic.num.partitions": "1", "transaction.state.log.num.partitions": "1"}).start()
    yield process
    if process.alive:
        assert process.stop() == 0, process.log_text()


@dataclass(frozen=True)
class Sent:
    partition: int
    offset: int
    key: bytes | None
    value: bytes
    timestamp: int
    tag: str | None
    committed: bool


@dataclass(frozen=True)
class Source:
    name: str
    sent: list[Sent]
    high_watermarks: dict[int, int]

    def expected(self, tag: str) -> list[tuple[int, int, bytes | None, bytes, int]]:
        """(partition, offset, key, value, timestamp) of the committed records tagged `tag`, in order."""
        return sorted((s.partition, s.offset, s.key, s.value, s.timestamp) for s in self.sent
                      if s.committed and s.tag == tag)


def produce(bootstrap: str, topic: str, base_ms: int, indexes: range, codec: str, tag_of: Any,
            transactional_id: str | None = None, abort: bool = False) -> list[Sent]:
    config: dict[str, Any] = {"bootstrap.servers": bootstrap, "compression.type": codec, "linger.ms": 20}
    if transactional_id:
        config["transactional.id"] = transactional_id
    producer = Producer(config)
    if transactional_id:
        producer.init_transactions(30)
        producer.begin_transaction()
    sent: list[Sent] = []
    errors: list[KafkaError] = []

    def delivered(error: KafkaError | None, message: Any, tag: str | None, ts: int) -> None:
        if error is not None:
            errors.append(error)
        else:
            sent.append(Sent(message.partition(), message.offset(), message.key(), message.value(), ts, tag, not abort))

    for i in indexes:
        tag = tag_of(i)
        headers = [("n", str(i).encode())] + ([("tag", tag.encode())] if tag is not None else [])
        key = None if i % 11 == 0 else f"user-{i % 13}".encode()
        ts = base_ms + i
        producer.produce(topic, value=f"order-{i}-".encode() + b"x" * 40, key=key, headers=headers,
                         partition=i % PARTITIONS, timestamp=ts,
                         on_delivery=lambda e, m, t=tag, ts=ts: delivered(e, m, t, ts))
    assert producer.flush(30) == 0
    if transactional_id:
        (producer.abort_transaction if abort else producer.commit_transaction)(30)
    assert producer.flush(30) == 0
    assert errors == []
    assert len(sent) == len(indexes)
    return sent


def mixed_tag(i: int) -> str | None:
    return None if i % 7 == 0 else TAGS[i % len(TAGS)]


@pytest.fixture(scope="module")
def source(broker: BrokerProcess) -> Source:
    bootstrap = broker.bootstrap
    name = create_topic(bootstrap, f"orders-{uuid.uuid4().hex[:8]}", PARTITIONS)
    base_ms = int(time.time() * 1000) - 3_600_000
    sent: list[Sent] = []
    sent += produce(bootstrap, name, base_ms, range(0, 150), "none", mixed_tag)
    sent += produce(bootstrap, name, base_ms, range(150, 300), "lz4", lambda i: TAGS[(i // 6) % 3])
    sent += produce(bootstrap, name, base_ms, range(300, 450), "zstd", mixed_tag)
    sent += produce(bootstrap, name, base_ms, range(450, 600), "gzip", mixed_tag)
    txid = f"spark-views-{name}"
    sent += produce(bootstrap, name, base_ms, range(600, 680), "zstd", mixed_tag, transactional_id=txid)
    sent += produce(bootstrap, name, base_ms, range(680, 760), "lz4", mixed_tag, transactional_id=txid, abort=True)
    # The newest records are not the view's.
    sent += produce(bootstrap, name, base_ms, range(760, 820), "none", lambda i: None if i % 2 else "refunded")
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused"})
    try:
        hw = {p: consumer.get_watermark_offsets(TopicPartition(name, p), timeout=10)[1] for p in range(PARTITIONS)}
    finally:
        consumer.close()
    return Source(name, sorted(sent, key=lambda s: (s.partition, s.offset)), hw)


@pytest.fixture(scope="module")
def view(broker: BrokerProcess, source: Source) -> str:
    name = create_topic(broker.bootstrap, f"paid-{uuid.uuid4().hex[:8]}", PARTITIONS,
                        {"view.source.topic": source.name, "view.filter": f"tag = '{VIEW_TAG}'"})
    expected = source.expected(VIEW_TAG)
    for p in range(PARTITIONS):
        # The premise: the view's answer for the whole partition ends with a gap marker from after
        # its last record to the high watermark.
        last_kept = max(offset for partition, offset, *_ in expected if partition == p)
        with RawClient(broker.bootstrap) as client:
            part = client.request(FETCH, 12, {
                "replica_id": -1, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": 50 << 20, "isolation_level": 1,
                "session_id": 0, "session_epoch": -1,
                "topics": [{"topic": name, "partitions": [
                    {"partition": p, "fetch_offset": 0, "partition_max_bytes": 50 << 20}]}],
            }).responses[0].partitions[0]
        assert part.error_code == ErrorCode.NO_ERROR and part.high_watermark == source.high_watermarks[p]
        gap = decode_batches(part.records)[-1]
        assert (gap.is_control, gap.producer_id, gap.last_offset) == (True, -1, part.high_watermark - 1)
        assert last_kept < gap.base_offset
    return name


def rows_of(df: DataFrame) -> DataFrame:
    return df.select("topic", "partition", "offset", "key", "value",
                     F.expr("unix_millis(timestamp)").alias("ms"), "timestampType", "headers")


def as_tuples(rows: list[Any]) -> list[tuple[int, int, bytes | None, bytes, int]]:
    return sorted((r.partition, r.offset, None if r.key is None else bytes(r.key), bytes(r.value), r.ms) for r in rows)


def check_rows(rows: list[Any], view: str, source: Source) -> None:
    expected = source.expected(VIEW_TAG)
    assert len(rows) == len(expected)
    assert as_tuples(rows) == expected
    assert {r.topic for r in rows} == {view}
    assert {r.timestampType for r in rows} == {0}  # CreateTime, as produced
    # Each row's headers are its record's: its index, then its tag.
    assert all([h.key for h in r.headers] == ["n", "tag"] and bytes(r.headers[1].value) == VIEW_TAG.encode()
               for r in rows)


def test_batch_read_of_a_view_gives_exactly_its_committed_records(kafka_spark: SparkSession, broker: BrokerProcess,
                                                                  source: Source, view: str) -> None:
    reader = (kafka_spark.read.format("kafka").option("kafka.bootstrap.servers", broker.bootstrap)
              .option("subscribe", view).option("startingOffsets", "earliest").option("endingOffsets", "latest"))
    for key, value in VIEW_OPTIONS.items():
        reader = reader.option(key, value)
    check_rows(rows_of(reader.load()).collect(), view, source)


def test_streaming_read_of_a_view_with_available_now(kafka_spark: SparkSession, broker: BrokerProcess,
                                                     source: Source, view: str, tmp_path: Path) -> None:
    stream = (kafka_spark.readStream.format("kafka").option("kafka.bootstrap.servers", broker.bootstrap)
              .option("subscribe", view).option("startingOffsets", "earliest")
              # Several micro-batches, whose offset ranges start and end inside the view's gaps.
              .option("maxOffsetsPerTrigger", "97"))
    for key, value in VIEW_OPTIONS.items():
        stream = stream.option(key, value)
    table = f"view_rows_{uuid.uuid4().hex[:8]}"
    query = (rows_of(stream.load()).writeStream.format("memory").queryName(table)
             .option("checkpointLocation", str(tmp_path / "checkpoint")).trigger(availableNow=True).start())
    try:
        assert query.awaitTermination(WAIT_S), "the availableNow query did not finish"
        assert query.exception() is None, query.exception()
        rows = kafka_spark.table(table).collect()
        progress = [json.loads(p.json) if hasattr(p, "json") else p for p in query.recentProgress]
    finally:
        query.stop()
    check_rows(rows, view, source)
    assert len([p for p in progress if p["numInputRows"] > 0]) >= 4, "maxOffsetsPerTrigger cut the read up"
    assert progress[-1]["sources"][0]["endOffset"] == {
        view: {str(p): hw for p, hw in source.high_watermarks.items()}}, "the query read to the high watermark"
    assert sum(p["numInputRows"] for p in progress) == len(source.expected(VIEW_TAG))


# -- at scale (slow) --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def million(broker: BrokerProcess) -> tuple[str, dict[str, list[views_million.Row]]]:
    return views_million.build_source(broker.bootstrap)


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_batch_read_of_ten_views_of_a_million_records(kafka_spark: SparkSession, broker: BrokerProcess,
                                                      million: tuple[str, dict[str, list[views_million.Row]]]) -> None:
    name, expected = million
    views = {views_million.view_name(name, tag): tag for tag in views_million.TAGS}
    reader = (kafka_spark.read.format("kafka").option("kafka.bootstrap.servers", broker.bootstrap)
              # The ten views, not their source (a pattern matches the whole topic name).
              .option("subscribePattern", f"{name}-t[0-9]")
              .option("startingOffsets", "earliest").option("endingOffsets", "latest"))
    for key, value in VIEW_OPTIONS.items():
        reader = reader.option(key, value)
    rows = reader.load().select(
        "topic", "partition", "offset", F.hex("value").alias("value"),
        F.expr("try_element_at(filter(headers, h -> h.key = 'tag'), 1).value").cast("string").alias("tag"))
    # ~950,000 rows, summed up by Spark per view and partition: the offsets, in order, and a
    # SHA-256 over the values (in hex, comma-separated) in offset order.
    summary = (rows.groupBy("topic", "partition")
               .agg(F.count("*").alias("n"), F.collect_set("tag").alias("tags"),
                    F.sort_array(F.collect_list(F.struct("offset", "value"))).alias("records"))
               .select("topic", "partition", "n", "tags", F.col("records.offset").alias("offsets"),
                       F.sha2(F.array_join(F.col("records.value"), ","), 256).alias("sha256")))
    got = {(r.topic, r.partition): r for r in summary.collect()}

    assert set(got) == {(view, p) for view in views for p in range(views_million.PARTITIONS)}
    for view, tag in views.items():
        for p in range(views_million.PARTITIONS):
            want = [row for row in expected[tag] if row[0] == p]
            found = got[(view, p)]
            assert found.n == len(want), f"{view} p{p}"
            assert found.offsets == [offset for _, offset, _ in want], f"{view} p{p}"
            assert found.sha256 == hashlib.sha256(",".join(value.hex().upper() for _, _, value in want).encode()
                                                  ).hexdigest(), f"{view} p{p}"
            assert found.tags == [tag], f"{view} p{p}"
    assert sum(r.n for r in got.values()) == sum(len(rows) for rows in expected.values())
