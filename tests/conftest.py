"""Shared fixtures: real broker processes and topics created through a real admin client."""

from __future__ import annotations

import itertools
import os
import re
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from kbroker.metadata.zookeeper_process import (
    ZooKeeperInstall,
    ZooKeeperNotFound,
    ZooKeeperServer,
    find_zookeeper,
)
from tests.brokers import BrokerProcess

_topic_counter = itertools.count()


@pytest.fixture(scope="session")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """One broker shared by the session's tests; tests use their own topics."""
    process = BrokerProcess(tmp_path_factory.mktemp("broker")).start()
    yield process
    if process.alive:
        assert process.stop() == 0, process.log_text()
    assert not (errors := process.unknown_field_errors()), "\n".join(errors)


def require_zookeeper() -> ZooKeeperInstall:
    """Debian's ZooKeeper, or a skip where it is not installed; except in CI, whose
    scripts/test.sh installs it: there a missing ZooKeeper fails rather than letting the cluster
    tests pass by not running."""
    try:
        return find_zookeeper()
    except ZooKeeperNotFound as e:
        if os.environ.get("CI"):
            pytest.fail(f"CI must run the ZooKeeper tests: {e}")
        pytest.skip(str(e))


@pytest.fixture(scope="module")
def zookeeper(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperServer]:
    """A real ZooKeeper server for the module's tests (each test uses its own chroot)."""
    install = require_zookeeper()
    server = ZooKeeperServer(tmp_path_factory.mktemp("zookeeper"), install=install).start()
    yield server
    server.stop()


_chroots = itertools.count()


@pytest.fixture
def zk_connect(zookeeper: ZooKeeperServer, request: pytest.FixtureRequest) -> str:
    """A zookeeper.connect string with a chroot of this test's own."""
    name = re.sub(r"[^a-zA-Z0-9_-]", "_", request.node.name)[:100]
    return f"{zookeeper.connect}/{name}-{next(_chroots)}"


@pytest.fixture
def make_broker(tmp_path: Path) -> Iterator[Callable[..., BrokerProcess]]:
    """Brokers a test owns (for restarts and kills); all are stopped afterwards."""
    started: list[BrokerProcess] = []

    def make(**overrides: str) -> BrokerProcess:
        process = BrokerProcess(tmp_path / f"broker{len(started)}", overrides=overrides)
        started.append(process)
        return process.start()

    yield make
    for process in started:
        process.kill()
    for process in started:
        assert not (errors := process.unknown_field_errors()), "\n".join(errors)


def create_topic(bootstrap: str, name: str, partitions: int = 1, configs: dict[str, str] | None = None) -> str:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(name, partitions, 1, config=configs or {})], operation_timeout=10)
    futures[name].result(timeout=30)
    return name


@pytest.fixture
def new_topic(broker: BrokerProcess, request: pytest.FixtureRequest) -> Callable[..., str]:
    """Create a uniquely named topic on the session broker."""

    def make(partitions: int = 1, configs: dict[str, str] | None = None) -> str:
        base = re.sub(r"[^a-zA-Z0-9._-]", "-", request.node.name)[:180]
        return create_topic(broker.bootstrap, f"{base}-{next(_topic_counter)}", partitions, configs)

    return make
