"""A log's segments in offset order, and what is done to them as a whole (Kafka's LogSegments
and the segment side of its LocalLog): reads across segments, lookups by timestamp, the aborted
transactions of a range, deletion after a delay.

Both the loader, which finds the segments on disk, and the log, which rolls, truncates and
deletes them, work on this one container; lookups by offset are binary searches over the base
offsets kept beside the segments. Offsets that describe the log (start, end, high watermark)
stay with the log and are passed in.
"""

from __future__ import annotations

import random
from bisect import bisect_right
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path

from kbroker.storage.encryption import BatchCipher
from kbroker.storage.log_config import LogConfig
from kbroker.storage.read_results import Read
from kbroker.storage.segment import LogSegment
from kbroker.storage.txn_index import AbortedTxn


def open_segment(directory: Path, config: LogConfig, base_offset: int, now_ms: int, *, fresh: bool,
                 cipher: BatchCipher | None = None) -> LogSegment:
    """The segment at `base_offset` with the log's settings (`fresh`: a new, empty one)."""
    jitter = config.segment_jitter_ms
    return LogSegment(
        directory,
        base_offset,
        index_interval_bytes=config.index_interval_bytes,
        max_index_bytes=config.segment_index_bytes,
        now_ms=now_ms,
        # Drawn per segment so that partitions created together do not all roll at once.
        roll_jitter_ms=random.randrange(jitter) if jitter > 0 else 0,
        fresh=fresh,
        cipher=cipher,
    )


