"""`kbroker cluster start --brokers N` / `kbroker cluster stop`: a local cluster for development.

`start` runs a ZooKeeper server and N `kbroker start` processes (broker ids 1..N, each with
its own log dir and port, `zookeeper.connect` set), detached so they outlive the command, and
records them in DIR/cluster.json; it returns once every broker has registered in ZooKeeper.
`stop` SIGTERMs the brokers (they flush and close their sessions), then ZooKeeper.

Layout of DIR: cluster.json, zookeeper/ (zoo.cfg, data/, zookeeper.log),
broker-<id>/ (logs/, broker.log = stderr, broker.out = stdout).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import select
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from kazoo.client import KazooClient
from kazoo.recipe.watchers import ChildrenWatch

from kbroker.cli.common import CommandError
from kbroker.fsutil import write_atomically
from kbroker.metadata.zk_store import BROKER_IDS_PATH
from kbroker.metadata.zookeeper_process import ZooKeeperNotFound, ZooKeeperServer, free_port

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
        return _alive(self.pid, self.marker)


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
    taken = [port for port in ports if not _port_free(port)]
    if taken:
        raise CommandError(f"port(s) {taken} are in use: choose another --base-port (0 picks free ones)")
    data_dir.mkdir(parents=True, exist_ok=True)

    zookeeper = ZooKeeperServer(data_dir / "zookeeper", port=zookeeper_port)
    try:
        zookeeper.start(detach=True)
    except ZooKeeperNotFound as e:
        raise CommandError(str(e)) from None
    except RuntimeError as e:
        raise CommandError(f"ZooKeeper did not start: {e}") from None
    assert zookeeper.proc is not None
    state = ClusterState(zookeeper.connect, ProcessRecord(zookeeper.proc.pid, str(zookeeper.config_path)), [])
    children: list[subprocess.Popen[bytes]] = [zookeeper.proc]
    try:
        for broker_id, port in enumerate(ports, start=1):
            directory = data_dir / f"broker-{broker_id}"
            proc = _spawn_broker(broker_id, port, directory, zookeeper.connect, overrides)
            children.append(proc)
            state.brokers.append(BrokerRecord(proc.pid, str(directory / "logs"), broker_id, port, str(directory)))
            state.save(state_path)  # at once, so `stop` finds whatever was started
        _wait_registered(zookeeper.connect, state.brokers, children[1:])
    except BaseException:
        for proc in reversed(children):
            _terminate_child(proc)
        state_path.unlink(missing_ok=True)
        raise
    state.save(state_path)

    print(f"ZooKeeper  {zookeeper.connect} (pid {zookeeper.proc.pid})")
    for broker in state.brokers:
        print(f"broker {broker.broker_id}   127.0.0.1:{broker.port} (pid {broker.pid}), logs in {broker.directory}")
    print(f"bootstrap servers: {state.bootstrap}")
    print(f"zookeeper.connect: {zookeeper.connect}")
    print(f"stop with: kbroker cluster stop --data-dir {data_dir}")
    return 0


def _spawn_broker(broker_id: int, port: int, directory: Path, zookeeper_connect: str,
                  overrides: list[str]) -> subprocess.Popen[bytes]:
    directory.mkdir(parents=True, exist_ok=True)
    settings = [f"broker.id={broker_id}", f"listeners=PLAINTEXT://127.0.0.1:{port}",
                f"log.dirs={directory / 'logs'}", f"zookeeper.connect={zookeeper_connect}", *overrides]
    command = [sys.executable, "-m", "kbroker.cli.main", "start"]
    for setting in settings:
        command += ["--override", setting]
    with open(directory / "broker.out", "ab") as out, open(directory / "broker.log", "ab") as err:
        return subprocess.Popen(
            command, stdin=subprocess.DEVNULL, stdout=out, stderr=err, start_new_session=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )


def _wait_registered(connect: str, brokers: list[BrokerRecord], procs: list[subprocess.Popen[bytes]]) -> None:
    """Until every broker's ephemeral znode exists: a broker registers once it listens."""
    expected = {str(b.broker_id) for b in brokers}
    all_registered = threading.Event()

    def on_brokers(ids: list[str]) -> None:
        if expected <= set(ids):
            all_registered.set()

    client = KazooClient(connect)
    client.start(timeout=15)
    try:
        client.ensure_path(BROKER_IDS_PATH)  # a watch on a path that does not exist yet would stop
        ChildrenWatch(client, BROKER_IDS_PATH, on_brokers)
        deadline = time.monotonic() + READY_TIMEOUT_S
        # Wakes up now and then only to notice a broker that exited (bad override, port taken).
        while not all_registered.wait(0.25):
            for broker, proc in zip(brokers, procs, strict=True):
                if proc.poll() is not None:
                    raise CommandError(f"broker {broker.broker_id} exited with {proc.returncode}:\n"
                                       f"{_tail(Path(broker.directory) / 'broker.log')}")
            if time.monotonic() > deadline:
                raise CommandError(f"brokers not registered after {READY_TIMEOUT_S:g} s; see {brokers[0].directory}/..")
    finally:
        client.stop()
        client.close()


def _port_free(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _terminate_child(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


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
        _signal(broker.pid, signal.SIGTERM)
    killed = [b.broker_id for b in running if not _wait_exit(b.pid, STOP_TIMEOUT_S, kill=True)]
    if state.zookeeper.alive():
        _signal(state.zookeeper.pid, signal.SIGTERM)
        _wait_exit(state.zookeeper.pid, STOP_TIMEOUT_S, kill=True)
    state_path.unlink()
    print(f"stopped {len(running)} broker(s) and ZooKeeper"
          + (f"; broker(s) {killed} did not stop within {STOP_TIMEOUT_S:g} s and were killed" if killed else ""))
    return 0


def _processes(state: ClusterState) -> list[ProcessRecord]:
    return [state.zookeeper, *state.brokers]


def _signal(pid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signum)


def _wait_exit(pid: int, timeout_s: float, kill: bool) -> bool:
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
            _signal(pid, signal.SIGKILL)
            poller.poll(STOP_TIMEOUT_S * 1000)
        return False
    finally:
        os.close(fd)


def _alive(pid: int, marker: str) -> bool:
    """Whether `pid` runs and is still the process we started (its command line names `marker`);
    a zombie has ended."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        status = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    state = status.rsplit(")", 1)[-1].split()[0] if ")" in status else ""
    return state != "Z" and marker in cmdline


def _tail(path: Path, lines: int = 20) -> str:
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:]) if path.exists() else ""
