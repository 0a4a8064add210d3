"""The brokers a benchmark runs against: kbroker (started here or given), the mock cluster, and
Apache Kafka from a local distribution.

Each is a `Server`: a bootstrap address, topic creation/deletion, and where possible the pid of
the process doing the broker's work so that its CPU time and memory can be read from /proc.
A server of several brokers (`brokers` > 1: a kbroker cluster on ZooKeeper, the mock cluster
with N brokers) creates its topics replicated on all of them.
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

from kbroker.bench.kafka_reference import HOME_ENV, KafkaProcess, kafka_home
from kbroker.client import Client
from kbroker.metadata.zookeeper_process import ZooKeeperNotFound, ZooKeeperServer
from protocol.errors import KafkaError

READY_MARKER = "started"
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
# As `kbroker cluster stop`: a broker of a cluster that takes longer is killed (and reported).
CLUSTER_STOP_TIMEOUT_S = 30.0
OFFSETS_TOPIC = "__consumer_offsets"
# What kafka-server-start.sh gives a broker when KAFKA_HEAP_OPTS is not set.
KAFKA_HEAP_OPTS = "-Xmx1G -Xms1G"


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
    """A broker under test. Subclasses fill in how it runs.

    `name` keys the results ("kbroker" and its references, whatever their broker count, so that
    ratios pair them); `label` tells a cluster apart in the run's list of servers.
    """

    name = "server"
    description = ""
    can_restart = False
    brokers = 1
    # Topics on a cluster are created with replication factor `brokers` and this many in-sync
    # replicas required (Kafka's usual rf=3, min.insync.replicas=2).
    min_insync_replicas = 1

    @property
    def label(self) -> str:
        return self.name if self.brokers == 1 else f"{self.name} ({self.brokers} brokers)"

    @property
    def replication_factor(self) -> int:
        return self.brokers

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

    def cpu_parts(self) -> dict[str, float] | None:
        """CPU seconds of the parts of a multi-process server (a cluster's leader and followers)."""
        return None

    def describe_pid(self) -> str:
        """Which process `pid` is, for a profile's caption."""
        return f"{self.name} (pid {self.pid})"


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

    def create(self, bootstrap: str, topics: dict[str, int], timeout_s: float = 300, replication_factor: int = 1,
               min_insync_replicas: int = 1) -> None:
        from confluent_kafka.admin import NewTopic

        admin = self._admin_client(bootstrap)
        configs = {"min.insync.replicas": str(min_insync_replicas)} if replication_factor > 1 else {}
        futures = admin.create_topics(
            [NewTopic(name, partitions, replication_factor, config=configs) for name, partitions in topics.items()],
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


def wait_full_isr(addresses: list[str], topic: str, partitions: int | None = None,
                  timeout_s: float = 60) -> dict[int, int]:
    """Wait until every broker in `addresses` reports every partition of `topic` (`partitions` of
    them; None: as many as it reports) with a leader and all its replicas in the ISR; returns
    partition -> leader id.

    Each broker is asked on a connection of its own: a broker answers Metadata from its own view of
    ZooKeeper, and that view is also what gives it its roles, so once all of them report the full
    ISR every follower knows it follows, and timing does not start while one is still joining.
    """
    deadline = time.monotonic() + timeout_s
    clients = [Client(address, client_id="kbroker-bench", timeout=10) for address in addresses]
    try:
        while True:
            leaders, problem = _full_isr_leaders(clients, addresses, topic, partitions)
            if leaders is not None:
                return leaders
            if time.monotonic() >= deadline:
                raise ServerError(f"{topic}: no full ISR after {timeout_s:g} s ({problem})")
            time.sleep(0.05)  # nothing pushes the cluster's state to us: poll it
    finally:
        for client in clients:
            client.close()


def _full_isr_leaders(clients: list[Client], addresses: list[str], topic: str,
                      partitions: int | None) -> tuple[dict[int, int] | None, str]:
    """partition -> leader if every broker sees a full ISR everywhere, else None and what is missing."""
    leaders: dict[int, int] = {}
    for client, address in zip(clients, addresses, strict=True):
        try:
            meta = client.metadata([topic], refresh=True).topic(topic)
        except KafkaError as e:  # the topic not yet known to this broker
            return None, f"{address}: {e}"
        seen = {i: (p.leader, sorted(p.replicas), sorted(set(p.isr))) for i, p in meta.partitions.items()}
        if not seen or (partitions is not None and len(seen) != partitions) or any(
                leader < 0 or not set(replicas) <= set(isr) for leader, replicas, isr in seen.values()):
            return None, f"{address} sees {seen} (partition: (leader, replicas, ISR))"
        leaders = {i: leader for i, (leader, _replicas, _isr) in seen.items()}
    return leaders, ""


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
        self._spawned_at = 0.0
        self._stop_sent = False
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
            # Deleted benchmark topics go at once, so a long run does not fill the disk (and the
            # removal of their directories does not wait for the start-up delay of the log tasks).
            "log.segment.delete.delay.ms": "0",
            "log.initial.task.delay.ms": "0",
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
        self.spawn()
        return self.wait_ready()

    def spawn(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._spawned_at = time.monotonic()
        self._stop_sent = False
        with open(self.data_dir / "broker.log", "a") as stderr:
            self.proc = subprocess.Popen(self.command(), stdout=subprocess.PIPE, stderr=stderr, text=True,
                                         env={**os.environ, "PYTHONUNBUFFERED": "1"})

    def wait_ready(self) -> float:
        """Wait for the ready line of the spawned process; returns the seconds since it was spawned."""
        assert self.proc is not None
        _wait_for_line(self.proc, READY_MARKER, self.start_timeout_s, self.data_dir / "broker.log")
        seconds = time.monotonic() - self._spawned_at
        self.start_seconds.append(seconds)
        self._topics.reset()
        return seconds

    def signal_stop(self) -> None:
        """SIGTERM without waiting (brokers of a cluster stop together), once: a second one arriving
        after the broker's event loop has closed would end it with the default action."""
        self._topics.reset()
        if self.proc is not None and self.proc.poll() is None and not self._stop_sent:
            self.proc.send_signal(signal.SIGTERM)
            self._stop_sent = True

    def stop(self, timeout_s: float = 300) -> float:
        """Clean shutdown (SIGTERM: flush and checkpoints); returns the seconds it took."""
        # The admin client goes first: left connected, it would log the broker's going away.
        self._topics.reset()
        if self.proc is None or self.proc.poll() is not None:
            return 0.0
        started = time.monotonic()
        self.signal_stop()
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

    def close(self, timeout_s: float = 300) -> None:
        try:
            self.stop(timeout_s)
        finally:
            if self.proc is not None and self.proc.stdout is not None:
                self.proc.stdout.close()

    def log_tail(self, lines: int = 20) -> str:
        path = self.data_dir / "broker.log"
        return "\n".join(path.read_text().splitlines()[-lines:]) if path.exists() else ""


class KbrokerClusterServer(Server):
    """A ZooKeeper and `brokers` kbroker processes (ids 1..N), as `kbroker cluster start` runs them.

    Built from the same parts rather than by calling `kbroker cluster start`: that command
    detaches its processes to outlive it, while a benchmark's brokers are its children (they go
    when it goes) and are started and stopped like its single broker (`KbrokerServer`, one per
    broker id, each with its own data directory). Topics are created with replication factor
    `brokers` and `min_insync_replicas`, and `create_topic` returns once every broker sees a full
    ISR. `pid` is the leader of the last created topic's partition 0 (what --profile samples);
    CPU time is the whole cluster's, split into leader and followers by `cpu_parts`.
    """

    name = "kbroker"

    def __init__(self, data_dir: Path, brokers: int = 3, min_insync_replicas: int = 2,
                 config_file: str | None = None, overrides: dict[str, str] | None = None,
                 start_timeout_s: float = 600) -> None:
        if brokers < 2:
            raise ServerError("a cluster needs at least 2 brokers")
        self.data_dir = data_dir
        self.brokers = brokers
        self.min_insync_replicas = max(1, min(min_insync_replicas, brokers))
        self.config_file = config_file
        self.overrides = overrides or {}
        self.start_timeout_s = start_timeout_s
        self.zookeeper = ZooKeeperServer(data_dir / "zookeeper")
        self.nodes: dict[int, KbrokerServer] = {}
        self.leader_id: int | None = None
        self._topics = _AdminTopics()
        self.description = (f"kbroker cluster: {brokers} × python -m kbroker.cli.main start"
                            f"{' ' + config_file if config_file else ''} on one ZooKeeper, topics with "
                            f"replication factor {brokers}, min.insync.replicas={self.min_insync_replicas}")

    @property
    def bootstrap(self) -> str:
        return ",".join(node.bootstrap for node in self.nodes.values())

    @property
    def pid(self) -> int | None:
        node = self.nodes.get(self.leader_id) if self.leader_id is not None else None
        return node.pid if node is not None else None

    def describe_pid(self) -> str:
        return f"leader broker {self.leader_id} (pid {self.pid})"

    def start(self) -> float:
        """ZooKeeper, then the brokers together (each waits for its ready line: it has registered)."""
        started = time.monotonic()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        try:
            self.zookeeper.start()
        except ZooKeeperNotFound as e:
            raise ServerError(f"the kbroker cluster needs ZooKeeper: {e}") from None
        except RuntimeError as e:
            raise ServerError(f"ZooKeeper did not start: {e}") from None
        try:
            for broker_id in range(1, self.brokers + 1):
                self.nodes[broker_id] = KbrokerServer(
                    self.data_dir / f"broker-{broker_id}", config_file=self.config_file,
                    overrides={"broker.id": str(broker_id), "zookeeper.connect": self.zookeeper.connect,
                               **self.overrides},
                    start_timeout_s=self.start_timeout_s)
            # All spawned before any is awaited, so that they start side by side.
            for node in self.nodes.values():
                node.spawn()
            for node in self.nodes.values():
                node.wait_ready()
            self._create_offsets_topic()
        except BaseException:
            self.close()
            raise
        self._topics.reset()
        return time.monotonic() - started

    def _create_offsets_topic(self) -> None:
        """Create __consumer_offsets and wait for its full ISR before anything is measured.

        The latency benchmark's consumer has a group id, so its first FindCoordinator would create
        the topic (50 partitions, replicated) in the middle of the first timed run. It also changes
        what every later round of replication costs: each follower's fetch carries every partition
        it follows from that leader, a third of the 50 here. Created up front, every case runs
        against the same cluster, the one any cluster with a consumer group is.
        """
        addresses = [node.bootstrap for node in self.nodes.values()]
        with Client(addresses[0], client_id="kbroker-bench", timeout=60) as client:
            client.find_coordinator("kbroker-bench")  # creates the topic; retried while it is set up
        wait_full_isr(addresses, OFFSETS_TOPIC)

    def create_topic(self, topic: str, partitions: int) -> None:
        self._topics.create(self.bootstrap, {topic: partitions}, replication_factor=self.brokers,
                            min_insync_replicas=self.min_insync_replicas)
        leaders = wait_full_isr([node.bootstrap for node in self.nodes.values()], topic, partitions)
        self.leader_id = leaders[0]

    def delete_topic(self, topic: str) -> None:
        self._topics.delete(self.bootstrap, topic)

    def cpu_seconds(self) -> float | None:
        times = [node.cpu_seconds() for node in self.nodes.values()]
        return None if None in times else sum(t for t in times if t is not None)

    def cpu_parts(self) -> dict[str, float] | None:
        """Leader (of the last topic's partition 0) and followers: the leader appends and answers
        the producer and the followers' fetches, a follower fetches and appends."""
        times = {broker_id: node.cpu_seconds() for broker_id, node in self.nodes.items()}
        if self.leader_id is None or None in times.values():
            return None
        return {"leader": times[self.leader_id] or 0.0,
                "followers": sum(t or 0.0 for broker_id, t in times.items() if broker_id != self.leader_id)}

    def close(self) -> None:
        """SIGTERM to every broker at once (each hands off its partitions and closes its session,
        which needs ZooKeeper), then ZooKeeper."""
        self._topics.reset()
        errors = []
        for node in self.nodes.values():
            node.signal_stop()
        for broker_id, node in self.nodes.items():
            try:
                node.close(CLUSTER_STOP_TIMEOUT_S)
            except ServerError as e:
                errors.append(f"broker {broker_id}: {e}")
        self.zookeeper.stop()
        if errors:
            raise ServerError("; ".join(errors))


class ExternalServer(Server):
    """A broker given with --bootstrap: measured as it is, never restarted."""

    name = "kbroker"

    def __init__(self, bootstrap: str, pid: int | None = None, brokers: int = 1, min_insync_replicas: int = 1) -> None:
        self._bootstrap = bootstrap
        self._pid = pid
        self.brokers = brokers
        self.min_insync_replicas = min_insync_replicas
        self._topics = _AdminTopics()
        self.description = (f"{'cluster of ' + str(brokers) + ' brokers' if brokers > 1 else 'broker'} at "
                            f"{bootstrap} (given with --bootstrap)")

    @property
    def bootstrap(self) -> str:
        return self._bootstrap

    @property
    def pid(self) -> int | None:
        return self._pid

    def create_topic(self, topic: str, partitions: int) -> None:
        self._topics.create(self._bootstrap, {topic: partitions}, replication_factor=self.replication_factor,
                            min_insync_replicas=self.min_insync_replicas)
        if self.brokers > 1:
            # Only the brokers given with --bootstrap are asked whether they see the full ISR.
            wait_full_isr(self._bootstrap.split(","), topic, partitions)

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
        self._topics = _AdminTopics()
        self.description = (f"Apache Kafka {kafka_version(home)} ({home / 'run-single-node.sh'}: one KRaft node, "
                            f"JVM heap {self.process.heap_opts})")

    @property
    def bootstrap(self) -> str:
        return self.process.bootstrap

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
