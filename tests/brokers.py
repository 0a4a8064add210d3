"""Start and stop real broker processes for tests."""

from __future__ import annotations

import os
import select
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

READY_MARKER = "started"
# How the broker's log shows an answer it could not encode because a handler put a key in it
# that no version of the message has (see protocol.primitives.UnknownFieldError).
UNKNOWN_FIELD_MARKER = "UnknownFieldError: "
START_TIMEOUT_S = 30.0
PROJECT_ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class BrokerProcess:
    """A `kbroker start` child process with its own data directory and port."""

    data_dir: Path
    port: int = field(default_factory=free_port)
    overrides: dict[str, str] = field(default_factory=dict)
    launcher: list[str] | None = None  # another way to run `kbroker start` (e.g. scripts/start.sh)
    start_timeout_s: float = START_TIMEOUT_S
    max_open_files: int | None = None  # RLIMIT_NOFILE of the broker process, for descriptor-exhaustion tests
    proc: subprocess.Popen[str] | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def log_dir(self) -> Path:
        return self.data_dir / "logs"

    @property
    def stderr_path(self) -> Path:
        return self.data_dir / "broker.log"

    def command(self) -> list[str]:
        settings = {
            "listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
            "log.dirs": str(self.log_dir),
            **self.overrides,
        }
        args = list(self.launcher) if self.launcher else [sys.executable, "-m", "kbroker.cli.main", "start"]
        for key, value in settings.items():
            args += ["--override", f"{key}={value}"]
        return args

    def start(self) -> BrokerProcess:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        stderr = open(self.stderr_path, "a")  # noqa: SIM115 - owned by the child for its lifetime
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        self.proc = subprocess.Popen(
            self.command(), stdout=subprocess.PIPE, stderr=stderr, text=True, cwd=PROJECT_ROOT, env=env,
            preexec_fn=self._limit_open_files if self.max_open_files else None,
        )
        stderr.close()
        self._wait_ready()
        return self

    def _limit_open_files(self) -> None:
        import resource

        assert self.max_open_files is not None
        resource.setrlimit(resource.RLIMIT_NOFILE, (self.max_open_files, self.max_open_files))

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def _wait_ready(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        deadline = time.monotonic() + self.start_timeout_s
        while time.monotonic() < deadline:
            ready, _, _ = select.select([self.proc.stdout], [], [], 0.2)
            if ready:
                line = self.proc.stdout.readline()
                if READY_MARKER in line:
                    return
            if self.proc.poll() is not None:
                raise RuntimeError(f"broker exited with {self.proc.returncode}:\n{self.log_tail()}")
        self.kill()
        raise RuntimeError(f"broker not ready after {self.start_timeout_s}s:\n{self.log_tail()}")

    def log_text(self) -> str:
        return self.stderr_path.read_text() if self.stderr_path.exists() else ""

    def unknown_field_errors(self) -> list[str]:
        """Answers this broker could not encode for a misspelt or stray key: each is a handler
        bug that a client only saw as UNKNOWN_SERVER_ERROR, which a test may not notice."""
        return [line for line in self.log_text().splitlines() if UNKNOWN_FIELD_MARKER in line]

    def log_tail(self, lines: int = 40) -> str:
        """The end of the log, where a failed start says why (a whole log of restarts is too long
        for a test report)."""
        return "\n".join(self.log_text().splitlines()[-lines:])

    def stop(self, timeout: float = 30.0) -> int:
        """Clean shutdown with SIGTERM; returns the exit status."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout)

    def kill(self) -> None:
        """kill -9: no flush, no checkpoints."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def restart(self) -> BrokerProcess:
        if self.proc is not None and self.proc.poll() is None:
            self.stop()
        return self.start()

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None
