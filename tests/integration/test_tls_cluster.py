"""A three-broker ZooKeeper cluster with only SSL listeners (mutual TLS, inter-broker too):
replication, then kill -9 of the leader, and everything acknowledged read from the new one.
With no plaintext port anywhere, followers can only replicate over TLS."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.brokers import BrokerProcess, free_port
from tests.tls_material import TlsMaterial
from tests.waiting import wait_until

SETTINGS = {"replica.lag.time.max.ms": "3000", "replica.fetch.wait.max.ms": "100",
            "replica.fetch.backoff.ms": "100", "zookeeper.session.timeout.ms": "4000",
            "offsets.topic.num.partitions": "3", "security.inter.broker.protocol": "SSL"}


@pytest.fixture
def tls_cluster(tmp_path: Path, zk_connect: str) -> Iterator[tuple[list[BrokerProcess], TlsMaterial]]:
    material = TlsMaterial.create(tmp_path / "tls")
    brokers = []
    try:
        for broker_id in range(3):
            port = free_port()
            brokers.append(BrokerProcess(tmp_path / f"b{broker_id}", port=port, overrides={
                "broker.id": str(broker_id), "zookeeper.connect": zk_connect, "listeners": f"SSL://127.0.0.1:{port}",
                **material.server_properties("required"), **SETTINGS}).start())
        yield brokers, material
    finally:
        for broker in brokers:
            broker.kill()


def _conf(brokers: list[BrokerProcess], material: TlsMaterial) -> dict[str, str]:
    client = material.client("tester")
    return {"bootstrap.servers": ",".join(b.bootstrap for b in brokers if b.alive), "security.protocol": "SSL",
            "ssl.ca.location": str(material.ca.pem_path), "ssl.certificate.location": str(client.chain),
            "ssl.key.location": str(client.key)}


def _partition(admin: AdminClient, topic: str) -> tuple[int, list[int]]:
    try:
        partition = admin.list_topics(topic, timeout=5).topics[topic].partitions[0]
    except (KafkaException, KeyError):
        return -1, []
    return partition.leader, sorted(partition.isrs)


def test_an_ssl_only_cluster_replicates_and_survives_its_leaders_death(
        tls_cluster: tuple[list[BrokerProcess], TlsMaterial]) -> None:
    brokers, material = tls_cluster
    conf = _conf(brokers, material)
    admin = AdminClient(conf)
    admin.create_topics([NewTopic("secured", 1, 3, config={"min.insync.replicas": "2"})])["secured"].result(30)
    wait_until(lambda: _partition(admin, "secured")[1] == [0, 1, 2], what="a full ISR over TLS")

    acknowledged: list[bytes] = []

    def delivered(error: object, message: object) -> None:
        if error is None:
            acknowledged.append(message.value())  # type: ignore[attr-defined]

    producer = Producer({**conf, "acks": "all", "enable.idempotence": True})
    for i in range(300):
        producer.produce("secured", f"record {i}".encode(), on_delivery=delivered)
    assert producer.flush(30) == 0
    assert len(acknowledged) == 300

    leader = _partition(admin, "secured")[0]
    brokers[leader].kill()  # kill -9
    survivors = [b for b in brokers if b.alive]
    admin = AdminClient(_conf(survivors, material))
    wait_until(lambda: _partition(admin, "secured")[0] not in (leader, -1), what="a new leader")

    consumer = Consumer({**_conf(survivors, material), "group.id": "check", "enable.auto.commit": False})
    consumer.assign([TopicPartition("secured", 0, 0)])
    read: list[bytes] = []
    deadline = time.monotonic() + 30
    while len(read) < len(acknowledged) and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            read.append(message.value())
    consumer.close()
    assert read == acknowledged
