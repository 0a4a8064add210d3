"""The leader-epoch cache: which offset each leader epoch started at (`leader-epoch-checkpoint`).

Followers use it, through OffsetForLeaderEpoch, to find where their log diverged from the
leader's. Saved on every change; changes are rare (once per leader election).
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable
from pathlib import Path
from typing import NamedTuple

from kbroker.storage.checkpoint import read_entries, write_entries

FILE_NAME = "leader-epoch-checkpoint"
UNDEFINED_EPOCH = -1
UNDEFINED_OFFSET = -1


class EpochEntry(NamedTuple):
    epoch: int
    start_offset: int


class LeaderEpochCache:
    def __init__(self, directory: Path) -> None:
        self.path = directory / FILE_NAME
        rows = read_entries(self.path, 2) or []
        self._entries = [EpochEntry(int(epoch), int(start)) for epoch, start in rows]

    @property
    def entries(self) -> tuple[EpochEntry, ...]:
        return tuple(self._entries)

    @property
    def latest_epoch(self) -> int:
        return self._entries[-1].epoch if self._entries else UNDEFINED_EPOCH

    def assign(self, epoch: int, start_offset: int) -> None:
        """Record that `epoch` starts at `start_offset`, dropping entries this contradicts."""
        if epoch < 0:
            return
        if self._entries and self._entries[-1].epoch == epoch and self._entries[-1].start_offset <= start_offset:
            return
        kept = [e for e in self._entries if e.epoch < epoch and e.start_offset < start_offset]
        self._save([*kept, EpochEntry(epoch, start_offset)])

    def end_offset_for(self, epoch: int, log_end_offset: int) -> tuple[int, int]:
        """Kafka's answer to OffsetForLeaderEpoch: (epoch, end offset).

        The latest epoch ends at the log end; an older one ends where the next higher epoch
        starts (reported with the largest known epoch <= the requested one, or the requested
        epoch itself when it is older than every known epoch). An unknown newer epoch, or -1,
        gives (-1, -1).
        """
        if epoch == UNDEFINED_EPOCH or not self._entries:
            return UNDEFINED_EPOCH, UNDEFINED_OFFSET
        if epoch == self.latest_epoch:
            return epoch, log_end_offset
        epochs = [e.epoch for e in self._entries]
        higher = bisect_right(epochs, epoch)
        if higher == len(epochs):
            return UNDEFINED_EPOCH, UNDEFINED_OFFSET
        floor_epoch = epochs[higher - 1] if higher > 0 else epoch
        return floor_epoch, self._entries[higher].start_offset

    def epoch_for_offset(self, offset: int) -> int:
        """The epoch in which `offset` was written, or -1 if before every known epoch."""
        starts = [e.start_offset for e in self._entries]
        slot = bisect_right(starts, offset) - 1
        return self._entries[slot].epoch if slot >= 0 else UNDEFINED_EPOCH

    def truncate_from_end(self, end_offset: int, *, keep_epoch_at_end: bool = False) -> None:
        """Forget epochs starting at or after `end_offset` (the log was truncated there).

        `keep_epoch_at_end` keeps one that starts exactly at the end: on load, a leader's epoch
        that began at the log end before anything was written in it is still true, and dropping
        it only to have the leader assign it again costs two checkpoint writes per partition.
        """
        kept = [e for e in self._entries
                if e.start_offset < end_offset or (keep_epoch_at_end and e.start_offset == end_offset)]
        if len(kept) != len(self._entries):
            self._save(kept)

    def truncate_from_start(self, start_offset: int) -> None:
        """The log now starts at `start_offset`: the epoch covering it starts there too."""
        covering = [e for e in self._entries if e.start_offset <= start_offset]
        if not covering:
            return
        first = EpochEntry(covering[-1].epoch, start_offset)
        kept = [first, *(e for e in self._entries if e.start_offset > start_offset)]
        if kept != self._entries:
            self._save(kept)

    def replace_entries(self, entries: Iterable[EpochEntry]) -> None:
        """Take another replica's epochs as they are (a copy of the log replacing it)."""
        self._save(list(entries))

    def clear(self) -> None:
        if self._entries or not self.path.exists():
            self._save([])

    def _save(self, entries: list[EpochEntry]) -> None:
        self._entries = entries
        write_entries(self.path, entries)
