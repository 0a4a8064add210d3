"""The brokers a benchmark runs against: kbroker, started here (kbroker/launcher.py runs its
processes) or given with --bootstrap; references.py has the references it is compared with.

Each is a `Server`: a bootstrap address, topic creation/deletion, and where possible the pid of
the process doing the broker's work so that its CPU time and memory can be read from /proc.
A server of several brokers (`brokers` > 1: a kbroker cluster on ZooKeeper, the mock cluster
with N brokers) creates its topics replicated on all of them.
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path

from kbroker.client import Client
from kbroker.launcher import BrokerCluster, BrokerProcess, LaunchError
from kbroker.metadata.zookeeper_process import ZooKeeperNotFound
from kbroker.ports import free_port
from protocol.errors import KafkaError

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
# As `kbroker cluster stop`: a broker of a cluster that takes longer is killed (and reported).
CLUSTER_STOP_TIMEOUT_S = 30.0
OFFSETS_TOPIC = "__consumer_offsets"


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
    def log_dirs(self) -> list[Path]:
        """The log directory of each broker this process started (none for a broker elsewhere):
        where the write ceiling writes."""
        return []

    # Where the measured clients connect, and with which client settings: the broker's own
    # (PLAINTEXT) bootstrap unless a benchmark points them at another listener (TLS).
    client_address: str | None = None
    client_settings: Mapping[str, str] = {}

    @property
    def bootstrap(self) -> str:
        raise NotImplementedError

    @property
    def client_bootstrap(self) -> str:
        return self.client_address or self.bootstrap

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


class AdminTopics:
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
               min_insync_replicas: int = 1, topic_configs: dict[str, str] | None = None) -> None:
        from confluent_kafka.admin import NewTopic

        admin = self._admin_client(bootstrap)
        configs = {"min.insync.replicas": str(min_insync_replicas)} if replication_factor > 1 else {}
        configs.update(topic_configs or {})
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


# Deleted benchmark topics go at once, so a long run does not fill the disk (and the removal of
# their directories does not wait for the start-up delay of the log tasks).
BENCH_BROKER_SETTINGS = {
    "log.segment.delete.delay.ms": "0",
    "log.initial.task.delay.ms": "0",
    "log.retention.check.interval.ms": "5000",
}


def _marks(env: dict[str, str] | None, described_overrides: dict[str, str] | None) -> str:
    """What sets a kbroker apart from the benchmark's other one, for its description."""
    marks = [f"{k}={v}" for k, v in (env or {}).items()]
    marks += [f"--override {k}={v}" for k, v in (described_overrides or {}).items()]
    return f", {' '.join(marks)}" if marks else ""


