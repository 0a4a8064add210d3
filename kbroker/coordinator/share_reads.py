"""What a share fetch makes of a read of a partition's log: the whole batches it holds, known by
their headers only, and the part of it an answer sends (up to the last batch holding an acquired
record).

A read of a plain log is a slice of a segment file: its batch headers are read from the file in
small chunks and the answer is a shorter slice of the same file, which the connection sends with
sendfile, as a classic fetch's. Copying the read into memory instead cost a share consumer a
third of its throughput (docs/performance.md, "Share groups"). A read of an encrypted log is
already decrypted batches in memory.
"""

from __future__ import annotations

import dataclasses
import struct

from kbroker.storage.batch_scan import CorruptBatch, scan_batches
from kbroker.storage.read_results import BatchBytes, Read

_OFFSET_AND_LENGTH = struct.Struct(">qi")
_LAST_OFFSET_DELTA = struct.Struct(">i")
_BATCH_OVERHEAD = 12  # base offset and length precede the length's count
_LAST_OFFSET_DELTA_AT = 23
BatchExtent = tuple[int, int, int]  # first offset, last offset, end position from the read's start


def batch_extents(records: Read) -> list[BatchExtent]:
    """(first offset, last offset, end position) of each whole batch of a read. A read may end
    inside a batch (it is cut at its byte limit): that batch is left out."""
    if isinstance(records, BatchBytes):
        return _extents_in(records.data)
    extents: list[BatchExtent] = []
    try:
        for position, header in scan_batches(records.file.fileno(), records.position,
                                             records.position + records.size):
            extents.append((header.base_offset, header.last_offset, position + header.size - records.position))
    except CorruptBatch:
        pass  # the batch cut at the read's end, or damage the answer stops before, as a fetch does
    return extents


def records_through(records: Read, end: int) -> Read:
    """The first `end` bytes of a read, the same kind of read: a file slice stays a file slice."""
    if isinstance(records, BatchBytes):
        return BatchBytes(records.data[:end], records.first_offset)
    return dataclasses.replace(records, size=end)


def _extents_in(data: bytes) -> list[BatchExtent]:
    extents: list[BatchExtent] = []
    position = 0
    while position + _LAST_OFFSET_DELTA_AT + 4 <= len(data):
        base_offset, length = _OFFSET_AND_LENGTH.unpack_from(data, position)
        end = position + _BATCH_OVERHEAD + length
        if end > len(data):
            break
        (delta,) = _LAST_OFFSET_DELTA.unpack_from(data, position + _LAST_OFFSET_DELTA_AT)
        extents.append((base_offset, base_offset + delta, end))
        position = end
    return extents
