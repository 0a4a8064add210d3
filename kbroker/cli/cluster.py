"""`kbroker cluster start --brokers N` / `kbroker cluster stop`: a local cluster for development.

`start` runs a ZooKeeper server and N `kbroker start` processes (broker ids 1..N, each with
its own log dir and port, `zookeeper.connect` set), detached so they outlive the command, and
records them in DIR/cluster.json; it returns once every broker has registered in ZooKeeper (the
line `kbroker start` prints then). kbroker/launcher.py runs them. `stop` SIGTERMs the brokers
(they flush and close their sessions), then ZooKeeper, by the pids in cluster.json.

Layout of DIR: cluster.json, zookeeper/ (zoo.cfg, data/, zookeeper.log),
broker-<id>/ (logs/, broker.log = stderr, broker.out = stdout).
"""

from __future__ import annotations

import argparse
import json
import signal
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from kbroker.cli.common import CommandError
from kbroker.fsutil import write_atomically
from kbroker.launcher import BrokerCluster, LaunchError, pid_runs, signal_pid, wait_pid_exit
from kbroker.metadata.zookeeper_process import ZooKeeperNotFound
from kbroker.ports import free_port, port_free

STATE_FILE = "cluster.json"
DEFAULT_DATA_DIR = Path(tempfile.gettempdir()) / "kbroker-cluster"
READY_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 30.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    start = actions.add_parser("start", help="start ZooKeeper and N brokers in the background")
    start.add_argument("--brokers", type=int, default=3, help="number of brokers (default 3)")
    start.add_argument("--data-dir", default=str(DEFAULT_DATA_DIR),
                       help=f"where everything goes (default {DEFAULT_DATA_DIR})")
    start.add_argument("--base-port", type=int, default=9092,
                       help="port of broker 1; broker N listens on base+N-1 (default 9092; 0: any free ports)")
    start.add_argument("--zookeeper-port", type=int, default=0, help="ZooKeeper's client port (default: a free one)")
    start.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                       help="a broker property for every broker; repeatable")
    stop = actions.add_parser("stop", help="stop the brokers, then ZooKeeper")
    stop.add_argument("--data-dir", default=str(DEFAULT_DATA_DIR),
                      help=f"the cluster's directory (default {DEFAULT_DATA_DIR})")


def run(args: argparse.Namespace) -> int:
    data_dir = Path(args.data_dir).resolve()
    if args.action == "start":
        return start(data_dir, args.brokers, args.base_port, args.zookeeper_port, args.override)
    return stop(data_dir)


@dataclass
class ProcessRecord:
    """A process of the cluster, and what identifies it (pids get reused)."""

    pid: int
    marker: str  # a string its command line contains: its config or log dir

    def alive(self) -> bool:
        return pid_runs(self.pid, self.marker)


@dataclass
class BrokerRecord(ProcessRecord):
    broker_id: int
    port: int
    directory: str


@dataclass
class ClusterState:
    zookeeper_connect: str
    zookeeper: ProcessRecord
    brokers: list[BrokerRecord]

    @property
    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{b.port}" for b in self.brokers)

    def save(self, path: Path) -> None:
        document = {"zookeeper_connect": self.zookeeper_connect, "bootstrap_servers": self.bootstrap,
                    "zookeeper": asdict(self.zookeeper), "brokers": [asdict(b) for b in self.brokers]}
        # A development cluster's state: replaced whole, but not worth an fsync.
        write_atomically(path, json.dumps(document, indent=1) + "\n", durable=False)

    @classmethod
    def of(cls, cluster: BrokerCluster) -> ClusterState:
        zookeeper = cluster.zookeeper
        assert zookeeper.pid is not None
        brokers = []
        for broker_id, node in cluster.nodes.items():
            assert node.pid is not None
            brokers.append(BrokerRecord(node.pid, str(node.log_dir), broker_id, node.port, str(node.data_dir)))
        return cls(zookeeper.connect, ProcessRecord(zookeeper.pid, str(zookeeper.config_path)), brokers)

    @classmethod
    def load(cls, path: Path) -> ClusterState:
        document: dict[str, Any] = json.loads(path.read_text())
        return cls(document["zookeeper_connect"], ProcessRecord(**document["zookeeper"]),
                   [BrokerRecord(**b) for b in document["brokers"]])