class LogSegments:
    def __init__(self) -> None:
        self._segments: list[LogSegment] = []
        self._bases: list[int] = []
        self._doomed: list[tuple[int, LogSegment]] = []  # (delete at ms, segment renamed `.deleted`)

    def __len__(self) -> int:
        return len(self._segments)

    def __iter__(self) -> Iterator[LogSegment]:
        return iter(self._segments)

    def __getitem__(self, slot: int) -> LogSegment:
        return self._segments[slot]

    def all(self) -> tuple[LogSegment, ...]:
        return tuple(self._segments)

    @property
    def first(self) -> LogSegment:
        return self._segments[0]

    @property
    def active(self) -> LogSegment:
        return self._segments[-1]

    def add(self, segment: LogSegment) -> None:
        slot = bisect_right(self._bases, segment.base_offset)
        self._segments.insert(slot, segment)
        self._bases.insert(slot, segment.base_offset)

    def remove(self, segments: Iterable[LogSegment]) -> None:
        gone = {id(segment) for segment in segments}
        self._segments = [segment for segment in self._segments if id(segment) not in gone]
        self._bases = [segment.base_offset for segment in self._segments]

    def pop_active(self) -> LogSegment:
        self._bases.pop()
        return self._segments.pop()

    def slot_for(self, offset: int) -> int:
        """The slot of the segment that holds `offset` (the first one for offsets before it)."""
        return max(bisect_right(self._bases, offset) - 1, 0)

    def base_for(self, offset: int) -> int:
        return self._bases[self.slot_for(offset)] if self._bases else 0

    def from_offset(self, offset: int) -> list[LogSegment]:
        """The segment holding `offset` and every later one."""
        return self._segments[self.slot_for(offset) :]

    def next_base(self, slot: int, log_end_offset: int) -> int:
        """Where the segment in `slot` ends: the next one's base, or the log end for the active one."""
        return self._segments[slot + 1].base_offset if slot + 1 < len(self._segments) else log_end_offset

    @property
    def size_in_bytes(self) -> int:
        return sum(segment.size for segment in self._segments)

    def prefix_below(
        self, high_watermark: int, log_end_offset: int, wanted: Callable[[LogSegment, int], bool]
    ) -> list[LogSegment]:
        """The oldest segments, while `wanted(segment, its end offset)` holds, that end at or below
        the high watermark (what consumers may not have read is never deleted). The active segment
        counts only when it holds something."""
        found = []
        for slot, segment in enumerate(self._segments):
            is_active = slot == len(self._segments) - 1
            upper = self.next_base(slot, log_end_offset)
            if (is_active and segment.is_empty) or upper > high_watermark or not wanted(segment, upper):
                break
            found.append(segment)
        return found

    # -- reading ----------------------------------------------------------------------------------

    def read(self, offset: int, upper: int, log_end_offset: int, max_bytes: int,
             min_one_batch: bool) -> Read | None:
        """Batches from the one holding `offset`, within one segment, none starting at or after `upper`.

        Raises CORRUPT_MESSAGE for an offset that may lie in damaged bytes.
        """
        for slot in range(self.slot_for(offset), len(self._segments)):
            segment = self._segments[slot]
            if segment.base_offset >= upper:
                break
            if segment.damage:
                segment.check_readable(offset, self.next_base(slot, log_end_offset))
            max_position = segment.bound_position(upper) if upper < segment.next_offset else None
            result = segment.read(offset, max_bytes, max_position, min_one_batch)
            if result is not None:
                return result
            # Nothing at or after `offset` in this segment (a compaction gap): the next one has it.
        return None

    def offset_for_timestamp(self, timestamp: int, log_start_offset: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record with timestamp >= `timestamp`."""
        for segment in self._segments:
            if segment.largest_timestamp >= timestamp:
                found = segment.find_offset_by_timestamp(timestamp, log_start_offset)
                if found is not None:
                    return found
        return None

    def max_timestamp_offset(self) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record with the largest timestamp."""
        best: LogSegment | None = None
        for segment in self._segments:
            if segment.max_timestamp >= 0 and (best is None or segment.max_timestamp > best.max_timestamp):
                best = segment
        return best.max_timestamp_record() if best is not None else None

    def collect_aborted_transactions(self, start: int, upper: int) -> list[tuple[int, int]]:
        """(producer id, first offset) of aborted transactions overlapping [start, upper).

        Each entry carries the LSO after its abort, so the scan stops at the first segment whose
        entries reach `upper`: no later segment can hold one that overlaps.
        """
        found: list[tuple[int, int]] = []
        for segment in self.from_offset(start):
            txns, complete = segment.txn_index.collect(start, upper)
            found.extend((txn.producer_id, txn.first_offset) for txn in txns)
            if complete:
                break
        return found

    def aborted_transactions(self, start: int, upper: int) -> list[AbortedTxn]:
        """Every aborted transaction overlapping [start, upper), in full."""
        found: list[AbortedTxn] = []
        for segment in self.from_offset(start):
            found.extend(txn for txn in segment.txn_index.entries if txn.last_offset >= start and txn.first_offset < upper)
        return found

    # -- deleting and closing ---------------------------------------------------------------------

    def schedule_deletion(self, segments: Sequence[LogSegment], due_ms: int) -> None:
        """Take segments out and rename them `.deleted`; their files go at `due_ms`, so reads
        already handed a slice of them can still be sent."""
        self.remove(segments)
        for segment in segments:
            segment.rename_to_deleted()
            self._doomed.append((due_ms, segment))

    def delete_expired(self, now_ms: int) -> int:
        """Close and unlink the segments whose deletion is due; returns how many."""
        due = [segment for at, segment in self._doomed if at <= now_ms]
        self._doomed = [(at, segment) for at, segment in self._doomed if at > now_ms]
        for segment in due:
            segment.delete_files()
        return len(due)

    def repoint(self, directory: Path) -> None:
        """The directory was renamed: every segment, the ones awaiting deletion too, opens files there."""
        for segment in [*self._segments, *(segment for _, segment in self._doomed)]:
            segment.repoint(directory)

    def release(self) -> None:
        """Close every file and remove the segments awaiting deletion now."""
        for segment in self._segments:
            segment.close()
        for _, segment in self._doomed:
            segment.delete_files()
        self._doomed = []
