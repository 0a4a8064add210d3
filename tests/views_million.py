"""The million-record source of the filtered-view acceptance tests (docs/views.md, "Tested"),
shared by tests/integration/test_views_acceptance.py (confluent-kafka, kafka-python, a group
across a restart), compat_tests/test_java_views.py (the Java client) and
pyspark_examples/tests/test_views.py (Spark).

`build_source(bootstrap)` writes RECORDS records to a new topic of PARTITIONS partitions: five
plain producers, one per codec, and TRANSACTIONS transactional ones of which the odd ones abort,
each record tagged by a `tag` header (record i goes to partition i % PARTITIONS with tag
`tag_of(i)`, so the tags of a batch mix). It creates a view per tag (`view_name(source, tag)`) and
returns, by tag, the committed records a view of the tag must give: (partition, offset, value),
sorted, as the producers' delivery reports placed them.
"""

from __future__ import annotations

import hashlib
import multiprocessing
import uuid
from collections import defaultdict
from collections.abc import Iterable
from concurrent.futures import ProcessPoolExecutor

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

RECORDS = 1_000_000
TAGS = [f"t{i}" for i in range(10)]
PARTITIONS = 4
CODECS = ("none", "lz4", "zstd", "gzip", "snappy")
TRANSACTIONS = 10  # of TXN_RECORDS each; the odd ones abort
TXN_RECORDS = 5_000
# For a broker started just for this source: one partition of each internal topic, so that the
# transactional producers do not wait for 50 partitions of __transaction_state to be created.
BROKER_OVERRIDES = {"offsets.topic.num.partitions": "1", "transaction.state.log.num.partitions": "1"}

Row = tuple[int, int, bytes]  # partition, offset, value


def tag_of(i: int) -> str:
    return TAGS[(i * 7 + i // 3) % len(TAGS)]


def view_name(source: str, tag: str) -> str:
    return f"{source}-{tag}"


def produce(bootstrap: str, topic: str, indexes: range, codec: str, txn_id: str | None = None,
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
                producer.produce(topic, value=value, headers=[("tag", tag_of(i).encode())], partition=i % PARTITIONS,
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


def _produce_job(args: tuple) -> list[tuple[int, Row]]:
    return produce(*args)


def build_source(bootstrap: str) -> tuple[str, dict[str, list[Row]]]:
    """Create and fill the source topic and a view per tag; returns the source's name and, by tag,
    the committed rows the tag's view must give, sorted by (partition, offset)."""
    name = f"events-{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, PARTITIONS, 1)])[name].result(30)
    plain = RECORDS - TRANSACTIONS * TXN_RECORDS
    per_codec = plain // len(CODECS)
    jobs = [(range(k * per_codec, (k + 1) * per_codec), codec, None, False) for k, codec in enumerate(CODECS)]
    for t in range(TRANSACTIONS):
        start = plain + t * TXN_RECORDS
        jobs.append((range(start, start + TXN_RECORDS), CODECS[t % len(CODECS)], f"txn-{name}-{t}", t % 2 == 1))
    # Spawned, not forked: the calling process runs librdkafka's threads (and maybe a JVM) already.
    with ProcessPoolExecutor(max_workers=2, mp_context=multiprocessing.get_context("spawn")) as pool:
        results = list(pool.map(_produce_job, [(bootstrap, name, *job) for job in jobs]))
    expected: dict[str, list[Row]] = defaultdict(list)
    written = 0
    for (indexes, _codec, _txn, abort), rows in zip(jobs, results, strict=True):
        assert len(rows) == len(indexes)
        written += len(rows)
        if not abort:
            for i, row in rows:
                expected[tag_of(i)].append(row)
    assert written == RECORDS
    for tag in TAGS:
        expected[tag].sort()
        view = view_name(name, tag)
        admin.create_topics([NewTopic(view, -1, config={"view.source.topic": name, "view.filter": f"tag = '{tag}'"})]
                            )[view].result(30)
    return name, dict(expected)


def high_watermarks(bootstrap: str, topic: str) -> dict[int, int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"hw-{uuid.uuid4().hex}"})
    try:
        return {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(PARTITIONS)}
    finally:
        consumer.close()


def values_digest(values: Iterable[bytes]) -> str:
    """SHA-256 over the values in order, each as a 4-byte big-endian length and its bytes (what
    ViewScenarios.java's consume_digest computes)."""
    digest = hashlib.sha256()
    for value in values:
        digest.update(len(value).to_bytes(4, "big"))
        digest.update(value)
    return digest.hexdigest()
