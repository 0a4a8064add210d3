"""The Java client (kafka-clients 3.9) and Kafka 3.9's kafka-configs.sh over SASL against kbroker:
SCRAM credentials created and described with kafka-configs.sh (AlterUserScramCredentials /
DescribeUserScramCredentials, also over SASL_SSL with --command-config) and with the Java
Admin; producing and consuming with PLAIN and SCRAM-SHA-512 over SASL_SSL (PEM trust store);
and a Java producer that re-authenticates (KIP-368) on a listener whose sessions last 2 s.

kbroker only, as test_java_tls.py: the Apache Kafka reference's SASL is Kafka's own; the
plaintext scenarios of test_java_client.py pin that the Java client sees the same answers from
both brokers. Kafka 3.9's messages for the same failures were checked against the reference
(see tests/integration/test_sasl.py).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from compat_tests.harness import JavaHarness
from compat_tests.kafka_local import kafka_home_or_skip, run_tool
from tests.brokers import BrokerProcess, free_port
from tests.tls_material import TlsMaterial

pytestmark = pytest.mark.timeout(240)

PLAIN_USERS = {"alice": "alice-java-secret"}
SCRAM_USER, SCRAM_PASSWORD = "java-user", "java-scram-secret"
REAUTH_MS = 2000
SCRAM_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"
PLAIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"


@dataclass
class SaslTarget:
    process: BrokerProcess
    material: TlsMaterial
    ports: dict[str, int]
    directory: Path


@pytest.fixture(scope="module")
def sasl_target(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SaslTarget]:
    directory = tmp_path_factory.mktemp("java-sasl")
    material = TlsMaterial.create(directory / "tls")
    ports = {"PLAINTEXT": free_port(), "SASL_SSL": free_port(), "REAUTH": free_port()}
    users = " ".join(f'user_{name}="{password}"' for name, password in PLAIN_USERS.items())
    process = BrokerProcess(directory / "broker", port=ports["PLAINTEXT"], overrides={
        "listeners": ",".join(f"{name}://127.0.0.1:{port}" for name, port in ports.items()),
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SASL_SSL:SASL_SSL,REAUTH:SASL_PLAINTEXT",
        **material.server_properties("none"),
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-512",
        "listener.name.sasl_ssl.plain.sasl.jaas.config": f"{PLAIN_MODULE} required {users};",
        "listener.name.reauth.sasl.enabled.mechanisms": "SCRAM-SHA-512",
        "listener.name.reauth.connections.max.reauth.ms": str(REAUTH_MS),
        "group.initial.rebalance.delay.ms": "0",
    }, start_command=[sys.executable, "-m", "kbroker.cli.main", "start", "--log-level", "DEBUG"]).start()
    yield SaslTarget(process, material, ports, directory)
    if process.alive:
        assert process.stop() == 0, process.log_tail()


@pytest.fixture(scope="module")
def kafka_home() -> Path:
    return kafka_home_or_skip()


def _client(target: SaslTarget, mechanism: str, user: str, password: str, listener: str = "SASL_SSL") -> dict[str, str]:
    module = PLAIN_MODULE if mechanism == "PLAIN" else SCRAM_MODULE
    settings = {"bootstrap": f"127.0.0.1:{target.ports[listener]}",
                "client.security.protocol": "SASL_SSL" if listener == "SASL_SSL" else "SASL_PLAINTEXT",
                "client.sasl.mechanism": mechanism,
                "client.sasl.jaas.config": f'{module} required username="{user}" password="{password}";'}
    if listener == "SASL_SSL":
        settings |= {"client.ssl.truststore.type": "PEM",
                     "client.ssl.truststore.location": str(target.material.ca.pem_path)}
    return settings


def test_kafka_configs_manages_scram_credentials(sasl_target: SaslTarget, kafka_home: Path, tmp_path: Path) -> None:
    plaintext = ["--bootstrap-server", f"127.0.0.1:{sasl_target.ports['PLAINTEXT']}"]
    user = ["--entity-type", "users", "--entity-name", SCRAM_USER]
    altered = run_tool(kafka_home, "kafka-configs", *plaintext, "--alter", *user, "--add-config",
                       f"SCRAM-SHA-512=[iterations=8192,password={SCRAM_PASSWORD}]")
    assert altered.returncode == 0, altered.stderr
    assert altered.stdout.strip() == f"Completed updating config for user {SCRAM_USER}."
    described = run_tool(kafka_home, "kafka-configs", *plaintext, "--describe", *user)
    assert described.returncode == 0, described.stderr
    assert described.stdout.strip() == \
        f"SCRAM credential configs for user-principal '{SCRAM_USER}' are SCRAM-SHA-512=iterations=8192"
    # The tool itself over SASL_SSL, logged in with the credential it just made.
    properties = tmp_path / "client.properties"
    properties.write_text(f"security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-512\n"
                          f'sasl.jaas.config={SCRAM_MODULE} required username="{SCRAM_USER}" '
                          f'password="{SCRAM_PASSWORD}";\n'
                          f"ssl.truststore.type=PEM\nssl.truststore.location={sasl_target.material.ca.pem_path}\n")
    secured = ["--bootstrap-server", f"127.0.0.1:{sasl_target.ports['SASL_SSL']}", "--command-config", str(properties)]
    other = run_tool(kafka_home, "kafka-configs", *secured, "--alter", "--entity-type", "users", "--entity-name",
                     "tool-user", "--add-config", "SCRAM-SHA-512=[password=tool-secret]")
    assert other.returncode == 0, other.stderr
    gone = run_tool(kafka_home, "kafka-configs", *secured, "--alter", "--entity-type", "users", "--entity-name",
                    "tool-user", "--delete-config", "SCRAM-SHA-256")
    assert gone.returncode != 0
    assert "ResourceNotFoundException: Attempt to delete a user credential that does not exist" in gone.stderr


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-512"])
def test_java_client_over_sasl_ssl(java: JavaHarness, sasl_target: SaslTarget, mechanism: str) -> None:
    user, password = ("alice", PLAIN_USERS["alice"]) if mechanism == "PLAIN" else (SCRAM_USER, SCRAM_PASSWORD)
    if mechanism != "PLAIN":  # its credential, through the Java Admin over the plaintext listener
        made = java.run("scram_users", bootstrap=f"127.0.0.1:{sasl_target.ports['PLAINTEXT']}", user=user,
                        mechanism=mechanism, iterations=4096, password=password)
        assert made == {"user": user, "credentials": [{"mechanism": mechanism, "iterations": 4096}]}
    args = _client(sasl_target, mechanism, user, password)
    cluster = java.run("describe_cluster", **args)
    assert cluster["nodes"] == [{"id": 0, "host": "127.0.0.1", "port": sasl_target.ports["SASL_SSL"], "rack": None}]
    topic = f"java-sasl-{mechanism.lower()}"
    assert len(java.run("produce", topic=topic, count=20, **args)["sent"]) == 20
    consumed = java.run("consume_all", topic=topic, **args)["records"]
    assert sorted(r["value"] for r in consumed) == sorted(f"value-{i}-{'x' * 200}".encode() for i in range(20))


def test_java_client_with_a_wrong_password(java: JavaHarness, sasl_target: SaslTarget) -> None:
    failed = java.run_raw("describe_cluster", **_client(sasl_target, "PLAIN", "alice", "wrong"))
    assert "SaslAuthenticationException" in str(failed) and "Invalid username or password" in str(failed)


def test_java_client_re_authenticates(java: JavaHarness, sasl_target: SaslTarget) -> None:
    java.run("scram_users", bootstrap=f"127.0.0.1:{sasl_target.ports['PLAINTEXT']}", user="paced",
             mechanism="SCRAM-SHA-512", iterations=4096, password="paced-secret")
    log_before = len(sasl_target.process.log_text())
    # 70 records 50 ms apart: three and a half seconds, almost two session lifetimes. The Java
    # client re-authenticates at its first send past 85-95 % of the lifetime: sends close together
    # make that happen before the session ends (an idle client's next request would come after
    # it, and the broker would close that connection, as Kafka does).
    sent = java.run("produce_paced", topic="java-reauth", count=70, pause_ms=50,
                    **_client(sasl_target, "SCRAM-SHA-512", "paced", "paced-secret", listener="REAUTH"))
    assert sent["offsets"] == list(range(70))
    log = sasl_target.process.log_text()[log_before:]
    assert "SASL re-authentication authenticated User:paced" in log
    assert "SASL session expired" not in log
