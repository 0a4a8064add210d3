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
