"""conf/secured.properties works as docs/security.md says: a broker started from it (with this
test's paths and port) takes only SASL_SSL, its PLAIN administrator creates SCRAM users and the
ACLs, the producer writes where allowed and nowhere else, the consumer reads in its group only,
and a user without ACLs gets nothing."""

from __future__ import annotations

import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from prometheus_client.parser import text_string_to_metric_families

from kbroker.properties import parse_properties
from tests.brokers import PROJECT_ROOT, BrokerProcess, free_port
from tests.tls_material import TlsMaterial
from tests.waiting import wait_until

EXAMPLE = PROJECT_ROOT / "conf" / "secured.properties"
ADMIN_PASSWORD = "change-this-admin-secret"  # as the example file says; an operator changes it


def tool(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kbroker.cli.main", *args], cwd=PROJECT_ROOT, capture_output=True,
                          text=True, timeout=60, check=check)


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, TlsMaterial, Path, int]]:
    directory = tmp_path_factory.mktemp("secured")
    material = TlsMaterial.create(directory / "tls")
    example = EXAMPLE.read_text().replace("/etc/kbroker/broker-store.pem", str(material.server.store))
    config = directory / "secured.properties"
    config.write_text(example)
    port, metrics_port = free_port(), free_port()
    broker = BrokerProcess(directory / "broker", config_file=str(config),
                           overrides={"listeners": f"SASL_SSL://127.0.0.1:{port}",
                                      "metrics.listener": f"http://127.0.0.1:{metrics_port}"})
    admin = directory / "admin.properties"
    admin.write_text("security.protocol=SASL_SSL\nsasl.mechanism=PLAIN\n"
                     "sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required "
                     f"username=\"admin\" password=\"{ADMIN_PASSWORD}\";\n"
                     f"ssl.truststore.type=PEM\nssl.truststore.location={material.ca.pem_path}\n")
    broker.start()
    try:
        yield f"127.0.0.1:{port}", material, admin, metrics_port
    finally:
        broker.stop()


def _scram(bootstrap: str, material: TlsMaterial, user: str, password: str) -> dict[str, str]:
    return {"bootstrap.servers": bootstrap, "security.protocol": "SASL_SSL", "ssl.ca.location": str(material.ca.pem_path),
            "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": user, "sasl.password": password}


def _read_one(conf: dict[str, str], topic: str, group: str) -> bytes:
    """The first record of `topic` read as a member of `group` (subscribe: the group is checked)."""
    consumer = Consumer({**conf, "group.id": group, "auto.offset.reset": "earliest"})
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None:
                continue
            assert message.error() is None, message.error().name()
            return message.value()
        raise AssertionError("no record within 30 s")
    finally:
        consumer.close()


def test_the_example_file_is_what_the_walkthrough_runs() -> None:
    props = parse_properties(EXAMPLE.read_text())
    assert props["listeners"].startswith("SASL_SSL://")
    assert "PLAINTEXT" not in props["listener.security.protocol.map"]
    assert props["authorizer.class.name"] == "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
    assert props["super.users"] == "User:admin" and props["allow.everyone.if.no.acl.found"] == "false"
    assert props["metrics.listener"] == "http://0.0.0.0:9404"
    assert f'user_admin="{ADMIN_PASSWORD}"' in props["listener.name.sasl_ssl.plain.sasl.jaas.config"]


