"""Filtered views at scale (slow; `scripts/test.sh -m slow -k views`): 1,000,000 records with
10 tags, written by producers with every codec and by transactional producers of which some
abort, and a view per tag. confluent-kafka and kafka-python read every view: each gives exactly
the committed records with its tag, in order, no more, no fewer. A consumer group on a view
commits half way, the broker restarts, and the group resumes exactly where it was."""

from __future__ import annotations

import multiprocessing
import uuid
from collections import defaultdict
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.brokers import BrokerProcess

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]

RECORDS = 1_000_000
TAGS = [f"t{i}" for i in range(10)]
PARTITIONS = 4
# Record i goes to partition i % 4 with tag TAGS[(i * 7 + i // 3) % 10]: the tags of a batch mix.
CODECS = ("none", "lz4", "zstd", "gzip", "snappy")
TRANSACTIONS = 10  # of TXN_RECORDS each; the odd ones abort
TXN_RECORDS = 5_000

Row = tuple[int, int, bytes]  # partition, offset, value


def _tag(i: int) -> str:
    return TAGS[(i * 7 + i // 3) % len(TAGS)]


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path_factory.mktemp("views-1m"), overrides={
        "offsets.topic.num.partitions": "1", "transaction.state.log.num.partitions": "1"}).start()
    yield process
    if process.alive:
        assert process.stop() == 0, process.log_tail()


def _produce(bootstrap: str, topic: str, indexes: range, codec: str, txn_id: str | None = None,
             abort: bool = False) -> list[tuple[int, Row]]:
    """Write records `indexes` and return (index, row) of each acknowledged one."""
    config = {"bootstrap.servers": bootstrap, "compression.type": codec, "linger.ms": 20,
              "queue.buffering.max.messages": 500_000}
    if txn_id:
        config["transactional.id"] = txn_id
    producer = Producer(config)
    if txn_id:
        producer.init_transactions(30)
        producer.begin_transaction()
    rows: list[tuple[int, Row]] = []

    def delivered(error: KafkaError | None, message: object) -> None:
        assert error is None, error
        rows.append((int(message.value().split(b":")[0]), (message.partition(), message.offset(), message.value())))

    for i in indexes:
        value = b"%d:%s:" % (i, codec.encode()) + b"x" * 60
        while True:
            try:
                producer.produce(topic, value=value, headers=[("tag", _tag(i).encode())], partition=i % PARTITIONS,
                                 on_delivery=delivered)
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
    if txn_id:
        producer.flush(120)
        (producer.abort_transaction if abort else producer.commit_transaction)(60)
    assert producer.flush(120) == 0
    return rows


@pytest.fixture(scope="module")
def source(broker: BrokerProcess) -> tuple[str, dict[str, list[Row]]]:
    """The source topic and, by tag, the committed rows a view of the tag must give, in order."""
    name = f"events-{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(name, PARTITIONS, 1)])[name].result(30)
    plain = RECORDS - TRANSACTIONS * TXN_RECORDS
    per_codec = plain // len(CODECS)
    jobs = [(range(k * per_codec, (k + 1) * per_codec), codec, None, False) for k, codec in enumerate(CODECS)]
    for t in range(TRANSACTIONS):
        start = plain + t * TXN_RECORDS
        jobs.append((range(start, start + TXN_RECORDS), CODECS[t % len(CODECS)], f"txn-{name}-{t}", t % 2 == 1))
    # Spawned, not forked: this process runs librdkafka's threads already.
    with ProcessPoolExecutor(max_workers=2, mp_context=multiprocessing.get_context("spawn")) as pool:
        results = list(pool.map(_produce_job, [(broker.bootstrap, name, *job) for job in jobs]))
    expected: dict[str, list[Row]] = defaultdict(list)
    written = 0
    for (indexes, _codec, _txn, abort), rows in zip(jobs, results, strict=True):
        assert len(rows) == len(indexes)
        written += len(rows)
        if not abort:
            for i, row in rows:
                expected[_tag(i)].append(row)
    assert written == RECORDS
    for tag in TAGS:
        expected[tag].sort()
        view = f"{name}-{tag}"
        admin.create_topics([NewTopic(view, -1, config={"view.source.topic": name, "view.filter": f"tag = '{tag}'"})]
                            )[view].result(30)
    return name, dict(expected)


def _produce_job(args: tuple) -> list[tuple[int, Row]]:
    return _produce(*args)


def _confluent_read(bootstrap: str, topic: str) -> list[Row]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4().hex}",
                         "enable.auto.commit": False, "isolation.level": "read_committed"})
    parts = [TopicPartition(topic, p) for p in range(PARTITIONS)]
    ends = [consumer.get_watermark_offsets(tp, timeout=10)[1] for tp in parts]
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
    rows: list[Row] = []
    try:
        while [tp.offset for tp in consumer.position(parts)] != ends:
            for message in consumer.consume(10_000, timeout=5):
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
        rows = _confluent_read(broker.bootstrap, f"{name}-{tag}")
        assert _in_partition_order(rows)
        assert sorted(rows) == expected[tag], tag


def test_kafka_python_reads_exactly_each_tags_committed_records(
        broker: BrokerProcess, source: tuple[str, dict[str, list[Row]]]) -> None:
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KafkaTopicPartition

    name, expected = source
    for tag in TAGS:
        view = f"{name}-{tag}"
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
    view, group = f"{name}-{TAGS[3]}", f"resume-{uuid.uuid4().hex[:6]}"
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