class KbrokerServer(Server):
    """A `kbroker start` child process with its own data directory (kbroker/launcher.py)."""

    name = "kbroker"
    can_restart = True

    def __init__(self, data_dir: Path, port: int | None = None, config_file: str | None = None,
                 overrides: dict[str, str] | None = None, start_timeout_s: float = 600, name: str = "kbroker",
                 env: dict[str, str] | None = None, described_overrides: dict[str, str] | None = None) -> None:
        self.name = name
        self.process = BrokerProcess(data_dir, port=port or free_port(), config_file=config_file,
                                     overrides={**BENCH_BROKER_SETTINGS, **(overrides or {})},
                                     start_timeout_s=start_timeout_s, name=name, env=env or {})
        self.start_seconds: list[float] = []
        self._topics = AdminTopics()
        self.description = (f"kbroker (python -m kbroker.cli.main start{' ' + config_file if config_file else ''}"
                            f"{_marks(env, described_overrides)})")

    @property
    def bootstrap(self) -> str:
        return self.process.bootstrap

    @property
    def log_dir(self) -> Path:
        return self.process.log_dir

    @property
    def log_dirs(self) -> list[Path]:
        return [self.log_dir]

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process.alive else None

    def start(self) -> float:
        """Start and wait for the ready line; returns the seconds that took."""
        try:
            self.process.spawn()
            seconds = self.process.wait_ready()
        except LaunchError as e:
            raise ServerError(str(e)) from None
        self.start_seconds.append(seconds)
        self._topics.reset()
        return seconds

    def stop(self, timeout_s: float = 300) -> float:
        """Clean shutdown (SIGTERM: flush and checkpoints); returns the seconds it took."""
        # The admin client goes first: left connected, it would log the broker's going away.
        self._topics.reset()
        if not self.process.alive:
            return 0.0
        started = time.monotonic()
        try:
            self.process.stop(timeout_s)
        except LaunchError as e:
            raise ServerError(str(e)) from None
        return time.monotonic() - started

    def kill(self) -> None:
        """kill -9: no flush, no checkpoints (what a crash leaves for the next start)."""
        self._topics.reset()  # as in stop(): a connected admin client would log the broker's going away
        self.process.kill()

    def restart(self, drop_page_cache: bool = False) -> float:
        self.stop()
        if drop_page_cache:
            evict_from_page_cache(self.log_dir)
        return self.start()

    def create_topic(self, topic: str, partitions: int) -> None:
        self._topics.create(self.bootstrap, {topic: partitions})

    def create_topics(self, topics: dict[str, int], configs: dict[str, str] | None = None) -> None:
        """Create `topics` (name -> partitions), each with the topic configs `configs`."""
        self._topics.create(self.bootstrap, topics, topic_configs=configs)

    def delete_topic(self, topic: str) -> None:
        self._topics.delete(self.bootstrap, topic)

    def close(self, timeout_s: float = 300) -> None:
        self.stop(timeout_s)

    def log_tail(self, lines: int = 20) -> str:
        return self.process.log_tail(lines)


