"""A three-broker ZooKeeper cluster with only SSL listeners (mutual TLS, inter-broker too):
replication, then kill -9 of the leader, and everything acknowledged read from the new one.
With no plaintext port anywhere, followers can only replicate over TLS."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.brokers import BrokerProcess, free_port
from tests.leader_death import acknowledged_records_survive_leader_death
from tests.tls_material import TlsMaterial

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


def test_an_ssl_only_cluster_replicates_and_survives_its_leaders_death(
        tls_cluster: tuple[list[BrokerProcess], TlsMaterial]) -> None:
    brokers, material = tls_cluster
    acknowledged_records_survive_leader_death(brokers, lambda live: _conf(live, material), _conf(brokers, material),
                                              over="TLS")
