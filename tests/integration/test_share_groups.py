"""Share groups (KIP-932) with confluent-kafka's ShareConsumer against a real broker: records of
one partition shared among consumers, each processed once; a killed consumer's records
redelivered after their lock; RELEASE, REJECT and the delivery-count limit."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import AcknowledgeType, Producer, ShareConsumer
from confluent_kafka.admin import AdminClient, NewTopic

from protocol.errors import ErrorCode
from tests.brokers import BrokerProcess
from tests.rawclient import RawClient
from tests.waiting import wait_until

pytestmark = pytest.mark.timeout(300)

LOCK_MS = 5000
DELIVERY_LIMIT = 3


def _broker(directory: Path, **overrides: str) -> Iterator[BrokerProcess]:
    process = BrokerProcess(directory, overrides={"offsets.topic.num.partitions": "1", **overrides}).start()
    yield process
    if process.alive:
        assert process.stop() == 0, process.log_tail()


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """Kafka's default lock duration (30 s): no lock expires in a test that does not wait for it."""
    yield from _broker(tmp_path_factory.mktemp("share-broker"))


@pytest.fixture(scope="module")
def short_locks(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    yield from _broker(tmp_path_factory.mktemp("share-short-locks"),
                       **{"group.share.record.lock.duration.ms": str(LOCK_MS),
                          "group.share.delivery.count.limit": str(DELIVERY_LIMIT)})


def _topic(broker: BrokerProcess, name: str) -> str:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(name, 1, 1)])[name].result(15)
    return name


def _produce(broker: BrokerProcess, topic: str, values: list[bytes]) -> None:
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5})
    for value in values:
        producer.produce(topic, value)
    assert producer.flush(30) == 0


def _consumer(broker: BrokerProcess, group: str, topic: str, explicit: bool = False) -> ShareConsumer:
    consumer = ShareConsumer({"bootstrap.servers": broker.bootstrap, "group.id": group,
                              "share.acknowledgement.mode": "explicit" if explicit else "implicit"})
    consumer.subscribe([topic])
    return consumer


def _described(broker: BrokerProcess, group: str) -> Any:
    with RawClient(broker.bootstrap) as client:
        answer = client.request(77, 1, {"group_ids": [group], "include_authorized_operations": False})
    return answer.groups[0]


def _joined(broker: BrokerProcess, group: str, members: int, consumers: list[ShareConsumer]) -> bool:
    """Poll the in-process consumers (their heartbeats run in the background; polls start their
    fetch sessions) until the group has `members` members, each with its partition."""
    for consumer in consumers:
        assert not [m for m in consumer.poll(0.1) if m.error() is None], "no record was produced yet"
    group_info = _described(broker, group)
    return len(group_info.members) == members and all(m.assignment.topic_partitions for m in group_info.members)


def test_four_consumers_share_one_partition_and_each_record_is_processed_once(broker: BrokerProcess) -> None:
    topic = _topic(broker, "share-queue")
    consumers = [_consumer(broker, "workers", topic) for _ in range(4)]
    try:
        # The share partition starts (share.auto.offset.reset=latest) when first assigned.
        wait_until(lambda: _joined(broker, "workers", 4, consumers), 60, "four members with the partition")
        total = 20_000
        _produce(broker, topic, [f"record-{i}".encode() for i in range(total)])
        seen: list[list[int]] = [[] for _ in consumers]
        deadline = time.monotonic() + 120
        while sum(map(len, seen)) < total and time.monotonic() < deadline:
            for index, consumer in enumerate(consumers):
                # Implicit mode: this poll accepts what the previous one returned.
                seen[index].extend(m.offset() for m in consumer.poll(0.05) if m.error() is None)
    finally:
        for consumer in consumers:
            consumer.close()
    offsets = [o for s in seen for o in s]
    assert sorted(offsets) == list(range(total)), "every record once, none twice"
    assert sum(1 for s in seen if s) > 1, f"one consumer took everything: {[len(s) for s in seen]}"


