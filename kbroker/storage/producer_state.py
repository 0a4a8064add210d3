"""Per-partition producer state: what idempotence and transactions need to know about each writer.

For every producer id that wrote to the partition the log keeps its epoch, the metadata of its
last five batches (sequences and the offsets they got), the coordinator epoch of its last
transaction marker and, while a transaction is open, where it began. From that:

- a retried batch (same epoch and sequences as one of the last five) is answered with the offsets
  it got the first time and is not written again;
- a batch out of sequence is refused with OUT_OF_ORDER_SEQUENCE_NUMBER, an older epoch with
  INVALID_PRODUCER_EPOCH;
- the first unstable offset (the start of the oldest open transaction) bounds what read_committed
  consumers may see.

The state is rebuilt on start from the newest `<offset>.snapshot` file plus the batches after it,
reading batch headers only (and the one record of each transaction marker). Validation follows
Kafka's ProducerAppendInfo; the snapshot files use Kafka's layout (version 1).
"""

from __future__ import annotations

import enum
import logging
import struct
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

import crc32c

from kbroker.delay.pending_batches import is_pending_batch
from kbroker.fsutil import write_atomically
from kbroker.storage.index import segment_file_name
from kbroker.storage.txn_index import AbortedTxn
from protocol.errors import ErrorCode, KafkaError
from protocol.record_batch import (
    ControlType,
    CorruptRecordError,
    decode_control_key,
    decode_end_txn_marker,
    decode_payload,
)
from protocol.records import NO_PRODUCER_EPOCH, NO_SEQUENCE, BatchHeader

log = logging.getLogger("kbroker.storage")

SNAPSHOT_SUFFIX = ".snapshot"
BATCHES_RETAINED = 5  # the most in-flight requests an idempotent producer may have per partition
INT32_MAX = 2**31 - 1
SNAPSHOT_VERSION = 1
_SNAPSHOT_HEAD = struct.Struct(">hIi")  # version, crc32c of what follows the crc, entry count
_SNAPSHOT_ENTRY = struct.Struct(">qhiqiqiq")


class AppendOrigin(enum.Enum):
    """Who is appending, which decides how much is checked (Kafka's AppendOrigin)."""

    CLIENT = "client"  # producers: epochs and sequences checked, duplicates detected
    COORDINATOR = "coordinator"  # the broker's coordinators: markers and offsets, epochs checked
    REPLICATION = "replication"  # a follower copying its leader: already checked there


class BatchMetadata(NamedTuple):
    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int
    timestamp: int


class CompletedTxn(NamedTuple):
    producer_id: int
    first_offset: int
    last_offset: int  # the marker's offset
    aborted: bool


@dataclass(slots=True)
class ProducerStateEntry:
    producer_id: int
    producer_epoch: int = NO_PRODUCER_EPOCH
    batches: deque[BatchMetadata] = field(default_factory=lambda: deque(maxlen=BATCHES_RETAINED))
    coordinator_epoch: int = -1
    last_timestamp: int = -1
    current_txn_start_offset: int = -1  # -1: no open transaction

    def copy(self) -> ProducerStateEntry:
        return ProducerStateEntry(self.producer_id, self.producer_epoch, deque(self.batches, maxlen=BATCHES_RETAINED),
                                  self.coordinator_epoch, self.last_timestamp, self.current_txn_start_offset)

    @property
    def last_sequence(self) -> int:
        return self.batches[-1].last_seq if self.batches else NO_SEQUENCE

    @property
    def last_offset(self) -> int:
        return self.batches[-1].last_offset if self.batches else -1

    @property
    def has_open_transaction(self) -> bool:
        return self.current_txn_start_offset >= 0

    def find_duplicate(self, header: BatchHeader) -> BatchMetadata | None:
        if header.producer_epoch != self.producer_epoch:
            return None
        last_seq = _last_sequence(header)
        for batch in self.batches:
            if batch.first_seq == header.base_sequence and batch.last_seq == last_seq:
                return batch
        return None

    def add_batch(self, epoch: int, batch: BatchMetadata) -> None:
        if epoch != self.producer_epoch:
            self.batches.clear()
            self.producer_epoch = epoch
        self.batches.append(batch)
        self.last_timestamp = batch.timestamp


def _last_sequence(header: BatchHeader) -> int:
    if header.base_sequence == NO_SEQUENCE:
        return NO_SEQUENCE
    return (header.base_sequence + header.last_offset_delta) % (INT32_MAX + 1)


def _in_sequence(last_seq: int, next_seq: int) -> bool:
    return next_seq == last_seq + 1 or (next_seq == 0 and last_seq == INT32_MAX)