def test_least_privilege_on_the_secured_example(secured: tuple[str, TlsMaterial, Path, int]) -> None:
    bootstrap, material, admin, _ = secured
    as_admin = ["--bootstrap-server", bootstrap, "--command-config", str(admin)]
    topic, other = f"orders-{uuid.uuid4().hex[:6]}", f"other-{uuid.uuid4().hex[:6]}"
    for name in (topic, other):
        tool("topics", *as_admin, "--create", "--topic", name, "--partitions", "1")
    tool("configs", *as_admin, "--entity-type", "users", "--entity-name", "alice", "--alter",
         "--add-config", "SCRAM-SHA-512=[iterations=8192,password=alice-secret]")
    tool("configs", *as_admin, "--entity-type", "users", "--entity-name", "mallory", "--alter",
         "--add-config", "SCRAM-SHA-512=[iterations=8192,password=mallory-secret]")
    tool("configs", *as_admin, "--entity-type", "users", "--entity-name", "bob", "--alter",
         "--add-config", "SCRAM-SHA-512=[iterations=8192,password=bob-secret]")
    tool("acls", *as_admin, "--add", "--allow-principal", "User:alice", "--producer", "--topic", topic)
    tool("acls", *as_admin, "--add", "--allow-principal", "User:bob", "--consumer", "--topic", topic,
         "--group", "billing")

    def produce(user: str, password: str, to: str) -> KafkaError | None:
        producer = Producer({**_scram(bootstrap, material, user, password), "message.timeout.ms": 5_000})
        outcome: list[KafkaError | None] = []
        producer.produce(to, b"order", on_delivery=lambda err, _msg: outcome.append(err))
        producer.flush(15)
        return outcome[0] if outcome else KafkaError(KafkaError._TIMED_OUT)

    assert produce("alice", "alice-secret", topic) is None
    assert produce("alice", "alice-secret", other).code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert produce("mallory", "mallory-secret", topic).code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    # A wrong password gets no further than the login (librdkafka retries it until the message expires).
    assert produce("alice", "not-alice-secret", topic) is not None
    # alice may not read what she wrote; the administrator can, and finds exactly one record.
    consumer = Consumer({**_scram(bootstrap, material, "alice", "alice-secret"), "group.id": "alice-group"})
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        message = consumer.poll(10)
        assert message is not None and message.error() is not None
        assert message.error().code() in (KafkaError.TOPIC_AUTHORIZATION_FAILED, KafkaError.GROUP_AUTHORIZATION_FAILED)
    finally:
        consumer.close()
    # bob reads in group billing, and nowhere else.
    assert _read_one(_scram(bootstrap, material, "bob", "bob-secret"), topic, "billing") == b"order"
    with pytest.raises(AssertionError, match="GROUP_AUTHORIZATION_FAILED"):
        _read_one(_scram(bootstrap, material, "bob", "bob-secret"), topic, "another-group")
    admin_client = Consumer({"bootstrap.servers": bootstrap, "security.protocol": "SASL_SSL",
                             "ssl.ca.location": str(material.ca.pem_path), "sasl.mechanism": "PLAIN",
                             "sasl.username": "admin", "sasl.password": ADMIN_PASSWORD, "group.id": "admin"})
    try:
        assert admin_client.get_watermark_offsets(TopicPartition(topic, 0), timeout=10) == (0, 1)
        assert admin_client.get_watermark_offsets(TopicPartition(other, 0), timeout=10) == (0, 0)
    finally:
        admin_client.close()


def test_plaintext_clients_are_not_served(secured: tuple[str, TlsMaterial, Path, int]) -> None:
    bootstrap, _, _, _ = secured
    refused = tool("topics", "--bootstrap-server", bootstrap, "--list", check=False)
    assert refused.returncode != 0
    with pytest.raises(KafkaException):
        Consumer({"bootstrap.servers": bootstrap, "group.id": "g", "socket.timeout.ms": 2000}).list_topics(timeout=3)


def _authentication_failures(metrics_port: int) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    return sum(sample.value for family in text_string_to_metric_families(text) for sample in family.samples
               if sample.name == "kbroker_authentication_failures_total" and sample.labels["listener"] == "SASL_SSL")


def test_failed_logins_show_in_the_metrics(secured: tuple[str, TlsMaterial, Path, int]) -> None:
    """A wrong password and a plaintext client (its TLS handshake fails) are failed authentications."""
    bootstrap, material, _, metrics_port = secured
    before = _authentication_failures(metrics_port)
    consumer = Consumer({**_scram(bootstrap, material, "admin", "wrong-password"), "sasl.mechanism": "PLAIN",
                         "group.id": "g"})
    try:
        with pytest.raises(KafkaException):
            consumer.list_topics(timeout=3)
    finally:
        consumer.close()
    wait_until(lambda: _authentication_failures(metrics_port) > before, 15, "the failed login to be counted")
    after_login = _authentication_failures(metrics_port)
    assert tool("topics", "--bootstrap-server", bootstrap, "--list", check=False).returncode != 0
    wait_until(lambda: _authentication_failures(metrics_port) > after_login, 15, "the failed handshake to be counted")
