"""Share-partition state survives the broker (KIP-932's `__share_group_state`): what a consumer
accepted is never delivered again after a crash; what it held comes back."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from confluent_kafka import Producer, ShareConsumer
from confluent_kafka.admin import AdminClient, NewTopic

from kbroker.coordinator.share_state_records import coordinator_key
from protocol.errors import ErrorCode
from protocol.primitives import ZERO_UUID
from tests.brokers import BrokerProcess
from tests.rawclient import RawClient
from tests.waiting import wait_until

pytestmark = pytest.mark.timeout(240)


def _produce(bootstrap: str, topic: str, values: list[bytes]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "acks": "all"})
    for value in values:
        producer.produce(topic, value)
    assert producer.flush(30) == 0


def _assigned(bootstrap: str, group: str) -> bool:
    """The group has a member and it has its partition (ShareGroupDescribe)."""
    with RawClient(bootstrap) as client:
        answer = client.request(77, 1, {"group_ids": [group], "include_authorized_operations": False})
    members = answer.groups[0].members
    return bool(members) and all(m.assignment.topic_partitions for m in members)


def _member(bootstrap: str, group: str, topic: str, accepted: int) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "tests.share_member", bootstrap, group, topic, str(accepted)],
                            stdout=subprocess.PIPE, text=True)


def test_after_a_crash_only_what_was_not_accepted_is_delivered_again(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "broker", overrides={"offsets.topic.num.partitions": "1",
                                                           "share.coordinator.state.topic.num.partitions": "1"})
    broker.start()
    member = None
    consumer = None
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([NewTopic("durable", 1, 1)])["durable"].result(15)
        member = _member(broker.bootstrap, "keepers", "durable", accepted=6)
        wait_until(lambda: _assigned(broker.bootstrap, "keepers"), 60, "the member with the partition")
        _produce(broker.bootstrap, "durable", [f"job-{i}".encode() for i in range(10)])
        assert member.stdout is not None
        first = json.loads(member.stdout.readline())
        assert first["accepted"] == [0, 1, 2, 3, 4, 5]
        assert first["held"] == [[o, 1] for o in range(6, 10)]
        # The broker dies while the member holds 6-9; the member goes too.
        broker.kill()
        member.kill()
        member.wait(10)
        broker.start()
        consumer = ShareConsumer({"bootstrap.servers": broker.bootstrap, "group.id": "keepers",
                                  "share.acknowledgement.mode": "explicit"})
        consumer.subscribe(["durable"])
        delivered: dict[int, int] = {}
        deadline = time.monotonic() + 60
        while len(delivered) < 4 and time.monotonic() < deadline:
            for message in consumer.poll(0.2):
                if message.error() is None:
                    delivered[message.offset()] = message.delivery_count()
                    consumer.acknowledge(message)
            consumer.commit_sync(10)
        # Held when the broker died: delivered again, the first delivery counted.
        assert delivered == {6: 2, 7: 2, 8: 2, 9: 2}
        # Nothing accepted comes back: a record produced now is the next and only one.
        _produce(broker.bootstrap, "durable", [b"sentinel"])
        later: list[int] = []
        deadline = time.monotonic() + 30
        while not later and time.monotonic() < deadline:
            for message in consumer.poll(0.2):
                if message.error() is None:
                    later.append(message.offset())
                    consumer.acknowledge(message)
        consumer.commit_sync(10)
        assert later == [10]
    finally:
        if member is not None and member.poll() is None:
            member.kill()
        if consumer is not None:
            consumer.close()
        if broker.alive:
            assert broker.stop() == 0, broker.log_tail()


def test_the_state_rpcs_and_find_coordinator_for_a_share_key(tmp_path: Path) -> None:
    """Initialize/Read/WriteShareGroupState as another broker sends them, and FindCoordinator's
    share key type; none of the state RPCs is advertised."""
    broker = BrokerProcess(tmp_path / "broker", overrides={"share.coordinator.state.topic.num.partitions": "2"})
    broker.start()
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([NewTopic("stated", 1, 1)])["stated"].result(15)
        with RawClient(broker.bootstrap) as client:
            topic_id = client.request(3, 12, {"topics": [{"name": "stated", "topic_id": ZERO_UUID}],
                                             "allow_auto_topic_creation": False,
                                             "include_topic_authorized_operations": False}).topics[0].topic_id
            key = coordinator_key("g", topic_id, 0)
            found = client.request(10, 6, {"key_type": 2, "coordinator_keys": [key, "not-a-key"]}).coordinators
            assert [(c.error_code, c.node_id) for c in found] == [(0, 0), (ErrorCode.INVALID_REQUEST, -1)]
            target = {"group_id": "g", "topics": [{"topic_id": topic_id, "partitions": [
                {"partition": 0, "leader_epoch": 3}]}]}
            unread = client.request(84, 0, target).results[0].partitions[0]
            assert (unread.error_code, unread.start_offset) == (0, -1)
            initialized = client.request(83, 0, {"group_id": "g", "topics": [{"topic_id": topic_id, "partitions": [
                {"partition": 0, "state_epoch": 1, "start_offset": 5}]}]})
            assert initialized.results[0].partitions[0].error_code == 0
            batch = {"first_offset": 5, "last_offset": 6, "delivery_state": 2, "delivery_count": 1}
            written = client.request(85, 0, {"group_id": "g", "topics": [{"topic_id": topic_id, "partitions": [
                {"partition": 0, "state_epoch": 1, "leader_epoch": 3, "start_offset": 5, "state_batches": [batch]}]}]})
            assert written.results[0].partitions[0].error_code == 0
            stale = client.request(85, 0, {"group_id": "g", "topics": [{"topic_id": topic_id, "partitions": [
                {"partition": 0, "state_epoch": 1, "leader_epoch": 2, "start_offset": 5, "state_batches": []}]}]})
            assert stale.results[0].partitions[0].error_code == ErrorCode.FENCED_LEADER_EPOCH
            read = client.request(84, 0, target).results[0].partitions[0]
            assert (read.error_code, read.state_epoch, read.start_offset) == (0, 1, 5)
            assert [(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count) for b in read.state_batches] \
                == [(5, 6, 2, 1)]
            advertised = {k.api_key for k in client.request(18, 3, {"client_software_name": "t",
                                                                    "client_software_version": "1"}).api_keys}
            assert not advertised & {83, 84, 85, 86, 87}
        # It is all in __share_group_state: a restart reads it back.
        broker.stop()
        broker.start()
        with RawClient(broker.bootstrap) as client:
            read = client.request(84, 0, target).results[0].partitions[0]
            assert (read.error_code, read.state_epoch, read.start_offset, len(read.state_batches)) == (0, 1, 5, 1)
    finally:
        if broker.alive:
            assert broker.stop() == 0, broker.log_tail()
