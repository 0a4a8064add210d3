"""The records inside one v2 batch, for the few storage features that need them.

Compaction (keys), exact timestamp lookups and the null-key check of compacted topics decode
records; the produce and fetch paths never do. Kept local to storage so it depends on nothing
but the batch header view in `protocol.records`.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

import cramjam
import crc32c

from protocol.errors import ErrorCode, KafkaError
from protocol.records import (
    ATTRIBUTES_OFFSET,
    COMPRESSION_MASK,
    HEADER_SIZE,
    LOG_OVERHEAD,
    BatchHeader,
    read_header,
)

NONE, GZIP, SNAPPY, LZ4, ZSTD = range(5)
_HEADER = struct.Struct(">qiibIhiqqqhii")
# Java's snappy framing (xerial SnappyOutputStream), which Kafka's own clients write.
_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = struct.Struct(">8sii")
_XERIAL_BLOCK = 32 * 1024


class Record(NamedTuple):
    attributes: int
    timestamp_delta: int
    offset_delta: int
    key: bytes | None
    value: bytes | None
    headers: bytes  # the encoded header section (count + headers), kept verbatim


def corrupt(reason: str) -> KafkaError:
    return KafkaError(ErrorCode.CORRUPT_MESSAGE, reason)


# -- compression ------------------------------------------------------------------------------


def decompress(codec: int, data: bytes | memoryview) -> bytes:
    try:
        if codec == GZIP:
            return bytes(cramjam.gzip.decompress(data))
        if codec == SNAPPY:
            return _snappy_decompress(bytes(data))
        if codec == LZ4:
            return bytes(cramjam.lz4.decompress(data))
        if codec == ZSTD:
            return bytes(cramjam.zstd.decompress(data))
    except Exception as e:  # cramjam raises its own error types
        raise corrupt(f"cannot decompress records: {e}") from None
    raise KafkaError(ErrorCode.UNSUPPORTED_COMPRESSION_TYPE, f"compression codec {codec}")


def compress(codec: int, data: bytes) -> bytes:
    if codec == NONE:
        return data
    if codec == GZIP:
        return bytes(cramjam.gzip.compress(data))
    if codec == SNAPPY:
        return _snappy_compress(data)
    if codec == LZ4:
        # Independent blocks: Kafka's Java LZ4 reader decompresses block by block.
        compressor = cramjam.lz4.Compressor(block_linked=False)
        compressor.compress(data)
        return bytes(compressor.finish())
    if codec == ZSTD:
        return bytes(cramjam.zstd.compress(data))
    raise KafkaError(ErrorCode.UNSUPPORTED_COMPRESSION_TYPE, f"compression codec {codec}")


def _snappy_decompress(data: bytes) -> bytes:
    if not data.startswith(_XERIAL_MAGIC):
        return bytes(cramjam.snappy.decompress_raw(data))  # librdkafka writes raw snappy
    out = []
    pos = _XERIAL_HEADER.size
    while pos < len(data):
        (length,) = struct.unpack_from(">i", data, pos)
        pos += 4
        out.append(bytes(cramjam.snappy.decompress_raw(data[pos : pos + length])))
        pos += length
    return b"".join(out)


def _snappy_compress(data: bytes) -> bytes:
    out = [_XERIAL_HEADER.pack(_XERIAL_MAGIC, 1, 1)]
    for start in range(0, len(data), _XERIAL_BLOCK):
        block = bytes(cramjam.snappy.compress_raw(data[start : start + _XERIAL_BLOCK]))
        out.append(struct.pack(">i", len(block)) + block)
    return b"".join(out)


# -- varints ------------------------------------------------------------------------------------


def read_varint(buf: bytes, pos: int) -> tuple[int, int]:
    """A zigzag varint (Kafka's varint and varlong share the encoding); returns (value, next pos)."""
    raw = 0
    shift = 0
    while True:
        if pos >= len(buf):
            raise corrupt("record ends inside a varint")
        byte = buf[pos]
        pos += 1
        raw |= (byte & 0x7F) << shift
        if byte < 0x80:
            return (raw >> 1) ^ -(raw & 1), pos
        shift += 7
        if shift > 63:
            raise corrupt("varint longer than 10 bytes")


def write_varint(value: int) -> bytes:
    raw = ((value << 1) ^ (value >> 63)) & 0xFFFFFFFFFFFFFFFF
    out = bytearray()
    while raw >= 0x80:
        out.append((raw & 0x7F) | 0x80)
        raw >>= 7
    out.append(raw)
    return bytes(out)


def _read_bytes(buf: bytes, pos: int) -> tuple[bytes | None, int]:
    length, pos = read_varint(buf, pos)
    if length < 0:
        return None, pos
    if pos + length > len(buf):
        raise corrupt("record field runs past the end of the record")
    return buf[pos : pos + length], pos + length


def _write_bytes(data: bytes | None) -> bytes:
    if data is None:
        return write_varint(-1)
    return write_varint(len(data)) + data


# -- records ------------------------------------------------------------------------------------


def records_of(batch: bytes | memoryview, header: BatchHeader | None = None) -> list[Record]:
    """Decode every record of the batch starting at batch[0]."""
    header = header or read_header(batch)
    body: bytes = bytes(memoryview(batch)[HEADER_SIZE : header.size])
    if header.compression != NONE:
        body = decompress(header.compression, body)
    records = []
    pos = 0
    for _ in range(header.record_count):
        record, pos = _read_record(body, pos)
        records.append(record)
    return records


def _read_record(buf: bytes, pos: int) -> tuple[Record, int]:
    length, start = read_varint(buf, pos)
    end = start + length
    if length < 1 or end > len(buf):
        raise corrupt(f"record length {length} does not fit the batch")
    data = buf[start:end]  # bounds every field read to this record
    timestamp_delta, pos = read_varint(data, 1)
    offset_delta, pos = read_varint(data, pos)
    key, pos = _read_bytes(data, pos)
    value, pos = _read_bytes(data, pos)
    headers_start = pos
    count, pos = read_varint(data, pos)
    for _ in range(max(count, 0)):
        _, pos = _read_bytes(data, pos)
        _, pos = _read_bytes(data, pos)
    if pos != len(data):
        raise corrupt("record length disagrees with its fields")
    return Record(data[0], timestamp_delta, offset_delta, key, value, data[headers_start:]), end


def _encode_record(record: Record, timestamp_delta: int) -> bytes:
    body = b"".join((
        bytes((record.attributes,)),
        write_varint(timestamp_delta),
        write_varint(record.offset_delta),
        _write_bytes(record.key),
        _write_bytes(record.value),
        record.headers,
    ))
    return write_varint(len(body)) + body


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
    recomputed so record timestamps stay the same. The compression codec comes from
    `attributes`.
    """
    timestamps = [header.base_timestamp + r.timestamp_delta for r in records]
    body = b"".join(_encode_record(r, ts - base_timestamp) for r, ts in zip(records, timestamps, strict=True))
    body = compress(attributes & COMPRESSION_MASK, body)
    if header.log_append_time:
        max_timestamp = header.max_timestamp
    else:
        max_timestamp = max(timestamps, default=header.max_timestamp)
    last_delta = records[-1].offset_delta if records else header.last_offset_delta
    batch = bytearray(HEADER_SIZE + len(body))
    _HEADER.pack_into(
        batch, 0, header.base_offset, HEADER_SIZE - LOG_OVERHEAD + len(body), header.partition_leader_epoch,
        header.magic, 0, attributes, last_delta, base_timestamp, max_timestamp, header.producer_id,
        header.producer_epoch, header.base_sequence, len(records),
    )
    batch[HEADER_SIZE:] = body
    struct.pack_into(">I", batch, 17, crc32c.crc32c(memoryview(batch)[ATTRIBUTES_OFFSET:]))
    return bytes(batch)
