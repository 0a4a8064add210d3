"""Build and read v2 record batches for storage tests, independently of the code under test."""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import NamedTuple

import cramjam
import crc32c

GZIP = 1
_HEADER = struct.Struct(">qiibIhiqqqhii")
_HEADER_SIZE = 61


class Rec(NamedTuple):
    key: bytes | None
    value: bytes | None
    timestamp: int = 1_000


class ReadRec(NamedTuple):
    offset: int
    key: bytes | None
    value: bytes | None
    timestamp: int


def _varint(n: int) -> bytes:
    z = (n << 1) ^ (n >> 63)
    out = bytearray()
    while z >= 0x80:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


def _field(data: bytes | None) -> bytes:
    return _varint(-1) if data is None else _varint(len(data)) + data


def _record(index: int, rec: Rec, base_timestamp: int) -> bytes:
    body = (b"\x00" + _varint(rec.timestamp - base_timestamp) + _varint(index)
            + _field(rec.key) + _field(rec.value) + _varint(0))
    return _varint(len(body)) + body


def batch(
    records: Sequence[Rec] | None = None,
    *,
    values: Sequence[bytes] | None = None,
    timestamp: int = 1_000,
    base_offset: int = 0,
    compression: int = 0,
    attributes: int = 0,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    partition_leader_epoch: int = -1,
) -> bytes:
    """A valid v2 batch: CRC32C over bytes 21.. end, varint records."""
    if records is None:
        records = [Rec(None, v, timestamp) for v in (values or [b"v"])]
    base_ts = records[0].timestamp if records else timestamp
    body = b"".join(_record(i, r, base_ts) for i, r in enumerate(records))
    if compression == GZIP:
        body = bytes(cramjam.gzip.compress(body))
    attrs = attributes | compression
    max_ts = max((r.timestamp for r in records), default=timestamp)
    out = bytearray(_HEADER.pack(base_offset, _HEADER_SIZE - 12 + len(body), partition_leader_epoch, 2, 0, attrs,
                                 len(records) - 1, base_ts, max_ts, producer_id, producer_epoch, base_sequence,
                                 len(records)))
    out += body
    struct.pack_into(">I", out, 17, crc32c.crc32c(bytes(out[21:])))
    return bytes(out)


def legacy_message(value: bytes = b"old", magic: int = 1) -> bytes:
    """A magic 0/1 message set entry (offset, size, crc, magic, attributes, [timestamp], key, value)."""
    body = bytes([magic, 0]) + (struct.pack(">q", 1_000) if magic == 1 else b"") + struct.pack(">i", -1)
    body += struct.pack(">i", len(value)) + value
    return struct.pack(">qiI", 0, len(body) + 4, 0) + body


def _read_varint(buf: bytes, pos: int) -> tuple[int, int]:
    shift = z = 0
    while True:
        b = buf[pos]
        pos += 1
        z |= (b & 0x7F) << shift
        if b < 0x80:
            return (z >> 1) ^ -(z & 1), pos
        shift += 7


def _read_field(buf: bytes, pos: int) -> tuple[bytes | None, int]:
    n, pos = _read_varint(buf, pos)
    if n < 0:
        return None, pos
    return buf[pos : pos + n], pos + n


def read_records(data: bytes, *, allow_partial_tail: bool = False) -> list[ReadRec]:
    """Every record of every whole batch in `data` (a log read), with absolute offsets."""
    out: list[ReadRec] = []
    pos = 0
    while pos < len(data):
        if len(data) - pos < _HEADER_SIZE:
            assert allow_partial_tail, "partial batch header"
            break
        (base, length, _, magic, crc, attrs, _, base_ts, max_ts, *_, count) = _HEADER.unpack_from(data, pos)
        end = pos + 12 + length
        if end > len(data):
            assert allow_partial_tail, "partial batch"
            break
        assert magic == 2
        assert crc32c.crc32c(data[pos + 21 : end]) == crc, "CRC mismatch"
        body = data[pos + _HEADER_SIZE : end]
        if attrs & 0x07 == GZIP:
            body = bytes(cramjam.gzip.decompress(body))
        rpos = 0
        for _ in range(count):
            _, rpos = _read_varint(body, rpos)
            ts_delta, rpos = _read_varint(body, rpos + 1)
            delta, rpos = _read_varint(body, rpos)
            key, rpos = _read_field(body, rpos)
            value, rpos = _read_field(body, rpos)
            headers, rpos = _read_varint(body, rpos)
            assert headers == 0
            ts = max_ts if attrs & 0x08 else base_ts + ts_delta
            out.append(ReadRec(base + delta, key, value, ts))
        pos = end
    return out


def header_fields(data: bytes, pos: int = 0) -> dict[str, int]:
    names = ("base_offset", "batch_length", "partition_leader_epoch", "magic", "crc", "attributes",
             "last_offset_delta", "base_timestamp", "max_timestamp", "producer_id", "producer_epoch",
             "base_sequence", "record_count")
    return dict(zip(names, _HEADER.unpack_from(data, pos), strict=True))
