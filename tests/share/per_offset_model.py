"""A per-offset share partition: kbroker's first `SharePartition`, kept as the reference model
for tests/share/test_share_partition_model.py. Each offset of the window has its own entry, which
makes it slow (every operation costs per record) but easy to check by reading."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from kbroker.share.share_partition import (
    AcknowledgementBatch,
    AcknowledgeType,
    AcquiredRange,
    Archived,
    ArchiveReason,
    RecordState,
    ShareLimits,
    StateBatch,
)
from protocol.errors import ErrorCode


@dataclass
class _InFlight:
    state: RecordState
    delivery_count: int
    member_id: str = ""
    lock_deadline_ms: int = 0


@dataclass
class PerOffsetSharePartition:
    """The share partition with its window held per offset: the model the run-length
    `SharePartition` must behave exactly like."""

    start_offset: int
    limits: ShareLimits = field(default_factory=ShareLimits)
    end_offset: int = -1
    state_epoch: int = 0
    _window: dict[int, _InFlight] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.end_offset < self.start_offset:
            self.end_offset = self.start_offset

    # -- reading ---------------------------------------------------------------------------------

    def next_fetch_offset(self) -> int:
        """Where the next read of the log should start: the first available in-flight record,
        else the first never acquired."""
        for offset in range(self.start_offset, self.end_offset):
            entry = self._window.get(offset)
            if entry is not None and entry.state is RecordState.AVAILABLE:
                return offset
        return self.end_offset

    def in_flight(self) -> int:
        return self.end_offset - self.start_offset

    def state_of(self, offset: int) -> RecordState | None:
        """An in-flight offset's state (None outside the window)."""
        entry = self._window.get(offset)
        return entry.state if entry is not None else None

    def acquired_by(self, member_id: str) -> list[int]:
        return [o for o, e in sorted(self._window.items())
                if e.state is RecordState.ACQUIRED and e.member_id == member_id]

    def next_lock_deadline_ms(self) -> int | None:
        """When the earliest lock expires, for the caller's wake-up."""
        deadlines = [e.lock_deadline_ms for e in self._window.values() if e.state is RecordState.ACQUIRED]
        return min(deadlines) if deadlines else None

    # -- acquiring -------------------------------------------------------------------------------

    def acquire(self, member_id: str, first_offset: int, last_offset: int, max_records: int,
                now_ms: int) -> list[AcquiredRange]:
        """Lock for `member_id` the available records among first..last (the offsets the caller
        read from the log), at most `max_records` and within the in-flight limit."""
        deadline = now_ms + self.limits.lock_duration_ms
        taken: list[tuple[int, int]] = []  # (offset, delivery count)
        first = max(first_offset, self.start_offset)
        for offset in range(first, min(last_offset + 1, self.end_offset)):
            if len(taken) >= max_records:
                break
            entry = self._window.get(offset)
            if entry is not None and entry.state is RecordState.AVAILABLE:
                self._lock(entry, member_id, deadline)
                taken.append((offset, entry.delivery_count))
        offset = max(self.end_offset, first)
        # New records: none may be skipped between end_offset and the first one taken.
        if offset == self.end_offset:
            while offset <= last_offset and len(taken) < max_records and self.in_flight() < self.limits.max_in_flight:
                entry = _InFlight(RecordState.AVAILABLE, 0)
                self._window[offset] = entry
                self._lock(entry, member_id, deadline)
                taken.append((offset, 1))
                offset += 1
                self.end_offset = offset
        return list(_ranges(taken))

    @staticmethod
    def _lock(entry: _InFlight, member_id: str, deadline_ms: int) -> None:
        entry.state = RecordState.ACQUIRED
        entry.delivery_count += 1
        entry.member_id = member_id
        entry.lock_deadline_ms = deadline_ms

    # -- acknowledging ---------------------------------------------------------------------------

    def acknowledge(self, member_id: str, batches: Iterable[AcknowledgementBatch],
                    now_ms: int) -> tuple[int, list[Archived]]:
        """Apply one member's acknowledgements, all or none: an error code (INVALID_RECORD_STATE
        when an offset is not held by the member, INVALID_REQUEST for malformed batches) and the
        records archived."""
        plan: list[tuple[int, AcknowledgeType]] = []
        for batch in batches:
            count = batch.last_offset - batch.first_offset + 1
            if count <= 0 or len(batch.types) not in (1, count):
                return ErrorCode.INVALID_REQUEST, []
            for index, offset in enumerate(range(batch.first_offset, batch.last_offset + 1)):
                try:
                    kind = AcknowledgeType(batch.types[0] if len(batch.types) == 1 else batch.types[index])
                except ValueError:
                    return ErrorCode.INVALID_REQUEST, []
                entry = self._window.get(offset)
                if kind is AcknowledgeType.GAP and entry is None and offset < self.start_offset:
                    continue  # already done with
                if entry is None or entry.state is not RecordState.ACQUIRED or entry.member_id != member_id:
                    return ErrorCode.INVALID_RECORD_STATE, []
                plan.append((offset, kind))
        archived: list[Archived] = []
        for offset, kind in plan:
            entry = self._window[offset]
            if kind is AcknowledgeType.ACCEPT:
                self._finish(entry, RecordState.ACKNOWLEDGED)
            elif kind is AcknowledgeType.RENEW:
                entry.lock_deadline_ms = now_ms + self.limits.lock_duration_ms
            elif kind is AcknowledgeType.RELEASE:
                archived.extend(self._release(offset, entry))
            else:
                self._finish(entry, RecordState.ARCHIVED)
                if kind is AcknowledgeType.REJECT:
                    archived.append(Archived(offset, entry.delivery_count, ArchiveReason.REJECTED))
        self._advance_start()
        return ErrorCode.NO_ERROR, archived

    def release_member(self, member_id: str) -> list[Archived]:
        """Give back everything a member holds (its share session closed or it left)."""
        archived: list[Archived] = []
        for offset in self.acquired_by(member_id):
            archived.extend(self._release(offset, self._window[offset]))
        self._advance_start()
        return archived

    def expire_locks(self, now_ms: int) -> list[Archived]:
        """Release every record whose lock deadline has passed."""
        archived: list[Archived] = []
        for offset, entry in sorted(self._window.items()):
            if entry.state is RecordState.ACQUIRED and entry.lock_deadline_ms <= now_ms:
                archived.extend(self._release(offset, entry))
        self._advance_start()
        return archived

    def _release(self, offset: int, entry: _InFlight) -> Iterator[Archived]:
        if entry.delivery_count >= self.limits.delivery_count_limit:
            self._finish(entry, RecordState.ARCHIVED)
            yield Archived(offset, entry.delivery_count, ArchiveReason.DELIVERY_COUNT_LIMIT)
        else:
            entry.state, entry.member_id, entry.lock_deadline_ms = RecordState.AVAILABLE, "", 0

    @staticmethod
    def _finish(entry: _InFlight, state: RecordState) -> None:
        entry.state, entry.member_id, entry.lock_deadline_ms = state, "", 0

    def _advance_start(self) -> None:
        while self.start_offset < self.end_offset:
            entry = self._window.get(self.start_offset)
            if entry is not None and entry.state not in (RecordState.ACKNOWLEDGED, RecordState.ARCHIVED):
                break
            self._window.pop(self.start_offset, None)
            self.start_offset += 1

    # -- moving the window -----------------------------------------------------------------------

    def move_start(self, offset: int) -> None:
        """Start at `offset`: the log's start moved past records (retention, DeleteRecords) or an
        administrator reset the group's offsets. Records before it are forgotten."""
        for old in [o for o in self._window if o < offset]:
            del self._window[old]
        self.start_offset = offset
        self.end_offset = max(self.end_offset, offset)
        self._advance_start()

    # -- persistence -----------------------------------------------------------------------------

    def snapshot(self) -> list[StateBatch]:
        """The in-flight window as Kafka persists it: runs of equal state and delivery count.
        A lock does not survive a restart, so ACQUIRED is written as AVAILABLE."""
        runs: list[StateBatch] = []
        for offset in range(self.start_offset, self.end_offset):
            entry = self._window.get(offset)
            if entry is None:
                continue
            state = RecordState.AVAILABLE if entry.state is RecordState.ACQUIRED else entry.state
            last = runs[-1] if runs else None
            if (last is not None and last.last_offset == offset - 1 and last.state is state
                    and last.delivery_count == entry.delivery_count):
                runs[-1] = StateBatch(last.first_offset, offset, state, entry.delivery_count)
            else:
                runs.append(StateBatch(offset, offset, state, entry.delivery_count))
        return runs

    @classmethod
    def restore(cls, start_offset: int, batches: Iterable[StateBatch], limits: ShareLimits,
                state_epoch: int = 0) -> PerOffsetSharePartition:
        """The partition as a snapshot left it: every listed offset back in its state, the
        window's end after the last of them."""
        partition = cls(start_offset, limits, state_epoch=state_epoch)
        for batch in batches:
            for offset in range(max(batch.first_offset, start_offset), batch.last_offset + 1):
                state = RecordState.AVAILABLE if batch.state is RecordState.ACQUIRED else batch.state
                partition._window[offset] = _InFlight(state, batch.delivery_count)
                partition.end_offset = max(partition.end_offset, offset + 1)
        # Offsets inside the window that no batch names were never acquired: available, undelivered.
        for offset in range(start_offset, partition.end_offset):
            partition._window.setdefault(offset, _InFlight(RecordState.AVAILABLE, 0))
        partition._advance_start()
        return partition


def _ranges(taken: list[tuple[int, int]]) -> Iterator[AcquiredRange]:
    """Consecutive offsets with the same delivery count as one range."""
    run: list[int] | None = None  # [first, last, delivery count]
    for offset, count in taken:
        if run is not None and offset == run[1] + 1 and count == run[2]:
            run[1] = offset
            continue
        if run is not None:
            yield AcquiredRange(*run)
        run = [offset, offset, count]
    if run is not None:
        yield AcquiredRange(*run)
