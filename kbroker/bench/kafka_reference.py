"""Apache Kafka as a local process: the reference broker of `kbroker bench` and of compat_tests/.

A Kafka distribution (by default `../shared/kafka-3.9.0` beside the project, or the directory
named by KBROKER_KAFKA_HOME) that ships `run-single-node.sh DATA_DIR PORT [key=value ...]`,
which formats DATA_DIR on first use and runs one KRaft node (broker and controller, node id 0)
in the foreground on 127.0.0.1:PORT, its controller on PORT+1. The script execs the JVM, so
the process started here is the broker itself: its CPU time and memory are read from /proc
like kbroker's.

What "ready" means is the caller's (a predicate polled until it holds): the benchmark and the
tests each wait for what they need.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

HOME_ENV = "KBROKER_KAFKA_HOME"
PROJECT_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_HOME = PROJECT_ROOT.parent / "shared" / "kafka-3.9.0"
LAUNCHER = "run-single-node.sh"
NODE_ID = 0  # run-single-node.sh's node.id
STOP_TIMEOUT_S = 60.0

# (ready, why not): polled until ready or the deadline.
Readiness = Callable[[], tuple[bool, str]]


def kafka_home(env: Mapping[str, str] | None = None) -> tuple[Path | None, str]:
    """The Kafka distribution to use, or None and why there is none."""
    env = os.environ if env is None else env
    named = env.get(HOME_ENV)
    home = Path(named) if named else DEFAULT_HOME
    if not (home / LAUNCHER).is_file():
        where = f"{HOME_ENV}={named}" if named else f"{DEFAULT_HOME} (set {HOME_ENV} to another)"
        return None, f"no Kafka distribution with {LAUNCHER} at {where}"
    return home, ""


def free_port_pair() -> int:
    """A port P of 127.0.0.1 that is free along with P+1 (the node's controller listener)."""
    while True:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port + 1))
            except OSError:
                continue
        return port


def _die_with_parent() -> None:
    """In the child before exec: SIGTERM when the process that started it dies (Linux
    PR_SET_PDEATHSIG), so a run that is killed outright does not leave a broker running.

    Linux sends the signal when the *thread* that forked the child ends, not its process: only
    a child started from the main thread may ask for it (see `KafkaProcess.spawn`)."""
    pr_set_pdeathsig = 1
    # Not Linux (no prctl): the owner's own shutdown still stops it.
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGTERM)


@dataclass
class KafkaProcess:
    """One `run-single-node.sh` process on 127.0.0.1:`port`, its data and output in `data_dir`."""

    home: Path
    data_dir: Path
    port: int = field(default_factory=free_port_pair)
    overrides: dict[str, str] = field(default_factory=dict)
    # KAFKA_HEAP_OPTS for the JVM; None keeps the script's (-Xmx512m -Xms256m).
    heap_opts: str | None = None
    node_id: int = NODE_ID
    proc: subprocess.Popen[bytes] | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.data_dir / "kafka.out"

    @property
    def log_dir(self) -> Path:
        """Where the partitions' files are (log.dirs)."""
        return self.data_dir / "log"

    @property
    def cluster_id(self) -> str:
        text = (self.log_dir / "meta.properties").read_text()
        return dict(line.split("=", 1) for line in text.split() if "=" in line)["cluster.id"]

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.alive and self.proc is not None else None

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def command(self) -> list[str]:
        return [str(self.home / LAUNCHER), str(self.data_dir), str(self.port),
                *(f"{key}={value}" for key, value in self.overrides.items())]

    def spawn(self) -> None:
        """Start the process without waiting for it to serve (`start` waits)."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, **({"KAFKA_HEAP_OPTS": self.heap_opts} if self.heap_opts else {})}
        with open(self.log_path, "ab") as out:
            # Its own session: a Ctrl-C meant for the owner reaches the owner, whose shutdown
            # stops the broker cleanly, not the JVM directly. It still ends with its parent.
            # Started from another thread (a pool starting brokers side by side), the broker
            # would be killed as soon as that thread ends: it then relies on its owner's stop().
            on_main_thread = threading.current_thread() is threading.main_thread()
            self.proc = subprocess.Popen(self.command(), stdout=out, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, env=env, start_new_session=True,
                                         preexec_fn=_die_with_parent if on_main_thread else None)

    def start(self, ready: Readiness, timeout_s: float) -> float:
        """Spawn and wait until `ready()` holds; returns the seconds that took. A start that
        fails or times out kills the process and raises RuntimeError with its last output."""
        started = time.monotonic()
        self.spawn()
        try:
            self.wait_ready(ready, timeout_s)
        except BaseException:
            self.kill()
            raise
        return time.monotonic() - started

    def wait_ready(self, ready: Readiness, timeout_s: float, poll_s: float = 0.2) -> None:
        deadline = time.monotonic() + timeout_s
        why = "no answer yet"
        while True:
            self.check_running()
            ok, why = ready()
            if ok:
                return
            if time.monotonic() >= deadline:
                raise RuntimeError(f"Kafka not ready after {timeout_s:.0f}s ({why}):\n{self.log_tail()}")
            time.sleep(poll_s)  # between polls of the condition

    def check_running(self) -> None:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise RuntimeError(f"Kafka exited with {self.proc.returncode} while starting:\n{self.log_tail()}")

    def log_tail(self, lines: int = 60) -> str:
        text = self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
        return "\n".join(text.splitlines()[-lines:])

    def stop(self, timeout_s: float = STOP_TIMEOUT_S) -> int | None:
        """SIGTERM (Kafka's clean shutdown); SIGKILL if it does not end within `timeout_s`.
        Returns the exit status (None when it never started)."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                return self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.kill()
        return self.proc.returncode

    def kill(self) -> None:
        """SIGKILL to its whole process group (the script's children too, e.g. a format step)."""
        if self.proc is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
