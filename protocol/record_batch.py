"""RecordBatch v2 (magic 2): the records inside a batch, encoded and decoded.

Sans-io and pure. For the places that need records: compaction, timestamp lookups,
transaction markers, tools and clients. The broker's produce and fetch paths never decode
records; they use the 61-byte header view in `protocol.records`, whose layout constants this
module shares.

Layout (after the 61-byte header) of each record, all varints zigzag-encoded:
length, attributes (int8, unused), timestamp delta (varlong), offset delta, key, value,
header count, then (key: string, value: nullable bytes) per header.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any, NamedTuple

import cramjam

from protocol.errors import ErrorCode, KafkaError
from protocol.records import (
    ATTRIBUTES_OFFSET,
    COMPRESSION_MASK,
    CONTROL_BIT,
    CRC_OFFSET,
    CURRENT_MAGIC,
    DELETE_HORIZON_BIT,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC_OFFSET,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    NO_TIMESTAMP,
    TIMESTAMP_TYPE_BIT,
    TRANSACTIONAL_BIT,
    BatchHeader,
    compute_crc,
    read_header,
)

# A length below the smallest legacy (v0) message is corrupt framing, not a partial batch,
# exactly as Kafka's ByteBufferLogInputStream decides.
_LEGACY_RECORD_OVERHEAD_V0 = 14
_HEADER = struct.Struct(">qiibIhiqqqhii")
_LENGTH = struct.Struct(">i")
_UINT32 = struct.Struct(">I")
# Java's snappy framing (xerial SnappyOutputStream): magic, version, compatible version,
# then [int32 length, raw snappy block]... Kafka's Java clients write it.
_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = struct.Struct(">8sii")
_XERIAL_BLOCK = 32 * 1024
_CONTROL_KEY = struct.Struct(">hh")
_END_TXN_MARKER = struct.Struct(">hi")

Header = tuple[str, bytes | None]


class Compression(IntEnum):
    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4


NONE, GZIP, SNAPPY, LZ4, ZSTD = Compression


class TimestampType(IntEnum):
    CREATE_TIME = 0
    LOG_APPEND_TIME = 1


class ControlType(IntEnum):
    """Types of control record keys a broker writes for transactions (Kafka's ControlRecordType)."""

    ABORT = 0
    COMMIT = 1


# -- errors -------------------------------------------------------------------------------------


class CorruptRecordError(KafkaError):
    """Bad framing, CRC or record layout: Kafka's CorruptRecordException (CORRUPT_MESSAGE)."""

    def __init__(self, message: str) -> None:
        super().__init__(ErrorCode.CORRUPT_MESSAGE, message)


class UnsupportedMagicError(KafkaError):
    """A magic 0/1 message set. The code matches `kbroker.storage.log`'s append validation."""

    def __init__(self, magic: int) -> None:
        super().__init__(
            ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT,
            f"message format v{magic} (magic {magic}) is not supported; only record batch v2 is",
        )
        self.magic = magic


class UnsupportedCompressionError(KafkaError):
    def __init__(self, codec: int) -> None:
        super().__init__(ErrorCode.UNSUPPORTED_COMPRESSION_TYPE, f"unknown compression codec {codec}")
        self.codec = codec


# -- data ---------------------------------------------------------------------------------------


@dataclass(slots=True)
class Record:
    offset_delta: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: list[Header] = field(default_factory=list)
    # Unused by Kafka (always 0); carried so a rewritten batch keeps its bytes.
    attributes: int = 0
    # Absolute offset, filled in by decoding; encoding uses offset_delta only.
    offset: int = field(default=-1, compare=False)


@dataclass(slots=True)
class RecordBatch:
    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records: list[Record]

    @property
    def size(self) -> int:
        """Bytes the whole batch occupies, header included."""
        return self.batch_length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.last_offset + 1

    @property
    def compression(self) -> Compression:
        return Compression(self.attributes & COMPRESSION_MASK)

    @property
    def timestamp_type(self) -> TimestampType:
        return TimestampType(bool(self.attributes & TIMESTAMP_TYPE_BIT))

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_BIT)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_BIT)

    @property
    def has_delete_horizon(self) -> bool:
        """KIP-534: the base timestamp holds the delete horizon of the batch's tombstones."""
        return bool(self.attributes & DELETE_HORIZON_BIT)


