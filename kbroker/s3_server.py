"""A real S3-compatible server on this machine, for the tests and `kbroker bench archive`: moto's
standalone server (`moto[server]`, installed with the test extra) in a child process."""

from __future__ import annotations

import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from types import TracebackType
from typing import IO, Self

from kbroker.ports import free_port

START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 10.0
# Each poll of a starting server: it either answers at once or refuses at once.
POLL_TIMEOUT_S = 1.0
POLL_INTERVAL_S = 0.05

# Any credentials do: moto checks none, and explicit ones keep boto3 from looking for real
# ones (environment, ~/.aws, the instance metadata service) in the tests.
ACCESS_KEY_ID = "testing"
SECRET_ACCESS_KEY = "testing"


class S3Server:
    """`python -m moto.server` on 127.0.0.1, on a free port that `stop()` and `start()` keep.

    moto 5's entry point is the module `moto.server` (also the `moto_server` script; the
    package `moto.moto_server` only holds its WSGI app): werkzeug's development server over
    every mocked service, S3 among them, which answers path-style bucket addresses.

    Its state lives in the process's memory: a stopped server forgets every bucket and object,
    so a restarted one starts empty (an outage test recreates its bucket). moto has no
    persistence option; the nearest is its recorder (MOTO_ENABLE_RECORDING and the
    /moto-api/recorder/ endpoints), which logs requests to a file to be replayed on demand.
    """

    def __init__(self, log_path: Path, port: int | None = None) -> None:
        self.log_path = log_path
        self.port = port or free_port()
        self._proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def start(self) -> Self:
        """Start the server (again, after `stop()`) and return once it answers HTTP."""
        if self.running:
            raise RuntimeError(f"the S3 server on port {self.port} is running already")
        self._log = self.log_path.open("ab")
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
            stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT)
        try:
            self._wait_answering()
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_answering(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while not self._answers():
            if time.monotonic() > deadline:
                raise RuntimeError(f"the S3 server on port {self.port} did not answer within {START_TIMEOUT_S} s")
            time.sleep(POLL_INTERVAL_S)

    def _answers(self) -> bool:
        """Whether the server answers a GET (any status); raises if its process has ended,
        e.g. because another process took the port."""
        if self._proc is None or self._proc.poll() is not None:
            code = None if self._proc is None else self._proc.returncode
            raise RuntimeError(f"the S3 server exited ({code}) while starting; its log:\n{self.log_tail()}")
        try:
            with urllib.request.urlopen(self.endpoint, timeout=POLL_TIMEOUT_S):
                return True
        except urllib.error.HTTPError:
            return True  # an error status is an answer all the same
        except OSError:  # refused (not listening yet), or a timeout
            return False

    def stop(self) -> None:
        """Terminate the server (SIGTERM; SIGKILL if it lingers) and wait for its exit, which
        frees the port: connections are refused until `start()`."""
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if self._log is not None:
            self._log.close()
            self._log = None

    def log_tail(self, lines: int = 40) -> str:
        if not self.log_path.exists():
            return ""
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()
