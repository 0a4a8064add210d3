"""The aborted-transaction index of a segment (`.txnindex`, Kafka's format).

One 34-byte entry per transaction aborted by a marker in this segment: version (int16, 0),
producer id, first offset, last offset (the ABORT marker) and the last stable offset right
after the abort (int64 each). read_committed fetches return the entries overlapping what they
read, so consumers can drop the aborted records. Most segments have none: the file is created
with the first entry, and read once, lazily.
"""

from __future__ import annotations

import os
import struct
from pathlib import Path
from typing import NamedTuple

from kbroker.fsutil import write_atomically

_ENTRY = struct.Struct(">hqqqq")
VERSION = 0


class AbortedTxn(NamedTuple):
    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int


class TransactionIndex:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._entries: list[AbortedTxn] | None = None

    @property
    def entries(self) -> list[AbortedTxn]:
        if self._entries is None:
            self._entries = _read(self.path)
        return self._entries

    def append(self, txn: AbortedTxn) -> None:
        entries = self.entries
        if entries and txn.last_offset <= entries[-1].last_offset:
            raise ValueError(f"aborted transaction ending at {txn.last_offset} is not after {entries[-1].last_offset}")
        with open(self.path, "ab") as f:
            f.write(_ENTRY.pack(VERSION, *txn))
        entries.append(txn)

    def collect(self, fetch_offset: int, upper_bound: int) -> tuple[list[AbortedTxn], bool]:
        """Aborted transactions overlapping [fetch_offset, upper_bound); True once no later segment can add any."""
        found = []
        for txn in self.entries:
            if txn.last_offset >= fetch_offset and txn.first_offset < upper_bound:
                found.append(txn)
            if txn.last_stable_offset >= upper_bound:
                return found, True
        return found, False

    def truncate_to(self, offset: int) -> None:
        """Drop the entries of markers at or after `offset`."""
        kept = [txn for txn in self.entries if txn.last_offset < offset]
        if len(kept) != len(self.entries):
            self._rewrite(kept)

    def reset(self) -> None:
        self._rewrite([])

    def _rewrite(self, entries: list[AbortedTxn]) -> None:
        if entries:
            # Not fsynced, as Kafka's truncation is not: after a crash the replay of the producer
            # state at start rewrites the entries from the snapshot's offset on.
            write_atomically(self.path, b"".join(_ENTRY.pack(VERSION, *txn) for txn in entries), durable=False)
        else:
            self.path.unlink(missing_ok=True)
        self._entries = entries

    def flush(self) -> None:
        if self._entries:
            fd = os.open(self.path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)

    def rename(self, path: Path) -> None:
        if self.path.exists():
            os.replace(self.path, path)
        self.path = path

    def delete(self) -> None:
        self.path.unlink(missing_ok=True)
        self._entries = []


def _read(path: Path) -> list[AbortedTxn]:
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return []
    return parse_entries(data)


def parse_entries(data: bytes) -> list[AbortedTxn]:
    """The entries of a `.txnindex` file's bytes (an archived segment's too)."""
    whole = len(data) - len(data) % _ENTRY.size  # a torn last entry is rebuilt by recovery
    return [AbortedTxn(pid, first, last, lso) for version, pid, first, last, lso in _ENTRY.iter_unpack(data[:whole])]
