"""The local Apache Kafka reference (kafka_local.py) without starting Kafka: where the distribution
comes from, when its absence skips or fails, which launcher the tests use, and the process's
life (a start that fails, a clean stop, no broker left behind when the test run dies).

The real distribution is exercised by every `[kafka]` test; these use stand-in scripts."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from compat_tests import kafka_local
from compat_tests.kafka_local import HOME_ENV, KIND_ENV, LocalKafka, kafka_home, reference_kind, required
from tests.brokers import PROJECT_ROOT
from tests.waiting import wait_until


def stand_in_home(tmp_path: Path, script: str) -> Path:
    """A directory whose run-single-node.sh is `script` (bash)."""
    home = tmp_path / "kafka-home"
    home.mkdir()
    launcher = home / "run-single-node.sh"
    launcher.write_text("#!/usr/bin/env bash\n" + script)
    launcher.chmod(0o755)
    return home


def process_gone(pid: int) -> bool:
    """Exited (or a zombie waiting for init to reap it)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return True
    return state in ("Z", "X")

def test_distribution_is_the_shared_one_or_the_named_one(tmp_path: Path) -> None:
    assert PROJECT_ROOT.parent / "shared" / "kafka-3.9.0" == kafka_local.DEFAULT_HOME
    named = stand_in_home(tmp_path, "exit 0\n")
    assert kafka_home({HOME_ENV: str(named)}) == (named, "")
    home, reason = kafka_home({HOME_ENV: str(tmp_path / "nowhere")})
    assert home is None and reason == f"no Kafka distribution with run-single-node.sh at {HOME_ENV}={tmp_path}/nowhere"


def test_absent_distribution_skips_here_and_fails_in_ci(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(HOME_ENV, str(tmp_path / "nowhere"))
    monkeypatch.delenv("CI", raising=False)
    monkeypatch.delenv(kafka_local.REQUIRE_ENV, raising=False)
    with pytest.raises(pytest.skip.Exception, match="^no Kafka distribution with run-single-node.sh at "):
        kafka_local.kafka_home_or_skip()
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="^the Apache Kafka reference is required here"):
        kafka_local.kafka_home_or_skip()
    assert required({kafka_local.REQUIRE_ENV: "1"}) and required({"CI": "True"}) and not required({})


def test_launcher_is_local_unless_docker_is_asked_for() -> None:
    assert reference_kind({}) == "local"
    assert reference_kind({KIND_ENV: ""}) == "local"
    assert reference_kind({KIND_ENV: "docker"}) == "docker"
    with pytest.raises(ValueError, match=f"^{KIND_ENV}=podman: expected one of local, docker$"):
        reference_kind({KIND_ENV: "podman"})


def test_port_and_the_controller_port_after_it_are_free() -> None:
    port = kafka_local.free_port_pair()
    for candidate in (port, port + 1):
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", candidate))


def test_command_passes_data_dir_port_and_overrides(tmp_path: Path) -> None:
    kafka = LocalKafka(tmp_path / "home", tmp_path / "data", port=41000, overrides={"num.partitions": "4"})
    assert kafka.command() == [str(tmp_path / "home" / "run-single-node.sh"), str(tmp_path / "data"), "41000",
                               "num.partitions=4"]
    assert kafka.bootstrap == "127.0.0.1:41000" and kafka.node_id == 0


def test_a_start_that_fails_reports_the_exit_and_the_log(tmp_path: Path) -> None:
    home = stand_in_home(tmp_path, 'echo "formatting $1 for port $2"\necho "no java here" >&2\nexit 3\n')
    kafka = LocalKafka(home, tmp_path / "data")
    with pytest.raises(RuntimeError, match="Kafka exited with 3 while starting:\nformatting .* for port [0-9]+\nno java"):
        kafka.start(ready_timeout_s=30)
    assert not kafka.alive


def test_a_start_that_never_serves_times_out_and_is_killed(tmp_path: Path) -> None:
    home = stand_in_home(tmp_path, "echo waiting\nexec sleep 600\n")
    kafka = LocalKafka(home, tmp_path / "data")
    with pytest.raises(RuntimeError, match="^Kafka not ready after 1s \\(.*\\):\nwaiting$"):
        kafka.start(ready_timeout_s=1)
    assert not kafka.alive


def test_stop_sends_sigterm(tmp_path: Path) -> None:
    marker, trapping = tmp_path / "terminated", tmp_path / "trapping"
    home = stand_in_home(tmp_path, f"trap 'touch {marker}; exit 0' TERM\ntouch {trapping}\n"
                                   "while true; do sleep 0.05; done\n")
    kafka = LocalKafka(home, tmp_path / "data")
    kafka.spawn()
    wait_until(trapping.exists, 10, "the stand-in broker to trap SIGTERM")
    assert kafka.alive
    assert kafka.stop(timeout=10) == 0
    assert marker.exists() and not kafka.alive


def test_the_broker_ends_when_the_test_run_is_killed(tmp_path: Path) -> None:
    """A run killed outright (no teardown) takes its Kafka with it: the child gets SIGTERM."""
    home = stand_in_home(tmp_path, "exec sleep 600\n")
    parent_code = (
        "import sys, time\n"
        "from pathlib import Path\n"
        "from compat_tests.kafka_local import LocalKafka\n"
        f"kafka = LocalKafka(Path({str(home)!r}), Path({str(tmp_path / 'data')!r}))\n"
        "kafka.spawn()\n"
        "print(kafka.proc.pid, flush=True)\n"
        "time.sleep(600)\n"
    )
    parent = subprocess.Popen([sys.executable, "-c", parent_code], stdout=subprocess.PIPE, text=True,
                              cwd=PROJECT_ROOT)
    assert parent.stdout is not None
    child = int(parent.stdout.readline())
    try:
        assert not process_gone(child)
        parent.send_signal(signal.SIGKILL)
        parent.wait()
        wait_until(lambda: process_gone(child), 10, "the broker to end with the killed test run")
    finally:
        if not process_gone(child):
            os.kill(child, signal.SIGKILL)
        parent.stdout.close()


def test_a_broker_started_from_a_worker_thread_outlives_the_thread(tmp_path: Path) -> None:
    """Linux's parent-death signal follows the thread that forked the child: a broker started by
    a pool thread (brokers started side by side) was killed the moment that thread ended."""
    home = stand_in_home(tmp_path, "exec sleep 600\n")
    kafka = LocalKafka(home, tmp_path / "data")
    starter = threading.Thread(target=kafka.spawn)
    starter.start()
    starter.join()
    try:
        assert kafka.proc is not None
        # A signal sent at the thread's end arrives at once: the broker must still run a second later.
        with pytest.raises(subprocess.TimeoutExpired):
            kafka.proc.wait(timeout=1)
    finally:
        kafka.kill()
