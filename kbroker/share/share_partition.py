"""One partition as a share group reads it (KIP-932): which records are in flight, who holds
them, how often each was delivered. Pure state, no IO: the caller reads the log, passes the
time in, schedules the lock-expiry wake-ups and persists `snapshot()`.

The partition's records split at two offsets:

- below `start_offset` (the share-partition start offset, SPSO) every record is done with:
  acknowledged, archived, or before where the group started;
- from `end_offset` (SPEO, exclusive here) on, no record was ever acquired;
- in between, the in-flight window, each offset is AVAILABLE (to be delivered again),
  ACQUIRED (locked by one member until a deadline), ACKNOWLEDGED or ARCHIVED.

A member acquires available records (redeliveries first, then new ones from `end_offset`), up to
the in-flight limit (`group.share.partition.max.record.locks`); each acquisition counts one
delivery and holds a lock for `share.record.lock.duration.ms`. Acknowledging ACCEPT makes a
record ACKNOWLEDGED, REJECT or GAP makes it ARCHIVED, RELEASE makes it AVAILABLE again; a lock
that expires releases the record too. A released record already delivered
`share.delivery.count.limit` times is ARCHIVED instead. `start_offset` then moves past every
leading record that is done, so the window stays small.

The window is held as runs of consecutive offsets in the same state (delivery count, holder and
lock deadline included), as Kafka holds it per in-flight batch: a consumer acquires and settles
hundreds of records at a time, so each operation costs per run, not per record. A run is split
where an operation covers part of it, and neighbours that became alike are merged again.
"""

from __future__ import annotations

import enum
from bisect import bisect_right
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace

from protocol.errors import ErrorCode


class RecordState(enum.IntEnum):
    """Kafka's record states; the values are those it persists."""

    AVAILABLE = 0
    ACQUIRED = 1
    ACKNOWLEDGED = 2
    ARCHIVED = 4


class AcknowledgeType(enum.IntEnum):
    """ShareFetch/ShareAcknowledge's AcknowledgeTypes."""

    GAP = 0
    ACCEPT = 1
    RELEASE = 2
    REJECT = 3
    RENEW = 4


class ArchiveReason(enum.Enum):
    REJECTED = "rejected"
    DELIVERY_COUNT_LIMIT = "delivery count limit"


@dataclass(frozen=True)
class AcquiredRange:
    """Offsets first..last (inclusive) given to one member, each delivered `delivery_count` times."""

    first_offset: int
    last_offset: int
    delivery_count: int


@dataclass(frozen=True)
class Archived:
    """A record that left the queue without being accepted (for dead letters and metrics)."""

    offset: int
    delivery_count: int
    reason: ArchiveReason


@dataclass(frozen=True)
class StateBatch:
    """A run of in-flight offsets in one state, as Kafka persists them (ShareSnapshotValue)."""

    first_offset: int
    last_offset: int
    state: RecordState
    delivery_count: int


@dataclass(frozen=True)
class AcknowledgementBatch:
    """first..last acknowledged with one type for all, or one type per offset."""

    first_offset: int
    last_offset: int
    types: tuple[int, ...]


@dataclass(slots=True)
class _Run:
    """Offsets first..last (inclusive) of the window, all in one state."""

    first: int
    last: int
    state: RecordState
    delivery_count: int
    member_id: str = ""
    lock_deadline_ms: int = 0

    def held_by(self, member_id: str) -> bool:
        return self.state is RecordState.ACQUIRED and self.member_id == member_id

    def alike(self, other: _Run) -> bool:
        return (self.state is other.state and self.delivery_count == other.delivery_count
                and self.member_id == other.member_id and self.lock_deadline_ms == other.lock_deadline_ms)

    def settle(self, state: RecordState) -> None:
        self.state, self.member_id, self.lock_deadline_ms = state, "", 0


def _first_of(run: _Run) -> int:
    return run.first


@dataclass(frozen=True)
class ShareLimits:
    delivery_count_limit: int = 5
    max_in_flight: int = 2000
    lock_duration_ms: int = 30_000


