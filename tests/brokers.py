"""Real broker processes for tests: kbroker.launcher's, run from the project's root, and what the
tests look for in their logs."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from kbroker import launcher
from kbroker.ports import free_port

__all__ = ["PROJECT_ROOT", "START_TIMEOUT_S", "UNKNOWN_FIELD_MARKER", "BrokerProcess", "free_port"]

START_TIMEOUT_S = launcher.START_TIMEOUT_S
# How the broker's log shows an answer it could not encode because a handler put a key in it
# that no version of the message has (see protocol.primitives.UnknownFieldError).
UNKNOWN_FIELD_MARKER = "UnknownFieldError: "
PROJECT_ROOT = Path(__file__).resolve().parent.parent


@dataclass
class BrokerProcess(launcher.BrokerProcess):
    """A `kbroker start` child process with its own data directory and port."""

    cwd: Path | None = PROJECT_ROOT

    def unknown_field_errors(self) -> list[str]:
        """Answers this broker could not encode for a misspelt or stray key: each is a handler
        bug that a client only saw as UNKNOWN_SERVER_ERROR, which a test may not notice."""
        return [line for line in self.log_text().splitlines() if UNKNOWN_FIELD_MARKER in line]
