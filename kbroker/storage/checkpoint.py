"""Kafka's small text checkpoint files, each replaced atomically and durably (`write_atomically`).

Every one has the same shape: a version line `0`, a count line, then one entry per line with
space-separated fields, e.g. `recovery-point-offset-checkpoint` holds `topic partition offset`
and `leader-epoch-checkpoint` holds `epoch startOffset`.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from pathlib import Path

from kbroker.fsutil import write_atomically

log = logging.getLogger("kbroker.storage")

VERSION = 0

RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
REPLICATION_CHECKPOINT = "replication-offset-checkpoint"  # high watermarks
LOG_START_CHECKPOINT = "log-start-offset-checkpoint"
CLEANER_CHECKPOINT = "cleaner-offset-checkpoint"


def write_entries(path: Path, entries: Iterable[Iterable[object]]) -> None:
    lines = [" ".join(str(field) for field in entry) for entry in entries]
    write_atomically(path, "\n".join([str(VERSION), str(len(lines)), *lines]) + "\n")


def read_entries(path: Path, fields: int) -> list[list[str]] | None:
    """The entries of a checkpoint file; None when it is missing or malformed (logged)."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        return None
    try:
        if int(lines[0]) != VERSION:
            raise ValueError(f"unknown version {lines[0]}")
        count = int(lines[1])
        entries = [line.split() for line in lines[2 : 2 + count]]
        if len(entries) != count or any(len(entry) != fields for entry in entries):
            raise ValueError("entry count or shape is wrong")
    except (ValueError, IndexError) as e:
        log.warning("ignoring malformed checkpoint file %s: %s", path, e)
        return None
    return entries


def write_offsets(path: Path, offsets: Mapping[tuple[str, int], int]) -> None:
    write_entries(path, ((topic, partition, offset) for (topic, partition), offset in sorted(offsets.items())))


def read_offsets(path: Path) -> dict[tuple[str, int], int]:
    entries = read_entries(path, 3) or []
    try:
        return {(topic, int(partition)): int(offset) for topic, partition, offset in entries}
    except ValueError as e:
        log.warning("ignoring malformed checkpoint file %s: %s", path, e)
        return {}
