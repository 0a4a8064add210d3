"""A three-broker ZooKeeper cluster with only SSL listeners (mutual TLS, inter-broker too):
replication, then kill -9 of the leader, and everything acknowledged read from the new one.
With no plaintext port anywhere, followers can only replicate over TLS. Then the same with ACLs
on: the brokers' certificate names a super user (as Kafka asks of broker principals), so they
replicate, while a client may do only what its ACLs allow."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, TopicPartition
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)

from tests.brokers import BrokerProcess, free_port
from tests.leader_death import acknowledged_records_survive_leader_death
from tests.tls_material import TlsMaterial

SETTINGS = {"replica.lag.time.max.ms": "3000", "replica.fetch.wait.max.ms": "100",
            "replica.fetch.backoff.ms": "100", "zookeeper.session.timeout.ms": "4000",
            "offsets.topic.num.partitions": "3", "security.inter.broker.protocol": "SSL"}


# The principals of the brokers' certificate and of the administrator's (RFC 2253, as Kafka names them).
BROKER_PRINCIPAL = "User:CN=localhost,O=kbroker tests"
ADMIN_PRINCIPAL = "User:CN=admin,OU=eng,O=kbroker tests"
ACLS_ON = {"authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
           "super.users": f"{BROKER_PRINCIPAL};{ADMIN_PRINCIPAL}", "allow.everyone.if.no.acl.found": "false"}


@pytest.fixture(params=[False, True], ids=["no-acls", "acls"])
def tls_cluster(tmp_path: Path, zk_connect: str, request: pytest.FixtureRequest,
                ) -> Iterator[tuple[list[BrokerProcess], TlsMaterial]]:
    material = TlsMaterial.create(tmp_path / "tls")
    acls = ACLS_ON if request.param else {}
    brokers = []
    try:
        for broker_id in range(3):
            port = free_port()
            brokers.append(BrokerProcess(tmp_path / f"b{broker_id}", port=port, overrides={
                "broker.id": str(broker_id), "zookeeper.connect": zk_connect, "listeners": f"SSL://127.0.0.1:{port}",
                **material.server_properties("required"), **SETTINGS, **acls}).start())
        yield brokers, material
    finally:
        for broker in brokers:
            broker.kill()


def _conf(brokers: list[BrokerProcess], material: TlsMaterial, name: str = "tester") -> dict[str, str]:
    client = material.client(name)
    return {"bootstrap.servers": ",".join(b.bootstrap for b in brokers if b.alive), "security.protocol": "SSL",
            "ssl.ca.location": str(material.ca.pem_path), "ssl.certificate.location": str(client.chain),
            "ssl.key.location": str(client.key)}


def test_an_ssl_only_cluster_replicates_and_survives_its_leaders_death(
        tls_cluster: tuple[list[BrokerProcess], TlsMaterial]) -> None:
    brokers, material = tls_cluster
    if "authorizer.class.name" not in brokers[0].overrides:
        acknowledged_records_survive_leader_death(brokers, lambda live: _conf(live, material),
                                                  _conf(brokers, material), over="TLS")
        return
    # ACLs on: the administrator lets the tester produce to "secured" (idempotently) and nothing else.
    admin = AdminClient(_conf(brokers, material, "admin"))
    tester = "User:CN=tester,OU=eng,O=kbroker tests"
    bindings = [AclBinding(ResourceType.TOPIC, "secured", ResourcePatternType.LITERAL, tester, "*", operation,
                           AclPermissionType.ALLOW) for operation in (AclOperation.WRITE, AclOperation.DESCRIBE)]
    bindings.append(AclBinding(ResourceType.BROKER, "kafka-cluster", ResourcePatternType.LITERAL, tester, "*",
                               AclOperation.IDEMPOTENT_WRITE, AclPermissionType.ALLOW))
    for future in admin.create_acls(bindings).values():
        future.result(30)
    acknowledged_records_survive_leader_death(brokers, lambda live: _conf(live, material, "admin"),
                                              _conf(brokers, material), over="TLS with ACLs on")
    # The tester may write but not read.
    survivors = [b for b in brokers if b.alive]
    consumer = Consumer({**_conf(survivors, material), "group.id": "tester-group"})
    try:
        consumer.assign([TopicPartition("secured", 0, 0)])
        refused = None
        deadline = time.monotonic() + 30
        while refused is None and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None:
                continue
            assert message.error() is not None, "the tester read a record it has no READ ACL for"
            # The consumer also looks up its group's coordinator, which the tester may not describe
            # either; that refusal can surface first, in any order with the fetch's.
            if message.error().code() != KafkaError.GROUP_AUTHORIZATION_FAILED:
                refused = message.error().code()
        assert refused == KafkaError.TOPIC_AUTHORIZATION_FAILED
    finally:
        consumer.close()
