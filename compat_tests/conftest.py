"""Fixtures for the Java client scenarios: the jars, the compiled harness, one broker and one
JVM per test module."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from compat_tests.harness import JavaHarness
from compat_tests.java_deps import classpath, compile_harness, ensure_jars, java_tools
from tests.brokers import BrokerProcess
from tests.conftest import create_topic


@pytest.fixture(scope="session")
def java_classpath() -> str:
    tools = java_tools()
    if tools is None:
        pytest.skip("java and javac (JDK 17+) are needed for the Java client scenarios")
    # A failed download or a hash mismatch is an error, not a skip: CI must not go green without these tests.
    jars = ensure_jars()
    return classpath([compile_harness(jars, tools[1]), *jars])


@pytest.fixture(scope="module")
def java_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    # Groups form at once instead of after Kafka's 3 s initial rebalance delay, which only
    # helps when many members join together.
    process = BrokerProcess(tmp_path_factory.mktemp("java-broker"),
                            overrides={"group.initial.rebalance.delay.ms": "0"}).start()
    yield process
    if process.alive:
        assert process.stop() == 0, process.log_text()


@pytest.fixture(scope="module")
def java(java_classpath: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[JavaHarness]:
    tools = java_tools()
    assert tools is not None
    harness = JavaHarness(tools[0], java_classpath, tmp_path_factory.mktemp("java") / "harness.log")
    yield harness
    harness.close()


@pytest.fixture
def topic_name(request: pytest.FixtureRequest) -> Callable[[str], str]:
    """Unique topic names per test (the broker is shared by the module)."""
    counter = iter(range(1000))

    def make(suffix: str = "") -> str:
        base = request.node.name.replace("[", "-").replace("]", "")
        return f"java-{base}{suffix}-{next(counter)}"

    return make


@pytest.fixture
def java_topic(java_broker: BrokerProcess, topic_name: Callable[[str], str]) -> Callable[..., str]:
    def make(partitions: int = 1, configs: dict[str, str] | None = None) -> str:
        return create_topic(java_broker.bootstrap, topic_name(""), partitions, configs)

    return make