def test_a_killed_consumers_records_come_back_after_their_lock(short_locks: BrokerProcess) -> None:
    broker = short_locks
    topic = _topic(broker, "share-crash")
    member = subprocess.Popen([sys.executable, "-m", "tests.share_member", broker.bootstrap, "crashers", topic],
                              stdout=subprocess.PIPE, text=True)
    survivor = None
    try:
        wait_until(lambda: _joined(broker, "crashers", 1, []), 60, "the member with the partition")
        _produce(broker, topic, [f"job-{i}".encode() for i in range(10)])
        assert member.stdout is not None
        held = json.loads(member.stdout.readline())["held"]
        member.kill()
        member.wait(10)
        assert held and all(count == 1 for _, count in held)
        # Only now a second consumer: nothing could go to it before the crash.
        survivor = _consumer(broker, "crashers", topic, explicit=True)
        redelivered: dict[int, int] = {}
        deadline = time.monotonic() + 30
        while len(redelivered) < 10 and time.monotonic() < deadline:
            for message in survivor.poll(0.2):
                if message.error() is None:
                    redelivered[message.offset()] = message.delivery_count()
                    survivor.acknowledge(message)
            survivor.commit_sync(10)
    finally:
        if member.poll() is None:
            member.kill()
        if survivor is not None:
            survivor.close()
    assert sorted(redelivered) == list(range(10))
    # What the killed member held came back once its lock expired, delivered a second time.
    assert {o: redelivered[o] for o, _ in held} == {o: 2 for o, _ in held}


def _poll_one(consumer: ShareConsumer, timeout_s: float = 30) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        messages = [m for m in consumer.poll(0.2) if m.error() is None]
        if messages:
            return messages
    raise AssertionError("no record in time")


def test_release_redelivers_reject_archives_and_the_delivery_limit_archives(short_locks: BrokerProcess) -> None:
    broker = short_locks
    topic = _topic(broker, "share-acks")
    consumer = _consumer(broker, "ackers", topic, explicit=True)
    try:
        wait_until(lambda: _joined(broker, "ackers", 1, [consumer]), 60, "the member with the partition")
        _produce(broker, topic, [b"accepted", b"released", b"rejected"])
        first = _poll_one(consumer)
        assert [(m.value(), m.delivery_count()) for m in first] == [
            (b"accepted", 1), (b"released", 1), (b"rejected", 1)]
        kinds = {b"accepted": AcknowledgeType.ACCEPT, b"released": AcknowledgeType.RELEASE,
                 b"rejected": AcknowledgeType.REJECT}
        for message in first:
            consumer.acknowledge(message, kinds[message.value()])
        consumer.commit_sync(10)
        # Released: delivered again, alone, until the delivery-count limit archives it.
        for delivery in range(2, DELIVERY_LIMIT + 1):
            again = _poll_one(consumer)
            assert [(m.value(), m.delivery_count()) for m in again] == [(b"released", delivery)]
            consumer.acknowledge(again[0], AcknowledgeType.RELEASE)
            consumer.commit_sync(10)
        # A record produced now comes next: nothing earlier is left to deliver (redeliveries go first).
        _produce(broker, topic, [b"sentinel"])
        last = _poll_one(consumer)
        assert [m.value() for m in last] == [b"sentinel"]
        consumer.acknowledge(last[0])
        consumer.commit_sync(10)
    finally:
        consumer.close()


def test_with_share_groups_disabled_their_apis_are_neither_advertised_nor_served(tmp_path: Path) -> None:
    for process in _broker(tmp_path / "no-shares", **{"group.share.enable": "false"}):
        with RawClient(process.bootstrap) as client:
            answer = client.request(18, 3, {"client_software_name": "t", "client_software_version": "1"})
            assert not {k.api_key for k in answer.api_keys} & {76, 77, 78, 79, 90, 91, 92}
            refused = client.request(76, 1, {"group_id": "g", "member_id": "m", "member_epoch": 0, "rack_id": None,
                                             "subscribed_topic_names": ["t"]})
            assert refused.error_code == ErrorCode.UNSUPPORTED_VERSION
            described = client.request(90, 1, {"groups": [{"group_id": "g", "topics": None}]}).groups[0]
            assert described.error_code == ErrorCode.UNSUPPORTED_VERSION
            altered = client.request(91, 0, {"group_id": "g", "topics": []})
            assert altered.error_code == ErrorCode.UNSUPPORTED_VERSION
