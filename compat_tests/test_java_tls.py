"""The Java client (kafka-clients 3.9) over TLS against kbroker: server authentication and
mutual TLS with PEM stores (`ssl.truststore.type=PEM`, `ssl.keystore.type=PEM`), each listener
reporting its own addresses.

kbroker only: the Apache Kafka reference runs PLAINTEXT here (its TLS setup is Kafka's own,
which this suite does not test); the plaintext scenarios of test_java_client.py already pin
that the Java client sees the same answers from both brokers.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from compat_tests.harness import JavaHarness
from tests.brokers import BrokerProcess, free_port
from tests.tls_material import TlsMaterial

pytestmark = pytest.mark.timeout(180)


@dataclass
class TlsTarget:
    process: BrokerProcess
    material: TlsMaterial
    ports: dict[str, int]


@pytest.fixture(scope="module")
def tls_target(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TlsTarget]:
    directory = tmp_path_factory.mktemp("java-tls")
    material = TlsMaterial.create(directory / "tls")
    ports = {"SSL": free_port(), "MTLS": free_port()}
    process = BrokerProcess(directory / "broker", port=ports["SSL"], overrides={
        "listeners": ",".join(f"{name}://127.0.0.1:{port}" for name, port in ports.items()),
        "listener.security.protocol.map": "SSL:SSL,MTLS:SSL", "security.inter.broker.protocol": "SSL",
        **material.server_properties("none"), "listener.name.mtls.ssl.client.auth": "required",
        "group.initial.rebalance.delay.ms": "0",
    }).start()
    yield TlsTarget(process, material, ports)
    if process.alive:
        assert process.stop() == 0, process.log_tail()


def _client_settings(target: TlsTarget, mutual: bool) -> dict[str, str]:
    settings = {"client.security.protocol": "SSL", "client.ssl.truststore.type": "PEM",
                "client.ssl.truststore.location": str(target.material.ca.pem_path)}
    if mutual:
        # Kafka's Java PEM key store: one file with the PKCS#8 key and the chain. Unencrypted: Java
        # cannot read the PBES2 encryption that OpenSSL and cryptography write.
        identity = target.material.client("java")
        settings |= {"client.ssl.keystore.type": "PEM", "client.ssl.keystore.location": str(identity.store)}
    return settings


@pytest.mark.parametrize("listener", ["SSL", "MTLS"])
def test_java_client_over_tls(java: JavaHarness, tls_target: TlsTarget, listener: str) -> None:
    port = tls_target.ports[listener]
    args = {"bootstrap": f"127.0.0.1:{port}", **_client_settings(tls_target, listener == "MTLS")}
    cluster = java.run("describe_cluster", **args)
    assert cluster["nodes"] == [{"id": 0, "host": "127.0.0.1", "port": port, "rack": None}]

    topic = f"java-tls-{listener.lower()}"
    sent = java.run("produce", topic=topic, count=20, **args)["sent"]
    assert len(sent) == 20
    consumed = java.run("consume_all", topic=topic, **args)["records"]
    assert sorted(r["value"] for r in consumed) == sorted(
        f"value-{i}-{'x' * 200}".encode() for i in range(20))
