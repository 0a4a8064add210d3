"""Sparse segment indexes in Kafka's file formats.

`.index`: 8-byte entries, relative offset (int32) -> file position (int32).
`.timeindex`: 12-byte entries, timestamp (int64) -> relative offset (int32).
Both big-endian, appended as the segment grows. Entries live in two parallel in-memory
arrays (loaded from the file on first use) and each append also goes to the file, so an index
is cheap to keep for thousands of segments and needs no mmap. Either index can be rebuilt
from the log, which is what recovery does.
"""

from __future__ import annotations

import os
import struct
from array import array
from bisect import bisect_left, bisect_right
from pathlib import Path

INT32_MAX = 2**31 - 1


def segment_file_name(base_offset: int, suffix: str) -> str:
    """Kafka's names: the base offset in 20 digits, e.g. 00000000000000001234.log."""
    return f"{base_offset:020d}{suffix}"


class CorruptIndex(Exception):
    """The index file contradicts the log: the caller rebuilds it."""


class _SparseIndex:
    """Sorted entries (key, value) stored as two parallel arrays plus an append-only file."""

    ENTRY: struct.Struct
    KEY_TYPE: str
    VALUE_TYPE: str

    def __init__(self, path: Path, base_offset: int, max_index_bytes: int) -> None:
        self.path = path
        self.base_offset = base_offset
        self.max_entries = max(1, max_index_bytes // self.ENTRY.size)
        self._keys: array[int] | None = None  # loaded lazily
        self._values: array[int] = array(self.VALUE_TYPE)
        self._fd: int | None = None

    # -- state ----------------------------------------------------------------------------

    def _load(self) -> None:
        keys, values = array(self.KEY_TYPE), array(self.VALUE_TYPE)
        data = self.path.read_bytes() if self.path.exists() else b""
        whole = len(data) - len(data) % self.ENTRY.size
        for key, value in self.ENTRY.iter_unpack(data[:whole]):
            keys.append(key)
            values.append(value)
        self._keys, self._values = keys, values

    @property
    def keys(self) -> array[int]:
        if self._keys is None:
            self._load()
        assert self._keys is not None
        return self._keys

    @property
    def values(self) -> array[int]:
        self.keys  # noqa: B018 - loads both arrays
        return self._values

    @property
    def entries(self) -> int:
        return len(self.keys)

    @property
    def is_full(self) -> bool:
        return self.entries >= self.max_entries

    def file_problem(self) -> str | None:
        """Kafka's sanity check, from the file alone: a torn entry size."""
        if not self.path.exists():
            return "missing"
        if self.path.stat().st_size % self.ENTRY.size:
            return "size is not a multiple of the entry size"
        return None

    # -- writing --------------------------------------------------------------------------

    def _append(self, key: int, value: int) -> None:
        self.keys.append(key)
        self.values.append(value)
        if self._fd is None:
            self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.write(self._fd, self.ENTRY.pack(key, value))

    def _truncate_entries(self, keep: int) -> None:
        del self.keys[keep:]
        del self.values[keep:]
        self._ensure_file()
        os.truncate(self.path, keep * self.ENTRY.size)

    def _ensure_file(self) -> None:
        if not self.path.exists():
            self.path.touch()

    def reset(self) -> None:
        """Drop every entry (before a rebuild)."""
        self._keys, self._values = array(self.KEY_TYPE), array(self.VALUE_TYPE)
        self._ensure_file()
        os.truncate(self.path, 0)

    def flush(self) -> None:
        if self._fd is not None:
            os.fsync(self._fd)

    def close_for_writes(self) -> None:
        """The segment is no longer active: release the descriptor, keep the entries."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    close = close_for_writes

    def rename(self, path: Path) -> None:
        if self.path.exists():
            os.replace(self.path, path)
        self.path = path

    def delete(self) -> None:
        self.close()
        self.path.unlink(missing_ok=True)


class OffsetIndex(_SparseIndex):
    ENTRY = struct.Struct(">ii")
    KEY_TYPE = "i"
    VALUE_TYPE = "i"

    def append(self, offset: int, position: int) -> None:
        relative = offset - self.base_offset
        keys = self.keys
        if keys and relative <= keys[-1]:
            raise ValueError(f"offset {offset} is not above the last index entry in {self.path}")
        self._append(relative, position)

    def lookup(self, offset: int) -> tuple[int, int]:
        """The last entry at or below `offset`, or (base offset, 0): where a scan should start."""
        slot = bisect_right(self.keys, offset - self.base_offset) - 1
        if slot < 0:
            return self.base_offset, 0
        return self.base_offset + self.keys[slot], self.values[slot]

    def last_entry(self) -> tuple[int, int]:
        if not self.keys:
            return self.base_offset, 0
        return self.base_offset + self.keys[-1], self.values[-1]

    def truncate_to(self, offset: int) -> None:
        """Remove entries for offsets >= `offset`."""
        self._truncate_entries(bisect_left(self.keys, offset - self.base_offset))

    def truncate_to_position(self, position: int) -> None:
        """Remove entries pointing at or beyond `position` (the log was cut there)."""
        self._truncate_entries(bisect_left(self.values, position))

    def check_against(self, log_size: int) -> None:
        problem = self.file_problem()
        if problem:
            raise CorruptIndex(f"{self.path.name}: {problem}")
        offset, position = self.last_entry()
        if offset < self.base_offset or position > log_size:
            raise CorruptIndex(f"{self.path.name}: last entry ({offset}, {position}) beyond the log")


class TimeIndex(_SparseIndex):
    ENTRY = struct.Struct(">qi")
    KEY_TYPE = "q"
    VALUE_TYPE = "i"

    def maybe_append(self, timestamp: int, offset: int) -> None:
        """Add an entry only when the max timestamp grew (Kafka's rule: keys strictly increase)."""
        keys = self.keys
        if keys and timestamp <= keys[-1]:
            return
        self._append(timestamp, offset - self.base_offset)

    def lookup(self, timestamp: int) -> tuple[int, int]:
        """The last entry with timestamp <= `timestamp`: (timestamp, offset), or (-1, base offset)."""
        slot = bisect_right(self.keys, timestamp) - 1
        if slot < 0:
            return -1, self.base_offset
        return self.keys[slot], self.base_offset + self.values[slot]

    def last_entry(self) -> tuple[int, int]:
        if not self.keys:
            return -1, self.base_offset
        return self.keys[-1], self.base_offset + self.values[-1]

    def truncate_to(self, offset: int) -> None:
        """Remove entries for offsets >= `offset`."""
        self._truncate_entries(bisect_left(self.values, offset - self.base_offset))

    def check_against(self, next_offset: int) -> None:
        problem = self.file_problem()
        if problem:
            raise CorruptIndex(f"{self.path.name}: {problem}")
        _, offset = self.last_entry()
        if offset < self.base_offset or offset >= max(next_offset, self.base_offset + 1):
            raise CorruptIndex(f"{self.path.name}: last entry points at offset {offset}, outside the segment")
