"""The denial matrix of tests/authz_matrix.py side by side: the same principals, ACLs and
operations against kbroker and against the Apache Kafka reference (KRaft, StandardAuthorizer),
through the protocol (kbroker's raw client) and through the Java client (kafka-clients 3.9).

Each broker gets a listener with mutual TLS whose certificates name the principals, Kafka's
`StandardAuthorizer` and `super.users=User:admin`. On the reference, the PLAINTEXT listener that
run-single-node.sh keeps (and its controller listener) authenticate as `User:ANONYMOUS`, which
must be a super user there for the node to talk to itself; no test connects through it.

Every cell must equal the outcome written out from KafkaApis' rules (`EXPECTED`) on both brokers,
so the table itself is checked against Kafka.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from compat_tests import kafka_local
from compat_tests.harness import JavaHarness
from tests.authz_matrix import (
    ALL_CLUSTER_OPS,
    AUTHORIZER,
    EXPECTED,
    GROUP,
    GROUP_DENIED,
    MAPPING_RULE,
    NO_CLUSTER_OPS,
    OK,
    PRINCIPALS,
    RAW,
    TOPIC,
    TOPIC_DENIED,
    Secured,
    doomed_topics,
    set_up,
    topic_exists,
)
from tests.brokers import BrokerProcess, free_port
from tests.tls_material import TlsMaterial

pytestmark = pytest.mark.timeout(600)

TARGETS = ["kbroker", "kafka"]
# Kafka's cluster operations (AclEntry.supportedOperations(CLUSTER)) as the Java client names them.
CLUSTER_OPERATIONS = sorted(["ALTER", "ALTER_CONFIGS", "CLUSTER_ACTION", "CREATE", "DESCRIBE", "DESCRIBE_CONFIGS",
                             "IDEMPOTENT_WRITE"])
# The Java consumer of the nobody principal looks up its group's coordinator and the topic's
# metadata at once: either refusal may reach the application first, from either broker.
JAVA_EITHER = {("join_group", "nobody"): {GROUP_DENIED, TOPIC_DENIED}}
COMMON = {"auto.create.topics.enable": "false", "num.partitions": "1", "offsets.topic.num.partitions": "1",
          "transaction.state.log.num.partitions": "1", "group.initial.rebalance.delay.ms": "0",
          "authorizer.class.name": AUTHORIZER, "ssl.principal.mapping.rules": MAPPING_RULE}


def _certificates(material: TlsMaterial) -> dict[str, Any]:
    return {name: material.client(name) for name in PRINCIPALS}


def _kbroker(directory: Path) -> Iterator[Secured]:
    material = TlsMaterial.create(directory / "tls")
    plain, mtls = free_port(), free_port()
    process = BrokerProcess(directory / "broker", port=plain, overrides={
        "listeners": f"PLAINTEXT://127.0.0.1:{plain},MTLS://127.0.0.1:{mtls}",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,MTLS:SSL",
        **material.server_properties("required"), "super.users": "User:admin", **COMMON,
    }).start()
    try:
        yield Secured(process, material, mtls, _certificates(material))
    finally:
        if process.alive:
            assert process.stop() == 0, process.log_tail()


def _kafka(directory: Path) -> Iterator[Secured]:
    home = kafka_local.kafka_home_or_skip()
    material = TlsMaterial.create(directory / "tls")
    port, mtls = kafka_local.free_port_pair(), free_port()
    kafka = kafka_local.LocalKafka(home, directory / "kafka", port=port, overrides={
        "listeners": f"PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{port + 1},MTLS://127.0.0.1:{mtls}",
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{port},MTLS://127.0.0.1:{mtls}",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,MTLS:SSL",
        **material.server_properties("required", prefix="listener.name.mtls."),
        "super.users": "User:admin;User:ANONYMOUS", **COMMON,
    }).start()
    try:
        yield Secured(kafka, material, mtls, _certificates(material))
    finally:
        kafka.stop()


@pytest.fixture(scope="module", params=TARGETS)
def secured(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secured]:
    directory = tmp_path_factory.mktemp(f"authz-{request.param}")
    brokers = _kbroker(directory) if request.param == "kbroker" else _kafka(directory)
    broker = next(brokers)
    set_up(broker, doomed_topics("java"))
    yield broker
    brokers.close()


def test_denial_matrix_through_the_protocol(secured: Secured) -> None:
    outcomes = {}
    for principal in PRINCIPALS:
        for operation, run in RAW.items():
            with secured.raw(principal) as client:
                outcomes[(operation, principal)] = run(client, principal)
    assert outcomes == {(op, p): EXPECTED[op][p] for op in RAW for p in PRINCIPALS}


def _java_client(secured: Secured, principal: str) -> dict[str, str]:
    # Kafka's Java PEM key store: one unencrypted file with the PKCS#8 key and the chain.
    return {"bootstrap": secured.bootstrap, "client.security.protocol": "SSL",
            "client.ssl.truststore.type": "PEM", "client.ssl.truststore.location": str(secured.material.ca.pem_path),
            "client.ssl.keystore.type": "PEM", "client.ssl.keystore.location": str(secured.certs[principal].store)}


def _java_outcome(java: JavaHarness, secured: Secured, operation: str, principal: str) -> str:
    result = java.run("authorize", op=operation, principal=principal, topic=TOPIC, group=GROUP,
                      transactional_id=f"tx-{principal}", name=_java_name(operation, principal),
                      retention_ms=str(80_000_000 + PRINCIPALS.index(principal)), **_java_client(secured, principal))
    if result["outcome"] != "operations":
        return result["outcome"]
    allowed = result["operations"]
    return ALL_CLUSTER_OPS if allowed == CLUSTER_OPERATIONS else NO_CLUSTER_OPS if not allowed else str(allowed)


def _java_name(operation: str, principal: str) -> str:
    """The resource an operation creates or deletes, one per principal."""
    return {"create_topic": f"pre-c-java-{principal}", "delete_topic": f"pre-d-java-{principal}",
            "create_acls": f"probe-java-{principal}"}.get(operation, "")


def test_denial_matrix_with_the_java_client(java: JavaHarness, secured: Secured) -> None:
    outcomes = {(op, p): _java_outcome(java, secured, op, p) for p in PRINCIPALS for op in EXPECTED}
    for cell, either in JAVA_EITHER.items():
        assert outcomes[cell] in either, cell
        outcomes[cell] = EXPECTED[cell[0]][cell[1]]
    assert outcomes == {(op, p): EXPECTED[op][p] for op in EXPECTED for p in PRINCIPALS}
    for principal in PRINCIPALS:
        allowed = EXPECTED["create_topic"][principal] == OK
        assert topic_exists(secured, f"pre-c-java-{principal}") == allowed
        assert topic_exists(secured, f"pre-d-java-{principal}") == (not allowed)
