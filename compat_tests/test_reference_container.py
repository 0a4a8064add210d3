"""The Apache Kafka reference container (KBROKER_COMPAT_KAFKA=docker), without a Docker engine:
the command line it is started with, and the reasons the Kafka side skips."""

from __future__ import annotations

import base64
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from compat_tests import kafka_docker
from compat_tests.conftest import Target
from compat_tests.kafka_docker import (
    CLUSTER_ID,
    KAFKA_IMAGE,
    KafkaContainer,
    ReferenceStatus,
    broker_listed,
    coordinators_missing,
    docker_run_command,
    engine_status,
    ensure_image,
    kafka_env,
    reference_ready,
    skip_unless_available,
)
from tests.brokers import free_port


def env_of(command: list[str]) -> dict[str, str]:
    pairs = [command[i + 1] for i, arg in enumerate(command) if arg == "--env"]
    return dict(pair.split("=", 1) for pair in pairs)


def test_run_command_publishes_the_advertised_port_on_loopback() -> None:
    command = docker_run_command("/usr/bin/docker", "ref-1", 41234)
    assert command[:4] == ["/usr/bin/docker", "run", "--detach", "--name"]
    assert command[4] == "ref-1"
    assert command[-1] == KAFKA_IMAGE == "apache/kafka:3.9.1"
    assert "--rm" not in command, "a container that dies at start keeps its logs"
    publish = command[command.index("--publish") + 1]
    assert publish == "127.0.0.1:41234:9092"
    assert env_of(command)["KAFKA_ADVERTISED_LISTENERS"] == "PLAINTEXT://127.0.0.1:41234"
    assert command[command.index("--label") + 1] == f"{kafka_docker.LABEL}=1"


def test_environment_is_a_single_kraft_node_set_for_fast_groups() -> None:
    env = kafka_env(5555)
    assert env == {
        "CLUSTER_ID": CLUSTER_ID,
        "KAFKA_NODE_ID": "1",
        "KAFKA_PROCESS_ROLES": "broker,controller",
        "KAFKA_LISTENERS": "PLAINTEXT://:9092,CONTROLLER://:9093",
        "KAFKA_ADVERTISED_LISTENERS": "PLAINTEXT://127.0.0.1:5555",
        "KAFKA_CONTROLLER_LISTENER_NAMES": "CONTROLLER",
        "KAFKA_LISTENER_SECURITY_PROTOCOL_MAP": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
        "KAFKA_CONTROLLER_QUORUM_VOTERS": "1@localhost:9093",
        "KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR": "1",
        "KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR": "1",
        "KAFKA_TRANSACTION_STATE_LOG_MIN_ISR": "1",
        "KAFKA_GROUP_INITIAL_REBALANCE_DELAY_MS": "0",
    }
    # The node id is the controller quorum's voter too.
    assert kafka_env(5555, node_id=3)["KAFKA_CONTROLLER_QUORUM_VOTERS"] == "3@localhost:9093"
    assert env_of(docker_run_command("docker", "n", 5555)) == env


def test_cluster_id_is_a_valid_uuid() -> None:
    # kafka-storage format takes a Uuid: 16 bytes in unpadded URL-safe base64 (22 characters).
    assert len(CLUSTER_ID) == 22
    assert len(base64.urlsafe_b64decode(CLUSTER_ID + "==")) == 16


def fake_run(results: dict[str, Any]) -> Callable[..., subprocess.CompletedProcess[str]]:
    """A subprocess.run stand-in answering by the docker subcommand (or raising what it holds)."""
    calls: list[list[str]] = []

    def run(args: list[str], **_kwargs: Any) -> subprocess.CompletedProcess[str]:
        calls.append(args)
        outcome = results[args[1]]
        if isinstance(outcome, BaseException):
            raise outcome
        code, out, err = outcome
        return subprocess.CompletedProcess(args, code, out, err)

    run.calls = calls  # type: ignore[attr-defined]
    return run


def test_no_docker_command_skips_with_that_reason() -> None:
    status = engine_status(which=lambda _name: None, run=fake_run({}))
    assert status == ReferenceStatus(None, "no docker command on PATH: the Apache Kafka side is skipped")
    assert not status.available


def test_unreachable_engine_skips_with_the_daemon_message() -> None:
    message = "Cannot connect to the Docker daemon at unix:///var/run/docker.sock. Is the docker daemon running?"
    run = fake_run({"info": (1, "\n", f"Client: Docker Engine\n\n{message}\n")})
    status = engine_status(which=lambda _name: "/usr/bin/docker", run=run)
    assert not status.available
    assert status.reason == f"Docker engine not reachable ({message}): the Apache Kafka side is skipped"
    assert run.calls == [["/usr/bin/docker", "info", "--format", "{{.ServerVersion}}"]]  # type: ignore[attr-defined]


