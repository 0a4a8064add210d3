"""A partition log in memory for the delay index tests: batches at offsets, appends, truncation.

It stands in for the partition's log only (offset assignment and truncation); the batches in it
are the real encoded bytes the broker would store.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kbroker.delay.delay_index import DelayIndex
from kbroker.delay.forward_batches import ForwardRecord, encode_forward_batch, encode_forward_done_batch
from kbroker.delay.pending_batches import (
    PendingRecord,
    decode_pending_batch,
    encode_delivery_batch,
    encode_pending_batch,
)
from kbroker.delay.retries import Route
from protocol.record_batch import ControlType, Record, encode_batch, encode_end_txn_batch
from protocol.records import read_header, set_base_offset

TOPIC = "jobs"
PARTITION = 0


@dataclass
class MemoryLog:
    batches: list[tuple[int, bytes]] = field(default_factory=list)
    end_offset: int = 0
    followers: list[DelayIndex] = field(default_factory=list)

    def append(self, batch: bytes) -> int:
        """Append `batch` at the log end; every attached index applies it. Returns its base offset."""
        base = self.end_offset
        stored = bytearray(batch)
        set_base_offset(stored, 0, base)
        self.batches.append((base, bytes(stored)))
        self.end_offset = base + read_header(batch).last_offset_delta + 1
        for index in self.followers:
            index.on_batch(base, bytes(stored))
        return base

    def pending(self, due_times: list[int], *, producer_id: int = -1, transactional: bool = False,
                timestamp: int = 0) -> list[int]:
        """Append a pending batch of one record per due time; returns their offsets."""
        records = [Record(i, timestamp, f"k{i}".encode(), f"v{self.end_offset + i}".encode()) for i in
                   range(len(due_times))]
        base = self.append(encode_pending_batch(records, due_times, producer_id=producer_id, producer_epoch=0,
                                                base_sequence=0 if producer_id >= 0 else -1,
                                                transactional=transactional))
        return [base + i for i in range(len(due_times))]

    def plain(self, count: int = 1) -> int:
        return self.append(encode_batch([Record(i, 0, None, b"x") for i in range(count)]))

    def marker(self, producer_id: int, commit: bool) -> int:
        kind = ControlType.COMMIT if commit else ControlType.ABORT
        return self.append(encode_end_txn_batch(kind, producer_id=producer_id, producer_epoch=0,
                                                coordinator_epoch=0, timestamp=0))

    def records_at(self, offsets: list[int]) -> list[PendingRecord]:
        wanted = set(offsets)
        found: dict[int, PendingRecord] = {}
        for base, batch in self.batches:
            header = read_header(batch)
            if any(base <= o <= header.last_offset for o in wanted) and header.is_control:
                found.update((p.offset, p) for p in decode_pending_batch(batch, header) if p.offset in wanted)
        return [found[o] for o in offsets]

    def record_at(self, offset: int) -> PendingRecord:
        return self.records_at([offset])[0]

    def deliver(self, offsets: list[int], topic: str = TOPIC, partition: int = PARTITION) -> int:
        """Append the delivery of pending records `offsets`, as the leader's mover would."""
        return self.append(encode_delivery_batch(topic, partition, self.records_at(offsets)))

    def forward(self, offsets: list[int], target: str = "target", target_partition: int = 0,
                producer_id: int = 900, sequence: int = 0) -> int:
        """Append a retry topic's forward batch naming `offsets`, as the leader's forwarder would."""
        forward = ForwardRecord(Route.TARGET, 0, producer_id, 0, sequence, target, target_partition, tuple(offsets))
        return self.append(encode_forward_batch([forward]))

    def forward_done(self, forward_batch: int) -> int:
        return self.append(encode_forward_done_batch(forward_batch, 0))

    def truncate(self, offset: int) -> None:
        self.batches = [(b, batch) for b, batch in self.batches if b < offset]
        self.end_offset = offset
        for index in self.followers:
            index.truncate(offset)

    def replay(self, index: DelayIndex) -> DelayIndex:
        for base, batch in self.batches:
            index.on_batch(base, batch)
        return index


def view(index: DelayIndex) -> list[tuple[int, int, str]]:
    """The pending records of an index as (offset, due, HELD or SCHEDULED): what must match
    between indexes built differently from the same log (in flight counts as scheduled)."""
    state = index.state()
    out = []
    for offset, due, s in zip(state.offsets, state.dues, state.states, strict=True):
        if s in (0, 1, 2):
            out.append((offset, due, "HELD" if s == 0 else "SCHEDULED"))
    return out