class KbrokerClusterServer(Server):
    """A ZooKeeper and `brokers` kbroker processes (ids 1..N): launcher.BrokerCluster, the parts
    `kbroker cluster start` runs, but as this process's children (they go when it goes) rather
    than detached. Topics are created with replication factor `brokers` and
    `min_insync_replicas`, and `create_topic` returns once every broker sees a full ISR. `pid` is
    the leader of the last created topic's partition 0 (what --profile samples); CPU time is the
    whole cluster's, split into leader and followers by `cpu_parts`.
    """

    name = "kbroker"

    def __init__(self, data_dir: Path, brokers: int = 3, min_insync_replicas: int = 2,
                 config_file: str | None = None, overrides: dict[str, str] | None = None,
                 start_timeout_s: float = 600, name: str = "kbroker", env: dict[str, str] | None = None,
                 described_overrides: dict[str, str] | None = None) -> None:
        if brokers < 2:
            raise ServerError("a cluster needs at least 2 brokers")
        self.name = name
        self.brokers = brokers
        self.min_insync_replicas = max(1, min(min_insync_replicas, brokers))
        self.cluster = BrokerCluster(data_dir, brokers, config_file=config_file,
                                     overrides={**BENCH_BROKER_SETTINGS, **(overrides or {})},
                                     start_timeout_s=start_timeout_s, env=env or {})
        self.leader_id: int | None = None
        self._topics = AdminTopics()
        self.description = (f"kbroker cluster: {brokers} × python -m kbroker.cli.main start"
                            f"{' ' + config_file if config_file else ''}{_marks(env, described_overrides)} on "
                            f"one ZooKeeper, topics with replication factor {brokers}, "
                            f"min.insync.replicas={self.min_insync_replicas}")

    @property
    def bootstrap(self) -> str:
        return self.cluster.bootstrap

    @property
    def pid(self) -> int | None:
        node = self.cluster.nodes.get(self.leader_id) if self.leader_id is not None else None
        return node.pid if node is not None and node.alive else None

    def describe_pid(self) -> str:
        return f"leader broker {self.leader_id} (pid {self.pid})"

    @property
    def log_dirs(self) -> list[Path]:
        return [node.log_dir for node in self.cluster.nodes.values()]

    def start(self) -> float:
        """ZooKeeper, then the brokers together (each ready once it has registered), then
        __consumer_offsets; returns the seconds that took."""
        started = time.monotonic()
        try:
            self.cluster.start()
        except ZooKeeperNotFound as e:
            raise ServerError(f"the kbroker cluster needs ZooKeeper: {e}") from None
        except LaunchError as e:
            raise ServerError(str(e)) from None
        try:
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
        addresses = self.cluster.addresses
        with Client(addresses[0], client_id="kbroker-bench", timeout=60) as client:
            client.find_coordinator("kbroker-bench")  # creates the topic; retried while it is set up
        wait_full_isr(addresses, OFFSETS_TOPIC)

    def create_topic(self, topic: str, partitions: int) -> None:
        self._topics.create(self.bootstrap, {topic: partitions}, replication_factor=self.brokers,
                            min_insync_replicas=self.min_insync_replicas)
        leaders = wait_full_isr(self.cluster.addresses, topic, partitions)
        self.leader_id = leaders[0]

    def delete_topic(self, topic: str) -> None:
        self._topics.delete(self.bootstrap, topic)

    def kill_broker(self, broker_id: int) -> None:
        """kill -9 one broker (its ZooKeeper session lives on until it times out, as after a crash)."""
        self._topics.reset()  # its connection may be to that broker
        self.cluster.nodes[broker_id].kill()

    def start_broker(self, broker_id: int) -> float:
        """Start a stopped broker again on its data; the seconds to its ready line (registered)."""
        node = self.cluster.nodes[broker_id]
        try:
            node.spawn()
            return node.wait_ready()
        except LaunchError as e:
            raise ServerError(str(e)) from None

    def live_addresses(self) -> dict[int, str]:
        """broker id -> address of the brokers whose process runs."""
        return {broker_id: node.bootstrap for broker_id, node in self.cluster.nodes.items() if node.alive}

    def _cpu_by_broker(self) -> dict[int, float | None]:
        return {broker_id: proc_cpu_seconds(node.pid) if node.pid is not None and node.alive else None
                for broker_id, node in self.cluster.nodes.items()}

    def cpu_seconds(self) -> float | None:
        times = list(self._cpu_by_broker().values())
        return None if None in times else sum(t for t in times if t is not None)

    def cpu_parts(self) -> dict[str, float] | None:
        """Leader (of the last topic's partition 0) and followers: the leader appends and answers
        the producer and the followers' fetches, a follower fetches and appends."""
        times = self._cpu_by_broker()
        if self.leader_id is None or None in times.values():
            return None
        return {"leader": times[self.leader_id] or 0.0,
                "followers": sum(t or 0.0 for broker_id, t in times.items() if broker_id != self.leader_id)}

    def close(self) -> None:
        """Every broker stopped at once, then ZooKeeper (launcher.BrokerCluster.stop)."""
        self._topics.reset()
        killed = self.cluster.stop(CLUSTER_STOP_TIMEOUT_S)
        if killed:
            raise ServerError(f"broker(s) {killed} did not stop within {CLUSTER_STOP_TIMEOUT_S:g} s and were killed")


class ExternalServer(Server):
    """A broker given with --bootstrap: measured as it is, never restarted."""

    name = "kbroker"

    def __init__(self, bootstrap: str, pid: int | None = None, brokers: int = 1, min_insync_replicas: int = 1) -> None:
        self._bootstrap = bootstrap
        self._pid = pid
        self.brokers = brokers
        self.min_insync_replicas = min_insync_replicas
        self._topics = AdminTopics()
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


def new_data_dir(parent: str | None, prefix: str) -> Path:
    return Path(tempfile.mkdtemp(prefix=prefix, dir=parent))
