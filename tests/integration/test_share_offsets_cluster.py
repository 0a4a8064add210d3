"""Share-group offsets on two brokers, the group's coordinator on one and the partition's leader on
the other: the lag comes from the leader's high watermark (ListOffsets between brokers), and a
reset takes effect on the leader, which let go of the share partition when the group's last
share session there ended."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer, ShareConsumer
from confluent_kafka.admin import AdminClient, NewTopic

from kbroker.client import Client
from kbroker.client.share_offsets import SharePartitionOffset
from tests.brokers import BrokerProcess, running_cluster
from tests.waiting import wait_until

pytestmark = pytest.mark.timeout(300)

SETTINGS = {"offsets.topic.num.partitions": "1", "offsets.topic.replication.factor": "1",
            "share.coordinator.state.topic.num.partitions": "1",
            "share.coordinator.state.topic.replication.factor": "1", "share.coordinator.state.topic.min.isr": "1"}
GROUP, TOPIC = "remote-workers", "remote-jobs"


@pytest.fixture
def brokers(tmp_path: Path, zk_connect: str) -> Iterator[list[BrokerProcess]]:
    with running_cluster(tmp_path, zk_connect, 2, SETTINGS) as started:
        yield started


def _consume_all(bootstrap: str, expected: int) -> list[bytes]:
    consumer = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": GROUP,
                              "share.acknowledgement.mode": "explicit"})
    consumer.subscribe([TOPIC])
    got: list[bytes] = []
    try:
        deadline = time.monotonic() + 60
        while len(got) < expected and time.monotonic() < deadline:
            messages = [m for m in consumer.poll(0.2) if m.error() is None]
            for message in messages:
                consumer.acknowledge(message)
                got.append(message.value())
            if messages:
                consumer.commit_sync(10)
    finally:
        consumer.close()
    return got


def _offsets(client: Client) -> list[SharePartitionOffset]:
    return client.share_group_offsets(GROUP)


def test_lag_and_a_reset_with_the_partition_led_elsewhere(brokers: list[BrokerProcess]) -> None:
    bootstrap = ",".join(b.bootstrap for b in brokers)
    with Client(bootstrap, timeout=30) as client:
        coordinator = client.find_coordinator(GROUP).node_id
        leader = 1 - coordinator
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic(TOPIC, num_partitions=1, replica_assignment=[[leader]])])[TOPIC].result(30)
        producer = Producer({"bootstrap.servers": bootstrap})
        for i in range(5):
            producer.produce(TOPIC, f"r{i}".encode())
        assert producer.flush(30) == 0
        assert client.alter_share_group_offsets(GROUP, {(TOPIC, 0): 0}) == {(TOPIC, 0): 0}
        assert _consume_all(bootstrap, 5) == [f"r{i}".encode() for i in range(5)]
        wait_until(lambda: client.describe_share_group(GROUP).state == "Empty", 30, "the group empty")

        for i in range(5, 8):
            producer.produce(TOPIC, f"r{i}".encode())
        assert producer.flush(30) == 0
        [row] = _offsets(client)
        assert (row.start_offset, row.lag) == (5, 3)  # the lag from the leader's high watermark

        assert client.alter_share_group_offsets(GROUP, {(TOPIC, 0): 0}) == {(TOPIC, 0): 0}
        assert _consume_all(bootstrap, 8) == [f"r{i}".encode() for i in range(8)]
