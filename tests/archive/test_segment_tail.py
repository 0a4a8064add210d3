"""A leader whose local segment holds offsets its predecessor archived already uploads only the
rest of it (kbroker/archive/archiver.py: `copyable`, `index_tail`, `_upload`), as a segment of
its own that reads back like the local one, from a real S3-compatible server."""

from __future__ import annotations

import struct
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest

from kbroker.archive.archiver import Archiver, ArchiveSettings, archive_key, copyable, index_tail
from kbroker.archive.object_store import ObjectStore
from kbroker.archive.remote_log import COPY_FINISHED, LOG, OFFSET_INDEX, TIME_INDEX, RemoteSegment
from kbroker.archive.remote_reader import RemoteReader
from kbroker.storage.log import Log
from kbroker.storage.log_config import LogConfig
from protocol.record_batch import decode_batches
from tests.storage.batches import Rec, batch

ONE = len(batch([Rec(b"k", b"r" * 100)]))
T0 = 1_700_000_000_000


@dataclass
class Hosted:
    log: Log
    topic: str = "t"
    index: int = 0
    topic_id: uuid.UUID = uuid.UUID(int=7)
    leader_epoch: int = 0
    is_leader: bool = True


def twenty_a_segment(directory: Path) -> Log:
    """50 single-record batches: segments [0..19] [20..39] [40..49], an index entry every 3rd."""
    log = Log(directory, LogConfig(segment_bytes=ONE * 20, index_interval_bytes=ONE * 2), clock=lambda: T0)
    for offset in range(50):
        log.append_as_leader(batch([Rec(b"k", b"r" * 100, T0 + offset)]), 0, T0)
    log.high_watermark = log.log_end_offset
    return log


def test_only_what_is_not_archived_is_copied(tmp_path: Path) -> None:
    log = twenty_a_segment(tmp_path / "t-0")
    try:
        assert [(s.base_offset, first, last) for s, first, last in copyable(log, -1)] == [(0, 0, 19), (20, 20, 39)]
        assert [(s.base_offset, first, last) for s, first, last in copyable(log, 12)] == [(0, 13, 19), (20, 20, 39)]
        assert [(s.base_offset, first, last) for s, first, last in copyable(log, 19)] == [(20, 20, 39)]
        assert list(copyable(log, 39)) == []  # the active segment never
    finally:
        log.release()


def test_the_tail_of_a_segment_is_archived_as_a_segment_of_its_own(store: ObjectStore, tmp_path: Path) -> None:
    log = twenty_a_segment(tmp_path / "t-0")
    archiver = Archiver(ArchiveSettings(), store, None, None, lambda: iter([]), tmp_path / "cache")  # type: ignore[arg-type]
    reader = RemoteReader(store, tmp_path / "reader-cache", 1 << 20, chunk_bytes=ONE * 3)
    try:
        segment, first, last = next(copyable(log, 12))
        position = segment.bound_position(first)
        assert position == 13 * ONE
        offsets, times = index_tail(segment, first, position)
        # The entries past offset 13, relative to it and to its position.
        expected = [(o - first, p - position) for o, p in zip(segment.offset_index.keys, segment.offset_index.values,
                                                             strict=True) if o >= first]
        assert expected and list(struct.iter_unpack(">ii", offsets)) == expected
        assert all(relative >= 0 for _, relative in struct.iter_unpack(">qi", times))

        remote = RemoteSegment(uuid.uuid4().hex, first, last, COPY_FINISHED, 0, segment.size - position)
        archiver._upload(Hosted(log), segment, remote, position)
        key = archive_key("t", uuid.UUID(int=7))
        stored = store.get_bytes(remote.object_key(key, 0, LOG))
        assert stored == segment.read_at(position, segment.size - position)
        assert store.get_bytes(remote.object_key(key, 0, OFFSET_INDEX)) == offsets
        assert store.get_bytes(remote.object_key(key, 0, TIME_INDEX)) == times
        for offset in range(first, last + 1):  # every offset reads back as from the local log
            got = decode_batches(reader.read(key, 0, remote, offset, 1))
            assert got[0].base_offset == offset
            local = log.read(offset, 1)
            assert local is not None and bytes(reader.read(key, 0, remote, offset, 1)) == local.read_bytes()
    finally:
        reader.close()
        log.release()


@pytest.mark.parametrize("archived_before", [-1, 12])
def test_an_archived_segment_is_searched_by_time_as_the_local_one(store: ObjectStore, tmp_path: Path,
                                                                   archived_before: int) -> None:
    """Whole or from its tail: the first record at or after a time, from any starting offset."""
    log = twenty_a_segment(tmp_path / "t-0")
    archiver = Archiver(ArchiveSettings(), store, None, None, lambda: iter([]), tmp_path / "cache")  # type: ignore[arg-type]
    reader = RemoteReader(store, tmp_path / "reader-cache", 1 << 20, chunk_bytes=ONE * 3)
    try:
        segment, first, last = next(copyable(log, archived_before))
        position = 0 if first == segment.base_offset else segment.bound_position(first)
        remote = RemoteSegment(uuid.uuid4().hex, first, last, COPY_FINISHED, 0, segment.size - position)
        archiver._upload(Hosted(log), segment, remote, position)
        key = archive_key("t", uuid.UUID(int=7))
        for timestamp in (T0 - 5, T0, T0 + first, T0 + 15, T0 + last, T0 + last + 1):
            for start in (first, 16):
                expected = segment.find_offset_by_timestamp(timestamp, start)
                got = reader.offset_for_timestamp(key, 0, remote, timestamp, start)
                assert (got and got[:2]) == expected, (timestamp, start)
        assert reader.offset_for_timestamp(key, 0, remote, T0 + 15, first) == (15, T0 + 15, 0)
    finally:
        reader.close()
        log.release()
