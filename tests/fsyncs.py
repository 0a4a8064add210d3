"""Which files and directories were fsynced, and in what order relative to renames.

Durability cannot be observed without pulling the power, so tests record the calls that provide
it: `os.fsync` (by the path its descriptor names, read from /proc/self/fd) and `os.replace`.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest


class SyncLog:
    def __init__(self) -> None:
        self.events: list[tuple[str, Path]] = []  # ("fsync", path) or ("replace", destination)

    @property
    def fsynced(self) -> list[Path]:
        return [path for kind, path in self.events if kind == "fsync"]

    def index(self, kind: str, path: Path) -> int:
        return self.events.index((kind, path))


def record_syncs(monkeypatch: pytest.MonkeyPatch) -> SyncLog:
    """Record every os.fsync and os.replace from now on (both still happen)."""
    record = SyncLog()
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd: int) -> None:
        record.events.append(("fsync", Path(os.readlink(f"/proc/self/fd/{fd}"))))
        real_fsync(fd)

    def replace(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> None:
        real_replace(src, dst)
        record.events.append(("replace", Path(dst).resolve()))

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    return record
