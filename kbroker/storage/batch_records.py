"""The records inside one v2 batch, for the few storage features that need them.

Compaction (keys), exact timestamp lookups and the null-key check of compacted topics decode
records; the produce and fetch paths never do. The codec is `protocol.record_batch`; this
module gives storage its view of a record: the raw timestamp delta (a LogAppendTime batch
keeps its producer's deltas), and batches rebuilt with their original header fields.
"""

from __future__ import annotations

from typing import NamedTuple

from protocol.errors import KafkaError
from protocol.record_batch import (
    GZIP,
    LZ4,
    NONE,
    SNAPPY,
    ZSTD,
    CorruptRecordError,
    Header,
    TimestampType,
    compress,
    decode_records,
    decompress,
    encode_batch,
    read_varint,
    write_varint,
)
from protocol.record_batch import Record as CodecRecord
from protocol.records import (
    COMPRESSION_MASK,
    CONTROL_BIT,
    DELETE_HORIZON_BIT,
    HEADER_SIZE,
    TIMESTAMP_TYPE_BIT,
    TRANSACTIONAL_BIT,
    BatchHeader,
    read_header,
)

__all__ = [
    "GZIP", "LZ4", "NONE", "SNAPPY", "ZSTD", "Record", "compress", "corrupt", "decompress", "read_varint",
    "rebuild_batch", "record_timestamp", "records_of", "write_varint",
]


class Record(NamedTuple):
    attributes: int
    timestamp_delta: int
    offset_delta: int
    key: bytes | None
    value: bytes | None
    headers: list[Header]


def corrupt(reason: str) -> KafkaError:
    return CorruptRecordError(reason)


def records_of(batch: bytes | memoryview, header: BatchHeader | None = None) -> list[Record]:
    """Decode every record of the batch starting at batch[0] (its CRC was checked when stored)."""
    header = header or read_header(batch)
    payload = decompress(header.compression, memoryview(batch)[HEADER_SIZE : header.size])
    base = header.base_timestamp
    return [
        Record(r.attributes, r.timestamp - base, r.offset_delta, r.key, r.value, r.headers)
        for r in decode_records(payload, header.record_count, base_timestamp=base)
    ]


def record_timestamp(header: BatchHeader, record: Record) -> int:
    """A record's timestamp: LogAppendTime batches give every record the batch's time."""
    if header.log_append_time:
        return header.max_timestamp
    return header.base_timestamp + record.timestamp_delta


def rebuild_batch(
    header: BatchHeader, records: list[Record], *, base_timestamp: int, attributes: int
) -> bytes:
    """A batch holding `records` with their original offsets and timestamps.

    `base_timestamp` may differ from the original (a delete horizon); timestamp deltas are
    recomputed so record timestamps stay the same. The compression codec and flags come from
    `attributes`.
    """
    timestamps = [header.base_timestamp + r.timestamp_delta for r in records]
    if header.log_append_time:
        max_timestamp = header.max_timestamp
    else:
        max_timestamp = max(timestamps, default=header.max_timestamp)
    return encode_batch(
        [CodecRecord(r.offset_delta, ts, r.key, r.value, r.headers, r.attributes)
         for r, ts in zip(records, timestamps, strict=True)],
        compression=attributes & COMPRESSION_MASK,
        base_offset=header.base_offset,
        producer_id=header.producer_id,
        producer_epoch=header.producer_epoch,
        base_sequence=header.base_sequence,
        transactional=bool(attributes & TRANSACTIONAL_BIT),
        control=bool(attributes & CONTROL_BIT),
        timestamp_type=TimestampType(bool(attributes & TIMESTAMP_TYPE_BIT)),
        partition_leader_epoch=header.partition_leader_epoch,
        base_timestamp=base_timestamp,
        max_timestamp=max_timestamp,
        last_offset_delta=records[-1].offset_delta if records else header.last_offset_delta,
        delete_horizon=bool(attributes & DELETE_HORIZON_BIT),
    )
