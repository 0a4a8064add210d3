"""A partition's pending delayed records, fed from its log batches.

The pending store is the partition's log itself (see `pending_batches`): a record is pending
while its pending record is in the log and its delivery is not. This index is that state kept
in memory, so it is exactly-once by construction: it is built by `on_batch` from the batches
of the log in offset order, the same code for a leader's appends, a follower's appends and a
log loaded from disk, and `truncate` undoes what truncated batches did.

What it keeps, per pending record (compact columns sorted by offset, ~21 bytes an entry, plus
16 in the timing wheel): its offset (its pending id), due time, size and state:

- HELD: of a transaction whose marker is not in the log yet. Held records are not in the
  wheel; the COMMIT marker schedules them, the ABORT marker drops them. This is the "not
  before the transaction is decided" rule; it holds back only the records of the open
  transaction itself, not every record after the LSO, because a delivery is appended at the
  log end and read_committed consumers see it only past the LSO anyway;
- SCHEDULED: in the timing wheel;
- IN_FLIGHT: handed out by `collect_due`, its delivery not seen yet (the mover is appending
  it); `release_in_flight` reschedules them when that append fails or leadership moves;
- DELIVERED / ABORTED: done, but by a batch at or above the high watermark that a follower's
  truncation may still remove; kept (with the delivering offset, or the marker) so `truncate`
  can put them back;
- GONE: done below the high watermark: dropped from the columns at the next compaction.

Deliveries are recognised only in batches marked as deliveries (`DELIVERY_ATTRIBUTE`, an
attribute bit only the broker writes) and only while the index holds entries: every other
batch costs one test of its header, never a look inside. A delivery names its partition; a
record copied from another partition (MirrorMaker, a retry topic) is not taken for one of ours.

Not thread-safe: the partition's owner calls it, as it appends.
"""

from __future__ import annotations

import itertools
from array import array
from bisect import bisect_left
from dataclasses import dataclass, field
from enum import IntEnum

from kbroker.clock import WallClock, wall_clock_ms
from kbroker.delay.delay_headers import DELAYED_FROM_HEADER
from kbroker.delay.forward_batches import (
    FORWARD_CONTROL_TYPE,
    FORWARD_DONE_CONTROL_TYPE,
    decode_forward_batch,
    decode_forward_done,
)
from kbroker.delay.pending_batches import (
    DELAYED_CONTROL_TYPE,
    control_type,
    is_delivery_batch,
    parse_delayed_from,
    pending_entries,
)
from kbroker.delay.timing_wheel import DEFAULT_TICK_MS, DEFAULT_WHEEL_SIZE, TimingWheel
from protocol.record_batch import ControlType, decode_payload
from protocol.records import BatchHeader, read_header


class EntryState(IntEnum):
    HELD = 0
    SCHEDULED = 1
    IN_FLIGHT = 2
    DELIVERED = 3
    ABORTED = 4
    GONE = 5


_LIVE = (EntryState.HELD, EntryState.SCHEDULED, EntryState.IN_FLIGHT)
# states.translate(_KEEP): 1 for entries a compaction keeps, 0 for GONE ones.
_KEEP = bytes(0 if s == EntryState.GONE else 1 for s in range(256))
# states.translate(_LIVE_MASK): 1 for pending entries.
_LIVE_MASK = bytes(1 if s in _LIVE else 0 for s in range(256))
_SCHEDULED_MASK = bytes(1 if s == EntryState.SCHEDULED else 0 for s in range(256))
_IN_FLIGHT_TO_SCHEDULED = bytes(EntryState.SCHEDULED if s == EntryState.IN_FLIGHT else s for s in range(256))
_COMPACT_AT_LEAST = 4096


class TruncatedBelowHighWatermark(Exception):
    """A truncation below what the index can undo: rebuild it from a snapshot at or below the
    truncation offset and the log after it (Kafka does the same with producer snapshots)."""


@dataclass(slots=True)
class Resolution:
    """A transaction marker at or above the high watermark, and the held records it decided."""

    marker_offset: int
    producer_id: int
    committed: bool
    offsets: array


