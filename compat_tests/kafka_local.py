"""Apache Kafka as a local process: the reference broker and Kafka's own command-line tools.

A Kafka distribution (by default `../shared/kafka-3.9.0` beside the project, or the directory
named by KBROKER_KAFKA_HOME) that ships `run-single-node.sh DATA_DIR PORT [key=value ...]`,
which runs one KRaft node (broker and controller, node id 0) in the foreground on
127.0.0.1:PORT, its controller on PORT+1. `bin/kafka-*.sh` are Kafka's tools; they work
against any Kafka-compatible broker, kbroker included. The process itself is run by
kbroker/bench/kafka_reference.py, which `kbroker bench` uses too.

Where no distribution is found, `kafka_home_or_skip()` skips with the reason, except in CI
(CI=true) or with KBROKER_COMPAT_REQUIRE_KAFKA=1, where the absence is a failure: CI must not
go green without the comparison.

The compatibility tests start this local process unless KBROKER_COMPAT_KAFKA=docker asks for
the `apache/kafka` container of kafka_docker.py instead (`reference_kind()`).
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest

from compat_tests.kafka_docker import REQUIRE_ENV, reference_ready
from kbroker.bench.kafka_reference import (
    DEFAULT_HOME,
    HOME_ENV,
    NODE_ID,
    KafkaProcess,
    free_port_pair,
    kafka_home,
)

__all__ = ["DEFAULT_HOME", "HOME_ENV", "NODE_ID", "LocalKafka", "free_port_pair", "kafka_home",
           "kafka_home_or_skip", "reference_kind", "required", "run_tool", "tool_command"]

KIND_ENV = "KBROKER_COMPAT_KAFKA"
KINDS = ("local", "docker")
READY_TIMEOUT_S = 120.0
TOOL_TIMEOUT_S = 120.0


def reference_kind(env: Mapping[str, str] | None = None) -> str:
    """How the compatibility tests run Apache Kafka: "local" (the default) or "docker"."""
    env = os.environ if env is None else env
    kind = env.get(KIND_ENV) or "local"
    if kind not in KINDS:
        raise ValueError(f"{KIND_ENV}={kind}: expected one of {', '.join(KINDS)}")
    return kind


def required(env: Mapping[str, str] | None = None) -> bool:
    """Must the reference run here? In CI, and wherever KBROKER_COMPAT_REQUIRE_KAFKA=1."""
    env = os.environ if env is None else env
    return env.get("CI", "").lower() == "true" or env.get(REQUIRE_ENV) == "1"


def kafka_home_or_skip() -> Path:
    home, reason = kafka_home()
    if home is not None:
        return home
    if required():
        pytest.fail(f"the Apache Kafka reference is required here (CI or {REQUIRE_ENV}=1) but {reason}")
    pytest.skip(reason)


def tool_command(home: os.PathLike[str] | str, tool: str, *args: str) -> list[str]:
    """The command line of one of Kafka's tools, e.g. tool_command(home, "kafka-topics", "--list")."""
    name = tool if tool.endswith(".sh") else f"{tool}.sh"
    return [os.path.join(home, "bin", name), *args]


def run_tool(home: os.PathLike[str] | str, tool: str, *args: str, input: str | None = None,
             timeout: float = TOOL_TIMEOUT_S) -> subprocess.CompletedProcess[str]:
    """Run one of Kafka's tools to completion; its output is captured, its exit status returned."""
    env = {**os.environ, "KAFKA_HEAP_OPTS": os.environ.get("KAFKA_TOOLS_HEAP_OPTS", "-Xmx256m")}
    return subprocess.run(tool_command(home, tool, *args), input=input, capture_output=True, text=True,
                          timeout=timeout, env=env, stdin=None if input is not None else subprocess.DEVNULL)


@dataclass
class LocalKafka(KafkaProcess):
    """The reference for the tests. `start()` returns once it serves metadata listing itself and
    has its group and transaction coordinators (so the internal topics exist before the first
    test)."""

    def start(self, ready_timeout_s: float = READY_TIMEOUT_S) -> LocalKafka:  # type: ignore[override]
        super().start(self._ready, ready_timeout_s)
        return self

    def _ready(self) -> tuple[bool, str]:
        return reference_ready(self.bootstrap, self.node_id)

    def stop(self, timeout: float = 60.0) -> int | None:  # type: ignore[override]
        return super().stop(timeout)

    def tool(self, tool: str, *args: str, input: str | None = None,
             timeout: float = TOOL_TIMEOUT_S) -> subprocess.CompletedProcess[str]:
        return run_tool(self.home, tool, *args, input=input, timeout=timeout)
