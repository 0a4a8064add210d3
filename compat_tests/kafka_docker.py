"""Apache Kafka in a Docker container: the reference the compatibility scenarios also run against.

One single-node KRaft broker (`apache/kafka`, the project's official image) per test session,
driven through the `docker` command line. Its PLAINTEXT listener is published on a free port of
127.0.0.1 and advertised at that address, so clients on this machine reach it exactly as they
reach a `kbroker start` process.

Where no Docker engine is reachable (no `docker` command, a daemon that does not answer, an
image that cannot be pulled) `reference_status()` says why, and the tests skip with that reason.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

KAFKA_IMAGE = "apache/kafka:3.9.1"
NODE_ID = 1
# The image formats its storage with CLUSTER_ID; a fixed one lets the tests know it in advance.
CLUSTER_ID = "a2Jyb2tlci1jb21wYXQtMQ"  # base64url of b"kbroker-compat-1"
CONTAINER_PORT = 9092
CONTROLLER_PORT = 9093
LABEL = "kbroker.compat-tests"
READY_TIMEOUT_S = 180.0
PULL_TIMEOUT_S = 900.0
# Set to 1 where Docker must be there (a CI job with an engine): the Kafka side then fails
# instead of skipping.
REQUIRE_ENV = "KBROKER_COMPAT_REQUIRE_KAFKA"
FIND_COORDINATOR = 10

Runner = Callable[..., subprocess.CompletedProcess[str]]


def kafka_env(host_port: int, node_id: int = NODE_ID, cluster_id: str = CLUSTER_ID) -> dict[str, str]:
    """The container's environment: a combined broker+controller node advertised at 127.0.0.1:host_port.

    The image turns KAFKA_X_Y into the server property x.y, and with any such variable set it
    uses only those (not the tarball's server.properties), so everything not listed keeps
    Kafka's built-in default.
    """
    return {
        "CLUSTER_ID": cluster_id,
        "KAFKA_NODE_ID": str(node_id),
        "KAFKA_PROCESS_ROLES": "broker,controller",
        "KAFKA_LISTENERS": f"PLAINTEXT://:{CONTAINER_PORT},CONTROLLER://:{CONTROLLER_PORT}",
        "KAFKA_ADVERTISED_LISTENERS": f"PLAINTEXT://127.0.0.1:{host_port}",
        "KAFKA_CONTROLLER_LISTENER_NAMES": "CONTROLLER",
        "KAFKA_LISTENER_SECURITY_PROTOCOL_MAP": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
        "KAFKA_CONTROLLER_QUORUM_VOTERS": f"{node_id}@localhost:{CONTROLLER_PORT}",
        # One broker: the internal topics cannot have Kafka's default of three replicas.
        "KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR": "1",
        "KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR": "1",
        "KAFKA_TRANSACTION_STATE_LOG_MIN_ISR": "1",
        # Groups form at once, as on the kbroker side (group.initial.rebalance.delay.ms=0).
        "KAFKA_GROUP_INITIAL_REBALANCE_DELAY_MS": "0",
    }


def docker_run_command(docker: str, name: str, host_port: int, image: str = KAFKA_IMAGE,
                       node_id: int = NODE_ID, cluster_id: str = CLUSTER_ID) -> list[str]:
    """`docker run` for the reference broker. No --rm: a container that dies at start keeps
    its logs until `docker rm -f` removes it."""
    command = [docker, "run", "--detach", "--name", name, "--label", f"{LABEL}=1",
               "--publish", f"127.0.0.1:{host_port}:{CONTAINER_PORT}"]
    for key, value in kafka_env(host_port, node_id, cluster_id).items():
        command += ["--env", f"{key}={value}"]
    return [*command, image]


def _last_line(text: str, fallback: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else fallback


@dataclass(frozen=True)
class ReferenceStatus:
    """Whether the Kafka reference can run here; `reason` says why not (the skip message)."""

    docker: str | None
    reason: str | None = None

    @property
    def available(self) -> bool:
        return self.docker is not None and self.reason is None


def engine_status(which: Callable[[str], str | None] = shutil.which, run: Runner = subprocess.run) -> ReferenceStatus:
    """Is there a docker command, and does its engine answer?"""
    docker = which("docker")
    if docker is None:
        return ReferenceStatus(None, "no docker command on PATH: the Apache Kafka side is skipped")
    try:
        result = run([docker, "info", "--format", "{{.ServerVersion}}"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired) as e:
        return ReferenceStatus(docker, f"Docker engine not reachable ({e}): the Apache Kafka side is skipped")
    if result.returncode != 0 or not result.stdout.strip():
        reason = _last_line(result.stderr, f"docker info exited with {result.returncode}")
        return ReferenceStatus(docker, f"Docker engine not reachable ({reason}): the Apache Kafka side is skipped")
    return ReferenceStatus(docker)


def ensure_image(docker: str, image: str = KAFKA_IMAGE, run: Runner = subprocess.run) -> str | None:
    """Pull the image unless present; None when it is there, else why it is not."""
    if run([docker, "image", "inspect", image], capture_output=True, text=True, timeout=60).returncode == 0:
        return None
    try:
        result = run([docker, "pull", image], capture_output=True, text=True, timeout=PULL_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return f"pulling {image} took over {PULL_TIMEOUT_S:.0f}s: the Apache Kafka side is skipped"
    if result.returncode != 0:
        reason = _last_line(result.stderr, f"docker pull exited with {result.returncode}")
        return f"could not pull {image} ({reason}): the Apache Kafka side is skipped"
    return None


def reference_status(image: str = KAFKA_IMAGE) -> ReferenceStatus:
    """The engine probe, then the image: everything short of starting the broker."""
    status = engine_status()
    if not status.available:
        return status
    assert status.docker is not None
    problem = ensure_image(status.docker, image)
    return ReferenceStatus(status.docker, problem)


def skip_unless_available(status: ReferenceStatus) -> str:
    """The docker command when the reference can run; else skip with the reason (fail when
    KBROKER_COMPAT_REQUIRE_KAFKA=1, for machines where Docker must be there)."""
    if status.available:
        assert status.docker is not None
        return status.docker
    reason = status.reason or "the Apache Kafka reference is unavailable"
    if os.environ.get(REQUIRE_ENV) == "1":
        pytest.fail(f"{REQUIRE_ENV}=1 but {reason}")
    pytest.skip(reason)


@dataclass
class KafkaContainer:
    """One `apache/kafka` container. `start()` returns once the broker serves metadata."""

    docker: str
    host_port: int
    image: str = KAFKA_IMAGE
    node_id: int = NODE_ID
    cluster_id: str = CLUSTER_ID
    name: str = field(default_factory=lambda: f"kbroker-compat-kafka-{uuid.uuid4().hex[:10]}")
    started: bool = False

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.host_port}"

    def _docker(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return subprocess.run([self.docker, *args], capture_output=True, text=True, timeout=timeout)

    def start(self, ready_timeout_s: float = READY_TIMEOUT_S) -> KafkaContainer:
        command = docker_run_command(self.docker, self.name, self.host_port, self.image, self.node_id,
                                     self.cluster_id)
        result = subprocess.run(command, capture_output=True, text=True, timeout=120)
        self.started = True  # a failed run may still have created the container: remove it either way
        if result.returncode != 0:
            self.remove()
            raise RuntimeError(f"docker run failed ({result.returncode}): {result.stderr.strip()}")
        try:
            self._wait_ready(ready_timeout_s)
        except BaseException:
            self.remove()
            raise
        return self

    def running(self) -> bool:
        result = self._docker("inspect", "--format", "{{.State.Running}}", self.name)
        return result.returncode == 0 and result.stdout.strip() == "true"

    def logs(self, lines: int = 80) -> str:
        result = self._docker("logs", "--tail", str(lines), self.name)
        return (result.stdout + result.stderr).strip()

    def _wait_ready(self, timeout_s: float) -> None:
        """Until `reference_ready` holds (each Metadata attempt waits up to 2 s for an answer)."""
        deadline = time.monotonic() + timeout_s
        while True:
            if not self.running():
                raise RuntimeError(f"the Kafka container {self.name} stopped while starting:\n{self.logs()}")
            ready, why = reference_ready(self.bootstrap, self.node_id)
            if ready:
                return
            if time.monotonic() >= deadline:
                raise RuntimeError(f"Kafka in {self.name} not ready after {timeout_s:.0f}s ({why}):\n{self.logs()}")
            time.sleep(0.2)  # between polls of the condition

    def remove(self) -> None:
        if self.started:
            self._docker("rm", "--force", "--volumes", self.name)
            self.started = False


def reference_ready(bootstrap: str, node_id: int) -> tuple[bool, str]:
    """Is the reference broker ready for the scenarios, and if not why: it answers Metadata
    listing itself, and finds its group and transaction coordinators. Kafka creates
    __consumer_offsets and __transaction_state on the first FindCoordinator and answers
    COORDINATOR_NOT_AVAILABLE meanwhile: asking now creates them, so the first group or
    transactional scenario does not spend its max.block.ms waiting for them."""
    listed, why = broker_listed(bootstrap, node_id)
    if not listed:
        return False, why
    missing = coordinators_missing(bootstrap)
    return (False, f"no coordinator yet for {missing}") if missing else (True, "")


def broker_listed(bootstrap: str, node_id: int, timeout_s: float = 2.0) -> tuple[bool, str]:
    """Does the broker at `bootstrap` answer Metadata with itself as a live broker?"""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap, "socket.connection.setup.timeout.ms": 1000,
                         "log_level": 0})
    try:
        metadata: Any = admin.list_topics(timeout=timeout_s)
    except KafkaException as e:
        return False, str(e)
    if node_id not in metadata.brokers:
        return False, f"metadata lists brokers {sorted(metadata.brokers)}, not {node_id}"
    return True, ""


def coordinators_missing(bootstrap: str) -> list[str]:
    """The coordinator kinds (group, transaction) that FindCoordinator does not find yet."""
    from tests.rawclient import RawClient

    missing = []
    with RawClient(bootstrap) as client:
        for key_type, kind in ((0, "group"), (1, "transaction")):
            response = client.request(FIND_COORDINATOR, 4, {"key_type": key_type, "coordinator_keys": ["kbroker-compat"]})
            if response.coordinators[0].error_code != 0:
                missing.append(kind)
    return missing