class ProducerAppend:
    """The state changes of one append, checked batch by batch and applied only if all pass."""

    def __init__(self, state: ProducerStateManager, origin: AppendOrigin, partition: str) -> None:
        self._state = state
        self.origin = origin
        self.partition = partition
        self.updated: dict[int, ProducerStateEntry] = {}
        self.started: list[tuple[int, int]] = []  # (producer id, first offset) of transactions begun
        self.completed: list[CompletedTxn] = []

    def _entry(self, producer_id: int) -> ProducerStateEntry:
        entry = self.updated.get(producer_id)
        if entry is None:
            current = self._state.producers.get(producer_id)
            entry = current.copy() if current is not None else ProducerStateEntry(producer_id)
            self.updated[producer_id] = entry
        return entry

    def data_batch(self, header: BatchHeader) -> None:
        """A batch whose offsets are assigned; raises KafkaError when the producer may not write it."""
        entry = self._entry(header.producer_id)
        self._check_epoch(entry, header.producer_epoch, header.base_offset)
        if self.origin is AppendOrigin.CLIENT:
            self._check_sequence(entry, header)
        entry.add_batch(header.producer_epoch, BatchMetadata(header.base_sequence, _last_sequence(header),
                                                             header.base_offset, header.last_offset,
                                                             header.max_timestamp))
        if entry.has_open_transaction and not header.is_transactional:
            raise KafkaError(ErrorCode.INVALID_TXN_STATE,
                             f"producer {header.producer_id} wrote a non-transactional batch at offset "
                             f"{header.base_offset} of {self.partition} inside a transaction")
        if not entry.has_open_transaction and header.is_transactional:
            entry.current_txn_start_offset = header.base_offset
            self.started.append((header.producer_id, header.base_offset))

    def control_batch(self, header: BatchHeader, batch: bytes | bytearray | memoryview) -> None:
        """A control batch (its bytes): a COMMIT/ABORT marker ends the transaction, a pending batch
        of delayed records counts as a data batch, others change nothing.

        Raises INVALID_RECORD for a marker whose record cannot be read.
        """
        if is_pending_batch(batch, header):
            # A pending batch stands for the producer's own batch (delayed delivery): it moves the
            # sequence, epoch and transaction exactly as that batch would have.
            self.data_batch(header)
            return
        marker = _end_txn_marker(batch, header)
        if marker is not None:
            self.end_marker(header, *marker)

    def end_marker(self, header: BatchHeader, aborted: bool, coordinator_epoch: int, timestamp: int) -> None:
        """A COMMIT or ABORT control batch ends the producer's transaction on this partition."""
        entry = self._entry(header.producer_id)
        self._check_epoch(entry, header.producer_epoch, header.base_offset)
        if entry.coordinator_epoch > coordinator_epoch and self.origin is not AppendOrigin.REPLICATION:
            raise KafkaError(ErrorCode.TRANSACTION_COORDINATOR_FENCED,
                             f"marker of producer {header.producer_id} from coordinator epoch {coordinator_epoch}, "
                             f"older than {entry.coordinator_epoch}")
        first_offset = entry.current_txn_start_offset if entry.has_open_transaction else header.base_offset
        self.completed.append(CompletedTxn(header.producer_id, first_offset, header.base_offset, aborted))
        if header.producer_epoch > entry.producer_epoch:
            entry.producer_epoch = header.producer_epoch
            entry.batches.clear()
        entry.current_txn_start_offset = -1
        entry.coordinator_epoch = coordinator_epoch
        entry.last_timestamp = timestamp

    def _check_epoch(self, entry: ProducerStateEntry, epoch: int, offset: int) -> None:
        if epoch >= entry.producer_epoch:
            return
        message = (f"epoch {epoch} of producer {entry.producer_id} at offset {offset} of {self.partition} "
                   f"is older than its last epoch {entry.producer_epoch}")
        if self.origin is AppendOrigin.REPLICATION:
            log.warning("%s", message)
            return
        # Kafka answers INVALID_PRODUCER_EPOCH here (not PRODUCER_FENCED) so the producer can abort and retry.
        raise KafkaError(ErrorCode.INVALID_PRODUCER_EPOCH, message)

    def _check_sequence(self, entry: ProducerStateEntry, header: BatchHeader) -> None:
        first_seq = header.base_sequence
        if header.producer_epoch != entry.producer_epoch:
            # A new epoch starts at sequence 0; a producer the partition does not know may start anywhere.
            if first_seq != 0 and entry.producer_epoch != NO_PRODUCER_EPOCH:
                raise KafkaError(ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                                 f"sequence {first_seq} for new epoch {header.producer_epoch} of producer "
                                 f"{entry.producer_id} in {self.partition}, expected 0")
            return
        if not _in_sequence(entry.last_sequence, first_seq):
            raise KafkaError(ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                             f"sequence {first_seq} of producer {entry.producer_id} in {self.partition} "
                             f"does not follow {entry.last_sequence}")