@dataclass
class SharePartition:
    """The in-flight window of one topic partition for one share group."""

    start_offset: int
    limits: ShareLimits = field(default_factory=ShareLimits)
    end_offset: int = -1
    state_epoch: int = 0
    # Runs covering start_offset..end_offset-1 exactly, in order, no two neighbours alike.
    _runs: list[_Run] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.end_offset < self.start_offset:
            self.end_offset = self.start_offset

    # -- reading ---------------------------------------------------------------------------------

    def next_fetch_offset(self) -> int:
        """Where the next read of the log should start: the first available in-flight record,
        else the first never acquired."""
        for run in self._runs:
            if run.state is RecordState.AVAILABLE:
                return run.first
        return self.end_offset

    def in_flight(self) -> int:
        return self.end_offset - self.start_offset

    def state_of(self, offset: int) -> RecordState | None:
        """An in-flight offset's state (None outside the window)."""
        if not self.start_offset <= offset < self.end_offset:
            return None
        return self._runs[self._index_of(offset)].state

    def acquired_by(self, member_id: str) -> list[int]:
        return [o for run in self._runs if run.held_by(member_id) for o in range(run.first, run.last + 1)]

    def next_lock_deadline_ms(self) -> int | None:
        """When the earliest lock expires, for the caller's wake-up."""
        deadlines = [r.lock_deadline_ms for r in self._runs if r.state is RecordState.ACQUIRED]
        return min(deadlines) if deadlines else None

    # -- acquiring -------------------------------------------------------------------------------

    def acquire(self, member_id: str, first_offset: int, last_offset: int, max_records: int,
                now_ms: int) -> list[AcquiredRange]:
        """Lock for `member_id` the available records among first..last (the offsets the caller
        read from the log), at most `max_records` and within the in-flight limit."""
        deadline = now_ms + self.limits.lock_duration_ms
        taken: list[tuple[int, int, int]] = []  # (first, last, delivery count)
        left = max_records
        first = max(first_offset, self.start_offset)
        last = min(last_offset, self.end_offset - 1)
        index = self._index_of(first) if first <= last else len(self._runs)
        while index < len(self._runs) and left > 0 and self._runs[index].first <= last:
            run = self._runs[index]
            if run.state is RecordState.AVAILABLE:
                low = max(run.first, first)
                index = self._isolate(index, low, min(run.last, last, low + left - 1))
                run = self._runs[index]
                run.state, run.member_id, run.lock_deadline_ms = RecordState.ACQUIRED, member_id, deadline
                run.delivery_count += 1
                taken.append((run.first, run.last, run.delivery_count))
                left -= run.last - run.first + 1
            index += 1
        # New records: none may be skipped between end_offset and the first one taken.
        if first <= self.end_offset:
            count = min(last_offset - self.end_offset + 1, left, self.limits.max_in_flight - self.in_flight())
            if count > 0:
                new = _Run(self.end_offset, self.end_offset + count - 1, RecordState.ACQUIRED, 1, member_id, deadline)
                self._runs.append(new)
                self.end_offset += count
                taken.append((new.first, new.last, 1))
        self._merge()
        return list(_ranges(taken))

    # -- acknowledging ---------------------------------------------------------------------------

    def acknowledge(self, member_id: str, batches: Iterable[AcknowledgementBatch],
                    now_ms: int) -> tuple[int, list[Archived]]:
        """Apply one member's acknowledgements, all or none: an error code (INVALID_RECORD_STATE
        when an offset is not held by the member, INVALID_REQUEST for malformed batches) and the
        records archived."""
        plan: list[tuple[int, int, AcknowledgeType]] = []
        for batch in batches:
            count = batch.last_offset - batch.first_offset + 1
            if count <= 0 or len(batch.types) not in (1, count):
                return ErrorCode.INVALID_REQUEST, []
            for first, last, raw_type in _same_type_runs(batch):
                try:
                    kind = AcknowledgeType(raw_type)
                except ValueError:
                    return ErrorCode.INVALID_REQUEST, []
                if kind is AcknowledgeType.GAP:
                    first = max(first, self.start_offset)  # a gap already done with
                    if first > last:
                        continue
                if not self._held_by(member_id, first, last):
                    return ErrorCode.INVALID_RECORD_STATE, []
                plan.append((first, last, kind))
        archived: list[Archived] = []
        for first, last, kind in plan:
            begin, end = self._isolate_range(first, last)
            for run in self._runs[begin:end]:
                if kind is AcknowledgeType.ACCEPT:
                    run.settle(RecordState.ACKNOWLEDGED)
                elif kind is AcknowledgeType.RENEW:
                    run.lock_deadline_ms = now_ms + self.limits.lock_duration_ms
                elif kind is AcknowledgeType.RELEASE:
                    archived.extend(self._release(run))
                else:
                    run.settle(RecordState.ARCHIVED)
                    if kind is AcknowledgeType.REJECT:
                        archived.extend(Archived(o, run.delivery_count, ArchiveReason.REJECTED)
                                        for o in range(run.first, run.last + 1))
        self._merge()
        self._advance_start()
        return ErrorCode.NO_ERROR, archived

    def _held_by(self, member_id: str, first: int, last: int) -> bool:
        """Whether every offset of first..last is in the window and acquired by `member_id`."""
        if first < self.start_offset or last >= self.end_offset:
            return False
        index = self._index_of(first)
        while index < len(self._runs) and self._runs[index].first <= last:
            if not self._runs[index].held_by(member_id):
                return False
            index += 1
        return True

    def release_member(self, member_id: str) -> list[Archived]:
        """Give back everything a member holds (its share session closed or it left)."""
        archived: list[Archived] = []
        for run in self._runs:
            if run.held_by(member_id):
                archived.extend(self._release(run))
        self._merge()
        self._advance_start()
        return archived

    def expire_locks(self, now_ms: int) -> list[Archived]:
        """Release every record whose lock deadline has passed."""
        archived: list[Archived] = []
        for run in self._runs:
            if run.state is RecordState.ACQUIRED and run.lock_deadline_ms <= now_ms:
                archived.extend(self._release(run))
        self._merge()
        self._advance_start()
        return archived

    def _release(self, run: _Run) -> list[Archived]:
        if run.delivery_count >= self.limits.delivery_count_limit:
            run.settle(RecordState.ARCHIVED)
            return [Archived(o, run.delivery_count, ArchiveReason.DELIVERY_COUNT_LIMIT)
                    for o in range(run.first, run.last + 1)]
        run.settle(RecordState.AVAILABLE)
        return []

    def _advance_start(self) -> None:
        done = 0
        while done < len(self._runs) and self._runs[done].state in (RecordState.ACKNOWLEDGED, RecordState.ARCHIVED):
            done += 1
        if done:
            del self._runs[:done]
        self.start_offset = self._runs[0].first if self._runs else self.end_offset

    # -- runs --------------------------------------------------------------------------------------

    def _index_of(self, offset: int) -> int:
        """The index of the run holding `offset`, an offset of the window."""
        return bisect_right(self._runs, offset, key=_first_of) - 1

    def _split_before(self, offset: int) -> int:
        """Make `offset` the first of a run; that run's index (len(runs) for the window's end)."""
        if offset >= self.end_offset:
            return len(self._runs)
        index = self._index_of(offset)
        run = self._runs[index]
        if run.first == offset:
            return index
        self._runs.insert(index + 1, replace(run, first=offset))
        run.last = offset - 1
        return index + 1

    def _isolate_range(self, first: int, last: int) -> tuple[int, int]:
        """Split runs so that first..last (in the window) is runs[begin:end] exactly."""
        self._split_before(last + 1)
        begin = self._split_before(first)
        return begin, self._index_of(last) + 1

    def _isolate(self, index: int, first: int, last: int) -> int:
        """Split runs[index] so that first..last, inside it, is a run of its own; its index."""
        run = self._runs[index]
        if last < run.last:
            self._runs.insert(index + 1, replace(run, first=last + 1))
            run.last = last
        if first > run.first:
            self._runs.insert(index + 1, replace(run, first=first))
            run.last = first - 1
            index += 1
        return index

    def _merge(self) -> None:
        """Join neighbouring runs that became alike."""
        merged: list[_Run] = []
        for run in self._runs:
            if merged and merged[-1].alike(run):
                merged[-1].last = run.last
            else:
                merged.append(run)
        self._runs = merged

    # -- moving the window -----------------------------------------------------------------------

    def move_start(self, offset: int) -> None:
        """Start at `offset`: the log's start moved past records (retention, DeleteRecords) or an
        administrator reset the group's offsets. Records before it are forgotten."""
        if offset <= self.start_offset:
            return
        if offset >= self.end_offset:
            self._runs = []
        else:
            del self._runs[:self._split_before(offset)]
        self.start_offset = offset
        self.end_offset = max(self.end_offset, offset)
        self._advance_start()

    # -- persistence -----------------------------------------------------------------------------

    def snapshot(self) -> list[StateBatch]:
        """The in-flight window as Kafka persists it: runs of equal state and delivery count.
        A lock does not survive a restart, so ACQUIRED is written as AVAILABLE."""
        batches: list[StateBatch] = []
        for run in self._runs:
            state = RecordState.AVAILABLE if run.state is RecordState.ACQUIRED else run.state
            last = batches[-1] if batches else None
            if last is not None and last.state is state and last.delivery_count == run.delivery_count:
                batches[-1] = StateBatch(last.first_offset, run.last, state, run.delivery_count)
            else:
                batches.append(StateBatch(run.first, run.last, state, run.delivery_count))
        return batches

    @classmethod
    def restore(cls, start_offset: int, batches: Iterable[StateBatch], limits: ShareLimits,
                state_epoch: int = 0) -> SharePartition:
        """The partition as a snapshot left it: every listed offset back in its state, the
        window's end after the last of them. Offsets inside the window that no batch names were
        never acquired: available, undelivered."""
        partition = cls(start_offset, limits, state_epoch=state_epoch)
        for batch in batches:
            first = max(batch.first_offset, start_offset)
            if first > batch.last_offset:
                continue
            if batch.last_offset >= partition.end_offset:
                partition._runs.append(_Run(partition.end_offset, batch.last_offset, RecordState.AVAILABLE, 0))
                partition.end_offset = batch.last_offset + 1
            state = RecordState.AVAILABLE if batch.state is RecordState.ACQUIRED else batch.state
            begin, end = partition._isolate_range(first, batch.last_offset)
            for run in partition._runs[begin:end]:
                run.settle(state)
                run.delivery_count = batch.delivery_count
        partition._merge()
        partition._advance_start()
        return partition


def _same_type_runs(batch: AcknowledgementBatch) -> Iterator[tuple[int, int, int]]:
    """(first, last, type) of the batch's stretches of offsets with one acknowledge type."""
    if len(batch.types) == 1:
        yield batch.first_offset, batch.last_offset, batch.types[0]
        return
    first = batch.first_offset
    for index in range(1, len(batch.types) + 1):
        if index == len(batch.types) or batch.types[index] != batch.types[index - 1]:
            yield first, batch.first_offset + index - 1, batch.types[index - 1]
            first = batch.first_offset + index


def _ranges(taken: list[tuple[int, int, int]]) -> Iterator[AcquiredRange]:
    """Consecutive (first, last, delivery count) stretches with the same count as one range."""
    run: list[int] | None = None  # [first, last, delivery count]
    for first, last, count in taken:
        if run is not None and first == run[1] + 1 and count == run[2]:
            run[1] = last
            continue
        if run is not None:
            yield AcquiredRange(*run)
        run = [first, last, count]
    if run is not None:
        yield AcquiredRange(*run)
