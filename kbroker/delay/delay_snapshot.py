"""Snapshots of a delay index, so a restart reads one file and scans only the log after it.

Like Kafka's producer-state snapshots (`<offset>.snapshot`), a file `<20-digit offset>.delayed`
in the partition's directory holds the index's state as of that log offset: a restart loads the
newest snapshot at or below the log end and feeds `on_batch` the batches from its offset on.
A truncation below a snapshot's offset deletes it (`delete_snapshots_above`); a missing or
damaged snapshot only costs a longer scan, never correctness, because the log is the truth.

Layout (all little-endian), version 2:

    magic "KBDI" | int16 version | int64 end offset | int64 high watermark | int32 n
    n x int64 offset | n x int64 due ms | n x int32 size | n x int8 state     (GONE left out)
    int32 m | m x int64 delivery offset | m x int64 delivered pending offset
    int32 k | k x (int64 producer id | int32 c | c x int64 held offset)
    int32 r | r x (int64 marker offset | int64 producer id | int8 committed | int32 c | c x int64 offset)
    int64 unconfirmed forward batch | int64 its lowest pending offset (-1: none)   (retry topics)
    int32 f | f x int64 forward event offset | f x int64 forward batch left unconfirmed
            | f x int64 its lowest pending offset
    uint32 CRC32C of everything before it

Version 1 is version 2 without the forward batches: it is read as having none (it was written
before retry topics existed).

Columns, not records: they are read back with `array.frombytes` (a copy at memory speed), so
a million pending records load in a fraction of a second; rebuilding the wheel is the rest.
"""

from __future__ import annotations

import itertools
import logging
import struct
import sys
from array import array
from pathlib import Path

import crc32c

from kbroker.clock import WallClock, wall_clock_ms
from kbroker.delay.delay_index import DelayIndex, EntryState, IndexState, Resolution
from kbroker.delay.timing_wheel import DEFAULT_TICK_MS, DEFAULT_WHEEL_SIZE
from kbroker.fsutil import write_atomically

log = logging.getLogger(__name__)

SNAPSHOT_SUFFIX = ".delayed"
MAGIC = b"KBDI"
VERSION = 2
_READABLE_VERSIONS = (1, 2)
_HEAD = struct.Struct("<4shqqi")
_COUNT = struct.Struct("<i")
_TXN = struct.Struct("<qi")
_RESOLUTION = struct.Struct("<qqbi")
_CRC = struct.Struct("<I")
_OFFSET = struct.Struct("<q")
_KEEP = bytes(0 if s == EntryState.GONE else 1 for s in range(256))
_SWAP = sys.byteorder != "little"


class CorruptSnapshotError(Exception):
    """The file is not a whole snapshot of this version: delete it and scan the log instead."""


def snapshot_path(directory: Path, end_offset: int) -> Path:
    return directory / f"{end_offset:020d}{SNAPSHOT_SUFFIX}"


def snapshot_offsets(directory: Path) -> list[int]:
    """The offsets of the snapshots in `directory`, ascending."""
    offsets = []
    for path in directory.glob(f"*{SNAPSHOT_SUFFIX}"):
        stem = path.name[: -len(SNAPSHOT_SUFFIX)]
        if len(stem) == 20 and stem.isdigit():
            offsets.append(int(stem))
    return sorted(offsets)


def latest_snapshot(directory: Path, at_most: int | None = None) -> Path | None:
    """The newest snapshot at or below `at_most` (the log end offset), None if there is none."""
    offsets = [o for o in snapshot_offsets(directory) if at_most is None or o <= at_most]
    return snapshot_path(directory, offsets[-1]) if offsets else None


def delete_snapshots_above(directory: Path, offset: int) -> None:
    """Delete snapshots past a truncation to `offset`: they describe batches no longer in the log."""
    for end_offset in snapshot_offsets(directory):
        if end_offset > offset:
            snapshot_path(directory, end_offset).unlink(missing_ok=True)


def load_index(directory: Path, topic: str, partition: int, *, log_end_offset: int,
               clock: WallClock = wall_clock_ms, tick_ms: int = DEFAULT_TICK_MS,
               wheel_size: int = DEFAULT_WHEEL_SIZE) -> DelayIndex:
    """The index of a partition as of its newest readable snapshot at or below `log_end_offset`
    (an empty index without one). The caller then feeds `on_batch` the log from `end_offset`.

    A damaged snapshot is deleted and the next older one tried, as Kafka does with producer
    snapshots: the log after it is scanned instead.
    """
    while (path := latest_snapshot(directory, log_end_offset)) is not None:
        try:
            state = read_snapshot(path)
        except CorruptSnapshotError as e:
            log.warning("%s-%d: deleting unreadable delay snapshot: %s", topic, partition, e)
            path.unlink(missing_ok=True)
            continue
        return DelayIndex(topic, partition, clock=clock, tick_ms=tick_ms, wheel_size=wheel_size, state=state)
    return DelayIndex(topic, partition, clock=clock, tick_ms=tick_ms, wheel_size=wheel_size)