class ControlRecordKey(NamedTuple):
    version: int
    type: int  # a ControlType; other values are KRaft's and are passed through


class EndTxnMarker(NamedTuple):
    version: int
    coordinator_epoch: int


# -- varints ------------------------------------------------------------------------------------


def read_varint(buf: bytes | memoryview, pos: int, end: int | None = None) -> tuple[int, int]:
    """A zigzag varint/varlong (one encoding) ending before `end`; returns (value, next pos)."""
    end = len(buf) if end is None else end
    raw = shift = 0
    while True:
        if pos >= end:
            raise CorruptRecordError("record ends inside a varint")
        byte = buf[pos]
        pos += 1
        raw |= (byte & 0x7F) << shift
        if byte < 0x80:
            return (raw >> 1) ^ -(raw & 1), pos
        shift += 7
        if shift > 63:
            raise CorruptRecordError("varint longer than 10 bytes")


def put_varint(out: bytearray, value: int) -> None:
    raw = ((value << 1) ^ (value >> 63)) & 0xFFFFFFFFFFFFFFFF
    while raw >= 0x80:
        out.append((raw & 0x7F) | 0x80)
        raw >>= 7
    out.append(raw)


def write_varint(value: int) -> bytes:
    out = bytearray()
    put_varint(out, value)
    return bytes(out)


def _put_bytes(out: bytearray, data: bytes | None) -> None:
    if data is None:
        put_varint(out, -1)
    else:
        put_varint(out, len(data))
        out += data


def _read_bytes(buf: bytes, pos: int, end: int) -> tuple[bytes | None, int]:
    length, pos = read_varint(buf, pos, end)
    if length < 0:
        return None, pos
    if pos + length > end:
        raise CorruptRecordError(f"a field of {length} bytes runs past the end of its record")
    return buf[pos : pos + length], pos + length


# -- compression --------------------------------------------------------------------------------


def _snappy_decompress(data: bytes) -> bytes:
    if not data.startswith(_XERIAL_MAGIC) or len(data) < _XERIAL_HEADER.size:
        return bytes(cramjam.snappy.decompress_raw(data))  # librdkafka may write raw snappy
    out = []
    pos = _XERIAL_HEADER.size
    while pos < len(data):
        (length,) = _LENGTH.unpack_from(data, pos)
        pos += _LENGTH.size
        if length < 0 or pos + length > len(data):
            raise ValueError(f"xerial block of {length} bytes does not fit")
        out.append(bytes(cramjam.snappy.decompress_raw(data[pos : pos + length])))
        pos += length
    return b"".join(out)


def _snappy_compress(data: bytes) -> bytes:
    out = [_XERIAL_HEADER.pack(_XERIAL_MAGIC, 1, 1)]
    for start in range(0, len(data), _XERIAL_BLOCK):
        block = bytes(cramjam.snappy.compress_raw(data[start : start + _XERIAL_BLOCK]))
        out.append(_LENGTH.pack(len(block)) + block)
    return b"".join(out)


def _lz4_compress(data: bytes) -> bytes:
    # Independent blocks: Kafka's Java LZ4 reader refuses linked ones.
    compressor = cramjam.lz4.Compressor(block_linked=False)
    compressor.compress(data)
    return bytes(compressor.finish())


# Each returns a buffer (cramjam's, or bytes): `decompress` copies it into bytes, the append
# path's validation reads it where it is.
_DECOMPRESSORS: dict[int, Callable[[bytes | memoryview], Any]] = {
    GZIP: cramjam.gzip.decompress,
    SNAPPY: lambda data: _snappy_decompress(bytes(data)),
    LZ4: cramjam.lz4.decompress,
    ZSTD: cramjam.zstd.decompress,
}
_COMPRESSORS: dict[int, Callable[[bytes], bytes]] = {
    GZIP: lambda data: bytes(cramjam.gzip.compress(data)),
    SNAPPY: _snappy_compress,
    LZ4: _lz4_compress,
    ZSTD: lambda data: bytes(cramjam.zstd.compress(data)),
}


