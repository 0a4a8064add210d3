"""A three-broker ZooKeeper cluster whose only listeners are SASL_SSL, brokers logging in to each
other with SCRAM-SHA-512: the first credentials written to ZooKeeper by `kbroker configs
--zookeeper` before any broker runs; a credential created through one broker works on the others
(ZooKeeper's change notifications); replication with acks=all survives kill -9 of the leader with
nothing acknowledged lost; and no password reaches a log or a data directory."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from kbroker.client import BrokerUnreachable, Client
from kbroker.metadata.zookeeper_process import ZooKeeperServer
from kbroker.security.client_config import ClientSecurity
from protocol.errors import KafkaError
from tests.brokers import PROJECT_ROOT, BrokerProcess, free_port
from tests.integration.test_replicated_cluster import Cluster, acknowledged_messages_survive_broker_kills
from tests.leader_death import acknowledged_records_survive_leader_death
from tests.tls_material import TlsMaterial
from tests.waiting import wait_until

PASSWORDS = {"broker": "inter-broker-secret-41d7", "admin": "admin-secret-93ab", "carol": "carol-secret-0c55"}
SCRAM = "org.apache.kafka.common.security.scram.ScramLoginModule"
SETTINGS = {"replica.lag.time.max.ms": "3000", "replica.fetch.wait.max.ms": "100",
            "replica.fetch.backoff.ms": "100", "zookeeper.session.timeout.ms": "4000",
            "offsets.topic.num.partitions": "3", "security.inter.broker.protocol": "SASL_SSL",
            "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
            "sasl.enabled.mechanisms": "SCRAM-SHA-512,SCRAM-SHA-256",
            "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config":
                f'{SCRAM} required username="broker" password="{PASSWORDS["broker"]}";'}


def _kbroker(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kbroker.cli.main", *args], cwd=PROJECT_ROOT, capture_output=True,
                          text=True, timeout=60, check=True)


@pytest.fixture
def sasl_cluster(tmp_path: Path, zk_connect: str) -> Iterator[tuple[list[BrokerProcess], TlsMaterial]]:
    material = TlsMaterial.create(tmp_path / "tls")
    for user in ("broker", "admin"):  # before any broker: no listener would let them be created
        written = _kbroker("configs", "--zookeeper", zk_connect, "--alter", "--entity-type", "users",
                           "--entity-name", user, "--add-config", f"SCRAM-SHA-512=[password={PASSWORDS[user]}]")
        assert written.stdout.strip() == f"Completed updating config for entity: user-principal '{user}'."
    brokers = []
    try:
        for broker_id in range(3):
            port = free_port()
            brokers.append(BrokerProcess(tmp_path / f"b{broker_id}", port=port, overrides={
                "broker.id": str(broker_id), "zookeeper.connect": zk_connect,
                "listeners": f"SASL_SSL://127.0.0.1:{port}", **material.server_properties("none"),
                **SETTINGS}, start_command=[sys.executable, "-m", "kbroker.cli.main", "start", "--log-level", "DEBUG"]))
        for broker in brokers:
            broker.spawn()
        for broker in brokers:
            broker.wait_ready()
        yield brokers, material
    finally:
        for broker in brokers:
            broker.kill()


def _conf(brokers: list[BrokerProcess], material: TlsMaterial, user: str = "admin") -> dict[str, str]:
    return {"bootstrap.servers": ",".join(b.bootstrap for b in brokers if b.alive), "security.protocol": "SASL_SSL",
            "ssl.ca.location": str(material.ca.pem_path), "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.username": user, "sasl.password": PASSWORDS[user]}


def _logs_in(broker: BrokerProcess, material: TlsMaterial, user: str) -> bool:
    security = ClientSecurity.from_properties({
        "security.protocol": "SASL_SSL", "ssl.truststore.type": "PEM", "ssl.truststore.location": str(material.ca.pem_path),
        "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": user, "sasl.password": PASSWORDS[user]})
    try:
        Client(broker.bootstrap, security=security, timeout=5).close()
    except (KafkaError, BrokerUnreachable):
        return False
    return True


def test_a_sasl_ssl_only_cluster(sasl_cluster: tuple[list[BrokerProcess], TlsMaterial], tmp_path: Path,
                                 zookeeper: ZooKeeperServer) -> None:
    brokers, material = sasl_cluster
    # A user created through broker 0 logs in on brokers 1 and 2 once their caches follow.
    properties = tmp_path / "admin.properties"
    properties.write_text(f"security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-512\nsasl.username=admin\n"
                          f"sasl.password={PASSWORDS['admin']}\nssl.ca.location={material.ca.pem_path}\n")
    assert not _logs_in(brokers[2], material, "carol")
    _kbroker("configs", "--bootstrap-server", brokers[0].bootstrap, "--command-config", str(properties), "--alter",
             "--entity-type", "users", "--entity-name", "carol", "--add-config",
             f"SCRAM-SHA-512=[iterations=4096,password={PASSWORDS['carol']}]")
    for broker in brokers:
        wait_until(lambda broker=broker: _logs_in(broker, material, "carol"), timeout_s=10,
                   what=f"carol's credential on {broker.bootstrap}")

    # Replication over SASL_SSL only, then the leader's death.
    survivors = acknowledged_records_survive_leader_death(
        brokers, lambda live: _conf(live, material), _conf(brokers, material, "carol"), over="SASL_SSL")

    # No password in any broker's log or data, nor in ZooKeeper's files (which hold the credentials).
    for broker in survivors:
        broker.stop()
    found = [f"{path}: {password}" for directory in (tmp_path, zookeeper.directory)
             for path in directory.rglob("*") if path.is_file() and path.name != "admin.properties"
             for password in PASSWORDS.values() if password.encode() in path.read_bytes()]
    assert found == []


def test_acknowledged_messages_survive_repeated_broker_kills_over_sasl_ssl(
        sasl_cluster: tuple[list[BrokerProcess], TlsMaterial]) -> None:
    """The replicated cluster's kill -9 test (ten rounds under an acks=all producer) on brokers
    whose only listeners are SASL_SSL: restarted brokers log in to each other again, and nothing
    acknowledged is lost."""
    brokers, material = sasl_cluster
    cluster = Cluster(brokers)
    cluster.client_settings = {k: v for k, v in _conf(brokers, material).items() if k != "bootstrap.servers"}
    cluster.security = ClientSecurity.from_properties({
        "security.protocol": "SASL_SSL", "ssl.truststore.type": "PEM", "ssl.truststore.location": str(material.ca.pem_path),
        "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "admin", "sasl.password": PASSWORDS["admin"]})
    acknowledged_messages_survive_broker_kills(cluster, rounds=10)
