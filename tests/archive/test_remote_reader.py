"""Reads of an archived segment (kbroker/archive/remote_reader.py) from a real S3-compatible
server: whole batches from the offset index's position, across chunk boundaries, through a
bounded on-disk cache, with the next chunks fetched ahead."""

from __future__ import annotations

import struct
from pathlib import Path

from kbroker.archive.object_store import ObjectStore
from kbroker.archive.remote_log import COPY_FINISHED, LOG, OFFSET_INDEX, TXN_INDEX, RemoteSegment
from kbroker.archive.remote_reader import READ_AHEAD_CHUNKS, RemoteReader
from protocol.record_batch import Record, decode_batches, encode_batch

TOPIC, PARTITION = "t.0123", 0
BATCH_RECORDS = 10


def archive_segment(store: ObjectStore, base: int, batches: int, value_bytes: int = 300,
                    index_every: int = 4) -> tuple[RemoteSegment, list[bytes]]:
    """A segment of `batches` batches of ten records, its offset index with an entry every
    `index_every` batches, uploaded as the archiver uploads one."""
    encoded, index, position = [], b"", 0
    for i in range(batches):
        offset = base + i * BATCH_RECORDS
        batch = encode_batch([Record(j, 1, None, bytes([i % 251]) * value_bytes) for j in range(BATCH_RECORDS)],
                             base_offset=offset)
        if i % index_every == 0 and i:
            index += struct.pack(">ii", offset - base, position)
        encoded.append(batch)
        position += len(batch)
    data = b"".join(encoded)
    segment = RemoteSegment(f"seg{base}", base, base + batches * BATCH_RECORDS - 1, COPY_FINISHED, 0, len(data), 1)
    store.put_bytes(segment.object_key(TOPIC, PARTITION, LOG), data)
    store.put_bytes(segment.object_key(TOPIC, PARTITION, OFFSET_INDEX), index)
    store.put_bytes(segment.object_key(TOPIC, PARTITION, TXN_INDEX), b"")
    return segment, encoded


def offsets(data: bytes) -> list[int]:
    return [b.base_offset for b in decode_batches(data)]


def test_reads_whole_batches_from_the_batch_holding_the_offset(store: ObjectStore, tmp_path: Path) -> None:
    segment, batches = archive_segment(store, 1000, 20)
    reader = RemoteReader(store, tmp_path / "cache", 1 << 20, chunk_bytes=1000)  # batches span chunks
    try:
        assert offsets(reader.read(TOPIC, PARTITION, segment, 1000, 1)) == [1000]  # at least one batch
        got = reader.read(TOPIC, PARTITION, segment, 1057, 3 * len(batches[0]))
        assert offsets(got) == [1050, 1060, 1070]
        assert got == b"".join(batches[5:8])
        assert reader.read(TOPIC, PARTITION, segment, 1199, 1 << 20) == batches[-1]
        assert reader.read(TOPIC, PARTITION, segment, 1000, 1 << 20) == b"".join(batches)
    finally:
        reader.close()


def test_a_second_read_comes_from_the_cache_and_the_next_chunks_are_fetched_ahead(
        store: ObjectStore, tmp_path: Path) -> None:
    segment, batches = archive_segment(store, 0, 40)
    chunk = 4 * len(batches[0])
    reader = RemoteReader(store, tmp_path / "cache", 1 << 20, chunk_bytes=chunk)
    try:
        reader.read(TOPIC, PARTITION, segment, 0, 1)
        reader.close()  # waits for the read ahead
        chunks = -(-segment.size // chunk)
        assert reader.gets == 1 + READ_AHEAD_CHUNKS  # the first chunk, and those ahead of it
        fetched = reader.gets
        for offset in range(0, 40 * BATCH_RECORDS, BATCH_RECORDS * 4):  # the rest, in order
            reader.read(TOPIC, PARTITION, segment, offset, chunk)
        assert reader.gets <= chunks
        again = reader.gets
        assert again > fetched
        assert reader.read(TOPIC, PARTITION, segment, 0, 1 << 20) == b"".join(batches)
        assert reader.gets == again  # all of it from the cache
    finally:
        reader.close()


def test_the_cache_stays_within_its_size(store: ObjectStore, tmp_path: Path) -> None:
    segment, batches = archive_segment(store, 0, 40)
    chunk = 4 * len(batches[0])
    reader = RemoteReader(store, tmp_path / "cache", 3 * chunk, chunk_bytes=chunk)
    try:
        assert reader.read(TOPIC, PARTITION, segment, 0, 1 << 20) == b"".join(batches)
        reader.close()
        assert reader.cached_bytes <= 3 * chunk
        files = [p for p in (tmp_path / "cache").iterdir() if not p.name.endswith(".part")]
        assert sum(p.stat().st_size for p in files) <= 3 * chunk
        reader.forget(segment)
        assert reader.cached_bytes == 0 and not list((tmp_path / "cache").iterdir())
    finally:
        reader.close()


def test_the_next_segment_is_fetched_ahead_at_the_end_of_one(store: ObjectStore, tmp_path: Path) -> None:
    first, batches = archive_segment(store, 0, 8)
    second, _ = archive_segment(store, 80, 8)
    reader = RemoteReader(store, tmp_path / "cache", 1 << 20, chunk_bytes=1 << 20)
    try:
        reader.read(TOPIC, PARTITION, first, 70, 1, following=second)
        reader.close()
        assert reader.gets == 2  # the first segment's only chunk, and the second's
    finally:
        reader.close()
