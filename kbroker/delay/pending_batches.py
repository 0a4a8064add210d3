"""Pending batches and delivery batches: how delayed records live in the partition's own log.

A produced batch holding delayed records is stored as a *pending batch*: a control batch
(attribute bit 0x20) that keeps the producer's id, epoch, base sequence and transactional bit
and has one record per original record, at the same offset deltas, so idempotence,
transactions, replication and truncation treat it exactly as the batch it replaces. Kafka's
consumers never hand control records to applications: the Java consumer drops every record of
a control batch (CompletedFetch.nextFetchedRecord) and reads an unknown type as UNKNOWN
(ControlRecordType.parse); librdkafka logs "Unsupported ctrl message type" and skips it
(rdkafka_msgset_reader.c). Both insist on a 4-byte key of version 0.

Each pending record:

- key: the 4-byte control key, int16 version 0, int16 type `DELAYED_CONTROL_TYPE` (0x4B42,
  "KB"; Kafka uses 0 ABORT, 1 COMMIT and 2-6 for KRaft);
- timestamp: the original record's, so time-based lookups and tools see the produce time;
- value, version 0: int8 version | int64 due time (ms since the epoch) | int64 original
  timestamp | the original record in Kafka's own record encoding (varint length, attributes,
  timestamp delta 0, offset delta 0, key, value, headers), which `protocol.record_batch`
  already encodes and decodes. A later version can add fields after the int8.

At its due time the record is appended again as a *delivery*: an ordinary batch (not control,
not compressed, producer id -1, CreateTime) with the original key, value, headers and
timestamp, plus the header `kbroker.delayed.from: <topic>-<partition>@<pending offset>`. Its
attributes carry `DELIVERY_ATTRIBUTE` (bit 14, one Kafka does not use; clients read only the
bits they know, and the produce path refuses it from clients), so the delay index tells a
delivery from any other batch by one bit of its header, without looking inside.
A record's pending id is the offset of its pending record.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from aiokafka.errors import CorruptRecordException
from aiokafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from kbroker.delay.delay_headers import DELAYED_FROM_HEADER
from protocol.record_batch import (
    NONE,
    CorruptRecordError,
    Header,
    Record,
    decode_records,
    decompress,
    encode_batch,
    encode_control_key,
    read_varint,
    uncompressed_batch,
)
from protocol.records import (
    HEADER_SIZE,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    BatchHeader,
    read_header,
)

DELAYED_CONTROL_TYPE = 0x4B42
DELIVERY_ATTRIBUTE = 0x4000  # attribute bit 14: a delivery batch, written by the broker only
PENDING_VALUE_VERSION = 0
DELAYED_CONTROL_KEY = encode_control_key(DELAYED_CONTROL_TYPE)
_PENDING_PREFIX = struct.Struct(">bqq")  # version, due ms, original timestamp
_CONTROL_KEY = struct.Struct(">hh")
_NO_SIZE_LIMIT = 1 << 62  # the builder's batch size cap: the caller bounds its batches


@dataclass(slots=True)
class PendingRecord:
    """A delayed record as its pending record holds it."""

    due_ms: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: list[Header] = field(default_factory=list)
    # Its pending id: the offset of its pending record (-1 before it is in the log).
    offset: int = -1


# -- pending records ------------------------------------------------------------------------------


def encode_pending_value(record: Record, due_ms: int) -> bytes:
    """The value of the pending record that holds `record` until `due_ms`."""
    original = Record(0, record.timestamp, record.key, record.value, record.headers, record.attributes)
    return _PENDING_PREFIX.pack(PENDING_VALUE_VERSION, due_ms, record.timestamp) + _encode_in_c([original])


def _encode_in_c(records: Sequence[Record]) -> bytes:
    """The uncompressed record section of `records` (offset deltas as given, timestamps against
    the first one's), encoded by aiokafka's batch builder in C: byte for byte Kafka's encoding,
    three times faster than `encode_records`."""
    builder = DefaultRecordBatchBuilder(2, NONE, 0, NO_PRODUCER_ID, NO_PRODUCER_EPOCH, NO_SEQUENCE, _NO_SIZE_LIMIT)
    for record in records:
        builder.append(record.offset_delta, timestamp=record.timestamp, key=record.key, value=record.value,
                       headers=record.headers)
    return bytes(builder.build())[HEADER_SIZE:]


def decode_pending_value(value: bytes | None, offset: int = -1) -> PendingRecord:
    """The delayed record a pending record's value holds; CorruptRecordError if it is not one."""
    if value is None or len(value) < _PENDING_PREFIX.size:
        raise CorruptRecordError(f"pending record at offset {offset} has a value of "
                                 f"{'null' if value is None else len(value)} bytes")
    version, due_ms, timestamp = _PENDING_PREFIX.unpack_from(value)
    if version != PENDING_VALUE_VERSION:
        raise CorruptRecordError(f"pending record at offset {offset} has unknown version {version}")
    (original,) = decode_records(value[_PENDING_PREFIX.size:], 1, base_timestamp=timestamp)
    return PendingRecord(due_ms, timestamp, original.key, original.value, original.headers, offset)


def pending_due_ms(value: bytes) -> int:
    """The due time of a pending record's value, without decoding the original record."""
    return _PENDING_PREFIX.unpack_from(value)[1]


def encode_pending_batch(
    records: Sequence[Record],
    due_times: Sequence[int],
    *,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = NO_PRODUCER_EPOCH,
    base_sequence: int = NO_SEQUENCE,
    transactional: bool = False,
    compression: int = NONE,
    base_offset: int = 0,
    partition_leader_epoch: int = -1,
) -> bytes:
    """The pending batch that replaces a client batch of `records` (decoded, in order).

    `due_times[i]` is record i's due time; a record of the batch that asked for no delay is
    given its append time, so the batch keeps its order and is delivered in one piece. The
    producer fields are the client batch's, so duplicate detection and transactions still work.
    """
    if len(records) != len(due_times) or not records:
        raise ValueError(f"{len(records)} records and {len(due_times)} due times")
    pending = [Record(r.offset_delta, r.timestamp, DELAYED_CONTROL_KEY, encode_pending_value(r, due))
               for r, due in zip(records, due_times, strict=True)]
    return encode_batch(
        pending, compression=compression, base_offset=base_offset, producer_id=producer_id,
        producer_epoch=producer_epoch, base_sequence=base_sequence, transactional=transactional,
        control=True, partition_leader_epoch=partition_leader_epoch, encoded=_encode_in_c(pending),
    )


def control_type(batch: bytes | memoryview, header: BatchHeader) -> int | None:
    """The control type in the first record's key of a control batch, None if it has none.

    Reads a few varints of an uncompressed batch; decompresses a compressed one.
    """
    if not header.is_control or header.record_count < 1:
        return None
    if header.compression == NONE:
        records = memoryview(batch)[HEADER_SIZE:header.size]
    else:
        records = memoryview(decompress(header.compression, memoryview(batch)[HEADER_SIZE:header.size]))
    length, pos = read_varint(records, 0)
    end = min(pos + length, len(records))
    _, pos = read_varint(records, pos + 1, end)  # attributes byte, then timestamp delta
    _, pos = read_varint(records, pos, end)  # offset delta
    key_length, pos = read_varint(records, pos, end)
    if key_length < _CONTROL_KEY.size or pos + _CONTROL_KEY.size > end:
        return None
    return _CONTROL_KEY.unpack_from(records, pos)[1]


def is_pending_batch(batch: bytes | memoryview, header: BatchHeader) -> bool:
    return control_type(batch, header) == DELAYED_CONTROL_TYPE


def decode_pending_batch(batch: bytes | memoryview, header: BatchHeader) -> list[PendingRecord]:
    """The delayed records of a pending batch (whose CRC was checked when it was stored)."""
    return [decode_pending_value(value, offset) for offset, value in pending_values(batch, header)]


def pending_entries(batch: bytes | memoryview, header: BatchHeader) -> Iterator[tuple[int, int, int]]:
    """(offset, due ms, value size) of each pending record of a pending batch, from the first
    bytes of its value: what the delay index keeps, without decoding the delayed records."""
    for offset, value in pending_values(batch, header):
        if value is None or len(value) < _PENDING_PREFIX.size:
            raise CorruptRecordError(f"pending record at offset {offset} has a value of "
                                     f"{'null' if value is None else len(value)} bytes")
        yield offset, _PENDING_PREFIX.unpack_from(value)[1], len(value)


def pending_values(batch: bytes | memoryview, header: BatchHeader) -> Iterator[tuple[int, bytes | None]]:
    """(offset, value) of each record of a (pending) batch, walked in C by aiokafka's record
    iterator."""
    plain = bytes(uncompressed_batch(memoryview(batch)[: header.size], header))
    # The batch's bytes may say another base offset than the log's (a batch not yet assigned one).
    shift = header.base_offset - read_header(plain).base_offset
    try:
        for record in DefaultRecordBatch(plain):
            yield record.offset + shift, record.value
    except CorruptRecordException as e:
        raise CorruptRecordError(f"unreadable pending batch at offset {header.base_offset}: {e}") from None


# -- deliveries -----------------------------------------------------------------------------------


def batches_fitting(records: Sequence[PendingRecord], max_bytes: int, overhead: int) -> Iterator[list[PendingRecord]]:
    """Runs of `records`, in order, whose re-encoded batch fits `max_bytes` (a larger record goes
    alone), counting each record's key, value and headers plus `overhead` bytes (its framing
    and the headers the broker adds, generously)."""
    chunk: list[PendingRecord] = []
    size = HEADER_SIZE
    for record in records:
        record_size = overhead + len(record.key or b"") + len(record.value or b"") + sum(
            len(name) + len(value or b"") + 8 for name, value in record.headers)
        if chunk and size + record_size > max_bytes:
            yield chunk
            chunk, size = [], HEADER_SIZE
        chunk.append(record)
        size += record_size
    if chunk:
        yield chunk


def delayed_from(topic: str, partition: int, offset: int) -> bytes:
    """The `kbroker.delayed.from` value naming pending record `offset` of a partition."""
    return f"{topic}-{partition}@{offset}".encode()


def parse_delayed_from(value: bytes | None) -> tuple[str, int] | None:
    """(`<topic>-<partition>`, pending offset) of a `kbroker.delayed.from` value; None if malformed."""
    if value is None:
        return None
    source, at, offset = value.rpartition(b"@")
    if not at or not offset.isdigit():
        return None
    try:
        return source.decode(), int(offset)
    except UnicodeDecodeError:
        return None


def encode_delivery_batch(
    topic: str,
    partition: int,
    due: Sequence[PendingRecord],
    *,
    base_offset: int = 0,
    partition_leader_epoch: int = -1,
) -> bytes:
    """The batch that delivers `due` (in that order): what consumers finally see."""
    if not due:
        raise ValueError("a delivery batch needs at least one record")
    records = []
    for delta, pending in enumerate(due):
        source = (DELAYED_FROM_HEADER, delayed_from(topic, partition, pending.offset))
        records.append(Record(delta, pending.timestamp, pending.key, pending.value, [*pending.headers, source]))
    return encode_batch(records, base_offset=base_offset, partition_leader_epoch=partition_leader_epoch,
                        extra_attributes=DELIVERY_ATTRIBUTE)


def is_delivery_batch(header: BatchHeader) -> bool:
    return bool(header.attributes & DELIVERY_ATTRIBUTE)
