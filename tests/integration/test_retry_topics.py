"""Retry topics end to end: a real broker, confluent-kafka producers and consumers.

A consumer that fails a record produces it, headers unchanged, to the retry topic; the broker
holds it for its attempt's backoff and appends it to the target topic with `kbroker.attempt`,
until its attempts are used up and it lands in the dead-letter topic with `kbroker.dead.reason`.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourceType,
)

from kbroker.partitioner import partition_for_key
from tests.brokers import BrokerProcess

ATTEMPT = "kbroker.attempt"
REASON = "kbroker.dead.reason"
BACKOFFS_MS = (600, 1200, 1800)
# The broker acts within a tick (100 ms) of a record's due time; the acceptance bound is 200 ms.
BROKER_LATE_MS = 200
# End to end, the consumer's fetch and a loaded 2-core CI machine come on top.
ARRIVAL_LATE_MS = 2500


def _now_ms() -> int:
    return int(time.time() * 1000)


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path_factory.mktemp("retries"), overrides={
        "offsets.topic.num.partitions": "1", "transaction.state.log.num.partitions": "1"}).start()
    yield process
    if process.alive:
        assert process.stop() == 0, process.log_tail()


def _create(bootstrap: str, name: str, partitions: int = 1, replication: int = 1, **configs: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions, replication, config=configs)])[name].result(30)


def _create_refused(bootstrap: str, name: str, **configs: str) -> str:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    with pytest.raises(KafkaException) as caught:
        admin.create_topics([NewTopic(name, 1, 1, config=configs)])[name].result(30)
    error = caught.value.args[0]
    assert error.code() == KafkaError.INVALID_CONFIG, error
    return error.str()


def _retry_configs(target: str, dead: str | None = None, backoffs: tuple[int, ...] = BACKOFFS_MS) -> dict[str, str]:
    configs = {"retry.target.topic": target, "retry.backoff.ms": ",".join(map(str, backoffs))}
    if dead is not None:
        configs["retry.dead.letter.topic"] = dead
    return configs


@dataclass
class Seen:
    topic: str
    partition: int
    offset: int
    key: bytes
    value: bytes
    headers: dict[str, bytes]
    timestamp: int
    seen_ms: int


class Watcher:
    """A consumer assigned every partition of some topics, remembering when each record came."""

    def __init__(self, bootstrap: str, topics: dict[str, int]) -> None:
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4()}",
                                  "enable.auto.commit": False, "fetch.wait.max.ms": 50})
        self.consumer.assign([TopicPartition(t, p, OFFSET_BEGINNING) for t, n in topics.items() for p in range(n)])
        self.seen: list[Seen] = []

    def poll(self, timeout_s: float = 0.1) -> Seen | None:
        message: Message | None = self.consumer.poll(timeout_s)
        if message is None:
            return None
        assert message.error() is None, message.error()
        seen = Seen(message.topic(), message.partition(), message.offset(), message.key(), message.value(),
                    dict(message.headers() or []), message.timestamp()[1], _now_ms())
        self.seen.append(seen)
        return seen

    def until(self, done: Callable[[list[Seen]], bool], timeout_s: float = 60.0, what: str = "records") -> None:
        deadline = time.monotonic() + timeout_s
        while not done(self.seen):
            assert time.monotonic() < deadline, f"timed out waiting for {what}: {[(s.topic, s.value) for s in self.seen]}"
            self.poll(0.2)

    def drain(self, timeout_s: float = 30.0) -> None:
        """Read every assigned partition up to its current high watermark."""
        ends = {}
        for tp in self.consumer.assignment():
            _, high = self.consumer.get_watermark_offsets(tp, timeout=10)
            ends[(tp.topic, tp.partition)] = high

        def read_all(seen: list[Seen]) -> bool:
            last = {}
            for s in seen:
                last[(s.topic, s.partition)] = max(last.get((s.topic, s.partition), -1), s.offset)
            return all(high == 0 or last.get(key, -1) >= high - 1 for key, high in ends.items())
        self.until(read_all, timeout_s, "the end of every partition")

    def close(self) -> None:
        self.consumer.close()


class FailingConsumer:
    """A consumer that fails every record of `target`: each goes back to `retry`, headers and
    all. Remembers what it saw (target and dead-letter topics) and when it sent each
    (key, attempts made) to the retry topic."""

    def __init__(self, bootstrap: str, target: str, retry: str, dead: str, partitions: int) -> None:
        self.target, self.retry, self.dead = target, retry, dead
        self.watcher = Watcher(bootstrap, {target: partitions, dead: partitions})
        self.producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "enable.idempotence": True,
                                  "acks": "all"})
        self.sent_at: dict[tuple[bytes, int], int] = {}

    @property
    def seen(self) -> list[Seen]:
        return self.watcher.seen

    def dead_letters(self) -> list[Seen]:
        return [s for s in self.seen if s.topic == self.dead]

    def run_until(self, done: Callable[[FailingConsumer], bool], timeout_s: float = 90.0, what: str = "") -> None:
        deadline = time.monotonic() + timeout_s
        while not done(self):
            assert time.monotonic() < deadline, f"timed out waiting for {what}: {len(self.seen)} records seen"
            seen = self.watcher.poll(0.05)
            if seen is None or seen.topic != self.target:
                continue
            attempt = int(seen.headers.get(ATTEMPT, b"0"))
            self.sent_at[(seen.key, attempt)] = _now_ms()
            self.producer.produce(self.retry, seen.value, key=seen.key, headers=list(seen.headers.items()),
                                  timestamp=_now_ms())
            self.producer.poll(0)

    def close(self) -> None:
        assert self.producer.flush(30) == 0
        self.watcher.close()


def _check_attempts(consumer: FailingConsumer, keys: list[bytes], partitions: int,
                    excused: Callable[[int], bool] = lambda due_ms: False) -> None:
    """Each key: once per attempt in the target, then once in the dead letters; never early, and
    forwarded within BROKER_LATE_MS of its due time unless `excused(due time)` (a failover)."""
    for key in keys:
        mine = [s for s in consumer.seen if s.key == key]
        in_target = [s for s in mine if s.topic == consumer.target]
        dead = [s for s in mine if s.topic == consumer.dead]
        # Exactly once per attempt, then once in the dead letters.
        assert [s.headers.get(ATTEMPT) for s in in_target] == [None, b"1", b"2", b"3"], key
        assert len(dead) == 1, key
        first = in_target[0]
        for retried in [*in_target[1:], *dead]:
            # Same key, value and the consumer's own headers; the same partition by the key.
            assert (retried.value, retried.headers["trace"]) == (b"payload of " + key, key)
            assert retried.partition == partition_for_key(key, partitions) == first.partition
            assert retried.headers["kbroker.original.topic"] == consumer.retry.encode()
            assert "kbroker.delayed.from" not in retried.headers
        # The first place the broker held it is kept through every attempt.
        assert len({s.headers["kbroker.original.offset"] for s in [*in_target[1:], *dead]}) == 1
        for attempt, backoff in enumerate(BACKOFFS_MS, start=1):
            came = in_target[attempt]
            due = consumer.sent_at[(key, attempt - 1)] + backoff
            # The record's timestamp is when the broker forwarded it: never before its due time
            # (the test's clock reading before the produce is earlier than the broker's append).
            assert due <= came.timestamp, (key, attempt, came.timestamp - due)
            if not excused(due):
                assert came.timestamp - due <= BROKER_LATE_MS, (key, attempt, came.timestamp - due)
                assert came.seen_ms - due <= ARRIVAL_LATE_MS, (key, attempt, came.seen_ms - due)
        assert dead[0].headers[ATTEMPT] == b"3"
        assert b"retries exhausted" in dead[0].headers[REASON]
        if not excused(consumer.sent_at[(key, 3)]):
            # Nothing waits: the dead letter goes as soon as the last attempt failed.
            assert dead[0].timestamp - consumer.sent_at[(key, 3)] <= BROKER_LATE_MS


def _produce_orders(bootstrap: str, topic: str, keys: list[bytes]) -> None:
    # Java's default partitioner, as the broker's: librdkafka's own default hashes otherwise.
    producer = Producer({"bootstrap.servers": bootstrap, "partitioner": "murmur2_random", "acks": "all"})
    for key in keys:
        producer.produce(topic, b"payload of " + key, key=key, headers=[("trace", key)])
    assert producer.flush(30) == 0


def test_a_failing_consumer_sees_each_record_back_then_in_the_dead_letters(broker: BrokerProcess) -> None:
    _create(broker.bootstrap, "orders", partitions=3)
    _create(broker.bootstrap, "orders.dead", partitions=3)
    _create(broker.bootstrap, "orders.retry", partitions=2, **_retry_configs("orders", "orders.dead"))
    keys = [b"order-%d" % i for i in range(6)]
    _produce_orders(broker.bootstrap, "orders", keys)
    consumer = FailingConsumer(broker.bootstrap, "orders", "orders.retry", "orders.dead", 3)
    consumer.run_until(lambda c: len(c.dead_letters()) == len(keys), what="every dead letter")
    consumer.close()
    _check_attempts(consumer, keys, 3)


def test_retry_topics_are_checked_at_create_time(broker: BrokerProcess) -> None:
    _create(broker.bootstrap, "payments")
    _create(broker.bootstrap, "payments.dead")
    message = _create_refused(broker.bootstrap, "payments.retry", **_retry_configs("no-such-topic"))
    assert "retry.target.topic no-such-topic of retry topic payments.retry does not exist" in message
    message = _create_refused(broker.bootstrap, "loop.retry", **_retry_configs("loop.retry"))
    assert "is the topic itself" in message
    message = _create_refused(broker.bootstrap, "payments.retry", **_retry_configs("payments", "payments"))
    assert "dead letters would be retried again" in message
    message = _create_refused(broker.bootstrap, "payments.retry", **_retry_configs("payments", "no-such-dead"))
    assert "retry.dead.letter.topic no-such-dead" in message
    message = _create_refused(broker.bootstrap, "payments.retry", **{"retry.target.topic": "payments",
                                                                     "retry.backoff.ms": "100,soon"})
    assert "retry.backoff.ms" in message
    _create(broker.bootstrap, "payments.retry", **_retry_configs("payments", "payments.dead"))
    # No chains: a retry topic is not a target, and a target does not become a retry topic.
    message = _create_refused(broker.bootstrap, "again.retry", **_retry_configs("payments.retry"))
    assert "is itself a retry topic" in message
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    resource = ConfigResource(ResourceType.TOPIC, "payments", incremental_configs=[
        ConfigEntry("retry.target.topic", "payments.dead", incremental_operation=AlterConfigOpType.SET)])
    with pytest.raises(KafkaException) as caught:
        admin.incremental_alter_configs([resource])[resource].result(15)
    assert caught.value.args[0].code() == KafkaError.INVALID_CONFIG
    assert "receives the records of retry topic payments.retry" in caught.value.args[0].str()


def test_bad_attempt_headers_and_spent_records_fail_their_partition_only(broker: BrokerProcess) -> None:
    _create(broker.bootstrap, "jobs")
    _create(broker.bootstrap, "jobs.retry", partitions=2, **_retry_configs("jobs"))  # no dead-letter topic
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 50, "retries": 0})
    results: dict[int, KafkaError | None] = {}

    def report(error: KafkaError | None, message: Message) -> None:
        results[message.partition()] = error

    for bad in ([(ATTEMPT, b"two")], [(ATTEMPT, b"3")]):
        results.clear()
        producer.produce("jobs.retry", b"bad", key=b"k", headers=bad, partition=0, on_delivery=report)
        producer.produce("jobs.retry", b"good", key=b"k", partition=1, on_delivery=report)
        assert producer.flush(15) == 0
        assert results[0] is not None and results[0].code() == KafkaError.INVALID_RECORD, bad
        assert results[1] is None
    watcher = Watcher(broker.bootstrap, {"jobs": 1})
    watcher.until(lambda seen: len(seen) >= 2, what="the two good records")
    watcher.drain()
    watcher.close()
    assert [(s.value, s.headers[ATTEMPT]) for s in watcher.seen] == [(b"good", b"1"), (b"good", b"1")]


def test_a_missing_target_sends_records_to_the_dead_letters(broker: BrokerProcess) -> None:
    _create(broker.bootstrap, "gone")
    _create(broker.bootstrap, "gone.dead")
    _create(broker.bootstrap, "gone.retry", **_retry_configs("gone", "gone.dead", backoffs=(300,)))
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.delete_topics(["gone"])["gone"].result(15)
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    producer.produce("gone.retry", b"orphan", key=b"o")
    assert producer.flush(15) == 0
    watcher = Watcher(broker.bootstrap, {"gone.dead": 1})
    watcher.until(lambda seen: len(seen) == 1, what="the dead letter")
    watcher.close()
    (letter,) = watcher.seen
    assert letter.value == b"orphan" and b"does not exist" in letter.headers[REASON]


def test_an_aborted_transaction_forwards_nothing(broker: BrokerProcess) -> None:
    _create(broker.bootstrap, "txn")
    _create(broker.bootstrap, "txn.retry", **_retry_configs("txn", backoffs=(200,)))
    producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "retry-txn"})
    producer.init_transactions(15)
    producer.begin_transaction()
    producer.produce("txn.retry", b"aborted", key=b"a")
    producer.abort_transaction(15)
    producer.begin_transaction()
    producer.produce("txn.retry", b"committed", key=b"c")
    producer.commit_transaction(15)
    watcher = Watcher(broker.bootstrap, {"txn": 1})
    watcher.until(lambda seen: len(seen) >= 1, what="the committed record")
    watcher.close()
    assert [s.value for s in watcher.seen] == [b"committed"]


def test_a_broker_killed_midway_forwards_each_record_exactly_once(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "crash", overrides={"offsets.topic.num.partitions": "1"}).start()
    try:
        _create(broker.bootstrap, "work", partitions=2)
        _create(broker.bootstrap, "work.retry", partitions=2, **_retry_configs("work", backoffs=(1000,)))
        producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all", "linger.ms": 0})
        count = 200
        for i in range(count):
            producer.produce("work.retry", b"w%03d" % i, key=b"k%03d" % i)
            if i % 20 == 19:
                assert producer.flush(15) == 0
                time.sleep(0.05)  # spreads the due times over ~0.5 s, so the kill lands midway
        assert producer.flush(15) == 0
        watcher = Watcher(broker.bootstrap, {"work": 2})
        watcher.until(lambda seen: len(seen) >= 10, what="the first forwarded records")
        assert len(watcher.seen) < count
        watcher.close()
        broker.kill()
        broker.start()
        # A sentinel through each retry partition, due after everything: once both are forwarded,
        # each partition's pass has appended again what its predecessor may not have finished.
        sentinels = Producer({"bootstrap.servers": broker.bootstrap})
        for partition in (0, 1):
            sentinels.produce("work.retry", b"sentinel", key=b"s%d" % partition, partition=partition)
        assert sentinels.flush(15) == 0
        after = Watcher(broker.bootstrap, {"work": 2})
        after.until(lambda seen: sum(s.value == b"sentinel" for s in seen) == 2, what="the sentinels")
        after.drain()
        after.close()
        values = [s.value for s in after.seen if s.value != b"sentinel"]
        assert sorted(values) == [b"w%03d" % i for i in range(count)]
    finally:
        if broker.alive:
            assert broker.stop() == 0, broker.log_tail()


def test_a_record_the_target_refuses_goes_to_the_dead_letters(broker: BrokerProcess) -> None:
    _create(broker.bootstrap, "profiles", **{"cleanup.policy": "compact"})
    _create(broker.bootstrap, "profiles.dead")
    _create(broker.bootstrap, "profiles.retry", **_retry_configs("profiles", "profiles.dead", backoffs=(200,)))
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    producer.produce("profiles.retry", b"keyless")  # a compacted topic refuses it: INVALID_RECORD
    producer.produce("profiles.retry", b"keyed", key=b"user-1")
    assert producer.flush(15) == 0
    watcher = Watcher(broker.bootstrap, {"profiles": 1, "profiles.dead": 1})
    watcher.until(lambda seen: len(seen) >= 2, what="both records")
    # Later records still reach the target partition (no sequence gap left by the refused batch).
    producer.produce("profiles.retry", b"later", key=b"user-2")
    assert producer.flush(15) == 0
    watcher.until(lambda seen: len(seen) >= 3, what="the later record")
    watcher.drain()
    watcher.close()
    where = {s.value: (s.topic, s.headers.get(REASON)) for s in watcher.seen}
    assert len(watcher.seen) == 3
    assert where[b"keyed"] == where[b"later"] == ("profiles", None)
    topic, reason = where[b"keyless"]
    assert topic == "profiles.dead" and reason is not None and b"refused the record" in reason