def decompress(codec: int, data: bytes | memoryview) -> bytes:
    """The record bytes of a batch payload compressed with `codec` (Kafka's numbering)."""
    if codec == NONE:
        return bytes(data)
    return bytes(decompress_buffer(codec, data))


def uncompressed_batch(batch: bytes | bytearray | memoryview, header: BatchHeader) -> bytes | bytearray | memoryview:
    """The batch as a record iterator reads it: itself when uncompressed, else its header marked
    uncompressed followed by the decompressed records (the one copy of them)."""
    if header.compression == NONE:
        return batch
    view = memoryview(batch)
    payload = decompress_buffer(header.compression, view[HEADER_SIZE : header.size])
    plain_header = bytearray(view[:HEADER_SIZE])
    struct.pack_into(">h", plain_header, ATTRIBUTES_OFFSET, header.attributes & ~COMPRESSION_MASK)
    return b"".join((plain_header, payload))


def decompress_buffer(codec: int, data: bytes | memoryview) -> Any:
    """Like `decompress`, without copying: a buffer-protocol object holding the records."""
    decoder = _DECOMPRESSORS.get(codec)
    if decoder is None:
        raise UnsupportedCompressionError(codec)
    try:
        return decoder(data)
    except (cramjam.DecompressionError, ValueError, struct.error) as e:
        raise CorruptRecordError(f"cannot decompress {Compression(codec).name} records: {e}") from None


def compress(codec: int, data: bytes) -> bytes:
    if codec == NONE:
        return data
    encoder = _COMPRESSORS.get(codec)
    if encoder is None:
        raise UnsupportedCompressionError(codec)
    return encoder(data)


# -- records ------------------------------------------------------------------------------------


def encode_records(records: Sequence[Record], base_timestamp: int) -> bytes:
    """The uncompressed record section of a batch whose base timestamp is `base_timestamp`."""
    out = bytearray()
    for record in records:
        body = bytearray((record.attributes,))
        put_varint(body, record.timestamp - base_timestamp)
        put_varint(body, record.offset_delta)
        _put_bytes(body, record.key)
        _put_bytes(body, record.value)
        put_varint(body, len(record.headers))
        for name, value in record.headers:
            _put_bytes(body, name.encode())
            _put_bytes(body, value)
        put_varint(out, len(body))
        out += body
    return bytes(out)


def decode_records(
    payload: bytes, count: int, *, base_offset: int = 0, base_timestamp: int = 0, log_append_time: int | None = None
) -> list[Record]:
    """`count` records from an uncompressed record section, which they must fill exactly.

    With `log_append_time` every record gets that timestamp, as Kafka reports LogAppendTime
    batches; without it a record's timestamp is base_timestamp + its delta.
    """
    if count < 0:
        raise CorruptRecordError(f"negative record count {count}")
    records = []
    pos = 0
    for _ in range(count):
        record, pos = _decode_record(payload, pos, base_timestamp)
        record.offset = base_offset + record.offset_delta
        if log_append_time is not None:
            record.timestamp = log_append_time
        records.append(record)
    if pos != len(payload):
        raise CorruptRecordError(f"{len(payload) - pos} bytes left after the batch's {count} records")
    return records


def _decode_record(buf: bytes, pos: int, base_timestamp: int) -> tuple[Record, int]:
    length, pos = read_varint(buf, pos)
    end = pos + length
    if length < 1 or end > len(buf):
        raise CorruptRecordError(f"record length {length} does not fit the batch")
    attributes = buf[pos]
    timestamp_delta, pos = read_varint(buf, pos + 1, end)
    offset_delta, pos = read_varint(buf, pos, end)
    key, pos = _read_bytes(buf, pos, end)
    value, pos = _read_bytes(buf, pos, end)
    headers, pos = _decode_headers(buf, pos, end)
    if pos != end:
        raise CorruptRecordError(f"record length {length} disagrees with its fields")
    return Record(offset_delta, base_timestamp + timestamp_delta, key, value, headers, attributes), end