# -- start ------------------------------------------------------------------------------------------


def start(data_dir: Path, count: int, base_port: int, zookeeper_port: int, overrides: list[str]) -> int:
    if count < 1:
        raise CommandError("--brokers must be at least 1")
    state_path = data_dir / STATE_FILE
    if state_path.exists():
        running = [p.pid for p in _processes(ClusterState.load(state_path)) if p.alive()]
        if running:
            raise CommandError(f"a cluster from {data_dir} is running (pids {running}): "
                               f"stop it first with `kbroker cluster stop --data-dir {data_dir}`")
    ports = [free_port() for _ in range(count)] if base_port == 0 else list(range(base_port, base_port + count))
    taken = [port for port in ports if not port_free(port)]
    if taken:
        raise CommandError(f"port(s) {taken} are in use: choose another --base-port (0 picks free ones)")

    cluster = BrokerCluster(data_dir, count, ports, zookeeper_port, _settings(overrides),
                            start_timeout_s=READY_TIMEOUT_S, detach=True)
    try:
        # Recorded as soon as all run, so that `stop` finds whatever was started.
        cluster.start(spawned=lambda started: ClusterState.of(started).save(state_path))
    except ZooKeeperNotFound as e:
        raise CommandError(str(e)) from None
    except LaunchError as e:
        state_path.unlink(missing_ok=True)
        raise CommandError(str(e)) from None
    except BaseException:
        state_path.unlink(missing_ok=True)
        raise
    state = ClusterState.of(cluster)

    print(f"ZooKeeper  {cluster.zookeeper.connect} (pid {cluster.zookeeper.pid})")
    for broker in state.brokers:
        print(f"broker {broker.broker_id}   127.0.0.1:{broker.port} (pid {broker.pid}), logs in {broker.directory}")
    print(f"bootstrap servers: {state.bootstrap}")
    print(f"zookeeper.connect: {cluster.zookeeper.connect}")
    print(f"stop with: kbroker cluster stop --data-dir {data_dir}")
    return 0


def _settings(overrides: list[str]) -> dict[str, str]:
    """--override KEY=VALUE arguments; a later one for the same key wins, as with `kbroker start`."""
    settings = {}
    for override in overrides:
        key, equals, value = override.partition("=")
        if not equals or not key.strip():
            raise CommandError(f"--override {override!r} is not key=value")
        settings[key.strip()] = value.strip()
    return settings


# -- stop -------------------------------------------------------------------------------------------


def stop(data_dir: Path) -> int:
    state_path = data_dir / STATE_FILE
    if not state_path.exists():
        raise CommandError(f"no cluster to stop: {state_path} does not exist")
    state = ClusterState.load(state_path)
    # Brokers first, all at once: each flushes its logs and closes its ZooKeeper session, which
    # needs ZooKeeper still up.
    running = [b for b in state.brokers if b.alive()]
    for broker in running:
        signal_pid(broker.pid, signal.SIGTERM)
    killed = [b.broker_id for b in running if not wait_pid_exit(b.pid, STOP_TIMEOUT_S, kill=True)]
    if state.zookeeper.alive():
        signal_pid(state.zookeeper.pid, signal.SIGTERM)
        wait_pid_exit(state.zookeeper.pid, STOP_TIMEOUT_S, kill=True)
    state_path.unlink()
    print(f"stopped {len(running)} broker(s) and ZooKeeper"
          + (f"; broker(s) {killed} did not stop within {STOP_TIMEOUT_S:g} s and were killed" if killed else ""))
    return 0


def _processes(state: ClusterState) -> list[ProcessRecord]:
    return [state.zookeeper, *state.brokers]
