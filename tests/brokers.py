"""Real broker processes for tests: kbroker.launcher's, run from the project's root, and what the
tests look for in their logs."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from kbroker import launcher
from kbroker.ports import free_port

__all__ = ["PROJECT_ROOT", "START_TIMEOUT_S", "UNKNOWN_FIELD_MARKER", "BrokerProcess", "bootstrap_of", "free_port",
           "running_cluster"]

START_TIMEOUT_S = launcher.START_TIMEOUT_S
# How the broker's log shows an answer it could not encode because a handler put a key in it
# that no version of the message has (see protocol.primitives.UnknownFieldError).
UNKNOWN_FIELD_MARKER = "UnknownFieldError: "
PROJECT_ROOT = Path(__file__).resolve().parent.parent


@dataclass
class BrokerProcess(launcher.BrokerProcess):
    """A `kbroker start` child process with its own data directory and port."""

    cwd: Path | None = PROJECT_ROOT

    def unknown_field_errors(self) -> list[str]:
        """Answers this broker could not encode for a misspelt or stray key: each is a handler
        bug that a client only saw as UNKNOWN_SERVER_ERROR, which a test may not notice."""
        return [line for line in self.log_text().splitlines() if UNKNOWN_FIELD_MARKER in line]


@contextmanager
def running_cluster(directory: Path, zk_connect: str, count: int,
                    settings: Mapping[str, str] | None = None) -> Iterator[list[BrokerProcess]]:
    """`count` brokers (ids 0, 1, ...) on one ZooKeeper, each with `settings`, in `directory`;
    killed (kill -9) afterwards, as a failover test leaves them."""
    started: list[BrokerProcess] = []
    try:
        for i in range(count):
            overrides = {"broker.id": str(i), "zookeeper.connect": zk_connect, **(settings or {})}
            started.append(BrokerProcess(directory / f"b{i}", overrides=overrides).start())
        yield started
    finally:
        for broker in started:
            broker.kill()


def bootstrap_of(brokers: list[BrokerProcess]) -> str:
    """The bootstrap list of the brokers still running."""
    return ",".join(b.bootstrap for b in brokers if b.alive)
