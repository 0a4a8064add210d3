"""Delayed delivery end to end: a real broker, confluent-kafka producers and consumers.

Records asking for a delay (`kbroker.delay.ms`, `kbroker.deliver.at`, the topic's
`delivery.delay.ms`) reach consumers at their due time, never before, with
`kbroker.delayed.from` naming their pending record; everything else is untouched.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewTopic,
    ResourceType,
)

from tests.brokers import BrokerProcess

DELAY = "kbroker.delay.ms"
DELIVER_AT = "kbroker.deliver.at"
FROM = "kbroker.delayed.from"
TICK_MS = 100
# A delivery is appended within a tick of its due time; the rest is the consumer's fetch and a
# loaded 2-core machine.
LATE_SLACK_MS = TICK_MS + 1900


@dataclass
class Arrival:
    value: bytes
    headers: dict[str, bytes]
    timestamp: int
    partition: int
    offset: int
    seen_ms: int  # the wall clock when the consumer got it


def _now_ms() -> int:
    return int(time.time() * 1000)


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path_factory.mktemp("delayed"), overrides={
        "offsets.topic.num.partitions": "1", "transaction.state.log.num.partitions": "1"}).start()
    yield process
    if process.alive:
        assert process.stop() == 0, process.log_tail()


def _create(bootstrap: str, name: str, partitions: int = 1, **configs: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1, config=configs)])[name].result(15)


class Reader:
    """A consumer that remembers when each record arrived."""

    def __init__(self, bootstrap: str, topic: str, isolation: str = "read_uncommitted", partitions: int = 1) -> None:
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4()}",
                                  "enable.auto.commit": False, "isolation.level": isolation,
                                  "fetch.wait.max.ms": 50})
        # Assigned, not subscribed: no group join delays the first fetch, so arrival times are
        # the broker's, not a rebalance's.
        self.consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        self.arrivals: list[Arrival] = []
        self._poll(1.0)  # connected and fetching before the test produces

    def _poll(self, timeout_s: float) -> None:
        message = self.consumer.poll(timeout_s)
        if message is None:
            return
        assert message.error() is None, message.error()
        self.arrivals.append(Arrival(message.value(), dict(message.headers() or []), message.timestamp()[1],
                                     message.partition(), message.offset(), _now_ms()))

    def until(self, done: object, timeout_s: float = 30.0, what: str = "the records") -> list[Arrival]:
        """Poll until `done(arrivals)` holds (a callable), or fail after `timeout_s`."""
        deadline = time.monotonic() + timeout_s
        while not done(self.arrivals):  # type: ignore[operator]
            assert time.monotonic() < deadline, f"timed out waiting for {what}: got {self.values()}"
            self._poll(0.2)
        return self.arrivals

    def values(self) -> list[bytes]:
        return [a.value for a in self.arrivals]

    def close(self) -> None:
        self.consumer.close()


def _delivered(arrivals: list[Arrival]) -> list[Arrival]:
    return [a for a in arrivals if FROM in a.headers]


def _produce(producer: Producer, topic: str, value: bytes, headers: list[tuple[str, bytes]] | None = None,
             partition: int = 0, timestamp: int = 0) -> None:
    producer.produce(topic, value, key=b"k-" + value, headers=headers or [], partition=partition,
                     timestamp=timestamp)


def test_delayed_records_arrive_at_their_due_time_in_due_order(broker: BrokerProcess) -> None:
    _create(broker.bootstrap, "reminders")
    reader = Reader(broker.bootstrap, "reminders")
    producer = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True, "linger.ms": 5})
    sent = _now_ms()
    _produce(producer, "reminders", b"third", [(DELAY, b"3000")], timestamp=sent)
    _produce(producer, "reminders", b"first", [(DELAY, b"1500")], timestamp=sent)
    _produce(producer, "reminders", b"tie-after-first", [(DELAY, b"1500"), ("trace", b"t-1")], timestamp=sent)
    _produce(producer, "reminders", b"second", [(DELIVER_AT, b"%d" % (sent + 2200))], timestamp=sent)
    assert producer.flush(15) == 0
    # In a batch of its own: a record without delay in a delayed batch goes with its batch (at once,
    # but as a delivery), so the batch stays whole and in order.
    _produce(producer, "reminders", b"now", timestamp=sent)
    assert producer.flush(15) == 0

    arrivals = reader.until(lambda got: len(got) == 5, what="five records")
    reader.close()
    assert [a.value for a in arrivals] == [b"now", b"first", b"tie-after-first", b"second", b"third"]
    immediate, *delivered = arrivals
    assert FROM not in immediate.headers and immediate.seen_ms - sent < 1500
    due = {b"first": sent + 1500, b"tie-after-first": sent + 1500, b"second": sent + 2200, b"third": sent + 3000}
    pending_offsets = set()
    for arrival in delivered:
        assert arrival.seen_ms >= due[arrival.value], f"{arrival.value!r} arrived early"
        assert arrival.seen_ms <= due[arrival.value] + LATE_SLACK_MS, f"{arrival.value!r} arrived late"
        assert arrival.timestamp == sent  # the original CreateTime
        source, _, pending = arrival.headers[FROM].decode().rpartition("@")
        assert source == "reminders-0" and int(pending) < arrival.offset
        pending_offsets.add(int(pending))
    assert len(pending_offsets) == 4
    tie = delivered[1]
    assert tie.headers["trace"] == b"t-1" and tie.headers[DELAY] == b"1500"


def test_the_topic_default_delays_records_without_headers(broker: BrokerProcess) -> None:
    _create(broker.bootstrap, "slow", **{"delivery.delay.ms": "1000", "delay.max.ms": "60000"})
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    resource = ConfigResource(ResourceType.TOPIC, "slow")
    configs = admin.describe_configs([resource])[resource].result(15)
    assert (configs["delivery.delay.ms"].value, configs["delay.max.ms"].value,
            configs["delay.tick.ms"].value) == ("1000", "60000", "100")
    assert configs["delay.tick.ms"].source == ConfigSource.DEFAULT_CONFIG.value
    assert configs["delivery.delay.ms"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    refused = admin.incremental_alter_configs([ConfigResource(ResourceType.TOPIC, "slow", incremental_configs=[
        ConfigEntry("delay.tick.ms", "0", incremental_operation=AlterConfigOpType.SET)])])
    with pytest.raises(KafkaException) as caught:
        refused[resource].result(15)
    assert caught.value.args[0].code() == KafkaError.INVALID_CONFIG
    reader = Reader(broker.bootstrap, "slow")
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    sent = _now_ms()
    _produce(producer, "slow", b"waits", timestamp=sent)
    _produce(producer, "slow", b"opted-out", [(DELAY, b"0")], timestamp=sent)
    assert producer.flush(15) == 0
    first, second = reader.until(lambda got: len(got) == 2, what="both records")
    reader.close()
    assert (first.value, second.value) == (b"opted-out", b"waits")
    assert second.seen_ms >= sent + 1000 and FROM in second.headers


def test_bad_delay_headers_fail_their_partition_only(broker: BrokerProcess) -> None:
    _create(broker.bootstrap, "strict", partitions=2)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 50, "retries": 0})
    results: dict[int, KafkaError | None] = {}

    def report(error: KafkaError | None, message: object) -> None:
        results[message.partition()] = error  # type: ignore[attr-defined]

    producer.produce("strict", b"bad", headers=[(DELAY, b"soon")], partition=0, on_delivery=report)
    producer.produce("strict", b"good", partition=1, on_delivery=report)
    assert producer.flush(15) == 0
    assert results[0] is not None and results[0].code() == KafkaError.INVALID_RECORD
    assert results[1] is None
    far = _now_ms() + 41 * 24 * 3600 * 1000
    producer.produce("strict", b"too-far", headers=[(DELIVER_AT, b"%d" % far)], partition=0, on_delivery=report)
    assert producer.flush(15) == 0
    assert results[0] is not None and results[0].code() == KafkaError.INVALID_RECORD
    reader = Reader(broker.bootstrap, "strict", partitions=2)
    reader.until(lambda got: len(got) >= 1, what="the good record")
    reader.close()
    assert reader.values() == [b"good"]


def test_a_transactions_delayed_records_are_delivered_only_if_it_commits(broker: BrokerProcess) -> None:
    _create(broker.bootstrap, "orders")
    producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "delayed-txn"})
    producer.init_transactions(15)
    producer.begin_transaction()
    _produce(producer, "orders", b"aborted", [(DELAY, b"1000")])
    producer.abort_transaction(15)
    producer.begin_transaction()
    # Due after the aborted one: once it is delivered, the aborted one would have been too.
    _produce(producer, "orders", b"committed", [(DELAY, b"1500")])
    producer.commit_transaction(15)
    for isolation in ("read_committed", "read_uncommitted"):
        reader = Reader(broker.bootstrap, "orders", isolation)
        reader.until(lambda got: b"committed" in [a.value for a in got], what="the committed record")
        reader.close()
        assert reader.values() == [b"committed"]


def test_a_broker_killed_midway_delivers_each_record_exactly_once(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "crash", overrides={"offsets.topic.num.partitions": "1"}).start()
    try:
        _create(broker.bootstrap, "retries")
        producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all"})
        sent = _now_ms()
        count = 20
        for i in range(count):
            _produce(producer, "retries", b"r%02d" % i, [(DELAY, b"%d" % (1000 + 200 * i))], timestamp=sent)
        assert producer.flush(15) == 0
        reader = Reader(broker.bootstrap, "retries")
        reader.until(lambda got: len(got) >= 3, what="the first deliveries")
        assert len(reader.arrivals) < count
        reader.close()
        broker.kill()
        broker.start()
        # Due after every other record: once it is here, a duplicate would have come before it.
        sentinel_producer = Producer({"bootstrap.servers": broker.bootstrap})
        sentinel_due = max(sent + 1000 + 200 * count, _now_ms()) + 500
        _produce(sentinel_producer, "retries", b"sentinel", [(DELIVER_AT, b"%d" % sentinel_due)])
        assert sentinel_producer.flush(15) == 0
        after = Reader(broker.bootstrap, "retries")
        after.until(lambda got: b"sentinel" in [a.value for a in got], what="the sentinel")
        after.close()
        delivered = _delivered(after.arrivals)
        sources = [a.headers[FROM] for a in delivered]
        assert len(sources) == len(set(sources)) == count + 1
        assert sorted(a.value for a in delivered) == sorted([b"r%02d" % i for i in range(count)] + [b"sentinel"])
        for arrival in reader.arrivals:  # those seen before the kill arrived no earlier than due
            assert arrival.seen_ms >= sent + 1000 + 200 * int(arrival.value[1:])
    finally:
        if broker.alive:
            assert broker.stop() == 0, broker.log_tail()