def _end_txn_marker(batch: bytes | bytearray | memoryview, header: BatchHeader) -> tuple[bool, int, int] | None:
    """(aborted, coordinator epoch, timestamp) of a COMMIT/ABORT control batch; None for other control batches."""
    try:
        records = decode_payload(batch, header)
        if not records:
            return None  # emptied by the cleaner
        key = decode_control_key(records[0].key)
        if key.type not in (ControlType.COMMIT, ControlType.ABORT):
            return None
        marker = decode_end_txn_marker(records[0].value)
    except (CorruptRecordError, KafkaError) as e:
        raise KafkaError(ErrorCode.INVALID_RECORD, f"unreadable transaction marker: {e}") from e
    return key.type == ControlType.ABORT, marker.coordinator_epoch, records[0].timestamp


@dataclass(frozen=True, slots=True)
class ProducerView:
    """What DescribeProducers shows of one producer."""

    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_timestamp: int
    coordinator_epoch: int
    current_txn_start_offset: int


class ProducerStateManager:
    def __init__(self, directory: Path, partition: str) -> None:
        self.directory = directory
        self.partition = partition
        self.producers: dict[int, ProducerStateEntry] = {}
        self.ongoing: dict[int, int] = {}  # producer id -> first offset of its open transaction
        self.map_end_offset = 0  # the state covers every batch below this offset
        self.latest_snapshot: int | None = None  # offset of the newest snapshot file this run wrote

    # -- appends ----------------------------------------------------------------------------------

    def find_duplicate(self, header: BatchHeader) -> BatchMetadata | None:
        entry = self.producers.get(header.producer_id)
        return entry.find_duplicate(header) if entry is not None else None

    def begin(self, origin: AppendOrigin) -> ProducerAppend:
        return ProducerAppend(self, origin, self.partition)

    def check_batches(
        self, buf: bytes | bytearray | memoryview, headers: Sequence[BatchHeader], origin: AppendOrigin
    ) -> ProducerAppend | None:
        """Check the producer fields of batches with assigned offsets (`buf` holds them, in order);
        nothing is applied until `commit`. None when no batch has a producer."""
        append = None
        position = 0
        for header in headers:
            if header.producer_id >= 0:
                if append is None:
                    append = self.begin(origin)
                if header.is_control:
                    append.control_batch(header, memoryview(buf)[position : position + header.size])
                else:
                    append.data_batch(header)
            position += header.size
        return append

    def commit(self, append: ProducerAppend, end_offset: int) -> list[AbortedTxn]:
        """Apply a checked append whose batches are now in the log (up to `end_offset`).

        Returns the aborted-transaction index entries of the transactions it aborted: their LSO
        depends on which transactions are still open once this append is applied.
        """
        self.producers.update(append.updated)
        for producer_id, first_offset in append.started:
            self.ongoing[producer_id] = first_offset
        for txn in append.completed:
            self.ongoing.pop(txn.producer_id, None)
        self.map_end_offset = end_offset
        return [AbortedTxn(txn.producer_id, txn.first_offset, txn.last_offset, self.stable_offset_after(txn))
                for txn in append.completed if txn.aborted]

    def first_unstable_offset(self) -> int | None:
        return min(self.ongoing.values()) if self.ongoing else None

    def stable_offset_after(self, txn: CompletedTxn) -> int:
        """Kafka's LSO stored with an aborted transaction: the next open transaction's start, or after the marker."""
        others = [offset for producer_id, offset in self.ongoing.items() if producer_id != txn.producer_id]
        return min(others) if others else txn.last_offset + 1

    def views(self) -> list[ProducerView]:
        return [ProducerView(e.producer_id, e.producer_epoch, e.last_sequence, e.last_timestamp,
                             e.coordinator_epoch, e.current_txn_start_offset)
                for e in self.producers.values()]

    def remove_expired(self, now_ms: int, expiration_ms: int) -> int:
        """Forget producers idle for `producer.id.expiration.ms` that have no open transaction."""
        expired = [pid for pid, e in self.producers.items()
                   if not e.has_open_transaction and now_ms - e.last_timestamp >= expiration_ms]
        for pid in expired:
            del self.producers[pid]
        return len(expired)

    def copy_from(self, other: ProducerStateManager, map_end_offset: int) -> None:
        """Take over `other`'s producers and open transactions (a copy of its log up to `map_end_offset`)."""
        self.producers = {pid: entry.copy() for pid, entry in other.producers.items()}
        self.ongoing = dict(other.ongoing)
        self.map_end_offset = map_end_offset

    def reset(self, offset: int) -> None:
        self.producers.clear()
        self.ongoing.clear()
        self.map_end_offset = offset

    # -- snapshots --------------------------------------------------------------------------------

    def snapshot_offsets(self) -> list[int]:
        offsets = []
        for path in self.directory.glob(f"*{SNAPSHOT_SUFFIX}"):
            stem = path.name[: -len(SNAPSHOT_SUFFIX)]
            if len(stem) == 20 and stem.isdigit():
                offsets.append(int(stem))
        return sorted(offsets)

    def _snapshot_path(self, offset: int) -> Path:
        return self.directory / segment_file_name(offset, SNAPSHOT_SUFFIX)

    def take_snapshot(self, *, sync: bool = True) -> Path:
        """Write the state at `map_end_offset` to `<offset>.snapshot` (atomically; fsynced if `sync`).

        Unsynced snapshots (a clean shutdown writes thousands) are safe: a torn one fails its CRC
        on load and an older snapshot plus a longer replay take its place.
        """
        entries = [
            _SNAPSHOT_ENTRY.pack(e.producer_id, e.producer_epoch, e.last_sequence, e.last_offset,
                                 _offset_delta(e), e.last_timestamp, e.coordinator_epoch, e.current_txn_start_offset)
            for e in self.producers.values()
        ]
        body = struct.pack(">i", len(entries)) + b"".join(entries)
        data = struct.pack(">hI", SNAPSHOT_VERSION, crc32c.crc32c(body)) + body
        path = self._snapshot_path(self.map_end_offset)
        write_atomically(path, data, durable=sync)
        self.latest_snapshot = self.map_end_offset
        return path

    def load_snapshot(self, at_most: int) -> int | None:
        """Load the newest readable snapshot at or below `at_most`; returns its offset (None: none)."""
        for offset in reversed(self.snapshot_offsets()):
            if offset > at_most:
                continue
            path = self._snapshot_path(offset)
            try:
                entries = _read_snapshot(path.read_bytes())
            except (OSError, ValueError) as e:
                log.warning("%s: deleting unreadable producer snapshot %s: %s", self.partition, path.name, e)
                path.unlink(missing_ok=True)
                continue
            self.reset(offset)
            for entry in entries:
                self.producers[entry.producer_id] = entry
                if entry.has_open_transaction:
                    self.ongoing[entry.producer_id] = entry.current_txn_start_offset
            self.latest_snapshot = offset
            return offset
        return None

    def delete_snapshots(self, *, below: int | None = None, above: int | None = None, keep: Iterable[int] = ()) -> None:
        kept = set(keep)
        for offset in self.snapshot_offsets():
            if offset in kept:
                continue
            if (below is not None and offset < below) or (above is not None and offset > above):
                self._snapshot_path(offset).unlink(missing_ok=True)
                if offset == self.latest_snapshot:
                    self.latest_snapshot = None


