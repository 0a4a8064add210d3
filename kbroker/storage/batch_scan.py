"""Walk the record batches of a segment file by their headers, never decoding records.

Lookups read headers in small chunks (they usually stop after a few batches); recovery reads
large chunks and also verifies magic and CRC of every batch, or for an encrypted batch its
AES-GCM tag (kbroker/storage/encryption.py: the header stays in clear, so walking needs no key).
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping

from kbroker.storage.encryption import ENCRYPTED_MAGIC, AuthenticationFailed, BatchCipher, open_stored
from protocol.records import CURRENT_MAGIC, HEADER_SIZE, LOG_OVERHEAD, BatchHeader, crc_ok, read_header

# A v2 batch's length field counts everything after itself: at least the rest of the header.
MIN_BATCH_LENGTH = HEADER_SIZE - LOG_OVERHEAD
LOOKUP_CHUNK = 16 * 1024
RECOVERY_CHUNK = 1024 * 1024


class CorruptBatch(Exception):
    def __init__(self, position: int, reason: str) -> None:
        super().__init__(f"{reason} at position {position}")
        self.position = position
        self.reason = reason


def pread_exact(fd: int, size: int, position: int) -> bytes:
    """`os.pread` that keeps reading until `size` bytes or end of file."""
    data = os.pread(fd, size, position)
    if len(data) == size or not data:
        return data
    parts = [data]
    got = len(data)
    while got < size:
        more = os.pread(fd, size - got, position + got)
        if not more:
            break
        parts.append(more)
        got += len(more)
    return b"".join(parts)


def scan_batches(
    fd: int, start: int, end: int, *, verify: bool = False, chunk_size: int = LOOKUP_CHUNK,
    skip: Mapping[int, int] | None = None, cipher: BatchCipher | None = None,
) -> Iterator[tuple[int, BatchHeader]]:
    """Yield (position, header) of each batch in [start, end), passing over the byte ranges
    `skip` maps (start -> end: known damage).

    Raises CorruptBatch at the first batch whose framing is wrong (and, with `verify`, whose
    magic or CRC is wrong, or which fails authentication); everything yielded before it is
    sound. An encrypted batch whose key `cipher` lacks raises MissingKey: that is no damage.
    """
    buf = b""
    buf_start = start
    position = start
    while position < end:
        if skip and position in skip:
            position = skip[position]
            continue
        if position + HEADER_SIZE > end:
            raise CorruptBatch(position, f"{end - position} trailing bytes, less than a batch header")
        if position + HEADER_SIZE > buf_start + len(buf):
            buf, buf_start = pread_exact(fd, min(max(chunk_size, HEADER_SIZE), end - position), position), position
            if len(buf) < HEADER_SIZE:
                raise CorruptBatch(position, "file ends inside a batch header")
        header = read_header(buf, position - buf_start)
        _check_framing(header, position, end)
        if verify:
            if position + header.size > buf_start + len(buf):
                buf, buf_start = pread_exact(fd, min(max(chunk_size, header.size), end - position), position), position
            _check_content(buf, position - buf_start, header, position, cipher)
        yield position, header
        position += header.size


def _check_framing(header: BatchHeader, position: int, end: int) -> None:
    if header.batch_length < MIN_BATCH_LENGTH:
        raise CorruptBatch(position, f"batch length {header.batch_length} is below the minimum")
    if position + header.size > end:
        raise CorruptBatch(position, f"batch of {header.size} bytes runs past the end ({end - position} left)")


def _check_content(buf: bytes, at: int, header: BatchHeader, position: int, cipher: BatchCipher | None) -> None:
    if len(buf) - at < header.size:
        raise CorruptBatch(position, "file ends inside a batch")
    if header.magic == ENCRYPTED_MAGIC:
        try:
            open_stored(cipher, buf, at, header)
        except AuthenticationFailed as e:
            raise CorruptBatch(position, f"authentication failed: {e}") from None
        return
    if header.magic != CURRENT_MAGIC:
        raise CorruptBatch(position, f"magic {header.magic}, expected {CURRENT_MAGIC}")
    if not crc_ok(buf, at, header):
        raise CorruptBatch(position, "CRC mismatch")
