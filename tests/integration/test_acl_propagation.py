"""ACLs in a three-broker ZooKeeper cluster: created through one broker, kept in Kafka's znodes
(`/kafka-acl`, `/kafka-acl-changes`), and applied by every other broker within a second; removal
likewise. Replication keeps working: the brokers reach each other on PLAINTEXT, whose principal
(User:ANONYMOUS) is a super user here, as docs/security.md asks of broker principals."""

from __future__ import annotations

import json
import socket
import ssl
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from protocol.connection import ClientProtocol
from protocol.errors import ErrorCode
from tests.brokers import BrokerProcess, free_port
from tests.rawclient import RawClient
from tests.tls_material import TlsMaterial
from tests.waiting import wait_until

TOPIC = "shared"


class Node:
    def __init__(self, process: BrokerProcess, plain: int, mtls: int) -> None:
        self.process, self.plain, self.mtls = process, plain, mtls


@pytest.fixture
def cluster(tmp_path: Path, zk_connect: str) -> Iterator[tuple[list[Node], TlsMaterial]]:
    material = TlsMaterial.create(tmp_path / "tls")
    nodes = []
    for broker_id in range(3):
        plain, mtls = free_port(), free_port()
        overrides = {
            "broker.id": str(broker_id), "zookeeper.connect": zk_connect,
            "listeners": f"PLAINTEXT://127.0.0.1:{plain},MTLS://127.0.0.1:{mtls}",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,MTLS:SSL",
            "inter.broker.listener.name": "PLAINTEXT",
            **material.server_properties("required"),
            "ssl.principal.mapping.rules": "RULE:^CN=([^,]*),.*$/$1/",
            "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
            "super.users": "User:ANONYMOUS", "zookeeper.session.timeout.ms": "4000",
        }
        nodes.append(Node(BrokerProcess(tmp_path / f"b{broker_id}", port=plain, overrides=overrides), plain, mtls))
    for node in nodes:
        node.process.spawn()
    try:
        for node in nodes:
            node.process.wait_ready()
        yield nodes, material
    finally:
        for node in nodes:
            node.process.kill()


def _as_alice(material: TlsMaterial, port: int) -> RawClient:
    alice = material.client("alice")
    context = ssl.create_default_context(cafile=str(material.ca.pem_path))
    context.load_cert_chain(alice.chain, alice.key)
    client = RawClient.__new__(RawClient)
    client.sock = context.wrap_socket(socket.create_connection(("127.0.0.1", port), timeout=10),
                                      server_hostname="localhost")
    client.conn = ClientProtocol("alice")
    return client


def _metadata_error(client: RawClient) -> int:
    answer = client.request(3, 12, {"topics": [{"name": TOPIC, "topic_id": None}], "allow_auto_topic_creation": False,
                                    "include_topic_authorized_operations": False})
    return answer.topics[0].error_code


ALICE_READS = {"resource_type": 2, "resource_name": TOPIC, "resource_pattern_type": 3, "principal": "User:alice",
               "host": "*", "operation": 3, "permission_type": 3}


def test_an_acl_created_on_one_broker_is_applied_by_the_others_within_a_second(
        cluster: tuple[list[Node], TlsMaterial], zk_connect: str) -> None:
    nodes, material = cluster
    with RawClient(f"127.0.0.1:{nodes[0].plain}") as admin:
        created = admin.request(19, 5, {"topics": [{"name": TOPIC, "num_partitions": 1, "replication_factor": 3,
                                                    "assignments": [], "configs": []}], "timeout_ms": 30000})
        assert created.topics[0].error_code == 0
    others = [_as_alice(material, node.mtls) for node in nodes[1:]]
    for client in others:
        wait_until(lambda c=client: _metadata_error(c) == ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                   what="the topic, refused to alice")
    with RawClient(f"127.0.0.1:{nodes[0].plain}") as admin:
        answer = admin.request(30, 3, {"creations": [ALICE_READS]})
        created_at = time.monotonic()
        assert [r.error_code for r in answer.results] == [0]
    for client in others:
        wait_until(lambda c=client: _metadata_error(c) == 0, timeout_s=5, interval_s=0.01,
                   what="the new ACL applied on another broker")
    assert time.monotonic() - created_at < 1.0
    # Kafka's layout, so Kafka's own tooling habits (zkCli.sh get /kafka-acl/Topic/shared) work.
    zk = KazooClient(hosts=zk_connect)
    zk.start(10)
    try:
        data, _ = zk.get(f"/kafka-acl/Topic/{TOPIC}")
        assert json.loads(data) == {"version": 1, "acls": [
            {"principal": "User:alice", "permissionType": "Allow", "operation": "Read", "host": "*"}]}
        changes = zk.get_children("/kafka-acl-changes")
        assert any(zk.get(f"/kafka-acl-changes/{c}")[0] == f"Topic:{TOPIC}".encode() for c in changes)
    finally:
        zk.stop()
        zk.close()
    # Removal travels the same way.
    with RawClient(f"127.0.0.1:{nodes[2].plain}") as admin:
        deleted = admin.request(31, 3, {"filters": [{"resource_type_filter": 2, "resource_name_filter": TOPIC,
                                                      "pattern_type_filter": 3, "principal_filter": "User:alice",
                                                      "host_filter": None, "operation": 1, "permission_type": 1}]})
        removed_at = time.monotonic()
        assert len(deleted.filter_results[0].matching_acls) == 1
    for client in (_as_alice(material, nodes[0].mtls), others[0]):
        wait_until(lambda c=client: _metadata_error(c) == ErrorCode.TOPIC_AUTHORIZATION_FAILED, timeout_s=5,
                   interval_s=0.01, what="the removal applied")
    assert time.monotonic() - removed_at < 1.0
    for client in others:
        client.close()