def test_hanging_engine_skips_too() -> None:
    run = fake_run({"info": subprocess.TimeoutExpired(["docker", "info"], 20)})
    status = engine_status(which=lambda _name: "docker", run=run)
    assert not status.available
    assert status.reason is not None and status.reason.startswith("Docker engine not reachable (Command ")


def test_answering_engine_is_available() -> None:
    status = engine_status(which=lambda _name: "docker", run=fake_run({"info": (0, "27.3.1\n", "")}))
    assert status == ReferenceStatus("docker") and status.available


def test_image_present_is_not_pulled() -> None:
    run = fake_run({"image": (0, "[...]", "")})
    assert ensure_image("docker", run=run) is None
    assert [c[1] for c in run.calls] == ["image"]  # type: ignore[attr-defined]


def test_image_pull_failure_skips_with_the_pull_error() -> None:
    run = fake_run({"image": (1, "", "Error: No such image"),
                    "pull": (1, "", "Error response from daemon: Get \"https://registry-1.docker.io/v2/\": timeout\n")})
    reason = ensure_image("docker", run=run)
    assert reason == (f"could not pull {KAFKA_IMAGE} (Error response from daemon: Get "
                      "\"https://registry-1.docker.io/v2/\": timeout): the Apache Kafka side is skipped")
    assert [c[1:] for c in run.calls] == [["image", "inspect", KAFKA_IMAGE], ["pull", KAFKA_IMAGE]]  # type: ignore[attr-defined]


def test_image_pulled_when_missing() -> None:
    run = fake_run({"image": (1, "", "Error: No such image"), "pull": (0, "Status: Downloaded", "")})
    assert ensure_image("docker", run=run) is None


def test_this_machine_probe_matches_docker_info() -> None:
    """The real probe agrees with what `docker info` itself says here (engine or not)."""
    status = engine_status()
    if status.docker is None:
        assert status.reason is not None and "no docker command" in status.reason
        return
    info = subprocess.run([status.docker, "info", "--format", "{{.ServerVersion}}"], capture_output=True, text=True,
                          timeout=20)
    assert status.available == (info.returncode == 0 and bool(info.stdout.strip()))


def test_unavailable_reference_skips_or_fails_when_required(monkeypatch: pytest.MonkeyPatch) -> None:
    down = ReferenceStatus("docker", "engine gone: the Apache Kafka side is skipped")
    monkeypatch.delenv(kafka_docker.REQUIRE_ENV, raising=False)
    with pytest.raises(pytest.skip.Exception, match="^engine gone: the Apache Kafka side is skipped$"):
        skip_unless_available(down)
    monkeypatch.setenv(kafka_docker.REQUIRE_ENV, "1")
    with pytest.raises(pytest.fail.Exception, match=f"^{kafka_docker.REQUIRE_ENV}=1 but engine gone"):
        skip_unless_available(down)
    assert skip_unless_available(ReferenceStatus("/bin/docker")) == "/bin/docker"


def test_failed_docker_run_raises_with_the_error_and_removes_the_container(tmp_path: Path) -> None:
    calls = tmp_path / "calls"
    fake = tmp_path / "docker"
    fake.write_text(f"""#!/bin/sh
echo "$@" >> {calls}
if [ "$1" = run ]; then
  echo "docker: Error response from daemon: port is already allocated." >&2
  exit 125
fi
""")
    fake.chmod(0o755)
    container = KafkaContainer(str(fake), 45678, name="ref-test")
    with pytest.raises(RuntimeError, match="docker run failed \\(125\\): docker: Error response from daemon: port"):
        container.start(ready_timeout_s=5)
    lines = calls.read_text().splitlines()
    assert lines[0].startswith("run --detach --name ref-test ") and lines[0].endswith(KAFKA_IMAGE)
    assert lines[1:] == ["rm --force --volumes ref-test"]
    assert not container.started


def test_readiness_probes_against_a_running_broker(kbroker_target: Target) -> None:
    """The conditions the container start waits for, checked on kbroker (they are protocol-level)."""
    assert broker_listed(kbroker_target.bootstrap, kbroker_target.node_id) == (True, "")
    listed, why = broker_listed(kbroker_target.bootstrap, kbroker_target.node_id + 1)
    assert not listed and why == f"metadata lists brokers [{kbroker_target.node_id}], not {kbroker_target.node_id + 1}"
    assert coordinators_missing(kbroker_target.bootstrap) == []
    assert reference_ready(kbroker_target.bootstrap, kbroker_target.node_id) == (True, "")
    assert not reference_ready(kbroker_target.bootstrap, kbroker_target.node_id + 1)[0]


def test_readiness_probe_without_a_broker() -> None:
    listed, why = broker_listed(f"127.0.0.1:{free_port()}", 1, timeout_s=1.0)
    assert not listed and why
