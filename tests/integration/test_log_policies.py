"""Acceptance: retention by time and size, compaction, timestamp lookups, DeleteRecords."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from tests.conftest import create_topic
from tests.waiting import wait_until

DAY_MS = 86_400_000


FAST_UPKEEP = {"log.retention.check.interval.ms": "200", "log.cleaner.backoff.ms": "200"}


@pytest.fixture
def fast_broker(make_broker):
    """A broker that checks retention and compaction every 200 ms, retention from the start
    (not after Kafka's default 30 s log.initial.task.delay.ms)."""
    return make_broker(**FAST_UPKEEP, **{"log.initial.task.delay.ms": "0"})

def watermarks(bootstrap: str, topic: str, partition: int = 0) -> tuple[int, int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "wm"})
    try:
        return consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
    finally:
        consumer.close()


def produce_all(bootstrap: str, topic: str, records: list[tuple[bytes | None, bytes | None, int | None]]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "batch.num.messages": 10})
    errors = []

    def delivered(error, _message) -> None:
        if error is not None:
            errors.append(error)

    for key, value, ts in records:
        kwargs = {"timestamp": ts} if ts is not None else {}
        producer.produce(topic, value, key, partition=0, on_delivery=delivered, **kwargs)
    assert producer.flush(30) == 0
    assert errors == []


def read_from_start(bootstrap: str, topic: str) -> list[tuple[int, bytes | None, bytes | None]]:
    _, high = watermarks(bootstrap, topic)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "reader", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, -2)])  # OFFSET_BEGINNING
    out = []
    deadline = time.monotonic() + 30
    while (not out or out[-1][0] < high - 1) and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and not msg.error():
            out.append((msg.offset(), msg.key(), msg.value()))
    consumer.close()
    return out


def test_retention_by_time_deletes_old_segments(fast_broker) -> None:
    bootstrap = fast_broker.bootstrap
    topic = create_topic(bootstrap, "by-time", 1, {"retention.ms": str(DAY_MS), "segment.bytes": "3000"})
    old = int(time.time() * 1000) - 30 * DAY_MS
    produce_all(bootstrap, topic, [(None, b"o" * 200, old + i) for i in range(50)])
    now = int(time.time() * 1000)
    produce_all(bootstrap, topic, [(None, b"n" * 200, now + i) for i in range(20)])
    wait_until(lambda: watermarks(bootstrap, topic)[0] >= 40, what="old segments to be deleted")
    low, high = watermarks(bootstrap, topic)
    assert low <= 50 and high == 70, "recent records must stay"
    assert all(v.startswith(b"n") for _, _, v in read_from_start(bootstrap, topic)[-20:])


def test_retention_waits_the_initial_task_delay_after_start(make_broker) -> None:
    """Records with old timestamps written right after a start are kept until
    log.initial.task.delay.ms has passed since the broker loaded its logs, as in Kafka."""
    delay_s = 5.0
    spawned = time.monotonic()  # before the broker's LogManager exists: its delay ends later than this + delay
    broker = make_broker(**FAST_UPKEEP, **{"log.initial.task.delay.ms": str(int(delay_s * 1000))})
    topic = create_topic(broker.bootstrap, "old-data", 1, {"retention.ms": str(DAY_MS), "segment.bytes": "3000"})
    old = int(time.time() * 1000) - 30 * DAY_MS
    produce_all(broker.bootstrap, topic, [(None, b"o" * 200, old + i) for i in range(50)])
    assert watermarks(broker.bootstrap, topic) == (0, 50)
    wait_until(lambda: watermarks(broker.bootstrap, topic)[0] > 0, what="retention after the initial delay")
    assert time.monotonic() - spawned >= delay_s, "retention ran before log.initial.task.delay.ms had passed"


def test_retention_by_size_keeps_the_newest_bytes(fast_broker) -> None:
    bootstrap = fast_broker.bootstrap
    topic = create_topic(bootstrap, "by-size", 1, {"retention.bytes": "6000", "segment.bytes": "2500"})
    produce_all(bootstrap, topic, [(None, b"s" * 200, None) for _ in range(200)])
    wait_until(lambda: watermarks(bootstrap, topic)[0] > 100, what="size retention")
    low, high = watermarks(bootstrap, topic)
    assert high == 200 and high - low < 60


def test_compaction_keeps_latest_value_per_key(fast_broker) -> None:
    bootstrap = fast_broker.bootstrap
    topic = create_topic(bootstrap, "compacted", 1, {
        "cleanup.policy": "compact", "segment.bytes": "2500", "min.cleanable.dirty.ratio": "0.01",
        "delete.retention.ms": "100",
    })
    records = [(f"k{i % 10}".encode(), f"v{i}".encode(), None) for i in range(300)]
    records.append((b"k0", None, None))  # tombstone for k0
    records += [(b"filler", f"f{i}".encode() * 40, None) for i in range(20)]  # roll past the above
    produce_all(bootstrap, topic, records)
    latest = {}
    for key, value, _ in records:
        latest[key] = value

    def compacted() -> bool:
        seen = read_from_start(bootstrap, topic)
        return len([r for r in seen if r[1] != b"filler"]) <= 12

    wait_until(compacted, timeout_s=60, what="compaction")
    seen = read_from_start(bootstrap, topic)
    last_seen = {}
    for _, key, value in seen:
        last_seen[key] = value
    for key, value in latest.items():
        if key == b"k0":
            assert last_seen.get(key) is None
        else:
            assert last_seen[key] == value
    offsets = [o for o, _, _ in seen]
    assert offsets == sorted(offsets) and len(set(offsets)) == len(offsets)


def test_list_offsets_by_timestamp(broker, new_topic) -> None:
    topic = new_topic()
    base = int(time.time() * 1000) - 100_000
    produce_all(broker.bootstrap, topic, [(None, f"t{i}".encode(), base + i * 1000) for i in range(50)])
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "ts"})
    try:
        for ts, expected in [(base, 0), (base + 5500, 6), (base + 49_000, 49), (base + 60_000, -1)]:
            found = consumer.offsets_for_times([TopicPartition(topic, 0, ts)], timeout=10)
            assert found[0].offset == expected, (ts - base, found[0].offset)
    finally:
        consumer.close()


def test_delete_records_moves_log_start(broker, new_topic) -> None:
    topic = new_topic()
    produce_all(broker.bootstrap, topic, [(None, f"d{i}".encode(), None) for i in range(100)])
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    futures = admin.delete_records([TopicPartition(topic, 0, 60)])
    result = futures[TopicPartition(topic, 0)].result(timeout=15)
    assert result.low_watermark == 60
    assert watermarks(broker.bootstrap, topic) == (60, 100)
    assert read_from_start(broker.bootstrap, topic)[0][0] == 60
