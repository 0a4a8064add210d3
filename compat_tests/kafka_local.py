"""Apache Kafka as a local process: the reference broker and Kafka's own command-line tools.

A Kafka distribution (by default `../shared/kafka-3.9.0` beside the project, or the directory
named by KBROKER_KAFKA_HOME) that ships `run-single-node.sh DATA_DIR PORT [key=value ...]`,
which runs one KRaft node (broker and controller, node id 0) in the foreground on
127.0.0.1:PORT, its controller on PORT+1. `bin/kafka-*.sh` are Kafka's tools; they work
against any Kafka-compatible broker, kbroker included.

Where no distribution is found, `kafka_home_or_skip()` skips with the reason, except in CI
(CI=true) or with KBROKER_COMPAT_REQUIRE_KAFKA=1, where the absence is a failure: CI must not
go green without the comparison.

The compatibility tests start this local process unless KBROKER_COMPAT_KAFKA=docker asks for
the `apache/kafka` container of kafka_docker.py instead (`reference_kind()`).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from compat_tests.kafka_docker import REQUIRE_ENV, broker_listed, coordinators_missing
from tests.brokers import PROJECT_ROOT, free_port

HOME_ENV = "KBROKER_KAFKA_HOME"
KIND_ENV = "KBROKER_COMPAT_KAFKA"
KINDS = ("local", "docker")
DEFAULT_HOME = PROJECT_ROOT.parent / "shared" / "kafka-3.9.0"
NODE_ID = 0  # run-single-node.sh's node.id
READY_TIMEOUT_S = 120.0
TOOL_TIMEOUT_S = 120.0


def reference_kind(env: dict[str, str] | None = None) -> str:
    """How the compatibility tests run Apache Kafka: "local" (the default) or "docker"."""
    env = os.environ if env is None else env
    kind = env.get(KIND_ENV) or "local"
    if kind not in KINDS:
        raise ValueError(f"{KIND_ENV}={kind}: expected one of {', '.join(KINDS)}")
    return kind


def free_port_pair() -> int:
    """A port P of 127.0.0.1 that is free along with P+1 (the node's controller listener)."""
    while True:
        port = free_port()
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port + 1))
            except OSError:
                continue
        return port


def _die_with_parent() -> None:
    """In the child before exec: SIGTERM when the process that started it dies (Linux
    PR_SET_PDEATHSIG), so a test run that is killed outright does not leave a broker running."""
    pr_set_pdeathsig = 1
    # Not Linux (no prctl): the session fixture's teardown still stops it.
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGTERM)


def kafka_home(env: dict[str, str] | None = None) -> tuple[Path | None, str]:
    """The Kafka distribution to use, or None and why there is none."""
    env = os.environ if env is None else env
    named = env.get(HOME_ENV)
    home = Path(named) if named else DEFAULT_HOME
    if not (home / "run-single-node.sh").is_file():
        where = f"{HOME_ENV}={named}" if named else f"{DEFAULT_HOME} (set {HOME_ENV} to another)"
        return None, f"no Kafka distribution with run-single-node.sh at {where}"
    return home, ""


def required(env: dict[str, str] | None = None) -> bool:
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


def tool_command(home: Path, tool: str, *args: str) -> list[str]:
    """The command line of one of Kafka's tools, e.g. tool_command(home, "kafka-topics", "--list")."""
    name = tool if tool.endswith(".sh") else f"{tool}.sh"
    return [str(home / "bin" / name), *args]


def run_tool(home: Path, tool: str, *args: str, input: str | None = None,
             timeout: float = TOOL_TIMEOUT_S) -> subprocess.CompletedProcess[str]:
    """Run one of Kafka's tools to completion; its output is captured, its exit status returned."""
    env = {**os.environ, "KAFKA_HEAP_OPTS": os.environ.get("KAFKA_TOOLS_HEAP_OPTS", "-Xmx256m")}
    return subprocess.run(tool_command(home, tool, *args), input=input, capture_output=True, text=True,
                          timeout=timeout, env=env, stdin=None if input is not None else subprocess.DEVNULL)


@dataclass
class LocalKafka:
    """One `run-single-node.sh` process. `start()` returns once it serves metadata and has its
    group and transaction coordinators (so the internal topics exist before the first test)."""

    home: Path
    data_dir: Path
    port: int = field(default_factory=free_port_pair)
    overrides: dict[str, str] = field(default_factory=dict)
    node_id: int = NODE_ID
    proc: subprocess.Popen[bytes] | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.data_dir / "kafka.out"

    @property
    def cluster_id(self) -> str:
        text = (self.data_dir / "log" / "meta.properties").read_text()
        return dict(line.split("=", 1) for line in text.split() if "=" in line)["cluster.id"]

    def command(self) -> list[str]:
        return [str(self.home / "run-single-node.sh"), str(self.data_dir), str(self.port),
                *(f"{key}={value}" for key, value in self.overrides.items())]

    def start(self, ready_timeout_s: float = READY_TIMEOUT_S) -> LocalKafka:
        self.spawn()
        try:
            self._wait_ready(ready_timeout_s)
        except BaseException:
            self.kill()
            raise
        return self

    def spawn(self) -> None:
        """Start the process without waiting for it to serve (`start` waits)."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as out:
            # Its own session: a Ctrl-C meant for the test run reaches the run's teardown, which
            # stops the broker cleanly, not the JVM directly. It still ends with its parent.
            self.proc = subprocess.Popen(self.command(), stdout=out, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, start_new_session=True,
                                         preexec_fn=_die_with_parent)

    def _wait_ready(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        last_error = "no answer yet"
        while time.monotonic() < deadline:
            self._check_running()
            ready, last_error = broker_listed(self.bootstrap, self.node_id)
            if ready:
                break
        else:
            raise RuntimeError(f"Kafka not ready after {timeout_s:.0f}s ({last_error}):\n{self.log_tail()}")
        while time.monotonic() < deadline:
            self._check_running()
            missing = coordinators_missing(self.bootstrap)
            if not missing:
                return
            last_error = f"no coordinator yet for {missing}"
            time.sleep(0.2)  # between polls of the condition
        raise RuntimeError(f"Kafka not ready after {timeout_s:.0f}s ({last_error}):\n{self.log_tail()}")

    def _check_running(self) -> None:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise RuntimeError(f"Kafka exited with {self.proc.returncode} while starting:\n{self.log_tail()}")

    def log_tail(self, lines: int = 60) -> str:
        text = self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
        return "\n".join(text.splitlines()[-lines:])

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout: float = 60.0) -> int:
        """SIGTERM (Kafka's clean shutdown); kill -9 if it does not end within `timeout`."""
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                return self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()
        return self.proc.returncode

    def kill(self) -> None:
        """SIGKILL to its whole process group (the script's children too, e.g. a format step)."""
        if self.proc is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    def tool(self, tool: str, *args: str, input: str | None = None,
             timeout: float = TOOL_TIMEOUT_S) -> subprocess.CompletedProcess[str]:
        return run_tool(self.home, tool, *args, input=input, timeout=timeout)
