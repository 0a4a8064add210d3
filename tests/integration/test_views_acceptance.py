"""Filtered views at scale (slow; `scripts/test.sh -m slow -k views`): 1,000,000 records with
10 tags, written by producers with every codec and by transactional producers of which some
abort, and a view per tag. confluent-kafka and kafka-python read every view: each gives exactly
the committed records with its tag, in order, no more, no fewer. A consumer group on a view
commits half way, the broker restarts, and the group resumes exactly where it was. The source
and views are tests/views_million.py's (compat_tests/test_java_views.py and
pyspark_examples/tests/test_views.py read the same with the Java client and Spark)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

from tests.brokers import BrokerProcess
from tests.views_million import BROKER_OVERRIDES, PARTITIONS, TAGS, Row, build_source, view_name

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path_factory.mktemp("views-1m"), overrides=BROKER_OVERRIDES).start()
    yield process
    if process.alive:
        assert process.stop() == 0, process.log_tail()


@pytest.fixture(scope="module")
def source(broker: BrokerProcess) -> tuple[str, dict[str, list[Row]]]:
    """The source topic and, by tag, the committed rows a view of the tag must give, in order
    (tests/views_million.py builds them)."""
    return build_source(broker.bootstrap)


def _confluent_read(bootstrap: str, topic: str) -> list[Row]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4().hex}",
                         "enable.auto.commit": False, "isolation.level": "read_committed"})
    parts = [TopicPartition(topic, p) for p in range(PARTITIONS)]
    ends = [consumer.get_watermark_offsets(tp, timeout=10)[1] for tp in parts]
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
    rows: list[Row] = []
    try:
        while [tp.offset for tp in consumer.position(parts)] != ends:
            for message in consumer.consume(10_000, timeout=0.5):
                assert message.error() is None, message.error()
                rows.append((message.partition(), message.offset(), message.value()))
    finally:
        consumer.close()
    return rows


def _in_partition_order(rows: list[Row]) -> bool:
    last: dict[int, int] = {}
    for partition, offset, _ in rows:
        if offset <= last.get(partition, -1):
            return False
        last[partition] = offset
    return True


def test_confluent_kafka_reads_exactly_each_tags_committed_records(
        broker: BrokerProcess, source: tuple[str, dict[str, list[Row]]]) -> None:
    name, expected = source
    for tag in TAGS:
        rows = _confluent_read(broker.bootstrap, view_name(name, tag))
        assert _in_partition_order(rows)
        assert sorted(rows) == expected[tag], tag


def test_kafka_python_reads_exactly_each_tags_committed_records(
        broker: BrokerProcess, source: tuple[str, dict[str, list[Row]]]) -> None:
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KafkaTopicPartition

    name, expected = source
    for tag in TAGS:
        view = view_name(name, tag)
        consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, isolation_level="read_committed",
                                 enable_auto_commit=False, max_partition_fetch_bytes=4 << 20)
        parts = [KafkaTopicPartition(view, p) for p in range(PARTITIONS)]
        consumer.assign(parts)
        consumer.seek_to_beginning()
        ends = consumer.end_offsets(parts)
        rows: list[Row] = []
        while any(consumer.position(tp) < ends[tp] for tp in parts):
            for batch in consumer.poll(timeout_ms=5000).values():
                rows.extend((m.partition, m.offset, m.value) for m in batch)
        consumer.close()
        assert _in_partition_order(rows)
        assert sorted(rows) == expected[tag], tag


def test_a_group_on_a_view_resumes_exactly_after_a_broker_restart(
        broker: BrokerProcess, source: tuple[str, dict[str, list[Row]]]) -> None:
    name, expected = source
    view, group = view_name(name, TAGS[3]), f"resume-{uuid.uuid4().hex[:6]}"
    config = {"bootstrap.servers": broker.bootstrap, "group.id": group, "enable.auto.commit": False,
              "auto.offset.reset": "earliest", "isolation.level": "read_committed"}
    first: list[Row] = []
    consumer = Consumer(config)
    consumer.subscribe([view])
    while len(first) < len(expected[TAGS[3]]) // 2:
        for message in consumer.consume(1000, timeout=5):
            assert message.error() is None, message.error()
            first.append((message.partition(), message.offset(), message.value()))
    consumer.commit(asynchronous=False)
    committed = {tp.partition: tp.offset for tp in consumer.committed(
        [TopicPartition(view, p) for p in range(PARTITIONS)], timeout=10)}
    consumer.close()
    assert broker.stop() == 0
    broker.start()
    consumer = Consumer(config)
    consumer.subscribe([view])
    rest: list[Row] = []
    consumed_before = {row for row in first if row[1] < committed.get(row[0], 0)}
    while len(consumed_before) + len(rest) < len(expected[TAGS[3]]):
        for message in consumer.consume(1000, timeout=5):
            assert message.error() is None, message.error()
            rest.append((message.partition(), message.offset(), message.value()))
    consumer.close()
    # Resumed exactly at the committed offsets: nothing below them again, nothing above missed.
    assert all(offset >= committed[partition] for partition, offset, _ in rest)
    assert sorted(consumed_before | set(rest)) == expected[TAGS[3]]
    assert len(rest) == len(set(rest))