def _decode_headers(buf: bytes, pos: int, end: int) -> tuple[list[Header], int]:
    count, pos = read_varint(buf, pos, end)
    if count < 0:
        raise CorruptRecordError(f"negative header count {count}")
    headers = []
    for _ in range(count):
        name, pos = _read_bytes(buf, pos, end)
        if name is None:
            raise CorruptRecordError("null record header key")
        value, pos = _read_bytes(buf, pos, end)
        try:
            headers.append((name.decode(), value))
        except UnicodeDecodeError:
            raise CorruptRecordError("record header key is not UTF-8") from None
    return headers, pos


# -- batches ------------------------------------------------------------------------------------


def encode_batch(
    records: Sequence[Record],
    *,
    compression: int = NONE,
    base_offset: int = 0,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = NO_PRODUCER_EPOCH,
    base_sequence: int = NO_SEQUENCE,
    transactional: bool = False,
    control: bool = False,
    timestamp_type: int = TimestampType.CREATE_TIME,
    partition_leader_epoch: int = -1,
    base_timestamp: int | None = None,
    max_timestamp: int | None = None,
    last_offset_delta: int | None = None,
    delete_horizon: bool = False,
    extra_attributes: int = 0,
    encoded: bytes | None = None,
) -> bytes:
    """A v2 batch holding `records` (by their offset deltas and absolute timestamps).

    Defaults follow Kafka's producer: the base timestamp is the first record's, the max
    timestamp the largest, the last offset delta the last record's. An empty batch (as
    compaction can leave) must say its `last_offset_delta`. `extra_attributes` are attribute
    bits Kafka does not use (a broker's own marks), or-ed in. `encoded`: the records already
    encoded (uncompressed, against the same base timestamp), by a faster encoder.
    """
    if not records and last_offset_delta is None:
        raise ValueError("an empty batch needs last_offset_delta")
    if base_timestamp is None:
        base_timestamp = records[0].timestamp if records else NO_TIMESTAMP
    if max_timestamp is None:
        max_timestamp = max((r.timestamp for r in records), default=NO_TIMESTAMP)
    if last_offset_delta is None:
        last_offset_delta = records[-1].offset_delta
    attributes = _attributes(compression, timestamp_type, transactional, control, delete_horizon) | extra_attributes
    payload = compress(compression, encode_records(records, base_timestamp) if encoded is None else encoded)
    batch = bytearray(HEADER_SIZE + len(payload))
    _HEADER.pack_into(
        batch, 0, base_offset, HEADER_SIZE - LOG_OVERHEAD + len(payload), partition_leader_epoch, CURRENT_MAGIC,
        0, attributes, last_offset_delta, base_timestamp, max_timestamp, producer_id, producer_epoch,
        base_sequence, len(records),
    )
    batch[HEADER_SIZE:] = payload
    _UINT32.pack_into(batch, CRC_OFFSET, compute_crc(batch, 0, len(batch)))
    return bytes(batch)


def _attributes(compression: int, timestamp_type: int, transactional: bool, control: bool, delete_horizon: bool) -> int:
    if compression not in _COMPRESSORS and compression != NONE:
        raise UnsupportedCompressionError(compression)
    attributes = compression
    if timestamp_type == TimestampType.LOG_APPEND_TIME:
        attributes |= TIMESTAMP_TYPE_BIT
    if transactional:
        attributes |= TRANSACTIONAL_BIT
    if control:
        attributes |= CONTROL_BIT
    if delete_horizon:
        attributes |= DELETE_HORIZON_BIT
    return attributes


def decode_batches(data: bytes | bytearray | memoryview) -> list[RecordBatch]:
    """Every complete batch in `data`; a partial trailing batch is ignored, as Kafka clients do
    with the tail a fetch response may cut."""
    view = memoryview(data)
    batches = []
    pos = 0
    while (size := complete_batch_size(view, pos)) is not None:
        batches.append(_decode_at(view, pos, size))
        pos += size
    return batches


def decode_batch(data: bytes | bytearray | memoryview, pos: int = 0) -> RecordBatch:
    """The one batch starting at `pos`, which must be complete; bytes after it are left alone."""
    view = memoryview(data)
    size = complete_batch_size(view, pos)
    if size is None:
        raise CorruptRecordError(f"truncated batch: {len(view) - pos} bytes at position {pos}")
    return _decode_at(view, pos, size)


