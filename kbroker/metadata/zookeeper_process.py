"""Run a real standalone ZooKeeper server: for kbroker/launcher.py's clusters and for the tests.

Debian's `zookeeper` package is what this looks for: its `/usr/share/java/zookeeper.jar`
names every jar it needs in its manifest, so `java -cp zookeeper.jar QuorumPeerMain zoo.cfg`
is all it takes (the package's `zkServer.sh` needs a `zkEnv.sh` and `/etc/zookeeper` settings
that a per-directory server does not want). An Apache release unpacked anywhere works too, with
`ZOOKEEPER_HOME` pointing at it. The server listens on 127.0.0.1 only, keeps everything under
its own directory, and has the admin HTTP server off (it would take port 8080).
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from kazoo.client import KazooClient

from kbroker.ports import free_port

DEBIAN_JAR = Path("/usr/share/java/zookeeper.jar")
# Debian's jar has no logging backend in its class path: without one ZooKeeper logs nothing.
DEBIAN_LOG_BACKEND = Path("/usr/share/java/slf4j-simple.jar")
MAIN_CLASS = "org.apache.zookeeper.server.quorum.QuorumPeerMain"
JVM_OPTIONS = [
    "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",  # small and quick to start
    "-Djava.awt.headless=true",
    "-Dzookeeper.admin.enableServer=false",
    "-Dorg.slf4j.simpleLogger.showDateTime=true",
]
START_TIMEOUT_S = 30.0
# The probe's "connection refused" warnings while the JVM starts are expected: keep them quiet.
_PROBE_LOG = logging.getLogger("kbroker.zookeeper.probe")
_PROBE_LOG.setLevel(logging.ERROR)
PORT_ATTEMPTS = 3


class ZooKeeperNotFound(Exception):
    """No ZooKeeper (or no Java) on this machine."""


@dataclass(frozen=True, slots=True)
class ZooKeeperInstall:
    java: str
    classpath: tuple[str, ...]


def find_zookeeper() -> ZooKeeperInstall:
    """Java and ZooKeeper's class path, or ZooKeeperNotFound saying what to install."""
    java_home = os.environ.get("JAVA_HOME")
    java = str(Path(java_home) / "bin" / "java") if java_home and (Path(java_home) / "bin" / "java").exists() \
        else shutil.which("java")
    home = os.environ.get("ZOOKEEPER_HOME")
    if home:
        jars = sorted(str(p) for p in [*Path(home).glob("zookeeper-*.jar"), *Path(home).glob("lib/*.jar")])
        if not jars:
            raise ZooKeeperNotFound(f"ZOOKEEPER_HOME={home} has no zookeeper jars (lib/*.jar)")
        classpath = tuple(jars)
    elif DEBIAN_JAR.exists():
        classpath = (str(DEBIAN_JAR),) + ((str(DEBIAN_LOG_BACKEND),) if DEBIAN_LOG_BACKEND.exists() else ())
    else:
        raise ZooKeeperNotFound(
            "ZooKeeper is not installed: `apt-get install zookeeper` (Debian/Ubuntu), or set ZOOKEEPER_HOME "
            "to an unpacked Apache ZooKeeper release"
        )
    if java is None:
        raise ZooKeeperNotFound("ZooKeeper needs Java: `apt-get install default-jre-headless`, or set JAVA_HOME")
    return ZooKeeperInstall(java, classpath)


@dataclass
class ZooKeeperServer:
    """One standalone ZooKeeper under `directory` (zoo.cfg, data/, zookeeper.log).

    `port` 0 picks a free one. `detach` starts it in its own session so it outlives the
    process that started it (`kbroker cluster start`)."""

    directory: Path
    port: int = 0
    install: ZooKeeperInstall | None = None
    proc: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def connect(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.directory / "zookeeper.log"

    @property
    def config_path(self) -> Path:
        return self.directory / "zoo.cfg"

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def config_text(self) -> str:
        return "\n".join([
            "tickTime=2000",
            f"dataDir={self.directory / 'data'}",
            f"clientPort={self.port}",
            "clientPortAddress=127.0.0.1",
            "admin.enableServer=false",
            "maxClientCnxns=0",
            "",
        ])

    def command(self) -> list[str]:
        install = self.install or find_zookeeper()
        return [install.java, *JVM_OPTIONS, "-cp", os.pathsep.join(install.classpath), MAIN_CLASS,
                str(self.config_path)]

    def start(self, timeout_s: float = START_TIMEOUT_S, detach: bool = False) -> ZooKeeperServer:
        """Start it and return once it answers a client; a free port that another process took
        meanwhile is replaced by a new one."""
        self.install = self.install or find_zookeeper()
        choose_port = self.port == 0
        attempt = 1
        while True:
            if choose_port:
                self.port = free_port()
            log_offset = self._spawn(detach)
            try:
                self.wait_serving(timeout_s)
                return self
            except RuntimeError:
                lost_port = not self.alive and "Address already in use" in self.log_text()[log_offset:]
                if not (choose_port and lost_port and attempt < PORT_ATTEMPTS):
                    self.stop()
                    raise
            attempt += 1

    def _spawn(self, detach: bool) -> int:
        """Start the JVM; returns where its output begins in the log."""
        (self.directory / "data").mkdir(parents=True, exist_ok=True)
        self.config_path.write_text(self.config_text())
        offset = len(self.log_text())
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                self.command(), stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                cwd=self.directory, start_new_session=detach,
            )
        return offset

    def wait_serving(self, timeout_s: float) -> None:
        """Wait for a ZooKeeper session to open (no four-letter words: `ruok` is not allowed
        by default since 3.5). Fails early if the process dies."""
        assert self.proc is not None
        client = KazooClient(
            # A short timeout: a JVM that accepts connections before it serves them leaves a
            # connect request unanswered, and kazoo waits the whole timeout before trying again.
            hosts=self.connect, timeout=1.0, logger=_PROBE_LOG,
            # Keep reconnect attempts close together while the JVM starts.
            connection_retry={"max_tries": -1, "delay": 0.05, "backoff": 1.5, "max_delay": 0.25},
        )
        connected = client.start_async()
        deadline = time.monotonic() + timeout_s
        try:
            # Wake up now and then only to notice a JVM that died (a port taken, a bad config).
            while not connected.wait(0.25):
                if self.proc.poll() is not None:
                    raise RuntimeError(f"ZooKeeper exited with {self.proc.returncode}:\n{self.log_tail()}")
                if time.monotonic() >= deadline:
                    raise RuntimeError(f"ZooKeeper not serving after {timeout_s:g} s:\n{self.log_tail()}")
            client.get_children("/")
        finally:
            client.stop()
            client.close()

    def stop(self, timeout_s: float = 15.0) -> int | None:
        """SIGTERM (ZooKeeper's data is durable on every write), SIGKILL if it lingers."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def log_tail(self, lines: int = 30) -> str:
        return "\n".join(self.log_text().splitlines()[-lines:])
