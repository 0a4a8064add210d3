"""kbroker/launcher.py's own edges: failed starts, a detached broker's output, a stop deadline.

Real processes: `kbroker start` where a broker is needed, and small Python programs in its
place (`start_command`) where a broker cannot be made to misbehave on purpose.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from kbroker.launcher import BrokerProcess, LaunchError

# Stands in for `kbroker start`: says it started, then ignores SIGTERM (the extra arguments
# the launcher adds end up in sys.argv, unread).
STUBBORN = [sys.executable, "-c",
            "import signal, time\n"
            "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
            "print('kbroker 0 started', flush=True)\n"
            "time.sleep(120)\n"]
SILENT = [sys.executable, "-c", "import time; time.sleep(120)"]


def test_a_broker_that_exits_while_starting_fails_the_start_with_its_log(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path, overrides={"num.partitions": "zero"})
    with pytest.raises(LaunchError, match="^broker exited with 1:\nerror: invalid value 'zero' for num.partitions"):
        broker.start()
    assert not broker.alive


def test_a_detached_broker_is_ready_by_this_runs_output_only(tmp_path: Path) -> None:
    """broker.out is appended to: an earlier run's ready line must not pass for this one's."""
    tmp_path.mkdir(exist_ok=True)
    (tmp_path / "broker.out").write_text("kbroker 0 started (cluster x) on PLAINTEXT://127.0.0.1:1\n")
    broker = BrokerProcess(tmp_path, overrides={"num.partitions": "zero"}, detach=True)
    with pytest.raises(LaunchError, match="^broker exited with 1:"):
        broker.start()


def test_a_detached_broker_serves_and_stops_cleanly(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path, detach=True).start()
    try:
        assert "started" in (tmp_path / "broker.out").read_text()
        assert broker.proc is not None and broker.proc.stdout is None  # nothing holds it to us
    finally:
        assert broker.stop() == 0, broker.log_tail()
    assert (broker.log_dir / ".kafka_cleanshutdown").exists()


def test_a_broker_that_never_gets_ready_is_killed_at_the_deadline(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path, start_command=SILENT, start_timeout_s=0.5)
    with pytest.raises(LaunchError, match="^broker not ready after 0.5 s"):
        broker.start()
    assert not broker.alive


def test_a_broker_that_ignores_sigterm_is_killed_at_the_stop_deadline(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path, start_command=STUBBORN).start()
    with pytest.raises(LaunchError, match="^broker did not stop within 0.5 s and was killed$"):
        broker.stop(timeout_s=0.5)
    assert not broker.alive
    assert broker.proc is not None and broker.proc.returncode == -9
