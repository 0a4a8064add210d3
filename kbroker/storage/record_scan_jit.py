"""The compiled part of `record_scan`: a pass over a batch's records that makes no object.

Imported only by `record_scan.load`, in a thread of its own: importing numba and compiling (or
loading the compiled code from numba's cache beside this file) takes a few hundred
milliseconds, which must not hold up the event loop.

The pass is conservative. It accepts a record only when it is read exactly as both Kafka's
DefaultRecord and aiokafka's record iterator (the validator's full walk) read it: the attributes
in one byte below 0x80 (aiokafka reads them as a varint), the int fields in at most four varint
bytes and the timestamp delta in at most nine (no encoding whose value the readers could
truncate differently). Anything else is left to the full walk, which decides about it.
"""

from __future__ import annotations

import numba
import numpy as np
from numba import types

_U64_ONE = np.uint64(1)
_U64_SEVEN = np.uint64(7)
INT_BYTES = 4  # an int32 varint of up to 4 bytes: |value| < 2**27
LONG_BYTES = 9  # an int64 varint of up to 9 bytes: |value| < 2**62


@numba.njit(cache=True)
def _varint(buf, position, end, max_bytes):
    """(zigzag-decoded value, position after it), or (0, -1) when it does not end within
    `max_bytes` bytes before `end`."""
    value = np.uint64(0)
    shift = np.uint64(0)
    for _ in range(max_bytes):
        if position >= end:
            return 0, -1
        byte = buf[position]
        position += 1
        value |= np.uint64(byte & 0x7F) << shift
        if byte < 0x80:
            return np.int64(value >> _U64_ONE) ^ -np.int64(value & _U64_ONE), position
        shift += _U64_SEVEN
    return 0, -1


def _first_unplain(buf, start, end, count, base_offset, base_timestamp, low, high, need_key):
    """-1 when the `count` records in buf[start:end] are all plain and fill it exactly; else
    the index of the first record that is not (`count` when bytes are left after the last).

    Plain: its offset delta makes it the batch's index-th record, it has no headers, its
    timestamp is within [low, high], and it has a key when `need_key`."""
    position = start
    for index in range(count):
        length, body = _varint(buf, position, end, INT_BYTES)
        if body < 0 or length <= 0 or length > end - body:
            return index
        record_end = body + length
        if buf[body] >= 0x80:  # attributes
            return index
        delta, at = _varint(buf, body + 1, record_end, LONG_BYTES)
        if at < 0:
            return index
        timestamp = base_timestamp + delta  # the caller keeps |base_timestamp| < 2**62: no overflow
        if timestamp < low or timestamp > high:
            return index
        offset_delta, at = _varint(buf, at, record_end, INT_BYTES)
        if at < 0 or base_offset + offset_delta != index:
            return index
        key_length, at = _varint(buf, at, record_end, INT_BYTES)
        if at < 0 or key_length < -1 or key_length > record_end - at or (need_key and key_length < 0):
            return index
        if key_length > 0:
            at += key_length
        value_length, at = _varint(buf, at, record_end, INT_BYTES)
        if at < 0 or value_length < -1 or value_length > record_end - at:
            return index
        if value_length > 0:
            at += value_length
        headers, at = _varint(buf, at, record_end, INT_BYTES)
        if at != record_end or headers != 0:
            return index
        position = record_end
    return -1 if position == end else count


# Compiled now, for the two kinds of buffer a batch comes in: a request frame's own bytearray
# (writable) and bytes (read-only).
_SIGNATURES = [
    types.int64(types.Array(types.uint8, 1, "C", readonly=readonly), types.int64, types.int64, types.int64,
                types.int64, types.int64, types.int64, types.int64, types.boolean)
    for readonly in (False, True)
]
first_unplain = numba.njit(_SIGNATURES, cache=True)(_first_unplain)