@dataclass(slots=True)
class IndexState:
    """Everything the index holds, as columns: what a snapshot stores."""

    end_offset: int = 0  # the log offset the state covers: batches below it were applied
    floor: int = 0  # the high watermark: nothing below it will be truncated
    offsets: array = field(default_factory=lambda: array("q"))
    dues: array = field(default_factory=lambda: array("q"))
    sizes: array = field(default_factory=lambda: array("i"))
    states: bytearray = field(default_factory=bytearray)
    deliveries_at: array = field(default_factory=lambda: array("q"))  # delivery offset, >= floor
    delivered: array = field(default_factory=lambda: array("q"))  # the pending offset it delivered
    open_txns: dict[int, array] = field(default_factory=dict)  # producer id -> held offsets
    resolutions: list[Resolution] = field(default_factory=list)
    # Retry topics: the forward batch whose target batches may not all be acknowledged (-1:
    # none) and the lowest pending offset it names (retention keeps it: the batch may have to
    # be appended again), as of the floor; and the forward batches and done markers at or
    # above it as (offset, the forward batch left unconfirmed: the batch's own offset or -1
    # after a done marker, its lowest pending offset or -1), so a truncation can undo them.
    unconfirmed_forward: int = -1
    unconfirmed_forward_low: int = -1
    forward_events_at: array = field(default_factory=lambda: array("q"))
    forward_events: array = field(default_factory=lambda: array("q"))
    forward_event_lows: array = field(default_factory=lambda: array("q"))


