"""Fixtures for the Java client scenarios: the jars, the compiled harness, the brokers they run
against, and one JVM per test module.

Every scenario runs against each target of `TARGETS`: a `kbroker start` process (one per
module) and, where a Docker engine is reachable, Apache Kafka in a container (one per session,
see kafka_docker.py). Without an engine the Kafka side skips with the reason.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pytest

from compat_tests import kafka_docker
from compat_tests.harness import JavaHarness
from compat_tests.java_deps import classpath, compile_harness, ensure_jars, java_tools
from tests.brokers import BrokerProcess, free_port
from tests.conftest import create_topic

TARGETS = ["kbroker", "kafka"]


@dataclass(frozen=True)
class Target:
    """A broker the scenarios run against, and what legitimately differs between brokers."""

    name: str
    bootstrap: str
    port: int
    node_id: int
    cluster_id: str
    # log.retention.hours when nothing sets it: kbroker keeps two weeks, Kafka one.
    retention_hours: int
    # How the broker names this machine's connections (MemberDescription.host), when known:
    # through Docker's port publishing they come from a bridge address.
    client_host: str | None

    def check_client_host(self, host: str) -> None:
        if self.client_host is not None:
            assert host == self.client_host
        else:
            assert host.startswith("/") and len(host) > 1, host


def kbroker_meta(broker: BrokerProcess) -> dict[str, str]:
    text = (broker.log_dir / "meta.properties").read_text()
    return dict(line.split("=", 1) for line in text.split() if "=" in line)


@pytest.fixture(scope="session")
def java_classpath() -> str:
    tools = java_tools()
    if tools is None:
        pytest.skip("java and javac (JDK 17+) are needed for the Java client scenarios")
    # A failed download or a hash mismatch is an error, not a skip: CI must not go green without these tests.
    jars = ensure_jars()
    return classpath([compile_harness(jars, tools[1]), *jars])


@pytest.fixture(scope="module")
def kbroker_process(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    # Groups form at once instead of after Kafka's 3 s initial rebalance delay, which only
    # helps when many members join together (the Kafka container is set the same way).
    process = BrokerProcess(tmp_path_factory.mktemp("java-broker"),
                            overrides={"group.initial.rebalance.delay.ms": "0"}).start()
    yield process
    if process.alive:
        assert process.stop() == 0, process.log_text()


@pytest.fixture(scope="module")
def kbroker_target(kbroker_process: BrokerProcess) -> Target:
    return Target(name="kbroker", bootstrap=kbroker_process.bootstrap, port=kbroker_process.port, node_id=0,
                  cluster_id=kbroker_meta(kbroker_process)["cluster.id"], retention_hours=336,
                  client_host="/127.0.0.1")


@pytest.fixture(scope="session")
def kafka_container() -> Iterator[kafka_docker.KafkaContainer]:
    docker = kafka_docker.skip_unless_available(kafka_docker.reference_status())
    # A container that does not become ready is an error, with its logs: the engine is there.
    container = kafka_docker.KafkaContainer(docker, free_port()).start()
    yield container
    container.remove()


@pytest.fixture(scope="session")
def kafka_target(kafka_container: kafka_docker.KafkaContainer) -> Target:
    return Target(name="kafka", bootstrap=kafka_container.bootstrap, port=kafka_container.host_port,
                  node_id=kafka_container.node_id, cluster_id=kafka_container.cluster_id, retention_hours=168,
                  client_host=None)


@pytest.fixture(scope="module", params=TARGETS)
def target(request: pytest.FixtureRequest) -> Target:
    """The broker under test: the same scenario runs as test_x[kbroker] and test_x[kafka]."""
    return request.getfixturevalue(f"{request.param}_target")


@pytest.fixture(scope="module")
def java(java_classpath: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[JavaHarness]:
    tools = java_tools()
    assert tools is not None
    harness = JavaHarness(tools[0], java_classpath, tmp_path_factory.mktemp("java") / "harness.log")
    yield harness
    harness.close()


@pytest.fixture
def topic_name(request: pytest.FixtureRequest) -> Callable[[str], str]:
    """Unique topic names per test (the broker is shared by the module, the Kafka one by the session)."""
    counter = iter(range(1000))

    def make(suffix: str = "") -> str:
        base = request.node.name.replace("[", "-").replace("]", "")
        return f"java-{base}{suffix}-{next(counter)}"

    return make


@pytest.fixture
def java_topic(target: Target, topic_name: Callable[[str], str]) -> Callable[..., str]:
    """Create a topic on the target through the admin API (CreateTopics works the same on both)."""

    def make(partitions: int = 1, configs: dict[str, str] | None = None) -> str:
        return create_topic(target.bootstrap, topic_name(""), partitions, configs)

    return make
