"""Local `kbroker start` processes: one broker, or a ZooKeeper and brokers 1..N on it.

The one place that knows how a broker process is run, for the tests (tests/brokers.py),
`kbroker bench` (bench/servers.py) and `kbroker cluster` (cli/cluster.py):

- its command line: `python -m kbroker.cli.main start [server.properties]` with `--override`s
  for its listener (PLAINTEXT on 127.0.0.1:port), its log dir and the caller's settings;
- its directory: `logs/` (log.dirs), `broker.log` (stderr), `broker.out` (stdout, when detached);
- readiness: the line `kbroker start` prints on stdout once it listens and, on ZooKeeper, has
  registered; a process that exits first fails the start with the end of its log;
- its end: SIGTERM for a clean shutdown (flush, checkpoints), SIGKILL once a deadline passes,
  and `kill` for a crash (kill -9: nothing flushed).

A broker is either the caller's child (its stdout a pipe, read for the ready line; it goes when
the caller stops it) or, with `detach`, in a session of its own with its stdout in a file, so
that it outlives the caller: `kbroker cluster start` returns and `kbroker cluster stop` stops
it later by pid (`signal_pid`, `wait_pid_exit`, `pid_runs`).
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Self

from kbroker.metadata.zookeeper_process import ZooKeeperServer
from kbroker.ports import free_port

# `kbroker start` prints "kbroker <id> started (cluster <id>) on <endpoints>" when it serves.
READY_MARKER = b"started"
START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 30.0
# How long a wait for output sleeps at most: a detached broker's output is a file, which cannot
# be waited on, and a pipe's wait must also notice the deadline.
OUTPUT_POLL_S = 0.2
DETACHED_POLL_S = 0.05


class LaunchError(RuntimeError):
    """A process that did not start, or did not stop in time (and was killed)."""


@dataclass
class BrokerProcess:
    """A `kbroker start` process with its own data directory and port."""

    data_dir: Path
    port: int = field(default_factory=free_port)
    overrides: dict[str, str] = field(default_factory=dict)
    config_file: str | None = None  # a server.properties the overrides apply over
    start_command: list[str] | None = None  # `kbroker start` run another way (e.g. scripts/start.sh)
    start_timeout_s: float = START_TIMEOUT_S
    max_open_files: int | None = None  # RLIMIT_NOFILE of the process, for descriptor-exhaustion tests
    detach: bool = False  # its own session and stdout in broker.out: it outlives the caller
    env: dict[str, str] = field(default_factory=dict)  # set in its environment on top of ours
    cwd: Path | None = None
    name: str = "broker"  # what messages call it ("broker 2" in a cluster)
    proc: subprocess.Popen[bytes] | None = None
    _spawned_at: float = field(default=0.0, init=False, repr=False)
    _stop_sent: bool = field(default=False, init=False, repr=False)
    _ready: bool = field(default=False, init=False, repr=False)
    _unread: bytes = field(default=b"", init=False, repr=False)  # output after the last whole line
    _output_file: IO[bytes] | None = field(default=None, init=False, repr=False)

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def log_dir(self) -> Path:
        return self.data_dir / "logs"

    @property
    def stderr_path(self) -> Path:
        return self.data_dir / "broker.log"

    @property
    def stdout_path(self) -> Path:
        """Where a detached broker's stdout goes (a child's is a pipe)."""
        return self.data_dir / "broker.out"

    @property
    def pid(self) -> int | None:
        """The started process's pid (it may have ended since: see `alive`)."""
        return self.proc.pid if self.proc is not None else None

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def command(self) -> list[str]:
        settings = {
            "listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
            "log.dirs": str(self.log_dir),
            # No metrics endpoint unless the caller asks for one on a port of its own: the fixed
            # port a config file names (conf/server.properties: 9404) would collide between brokers.
            "metrics.listener": "",
            **self.overrides,
        }
        args = list(self.start_command or [sys.executable, "-m", "kbroker.cli.main", "start"])
        if self.config_file:
            args.append(self.config_file)
        for key, value in settings.items():
            args += ["--override", f"{key}={value}"]
        return args

    # -- start --------------------------------------------------------------------------------------

    def start(self) -> Self:
        """Spawn and wait until it serves."""
        self.spawn()
        self.wait_ready()
        return self

    def spawn(self) -> None:
        """Start the process without waiting for it (brokers of a cluster start side by side)."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._close_output()
        self._ready, self._unread, self._stop_sent = False, b"", False
        if self.detach:
            with open(self.stdout_path, "ab") as out:
                reader = open(self.stdout_path, "rb")  # noqa: SIM115 - read until it is ready
                reader.seek(out.tell())  # this run's output, not an earlier run's
                try:
                    self._popen(out)
                except BaseException:
                    reader.close()
                    raise
                self._output_file = reader
        else:
            self._popen(subprocess.PIPE)
        self._spawned_at = time.monotonic()

    def _popen(self, stdout: IO[bytes] | int) -> None:
        with open(self.stderr_path, "ab") as stderr:
            self.proc = subprocess.Popen(
                self.command(), stdin=subprocess.DEVNULL, stdout=stdout, stderr=stderr, cwd=self.cwd,
                env={**os.environ, "PYTHONUNBUFFERED": "1", **self.env}, start_new_session=self.detach,
                preexec_fn=self._limit_open_files if self.max_open_files else None,
            )

    def _limit_open_files(self) -> None:
        import resource

        assert self.max_open_files is not None
        resource.setrlimit(resource.RLIMIT_NOFILE, (self.max_open_files, self.max_open_files))

    def wait_ready(self) -> float:
        """Wait (up to `start_timeout_s`) for the ready line; returns the seconds since the spawn."""
        wait_all_ready([self], self.start_timeout_s)
        return time.monotonic() - self._spawned_at

    def ready(self) -> bool:
        """Whether the ready line has come, reading what output there is without blocking.
        Raises LaunchError if the process ended before it."""
        assert self.proc is not None
        if not self._ready:
            for line in self._read_lines():
                if READY_MARKER in line:
                    self._ready = True
                    self._close_output_file()
                    break
        if not self._ready and self.proc.poll() is not None:
            self._close_output()
            raise LaunchError(f"{self.name} exited with {self.proc.returncode}:\n{self.log_tail()}")
        return self._ready

    def _read_lines(self) -> list[bytes]:
        if self._output_file is not None:
            self._unread += self._output_file.read()
        elif self.proc is not None and self.proc.stdout is not None:
            fd = self.proc.stdout.fileno()
            while select.select([fd], [], [], 0)[0]:
                chunk = os.read(fd, 65536)
                if not chunk:  # the end: the process closed its stdout
                    break
                self._unread += chunk
        *lines, self._unread = self._unread.split(b"\n")
        return lines

    def output_pipe(self) -> IO[bytes] | None:
        """The pipe a wait for the ready line can select on (None: detached, or ready)."""
        return self.proc.stdout if self.proc is not None and not self._ready and not self.detach else None

    # -- stop ---------------------------------------------------------------------------------------

    def signal_stop(self) -> None:
        """SIGTERM without waiting (a cluster's brokers stop together), once: a second one arriving
        after the broker's event loop has closed would end it with the default action."""
        if self.alive and not self._stop_sent:
            assert self.proc is not None
            self.proc.send_signal(signal.SIGTERM)
            self._stop_sent = True

    def stop(self, timeout_s: float = STOP_TIMEOUT_S) -> int | None:
        """Clean shutdown (SIGTERM: it flushes and checkpoints); returns the exit status (None if
        it never started). One that has not ended within `timeout_s` is killed: LaunchError."""
        if self.proc is None:
            return None
        self.signal_stop()
        try:
            code = self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()
            raise LaunchError(f"{self.name} did not stop within {timeout_s:g} s and was killed") from None
        self._close_output()
        return code

    def kill(self) -> None:
        """kill -9: no flush, no checkpoints."""
        if self.alive:
            assert self.proc is not None
            self.proc.kill()
            self.proc.wait()
        self._close_output()

    def restart(self) -> Self:
        if self.alive:
            self.stop()
        return self.start()

    def _close_output(self) -> None:
        """Once it has ended: the pipe or file its output was read from."""
        self._close_output_file()
        if self.proc is not None and self.proc.stdout is not None and self.proc.poll() is not None:
            self.proc.stdout.close()

    def _close_output_file(self) -> None:
        if self._output_file is not None:
            self._output_file.close()
            self._output_file = None

    # -- its log ------------------------------------------------------------------------------------

    def log_text(self) -> str:
        return self.stderr_path.read_text(errors="replace") if self.stderr_path.exists() else ""

    def log_tail(self, lines: int = 40) -> str:
        """The end of the log, where a failed start says why (a whole log of restarts is too long
        for a report)."""
        return "\n".join(self.log_text().splitlines()[-lines:])


def wait_all_ready(processes: Iterable[BrokerProcess], timeout_s: float) -> None:
    """Wait until every process has printed its ready line. One that exits first, or a deadline
    passed, fails the wait (LaunchError); on a timeout those not ready are killed."""
    deadline = time.monotonic() + timeout_s
    pending = list(processes)
    while True:
        pending = [process for process in pending if not process.ready()]
        if not pending:
            return
        if time.monotonic() >= deadline:
            for process in pending:
                process.kill()
            late = pending[0]
            raise LaunchError(f"{late.name} not ready after {timeout_s:g} s:\n{late.log_tail()}")
        pipes = [pipe for process in pending if (pipe := process.output_pipe()) is not None]
        # Woken by output on a pipe (or its end); a detached broker's file is polled.
        select.select(pipes, [], [], OUTPUT_POLL_S if len(pipes) == len(pending) else DETACHED_POLL_S)


@dataclass
class BrokerCluster:
    """A ZooKeeper and brokers 1..N with `zookeeper.connect` set, under one directory:
    `zookeeper/` (zoo.cfg, data/, zookeeper.log) and `broker-<id>/` (a BrokerProcess each).

    `ports` gives broker i the port ports[i-1] (None: free ones); `zookeeper_port` 0 picks a free
    one; `overrides` apply to every broker; `detach` as BrokerProcess's, for ZooKeeper too.
    """

    directory: Path
    brokers: int = 3
    ports: list[int] | None = None
    zookeeper_port: int = 0
    overrides: dict[str, str] = field(default_factory=dict)
    config_file: str | None = None
    start_timeout_s: float = START_TIMEOUT_S
    detach: bool = False
    env: dict[str, str] = field(default_factory=dict)  # each broker's environment, on top of ours
    zookeeper: ZooKeeperServer = field(init=False)
    nodes: dict[int, BrokerProcess] = field(default_factory=dict, init=False)

    def __post_init__(self) -> None:
        if self.ports is not None and len(self.ports) != self.brokers:
            raise ValueError(f"{len(self.ports)} ports for {self.brokers} brokers")
        self.zookeeper = ZooKeeperServer(self.directory / "zookeeper", port=self.zookeeper_port)

    @property
    def bootstrap(self) -> str:
        return ",".join(self.addresses)

    @property
    def addresses(self) -> list[str]:
        return [node.bootstrap for node in self.nodes.values()]

    def start(self, spawned: Callable[[BrokerCluster], None] | None = None) -> float:
        """ZooKeeper, then the brokers side by side; returns the seconds until every broker was
        ready (registered in ZooKeeper). `spawned` is called once all processes run, before the
        wait (`kbroker cluster` records their pids there, for a `stop` after an interruption).
        ZooKeeperNotFound where there is none; on any failure whatever started is stopped."""
        started = time.monotonic()
        self.directory.mkdir(parents=True, exist_ok=True)
        try:
            self.zookeeper.start(detach=self.detach)  # stops itself if it fails
        except RuntimeError as e:
            raise LaunchError(f"ZooKeeper did not start: {e}") from None
        except BaseException:  # interrupted while it started
            self.zookeeper.stop()
            raise
        try:
            ports = self.ports or [free_port() for _ in range(self.brokers)]
            for broker_id, port in enumerate(ports, start=1):
                self.nodes[broker_id] = node = self._broker(broker_id, port)
                node.spawn()
            if spawned is not None:
                spawned(self)
            wait_all_ready(self.nodes.values(), self.start_timeout_s)
        except BaseException:
            self.stop()
            raise
        return time.monotonic() - started

    def _broker(self, broker_id: int, port: int) -> BrokerProcess:
        overrides = {"broker.id": str(broker_id), "zookeeper.connect": self.zookeeper.connect, **self.overrides}
        return BrokerProcess(self.directory / f"broker-{broker_id}", port=port, overrides=overrides,
                             config_file=self.config_file, start_timeout_s=self.start_timeout_s,
                             detach=self.detach, name=f"broker {broker_id}", env=self.env)

    def stop(self, timeout_s: float = STOP_TIMEOUT_S) -> list[int]:
        """SIGTERM to every broker at once (each hands off its partitions and closes its
        ZooKeeper session, which needs ZooKeeper up), then ZooKeeper. Returns the ids of the
        brokers that did not stop within `timeout_s` and were killed."""
        for node in self.nodes.values():
            node.signal_stop()
        killed = []
        for broker_id, node in self.nodes.items():
            try:
                node.stop(timeout_s)
            except LaunchError:
                killed.append(broker_id)
        self.zookeeper.stop()
        return killed


# -- detached processes, stopped by a later command ------------------------------------------------


def signal_pid(pid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signum)


def wait_pid_exit(pid: int, timeout_s: float, kill: bool) -> bool:
    """Wait for a process that is not our child to end (a pidfd becomes readable when it does);
    SIGKILL it after `timeout_s` if `kill`. Returns whether it ended by itself."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    try:
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        if poller.poll(timeout_s * 1000):
            return True
        if kill:
            signal_pid(pid, signal.SIGKILL)
            poller.poll(STOP_TIMEOUT_S * 1000)
        return False
    finally:
        os.close(fd)


def pid_runs(pid: int, marker: str) -> bool:
    """Whether `pid` runs and is still the process we started (its command line names `marker`,
    e.g. its config or log dir: pids get reused); a zombie has ended."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        status = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    state = status.rsplit(")", 1)[-1].split()[0] if ")" in status else ""
    return state != "Z" and marker in cmdline