class DelayIndex:
    """One partition's pending delayed records: what is due when, and what was delivered."""

    def __init__(self, topic: str, partition: int, *, clock: WallClock = wall_clock_ms,
                 tick_ms: int = DEFAULT_TICK_MS, wheel_size: int = DEFAULT_WHEEL_SIZE,
                 state: IndexState | None = None) -> None:
        self.topic = topic
        self.partition = partition
        self._source = f"{topic}-{partition}"
        self._clock = clock
        self._wheel = TimingWheel(tick_ms=tick_ms, wheel_size=wheel_size, start_ms=clock())
        self._s = state or IndexState()
        self._in_flight: set[int] = set()
        self._restore()

    # -- reading --------------------------------------------------------------------------------

    @property
    def pending_count(self) -> int:
        """Records pending: held, scheduled or in flight."""
        return self._pending_count

    @property
    def pending_bytes(self) -> int:
        """The bytes of their pending records' values (what a delivery will copy)."""
        return self._pending_bytes

    @property
    def end_offset(self) -> int:
        """The next log offset the index expects: batches below it were applied."""
        return self._s.end_offset

    def next_due(self) -> int | None:
        """When to call `collect_due` next: never after the earliest scheduled due time."""
        return self._wheel.next_due_ms()

    def held_count(self) -> int:
        """Records of transactions not decided yet (O(entries): for describing the partition)."""
        return self._s.states.count(EntryState.HELD)

    def earliest_due(self) -> int | None:
        """The exact earliest due time of the scheduled records, None if none is scheduled (held
        ones have no due time until their commit, in-flight ones are being delivered). Unlike
        `next_due`, never a bucket's start or a stale entry's time: it is for describing the
        partition, so it scans the columns (O(entries), one temporary byte an entry)."""
        scheduled = self._s.states.translate(_SCHEDULED_MASK)
        return min(itertools.compress(self._s.dues, scheduled), default=None)

    def state_of(self, offset: int) -> EntryState | None:
        """The state of the pending record at `offset`, None if the index has none there."""
        i = self._locate(offset)
        return None if i is None else EntryState(self._s.states[i])

    def is_pending(self, offset: int) -> bool:
        """Whether `offset` holds a record still waiting for its delivery."""
        return self.state_of(offset) in _LIVE

    def due_time(self, offset: int) -> int | None:
        i = self._locate(offset)
        return None if i is None else self._s.dues[i]

    def lowest_pending_offset(self) -> int | None:
        """The offset of the oldest record still pending, or named by the unconfirmed forward
        batch of a retry topic: retention must keep it in the log."""
        s = self._s
        first = s.states.translate(_LIVE_MASK).find(1)
        lowest = None if first < 0 else s.offsets[first]
        forward_low = s.forward_event_lows[-1] if s.forward_events else s.unconfirmed_forward_low
        if forward_low >= 0 and (lowest is None or forward_low < lowest):
            lowest = forward_low
        return lowest

    def pending_offsets(self) -> list[int]:
        """Every pending record's offset, ascending (for describing the partition)."""
        return list(itertools.compress(self._s.offsets, self._s.states.translate(_LIVE_MASK)))

    def unconfirmed_forward_batch(self) -> int | None:
        """The base offset of the forward batch (retry topics) whose target batches may not all
        be acknowledged: the newest one, unless a done marker followed it. A leader appends its
        target batches (again) before forwarding anything else."""
        s = self._s
        current = s.forward_events[-1] if s.forward_events else s.unconfirmed_forward
        return None if current < 0 else current

    def state(self) -> IndexState:
        """The index's state (live: do not change it), for a snapshot."""
        return self._s

    # -- the log --------------------------------------------------------------------------------

    def on_batch(self, base_offset: int, batch: bytes | bytearray | memoryview) -> None:
        """Apply one batch appended to the log at `base_offset` (its CRC checked already).

        Batches must come in log order; a batch wholly below `end_offset` was applied before
        (a rescan after a snapshot may start a little early) and is skipped.
        """
        header = read_header(batch)._replace(base_offset=base_offset)
        end = header.last_offset + 1
        if end <= self._s.end_offset:
            return
        if base_offset < self._s.end_offset:
            raise ValueError(f"{self._source}: batch at {base_offset}..{end - 1} overlaps applied offsets "
                             f"below {self._s.end_offset}; truncate first")
        if header.is_control:
            self._on_control_batch(header, batch)
        elif self._s.offsets and is_delivery_batch(header):
            self._on_delivery_batch(header, batch)
        self._s.end_offset = end

    def needs_batch(self, header: BatchHeader) -> bool:
        """Whether `on_batch` would look inside a batch of this header. When not, the log calls
        `skip_to` instead and never reads the batch: every batch but control batches and
        deliveries (on a partition with pending records) costs one header test."""
        return header.is_control or (bool(self._s.offsets) and is_delivery_batch(header))

    def skip_to(self, end_offset: int) -> None:
        """Batches below `end_offset` were appended that change nothing here (see `needs_batch`)."""
        if end_offset > self._s.end_offset:
            self._s.end_offset = end_offset

    def aborted(self, producer_id: int, first_offset: int, last_offset: int) -> None:
        """A transaction of `producer_id` from `first_offset` was aborted by its marker at
        `last_offset` (an AbortedTxn entry). Its held records are dropped. The index also sees
        markers in `on_batch`; this hook is for callers that learn of the abort otherwise."""
        held = self._s.open_txns.get(producer_id)
        if held is None:
            return
        self._resolve(producer_id, committed=False, marker_offset=last_offset,
                      within=(first_offset, last_offset))

    def on_high_watermark(self, high_watermark: int) -> None:
        """Offsets below `high_watermark` are committed and will not be truncated: forget how to
        undo the deliveries and aborts there."""
        s = self._s
        if high_watermark <= s.floor:
            return
        s.floor = high_watermark
        cut = bisect_left(s.deliveries_at, high_watermark)
        for offset in s.delivered[:cut]:
            self._set_gone(offset, EntryState.DELIVERED)
        del s.deliveries_at[:cut]
        del s.delivered[:cut]
        cut = bisect_left(s.forward_events_at, high_watermark)
        if cut:
            s.unconfirmed_forward = s.forward_events[cut - 1]
            s.unconfirmed_forward_low = s.forward_event_lows[cut - 1]
            del s.forward_events_at[:cut], s.forward_events[:cut], s.forward_event_lows[:cut]
        while s.resolutions and s.resolutions[0].marker_offset < high_watermark:
            resolution = s.resolutions.pop(0)
            if not resolution.committed:
                for offset in resolution.offsets:
                    self._set_gone(offset, EntryState.ABORTED)
        self._maybe_compact()

    def truncate(self, offset: int) -> None:
        """The log was truncated to `offset` (a follower's truncation): undo every batch at or
        above it. Raises TruncatedBelowHighWatermark below the high watermark given."""
        s = self._s
        if offset >= s.end_offset:
            return
        if offset < s.floor:
            raise TruncatedBelowHighWatermark(
                f"{self._source}: truncation to {offset} is below the high watermark {s.floor}")
        self._drop_entries_from(offset)
        cut = bisect_left(s.forward_events_at, offset)
        del s.forward_events_at[cut:], s.forward_events[cut:], s.forward_event_lows[cut:]
        rescheduled = self._undo_deliveries_from(offset)
        self._undo_resolutions_from(offset)
        for i in rescheduled:
            if s.states[i] == EntryState.SCHEDULED:
                self._wheel.add(s.dues[i], s.offsets[i])
        s.end_offset = offset

    # -- due records ----------------------------------------------------------------------------

    def collect_due(self, now_ms: int | None = None, limit: int | None = None) -> list[int]:
        """The pending offsets due by `now_ms`, in (due, offset) order, now IN_FLIGHT: the
        leader reads their pending records and appends their delivery."""
        now_ms = self._clock() if now_ms is None else now_ms
        s = self._s
        due: list[int] = []
        # Stale wheel entries do not count against `limit`: pull until it is reached or none is due.
        while entries := self._wheel.advance_entries(now_ms, None if limit is None else limit - len(due)):
            for due_ms, offset in entries:
                i = self._locate(offset)
                # A wheel entry is stale if its record was delivered, truncated away or rescheduled.
                if i is None or s.states[i] != EntryState.SCHEDULED or s.dues[i] != due_ms:
                    continue
                s.states[i] = EntryState.IN_FLIGHT
                self._in_flight.add(offset)
                due.append(offset)
            if limit is None or len(due) >= limit:
                break
        return due

    def release_in_flight(self, offsets: list[int] | None = None) -> None:
        """Reschedule in-flight records (all, or `offsets`) whose delivery was not appended:
        an append failed, or this replica stopped being the leader."""
        s = self._s
        for offset in sorted(self._in_flight if offsets is None else set(offsets) & self._in_flight):
            self._in_flight.discard(offset)
            i = self._locate(offset)
            if i is not None and s.states[i] == EntryState.IN_FLIGHT:
                s.states[i] = EntryState.SCHEDULED
                self._wheel.add(s.dues[i], offset)

    # -- applying batches -----------------------------------------------------------------------

    def _on_control_batch(self, header: BatchHeader, batch: bytes | bytearray | memoryview) -> None:
        kind = control_type(batch, header)
        if kind == DELAYED_CONTROL_TYPE:
            self._add_pending(header, batch)
        elif kind == FORWARD_CONTROL_TYPE:
            self._on_forward_batch(header, batch)
        elif kind == FORWARD_DONE_CONTROL_TYPE:
            if decode_forward_done(batch, header) == self.unconfirmed_forward_batch():
                self._forward_event(header.base_offset, -1, -1)
        elif kind in (ControlType.ABORT, ControlType.COMMIT) and header.producer_id in self._s.open_txns:
            self._resolve(header.producer_id, committed=kind == ControlType.COMMIT, marker_offset=header.base_offset)

    def _add_pending(self, header: BatchHeader, batch: bytes | bytearray | memoryview) -> None:
        s = self._s
        held = header.is_transactional
        state = EntryState.HELD if held else EntryState.SCHEDULED
        added = array("q")
        for offset, due_ms, size in pending_entries(batch, header):
            s.offsets.append(offset)
            s.dues.append(due_ms)
            s.sizes.append(size)
            s.states.append(state)
            self._pending_bytes += size
            added.append(offset)
            if not held:
                self._wheel.add(due_ms, offset)
        self._pending_count += len(added)
        if held:
            s.open_txns.setdefault(header.producer_id, array("q")).extend(added)

    def _resolve(self, producer_id: int, *, committed: bool, marker_offset: int,
                 within: tuple[int, int] | None = None) -> None:
        s = self._s
        held = s.open_txns.pop(producer_id)
        if within is not None:
            first, last = within
            decided = array("q", (o for o in held if first <= o <= last))
            rest = array("q", (o for o in held if not first <= o <= last))
            if rest:
                s.open_txns[producer_id] = rest
            held = decided
        for offset in held:
            i = self._locate(offset)
            if i is None or s.states[i] != EntryState.HELD:
                continue
            if committed:
                s.states[i] = EntryState.SCHEDULED
                self._wheel.add(s.dues[i], offset)
            else:
                s.states[i] = EntryState.ABORTED
                self._pending_count -= 1
                self._pending_bytes -= s.sizes[i]
        s.resolutions.append(Resolution(marker_offset, producer_id, committed, held))

    def _on_delivery_batch(self, header: BatchHeader, batch: bytes | bytearray | memoryview) -> None:
        for record in decode_payload(batch, header):
            for name, value in record.headers:
                if name != DELAYED_FROM_HEADER:
                    continue
                parsed = parse_delayed_from(value)
                if parsed is not None and parsed[0] == self._source:
                    self._mark_delivered(parsed[1], record.offset)

    def _on_forward_batch(self, header: BatchHeader, batch: bytes | bytearray | memoryview) -> None:
        """A retry topic's forward batch: its records' pending offsets are done (delivered to
        another topic), as a delivery in this log would make them."""
        forwards = decode_forward_batch(batch, header)
        low = min((o for forward in forwards for o in forward.pending_offsets), default=header.base_offset)
        self._forward_event(header.base_offset, header.base_offset, low)
        for forward in forwards:
            for pending in forward.pending_offsets:
                self._mark_delivered(pending, forward.offset)

    def _forward_event(self, at: int, unconfirmed: int, low: int) -> None:
        s = self._s
        s.forward_events_at.append(at)
        s.forward_events.append(unconfirmed)
        s.forward_event_lows.append(low)

    def _mark_delivered(self, pending: int, delivery_offset: int) -> None:
        s = self._s
        i = self._locate(pending)
        if i is None or s.states[i] not in (EntryState.SCHEDULED, EntryState.IN_FLIGHT):
            return
        self._in_flight.discard(pending)
        s.states[i] = EntryState.DELIVERED
        self._pending_count -= 1
        self._pending_bytes -= s.sizes[i]
        s.deliveries_at.append(delivery_offset)
        s.delivered.append(pending)

    # -- truncation -----------------------------------------------------------------------------

    def _drop_entries_from(self, offset: int) -> None:
        s = self._s
        cut = bisect_left(s.offsets, offset)
        for i in range(cut, len(s.offsets)):
            state = s.states[i]
            if state in _LIVE:
                self._pending_count -= 1
                self._pending_bytes -= s.sizes[i]
            elif state == EntryState.GONE:
                self._gone -= 1
            self._in_flight.discard(s.offsets[i])
        del s.offsets[cut:], s.dues[cut:], s.sizes[cut:], s.states[cut:]
        for producer_id, held in list(s.open_txns.items()):
            del held[bisect_left(held, offset):]
            if not held:
                del s.open_txns[producer_id]

    def _undo_deliveries_from(self, offset: int) -> list[int]:
        s = self._s
        cut = bisect_left(s.deliveries_at, offset)
        rescheduled = []
        for pending in s.delivered[cut:]:
            i = self._locate(pending)
            if i is not None and s.states[i] == EntryState.DELIVERED:
                s.states[i] = EntryState.SCHEDULED
                self._pending_count += 1
                self._pending_bytes += s.sizes[i]
                rescheduled.append(i)
        del s.deliveries_at[cut:], s.delivered[cut:]
        return rescheduled

    def _undo_resolutions_from(self, offset: int) -> None:
        s = self._s
        while s.resolutions and s.resolutions[-1].marker_offset >= offset:
            resolution = s.resolutions.pop()
            held = resolution.offsets
            del held[bisect_left(held, offset):]
            for pending in held:
                i = self._locate(pending)
                if i is None:
                    continue
                if s.states[i] == EntryState.ABORTED:
                    self._pending_count += 1
                    self._pending_bytes += s.sizes[i]
                self._in_flight.discard(pending)
                s.states[i] = EntryState.HELD
            if held:
                still_open = s.open_txns.get(resolution.producer_id, array("q"))
                s.open_txns[resolution.producer_id] = array("q", sorted({*still_open, *held}))

    # -- bookkeeping ----------------------------------------------------------------------------

    def _locate(self, offset: int) -> int | None:
        offsets = self._s.offsets
        i = bisect_left(offsets, offset)
        return i if i < len(offsets) and offsets[i] == offset else None

    def _set_gone(self, offset: int, expected: EntryState) -> None:
        i = self._locate(offset)
        if i is not None and self._s.states[i] == expected:
            self._s.states[i] = EntryState.GONE
            self._gone += 1

    def _maybe_compact(self) -> None:
        """Drop GONE entries once they are at least half the columns (amortised O(1))."""
        s = self._s
        if self._gone < _COMPACT_AT_LEAST or self._gone * 2 < len(s.offsets):
            return
        keep = s.states.translate(_KEEP)
        s.offsets = array("q", itertools.compress(s.offsets, keep))
        s.dues = array("q", itertools.compress(s.dues, keep))
        s.sizes = array("i", itertools.compress(s.sizes, keep))
        s.states = bytearray(itertools.compress(s.states, keep))
        self._gone = 0

    def _restore(self) -> None:
        """Counters and the wheel from the state columns (a new index, or one from a snapshot).

        Nothing is in flight after a restart: those records are scheduled again.
        """
        s = self._s
        s.states = s.states.translate(_IN_FLIGHT_TO_SCHEDULED)
        live = s.states.translate(_LIVE_MASK)
        self._pending_count = live.count(1)
        self._pending_bytes = sum(itertools.compress(s.sizes, live))
        self._gone = s.states.count(EntryState.GONE)
        add = self._wheel.add
        scheduled = s.states.translate(_SCHEDULED_MASK)
        for due_ms, offset in itertools.compress(zip(s.dues, s.offsets, strict=True), scheduled):
            add(due_ms, offset)