def _offset_delta(entry: ProducerStateEntry) -> int:
    last = entry.batches[-1] if entry.batches else None
    return last.last_offset - last.first_offset if last is not None else 0


def _read_snapshot(data: bytes) -> list[ProducerStateEntry]:
    if len(data) < _SNAPSHOT_HEAD.size:
        raise ValueError("shorter than its header")
    version, crc, count = _SNAPSHOT_HEAD.unpack_from(data)
    if version != SNAPSHOT_VERSION:
        raise ValueError(f"version {version}")
    if crc32c.crc32c(data[6:]) != crc:
        raise ValueError("CRC mismatch")
    if count < 0 or len(data) != _SNAPSHOT_HEAD.size + count * _SNAPSHOT_ENTRY.size:
        raise ValueError(f"{count} entries do not fit {len(data)} bytes")
    entries = []
    for pid, epoch, last_seq, last_offset, delta, timestamp, coordinator_epoch, txn_start in _SNAPSHOT_ENTRY.iter_unpack(
        data[_SNAPSHOT_HEAD.size :]
    ):
        entry = ProducerStateEntry(pid, epoch, coordinator_epoch=coordinator_epoch, last_timestamp=timestamp,
                                   current_txn_start_offset=txn_start)
        if last_offset >= 0:
            first_seq = last_seq if last_seq == NO_SEQUENCE else (last_seq - delta) % (INT32_MAX + 1)
            entry.batches.append(BatchMetadata(first_seq, last_seq, last_offset - delta, last_offset, timestamp))
        entries.append(entry)
    return entries
