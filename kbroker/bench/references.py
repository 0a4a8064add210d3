"""The references a benchmark measures kbroker against: librdkafka's mock cluster, hosted in a
process of its own (mock_host.py), and Apache Kafka from a local distribution (kafka_reference.py).
"""

from __future__ import annotations

import os
import select
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import IO

from kbroker.bench.kafka_reference import HOME_ENV, KafkaProcess, kafka_home
from kbroker.bench.servers import AdminTopics, Server, ServerError, evict_from_page_cache, wait_full_isr
from kbroker.client import Client
from protocol.errors import KafkaError

# What kafka-server-start.sh gives a broker when KAFKA_HEAP_OPTS is not set.
KAFKA_HEAP_OPTS = "-Xmx1G -Xms1G"


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
        self.brokers = brokers
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
        self._command(f"create {topic} {partitions} {self.replication_factor}")

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


class KafkaServer(Server):
    """Apache Kafka from a local distribution, the second reference: one KRaft node started by
    the distribution's `run-single-node.sh` (kafka_reference.py) with Kafka's defaults but for
    what one node needs (internal topics with one replica, no initial rebalance delay), and
    the JVM heap Kafka's own start script gives a broker (KAFKA_HEAP_OPTS, else 1 GiB).

    The script execs the JVM, so `pid` is the broker: its CPU time and RSS are read like kbroker's.
    It can be restarted (the cold-start consume benchmark): a clean stop, its log files evicted
    from the page cache, and a start with the same data directory and port.
    """

    name = "kafka"
    can_restart = True

    def __init__(self, home: Path, data_dir: Path, start_timeout_s: float = 180) -> None:
        self.process = KafkaProcess(home, data_dir, heap_opts=os.environ.get("KAFKA_HEAP_OPTS", KAFKA_HEAP_OPTS))
        self.start_timeout_s = start_timeout_s
        self.start_seconds: list[float] = []
        self._topics = AdminTopics()
        self.description = (f"Apache Kafka {kafka_version(home)} ({home / 'run-single-node.sh'}: one KRaft node, "
                            f"JVM heap {self.process.heap_opts})")

    @property
    def bootstrap(self) -> str:
        return self.process.bootstrap

    @property
    def log_dirs(self) -> list[Path]:
        return [self.process.log_dir]

    @property
    def pid(self) -> int | None:
        return self.process.pid

    def start(self) -> float:
        """Start and wait until it serves metadata and coordinates groups; returns the seconds."""
        seconds = self.process.start(self._ready, self.start_timeout_s)
        self.start_seconds.append(seconds)
        self._topics.reset()
        return seconds

    def _ready(self) -> tuple[bool, str]:
        # FindCoordinator also makes Kafka create __consumer_offsets, which the latency
        # benchmark's consumer group would otherwise create inside its first timed run.
        try:
            with Client(self.bootstrap, client_id="kbroker-bench", timeout=10) as client:
                client.find_coordinator("kbroker-bench")
        except (OSError, KafkaError) as e:
            return False, str(e)
        return True, ""

    def restart(self, drop_page_cache: bool = False) -> float:
        self.stop()
        if drop_page_cache:
            evict_from_page_cache(self.process.log_dir)
        return self.start()

    def stop(self) -> None:
        self._topics.reset()
        code = self.process.stop()
        if code not in (None, 0, 143, -signal.SIGTERM):  # the JVM ends a SIGTERM shutdown with 143
            raise ServerError(f"Kafka exited with {code} when stopped:\n{self.process.log_tail(20)}")

    def create_topic(self, topic: str, partitions: int) -> None:
        self._topics.create(self.bootstrap, {topic: partitions})
        # Kafka answers CreateTopics once its controller has the topic; the broker serves it
        # a moment later.
        wait_full_isr([self.bootstrap], topic, partitions)

    def delete_topic(self, topic: str) -> None:
        self._topics.delete(self.bootstrap, topic)

    def close(self) -> None:
        self.stop()

    def log_tail(self, lines: int = 20) -> str:
        return self.process.log_tail(lines)


def kafka_version(home: Path) -> str:
    """The distribution's version, from its kafka-clients jar's name ("?" when not found)."""
    jars = sorted(home.glob("libs/kafka-clients-*.jar"))
    return jars[0].name.removeprefix("kafka-clients-").removesuffix(".jar") if jars else "?"


def kafka_reference_status(home_dir: str | None = None) -> tuple[Path | None, str]:
    """The Kafka distribution to measure (from `home_dir`, KBROKER_KAFKA_HOME or
    ../shared/kafka-3.9.0) and a JVM to run it, or None and why the reference is skipped."""
    home, reason = kafka_home({HOME_ENV: home_dir} if home_dir else None)
    if home is None:
        return None, f"{reason}: the Apache Kafka reference is skipped"
    if shutil.which("java") is None:
        return None, "no java on PATH (Kafka needs Java 17+): the Apache Kafka reference is skipped"
    return home, ""


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