def complete_batch_size(buf: bytes | bytearray | memoryview, pos: int,
                        min_length: int = _LEGACY_RECORD_OVERHEAD_V0) -> int | None:
    """The size of the batch at `pos`, or None when fewer bytes are left than it needs; a length
    field below `min_length` is corrupt."""
    left = len(buf) - pos
    if left < LOG_OVERHEAD:
        return None
    (length,) = _LENGTH.unpack_from(buf, pos + LOG_OVERHEAD - _LENGTH.size)
    if length < min_length:
        raise CorruptRecordError(f"batch length {length} at position {pos} is below the minimum {min_length}")
    size = LOG_OVERHEAD + length
    return size if size <= left else None


def _decode_at(view: memoryview, pos: int, size: int) -> RecordBatch:
    magic = view[pos + MAGIC_OFFSET]
    if magic in (0, 1):
        raise UnsupportedMagicError(magic)
    if magic != CURRENT_MAGIC:
        raise CorruptRecordError(f"unknown magic {magic} at position {pos}")
    if size < HEADER_SIZE:
        raise CorruptRecordError(f"batch of {size} bytes is smaller than the v2 header")
    header = read_header(view, pos)
    computed = compute_crc(view, pos, size)
    if computed != header.crc:
        raise CorruptRecordError(
            f"CRC mismatch in batch at offset {header.base_offset}: "
            f"header says {header.crc:#010x}, bytes give {computed:#010x}"
        )
    return _batch(header, decode_payload(view[pos : pos + size], header))


def decode_payload(batch: bytes | memoryview, header: BatchHeader) -> list[Record]:
    """The records of one batch (`batch` starts at its first byte) whose header was read already.

    Does not check the CRC: for callers that verified it when the batch was stored.
    """
    payload = decompress(header.compression, memoryview(batch)[HEADER_SIZE : header.size])
    log_append_time = header.max_timestamp if header.log_append_time else None
    return decode_records(
        payload, header.record_count, base_offset=header.base_offset,
        base_timestamp=header.base_timestamp, log_append_time=log_append_time,
    )


def _batch(header: BatchHeader, records: list[Record]) -> RecordBatch:
    return RecordBatch(
        header.base_offset, header.batch_length, header.partition_leader_epoch, header.magic, header.crc,
        header.attributes, header.last_offset_delta, header.base_timestamp, header.max_timestamp,
        header.producer_id, header.producer_epoch, header.base_sequence, records,
    )


# -- control records (transaction markers) -------------------------------------------------------


def encode_control_key(control_type: int, version: int = 0) -> bytes:
    return _CONTROL_KEY.pack(version, control_type)


def decode_control_key(key: bytes | None) -> ControlRecordKey:
    if key is None or len(key) < _CONTROL_KEY.size:
        raise CorruptRecordError(f"control record key {key!r} is shorter than version + type")
    version, control_type = _CONTROL_KEY.unpack_from(key)
    if version < 0:
        raise CorruptRecordError(f"control record key version {version}")
    return ControlRecordKey(version, control_type)


def encode_end_txn_marker(coordinator_epoch: int, version: int = 0) -> bytes:
    return _END_TXN_MARKER.pack(version, coordinator_epoch)


def decode_end_txn_marker(value: bytes | None) -> EndTxnMarker:
    # Newer versions only append fields, so Kafka reads any version as v0.
    if value is None or len(value) < _END_TXN_MARKER.size:
        raise CorruptRecordError(f"end transaction marker {value!r} is shorter than version + epoch")
    return EndTxnMarker._make(_END_TXN_MARKER.unpack_from(value))


def encode_end_txn_batch(
    control_type: int,
    *,
    producer_id: int,
    producer_epoch: int,
    coordinator_epoch: int,
    timestamp: int,
    base_offset: int = 0,
    partition_leader_epoch: int = -1,
) -> bytes:
    """A COMMIT/ABORT marker batch as a transaction coordinator asks a partition leader to write."""
    record = Record(0, timestamp, encode_control_key(control_type), encode_end_txn_marker(coordinator_epoch))
    return encode_batch(
        [record], base_offset=base_offset, producer_id=producer_id, producer_epoch=producer_epoch,
        transactional=True, control=True, partition_leader_epoch=partition_leader_epoch,
    )