def write_snapshot(directory: Path, state: IndexState, *, durable: bool = True) -> Path:
    """Write `state` to `<end offset>.delayed` in `directory`, all at once; returns the path."""
    path = snapshot_path(directory, state.end_offset)
    write_atomically(path, encode_snapshot(state), durable=durable)
    return path


def read_snapshot(path: Path) -> IndexState:
    try:
        data = path.read_bytes()
    except OSError as e:
        raise CorruptSnapshotError(f"{path}: {e}") from None
    return decode_snapshot(data, str(path))


def encode_snapshot(state: IndexState) -> bytes:
    keep = state.states.translate(_KEEP)
    offsets = array("q", itertools.compress(state.offsets, keep))
    parts = [
        _HEAD.pack(MAGIC, VERSION, state.end_offset, state.floor, len(offsets)),
        _column(offsets),
        _column(array("q", itertools.compress(state.dues, keep))),
        _column(array("i", itertools.compress(state.sizes, keep))),
        bytes(itertools.compress(state.states, keep)),
        _COUNT.pack(len(state.deliveries_at)),
        _column(state.deliveries_at),
        _column(state.delivered),
        _COUNT.pack(len(state.open_txns)),
    ]
    for producer_id, held in state.open_txns.items():
        parts += [_TXN.pack(producer_id, len(held)), _column(held)]
    parts.append(_COUNT.pack(len(state.resolutions)))
    for r in state.resolutions:
        parts += [_RESOLUTION.pack(r.marker_offset, r.producer_id, r.committed, len(r.offsets)), _column(r.offsets)]
    parts += [_OFFSET.pack(state.unconfirmed_forward), _OFFSET.pack(state.unconfirmed_forward_low),
              _COUNT.pack(len(state.forward_events_at)), _column(state.forward_events_at),
              _column(state.forward_events), _column(state.forward_event_lows)]
    body = b"".join(parts)
    return body + _CRC.pack(crc32c.crc32c(body))


def decode_snapshot(data: bytes, name: str = "snapshot") -> IndexState:
    if len(data) < _HEAD.size + _CRC.size:
        raise CorruptSnapshotError(f"{name}: {len(data)} bytes is too short for a snapshot")
    body = memoryview(data)[: -_CRC.size]
    if crc32c.crc32c(body) != _CRC.unpack_from(data, len(data) - _CRC.size)[0]:
        raise CorruptSnapshotError(f"{name}: CRC mismatch")
    magic, version, end_offset, floor, count = _HEAD.unpack_from(body)
    if magic != MAGIC or version not in _READABLE_VERSIONS:
        raise CorruptSnapshotError(f"{name}: magic {magic!r} version {version}, expected {MAGIC!r} {VERSION}")
    reader = _Reader(body, _HEAD.size, name)
    try:
        state = IndexState(end_offset, floor, reader.column("q", count), reader.column("q", count),
                           reader.column("i", count), bytearray(reader.take(count)))
        deliveries = reader.count()
        state.deliveries_at = reader.column("q", deliveries)
        state.delivered = reader.column("q", deliveries)
        for _ in range(reader.count()):
            producer_id, held = reader.unpack(_TXN)
            state.open_txns[producer_id] = reader.column("q", held)
        for _ in range(reader.count()):
            marker_offset, producer_id, committed, held = reader.unpack(_RESOLUTION)
            state.resolutions.append(Resolution(marker_offset, producer_id, bool(committed), reader.column("q", held)))
        if version >= 2:
            (state.unconfirmed_forward,) = reader.unpack(_OFFSET)
            (state.unconfirmed_forward_low,) = reader.unpack(_OFFSET)
            events = reader.count()
            state.forward_events_at = reader.column("q", events)
            state.forward_events = reader.column("q", events)
            state.forward_event_lows = reader.column("q", events)
    except struct.error as e:
        raise CorruptSnapshotError(f"{name}: {e}") from None
    if reader.pos != len(body):
        raise CorruptSnapshotError(f"{name}: {len(body) - reader.pos} bytes left after the last field")
    return state


def _column(values: array) -> bytes:
    if _SWAP:
        values = array(values.typecode, values)
        values.byteswap()
    return values.tobytes()


class _Reader:
    """Reads the fields of a snapshot body in order, refusing any that runs past its end."""

    def __init__(self, body: memoryview, pos: int, name: str) -> None:
        self.body = body
        self.pos = pos
        self.name = name

    def take(self, size: int) -> memoryview:
        if size < 0 or self.pos + size > len(self.body):
            raise CorruptSnapshotError(f"{self.name}: a field of {size} bytes runs past the end")
        chunk = self.body[self.pos : self.pos + size]
        self.pos += size
        return chunk

    def unpack(self, layout: struct.Struct) -> tuple:
        return layout.unpack(self.take(layout.size))

    def count(self) -> int:
        return self.unpack(_COUNT)[0]

    def column(self, typecode: str, count: int) -> array:
        values = array(typecode)
        if count < 0:
            raise CorruptSnapshotError(f"{self.name}: negative count {count}")
        values.frombytes(self.take(count * values.itemsize))
        if _SWAP:
            values.byteswap()
        return values
