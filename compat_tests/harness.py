"""Drive KafkaHarness.java: one long-lived JVM that runs scenarios on request.

The JVM reads one request per line on stdin and answers with one `@@result<TAB>JSON` line on
stdout; anything else it prints (there should be nothing) is ignored. A scenario that does
not answer in time gets the JVM killed, and the next request starts a new one.
"""

from __future__ import annotations

import base64
import json
import os
import select
import subprocess
import time
from pathlib import Path
from typing import Any

RESULT_PREFIX = "@@result\t"


class ScenarioError(AssertionError):
    """The scenario threw: the Java exception's type, message and stack trace."""


class JavaHarness:
    def __init__(self, java: str, classpath: str, log_path: Path) -> None:
        self.java = java
        self.classpath = classpath
        self.log_path = log_path
        self.proc: subprocess.Popen[bytes] | None = None
        self._buffer = b""

    def _start(self) -> subprocess.Popen[bytes]:
        log = self.log_path.open("ab")
        try:
            proc = subprocess.Popen(
                [self.java, "-cp", self.classpath, "KafkaHarness", "--serve"],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log,
            )
        finally:
            log.close()
        self._buffer = b""
        return proc

    def run(self, scenario: str, timeout: float = 90.0, **args: object) -> dict[str, Any]:
        """Run one scenario; returns its result with base64 bytes decoded. Raises on a Java exception."""
        result = self.run_raw(scenario, timeout, **args)
        if "exception" in result:
            exc = result["exception"]
            raise ScenarioError(f"{scenario}: {exc['type']}: {exc['message']}\n{exc.get('trace', '')}")
        return result

    def run_raw(self, scenario: str, timeout: float = 90.0, **args: object) -> dict[str, Any]:
        if self.proc is None or self.proc.poll() is not None:
            self.proc = self._start()
        assert self.proc.stdin is not None
        fields = [scenario] + [f"{key}={value}" for key, value in args.items()]
        assert all("\t" not in f and "\n" not in f for f in fields), fields
        self.proc.stdin.write(("\t".join(fields) + "\n").encode())
        self.proc.stdin.flush()
        line = self._read_result(timeout)
        return json.loads(line, object_hook=_decode_bytes)

    def _read_result(self, timeout: float) -> str:
        assert self.proc is not None and self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        deadline = time.monotonic() + timeout
        while True:
            while b"\n" in self._buffer:
                raw, self._buffer = self._buffer.split(b"\n", 1)
                line = raw.decode()
                if line.startswith(RESULT_PREFIX):
                    return line[len(RESULT_PREFIX):]
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self.close(kill=True)
                raise TimeoutError(f"no answer from the Java harness in {timeout}s\n{self.log_tail()}")
            ready, _, _ = select.select([fd], [], [], remaining)
            if ready:
                chunk = os.read(fd, 1 << 16)
                if not chunk:
                    code = self.proc.wait()
                    self.proc = None
                    raise RuntimeError(f"Java harness exited with {code}\n{self.log_tail()}")
                self._buffer += chunk

    def log_tail(self, lines: int = 40) -> str:
        if not self.log_path.exists():
            return ""
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def close(self, kill: bool = False) -> None:
        if self.proc is None:
            return
        if kill:
            self.proc.kill()
            self.proc.wait()
        elif self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()  # EOF ends the serve loop
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None


def _decode_bytes(obj: dict[str, Any]) -> Any:
    # The harness writes byte[] as {"b64": "..."}; nothing else has that shape.
    if obj.keys() == {"b64"}:
        return base64.b64decode(obj["b64"])
    return obj
