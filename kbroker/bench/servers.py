"""The brokers a benchmark runs against: kbroker (started here or given), the mock cluster, Kafka.

Each is a `Server`: a bootstrap address, topic creation/deletion, and where possible the pid of
the process doing the broker's work so that its CPU time and memory can be read from /proc.
"""

from __future__ import annotations

import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import IO

READY_MARKER = "started"
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


class ServerError(RuntimeError):
    pass


def proc_rss_bytes(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def proc_cpu_seconds(pid: int) -> float | None:
    """User + system CPU time of a process (all threads), from /proc/PID/stat."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return None
    # The command name (field 2) may hold spaces; fields after its closing parenthesis are fixed.
    fields = stat[stat.rindex(")") + 2:].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


class Server:
    """A broker under test. Subclasses fill in how it runs."""

    name = "server"
    description = ""
    can_restart = False

    @property
    def bootstrap(self) -> str:
        raise NotImplementedError

    @property
    def pid(self) -> int | None:
        return None

    def create_topic(self, topic: str, partitions: int) -> None:
        raise NotImplementedError

    def delete_topic(self, topic: str) -> None:
        raise NotImplementedError

    def restart(self, drop_page_cache: bool = False) -> float:
        raise ServerError(f"{self.name} cannot be restarted by the benchmark")

    def close(self) -> None:
        pass

    def rss_bytes(self) -> int | None:
        return proc_rss_bytes(self.pid) if self.pid else None

    def cpu_seconds(self) -> float | None:
        return proc_cpu_seconds(self.pid) if self.pid else None


class _AdminTopics:
    """Topic creation through the Kafka admin API (kbroker, Kafka, any --bootstrap broker)."""

    def __init__(self) -> None:
        self._admin = None

    def _admin_client(self, bootstrap: str):  # noqa: ANN202 - confluent_kafka is imported lazily
        if self._admin is None:
            from confluent_kafka.admin import AdminClient

            # Creating thousands of partitions can take kbroker minutes (docs/performance.md);
            # librdkafka otherwise gives up on any request after socket.timeout.ms (60 s).
            self._admin = AdminClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": 300_000})
        return self._admin

    def create(self, bootstrap: str, topics: dict[str, int], timeout_s: float = 300) -> None:
        from confluent_kafka.admin import NewTopic

        admin = self._admin_client(bootstrap)
        futures = admin.create_topics(
            [NewTopic(name, partitions, 1) for name, partitions in topics.items()],
            operation_timeout=timeout_s, request_timeout=timeout_s,
        )
        for future in futures.values():
            future.result(timeout=timeout_s + 30)

    def delete(self, bootstrap: str, topic: str) -> None:
        admin = self._admin_client(bootstrap)
        for future in admin.delete_topics([topic], operation_timeout=60, request_timeout=60).values():
            future.result(timeout=90)

    def reset(self) -> None:
        self._admin = None


class KbrokerServer(Server):
    """A `kbroker start` child process with its own data directory, like tests/brokers.py."""

    name = "kbroker"
    can_restart = True

    def __init__(self, data_dir: Path, port: int | None = None, config_file: str | None = None,
                 overrides: dict[str, str] | None = None, start_timeout_s: float = 600) -> None:
        self.data_dir = data_dir
        self.port = port or free_port()
        self.config_file = config_file
        self.overrides = overrides or {}
        self.start_timeout_s = start_timeout_s
        self.proc: subprocess.Popen[str] | None = None
        self.start_seconds: list[float] = []
        self._topics = _AdminTopics()
        self.description = f"kbroker (python -m kbroker.cli.main start{' ' + config_file if config_file else ''})"

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def log_dir(self) -> Path:
        return self.data_dir / "logs"

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None and self.proc.poll() is None else None

    def command(self) -> list[str]:
        settings = {
            "listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
            "log.dirs": str(self.log_dir),
            # Deleted benchmark topics go at once, so a long run does not fill the disk.
            "log.segment.delete.delay.ms": "0",
            "log.retention.check.interval.ms": "5000",
            **self.overrides,
        }
        args = [sys.executable, "-m", "kbroker.cli.main", "start"]
        if self.config_file:
            args.append(self.config_file)
        for key, value in settings.items():
            args += ["--override", f"{key}={value}"]
        return args

    def start(self) -> float:
        """Start and wait for the ready line; returns the seconds that took."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        started = time.monotonic()
        with open(self.data_dir / "broker.log", "a") as stderr:
            self.proc = subprocess.Popen(self.command(), stdout=subprocess.PIPE, stderr=stderr, text=True,
                                         env={**os.environ, "PYTHONUNBUFFERED": "1"})
        _wait_for_line(self.proc, READY_MARKER, self.start_timeout_s, self.data_dir / "broker.log")
        seconds = time.monotonic() - started
        self.start_seconds.append(seconds)
        self._topics.reset()
        return seconds

    def stop(self, timeout_s: float = 300) -> float:
        """Clean shutdown (SIGTERM: flush and checkpoints); returns the seconds it took."""
        # The admin client goes first: left connected, it would log the broker's going away.
        self._topics.reset()
        if self.proc is None or self.proc.poll() is not None:
            return 0.0
        started = time.monotonic()
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise ServerError(f"kbroker did not stop within {timeout_s}s") from None
        return time.monotonic() - started

    def restart(self, drop_page_cache: bool = False) -> float:
        self.stop()
        if drop_page_cache:
            evict_from_page_cache(self.log_dir)
        return self.start()

    def create_topic(self, topic: str, partitions: int) -> None:
        self._topics.create(self.bootstrap, {topic: partitions})

    def create_topics(self, topics: dict[str, int]) -> None:
        self._topics.create(self.bootstrap, topics)

    def delete_topic(self, topic: str) -> None:
        self._topics.delete(self.bootstrap, topic)

    def close(self) -> None:
        try:
            self.stop()
        finally:
            if self.proc is not None and self.proc.stdout is not None:
                self.proc.stdout.close()

    def log_tail(self, lines: int = 20) -> str:
        path = self.data_dir / "broker.log"
        return "\n".join(path.read_text().splitlines()[-lines:]) if path.exists() else ""


class ExternalServer(Server):
    """A broker given with --bootstrap: measured as it is, never restarted."""

    name = "kbroker"

    def __init__(self, bootstrap: str, pid: int | None = None) -> None:
        self._bootstrap = bootstrap
        self._pid = pid
        self._topics = _AdminTopics()
        self.description = f"broker at {bootstrap} (given with --bootstrap)"

    @property
    def bootstrap(self) -> str:
        return self._bootstrap

    @property
    def pid(self) -> int | None:
        return self._pid

    def create_topic(self, topic: str, partitions: int) -> None:
        self._topics.create(self._bootstrap, {topic: partitions})

    def delete_topic(self, topic: str) -> None:
        self._topics.delete(self._bootstrap, topic)


class MockServer(Server):
    """librdkafka's mock cluster, hosted by `python -m kbroker.bench.mock_host` in its own process."""

    name = "mock"

    def __init__(self, brokers: int = 1) -> None:
        import confluent_kafka

        self.proc = subprocess.Popen(
            [sys.executable, "-m", "kbroker.bench.mock_host", str(brokers)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        )
        line = _wait_for_line(self.proc, "bootstrap ", 60, None)
        self._bootstrap = line.split()[1]
        self.description = (f"librdkafka {confluent_kafka.libversion()[0]} mock cluster "
                            f"({brokers} broker{'s' if brokers > 1 else ''}, in-memory, C)")

    @property
    def bootstrap(self) -> str:
        return self._bootstrap

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc.poll() is None else None

    def _command(self, line: str) -> None:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        answer = self.proc.stdout.readline().strip()
        if answer != "ok":
            raise ServerError(f"mock cluster: {line}: {answer or 'no answer'}")

    def create_topic(self, topic: str, partitions: int) -> None:
        self._command(f"create {topic} {partitions}")

    def delete_topic(self, topic: str) -> None:
        self._command(f"delete {topic}")

    def close(self) -> None:
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()


class KafkaDockerServer(Server):
    """Apache Kafka in Docker: the second reference. A hook, not built yet.

    To build it: `docker run -d -p PORT:9092 apache/kafka:3.9.0` with KAFKA_ADVERTISED_LISTENERS
    pointing at 127.0.0.1:PORT (the image runs a single KRaft node by default), wait until the
    admin client lists topics, implement create/delete with `_AdminTopics`, and take `pid` from
    `docker inspect --format {{.State.Pid}}` so CPU and RSS are read like kbroker's.
    """

    name = "kafka"

    def __init__(self) -> None:
        raise NotImplementedError("the Apache Kafka reference is not implemented yet "
                                  "(hook: kbroker/bench/servers.py KafkaDockerServer)")


def kafka_reference_status() -> tuple[bool, str]:
    """Whether an Apache Kafka reference can run here, and why not."""
    docker = shutil.which("docker")
    if docker is None:
        return False, "no docker command: the Apache Kafka reference is skipped"
    try:
        result = subprocess.run([docker, "info", "--format", "{{.ServerVersion}}"], capture_output=True,
                                text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired) as e:
        return False, f"Docker engine not reachable ({e}): the Apache Kafka reference is skipped"
    if result.returncode != 0 or not result.stdout.strip():
        reason = (result.stderr.strip().splitlines() or ["docker info failed"])[-1]
        return False, f"Docker engine not reachable ({reason}): the Apache Kafka reference is skipped"
    return False, (f"Docker engine {result.stdout.strip()} found, but the Apache Kafka reference is not "
                   "implemented yet (hook: kbroker/bench/servers.py KafkaDockerServer): skipped")


def evict_from_page_cache(directory: Path) -> int:
    """Drop a directory's files from the page cache (no root needed, unlike drop_caches).

    The files must be clean for the kernel to drop them, hence the fsync first. Returns the
    bytes advised away.
    """
    advised = 0
    for root, _dirs, files in os.walk(directory):
        for name in files:
            path = os.path.join(root, name)
            try:
                fd = os.open(path, os.O_RDONLY)
            except OSError:
                continue
            try:
                os.fsync(fd)
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                advised += os.fstat(fd).st_size
            finally:
                os.close(fd)
    return advised


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def new_data_dir(parent: str | None, prefix: str) -> Path:
    return Path(tempfile.mkdtemp(prefix=prefix, dir=parent))


def _wait_for_line(proc: subprocess.Popen[str], marker: str, timeout_s: float, log_path: Path | None) -> str:
    assert proc.stdout is not None
    stdout: IO[str] = proc.stdout
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        ready, _, _ = select.select([stdout], [], [], 0.2)
        if ready:
            line = stdout.readline()
            if marker in line:
                return line
        if proc.poll() is not None:
            log = log_path.read_text()[-3000:] if log_path and log_path.exists() else ""
            raise ServerError(f"{proc.args[2] if len(proc.args) > 2 else proc.args} exited with "
                              f"{proc.returncode}:\n{log}")
    proc.kill()
    proc.wait()
    raise ServerError(f"no {marker!r} line within {timeout_s}s")
