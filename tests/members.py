"""Group members as child processes (tests/group_member.py, or kcat -G) and what they report."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

PROJECT = Path(__file__).resolve().parent.parent


class MemberProcess:
    """A consumer in its own process; its events (assignments, messages) are collected as they come."""

    def __init__(self, command: list[str], name: str, parse: Callable[[str], dict[str, Any] | None]) -> None:
        self.name = name
        self._parse = parse
        self.assignment: list[tuple[str, int]] = []
        self.history: list[set[tuple[str, int]]] = []  # every assignment it reported, in order
        self.assignments_seen = 0
        self.messages: list[tuple[int, int, str]] = []
        self.commits: list[tuple[int, int, str | None]] = []  # (partition, offset, error or None)
        self.ready = False
        self._changed = threading.Condition()
        self.proc = subprocess.Popen(
            command, cwd=PROJECT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        self.stderr_lines: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()
        threading.Thread(target=self._read_stderr, daemon=True).start()

    @classmethod
    def python(cls, bootstrap: str, group: str, topic: str, name: str, **options: Any) -> MemberProcess:
        command = [sys.executable, "-m", "tests.group_member", bootstrap, group, topic]
        for key, value in options.items():
            command += [f"--{key.replace('_', '-')}", str(value)]
        return cls(command, name, json.loads)

    @classmethod
    def kcat(cls, bootstrap: str, group: str, topic: str, name: str) -> MemberProcess:
        command = ["kcat", "-b", bootstrap, "-G", group, topic, "-o", "beginning", "-u",
                   "-X", "session.timeout.ms=6000", "-X", "heartbeat.interval.ms=500",
                   "-X", "partition.assignment.strategy=range", "-f", "%p %o %s\\n"]

        def parse(line: str) -> dict[str, Any] | None:
            partition, offset, value = line.split(" ", 2)
            return {"msg": [int(partition), int(offset), value]}

        member = cls(command, name, parse)
        member.ready = True
        return member

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            event = self._parse(line.rstrip("\n"))
            if event is None:
                continue
            with self._changed:
                if "assigned" in event:
                    self.assignment = [tuple(tp) for tp in event["assigned"]]  # type: ignore[misc]
                    self.history.append(set(self.assignment))
                    self.assignments_seen += 1
                elif "msg" in event:
                    self.messages.append(tuple(event["msg"]))  # type: ignore[arg-type]
                elif "commit" in event:
                    self.commits.append(tuple(event["commit"]))  # type: ignore[arg-type]
                elif event.get("ready"):
                    self.ready = True
                self._changed.notify_all()

    def _read_stderr(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.stderr_lines.append(line)

    def values(self) -> list[str]:
        with self._changed:
            return [value for _, _, value in self.messages]

    def wait_for(self, condition: Callable[[MemberProcess], bool], timeout_s: float, what: str) -> None:
        deadline = time.monotonic() + timeout_s
        with self._changed:
            while not condition(self):
                remaining = deadline - time.monotonic()
                if remaining <= 0 or self.proc.poll() is not None and not condition(self):
                    raise AssertionError(f"{self.name}: timed out waiting for {what}; stderr:\n"
                                         + "".join(self.stderr_lines[-20:]))
                self._changed.wait(min(remaining, 0.5))

    def stop(self) -> None:
        """SIGTERM: the member closes its consumer and leaves the group."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def kill(self) -> None:
        """SIGKILL: a crash; the member never leaves, its session has to time out."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

def exclusive_cover(members: list[MemberProcess], partitions: set[tuple[str, int]]) -> bool:
    """Every partition is assigned to exactly one of `members`."""
    owned = [tp for m in members for tp in m.assignment]
    return len(owned) == len(set(owned)) and set(owned) == partitions
