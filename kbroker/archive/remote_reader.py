"""Reads of archived segments: whole batches from an offset, out of the object store, through a
bounded cache of segment chunks on local disk.

A fetch below the local log start reads here, on a worker thread (every call blocks on the
object store). The segment's offset index (fetched whole, kept in memory) gives where to start;
the batches are read from chunks of `CHUNK_BYTES` fetched with ranged GETs and kept as files in
the cache directory, the least recently used going once the cache is over its size. A consumer
reading an archived segment from its start thus makes one GET per chunk, and a second consumer
none while the chunks are cached. A read of chunk n fetches the next `READ_AHEAD_CHUNKS` on
worker threads of its own, so a consumer reading in order finds its next chunks on disk rather
than waiting for each GET in turn.
"""

from __future__ import annotations

import logging
import os
import shutil
import struct
import threading
from bisect import bisect_right
from collections import OrderedDict
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

from kbroker.archive.object_store import ObjectStore
from kbroker.archive.remote_log import LOG, OFFSET_INDEX, TIME_INDEX, TXN_INDEX, RemoteSegment
from kbroker.storage.batch_records import record_timestamp, records_of
from kbroker.storage.txn_index import AbortedTxn, parse_entries
from protocol.errors import ErrorCode, KafkaError
from protocol.records import HEADER_SIZE, read_header

log = logging.getLogger("kbroker.archive")

CHUNK_BYTES = 8 << 20
READ_AHEAD_CHUNKS = 4
# Offset indexes and transaction indexes of archived segments, in memory.
MAX_INDEX_BYTES = 64 << 20
_INDEX_ENTRY = struct.Struct(">ii")
_TIME_ENTRY = struct.Struct(">qi")


class RemoteReader:
    def __init__(self, store: ObjectStore, cache_dir: Path, cache_bytes: int, chunk_bytes: int = CHUNK_BYTES) -> None:
        self.store = store
        self.cache_dir = cache_dir
        self.cache_bytes = max(cache_bytes, chunk_bytes)
        self.chunk_bytes = chunk_bytes
        # Chunks left by an earlier run may be of segments deleted since: start empty.
        shutil.rmtree(cache_dir, ignore_errors=True)
        cache_dir.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._chunks: OrderedDict[str, int] = OrderedDict()  # file name -> size, oldest first
        self._cached_bytes = 0
        self._indexes: OrderedDict[str, bytes] = OrderedDict()
        self._index_bytes = 0
        self.gets = 0  # ranged GETs of segment bytes made (the cache's misses)
        self._fetching: dict[str, Future[bytes]] = {}  # chunks being fetched, by file name
        self._ahead = ThreadPoolExecutor(READ_AHEAD_CHUNKS, thread_name_prefix="archive-read-ahead")

    def close(self) -> None:
        self._ahead.shutdown(wait=True, cancel_futures=True)

    def read(self, topic: str, partition: int, segment: RemoteSegment, offset: int, max_bytes: int,
             following: RemoteSegment | None = None) -> bytes:
        """Whole batches of `segment` from the one holding `offset`, up to `max_bytes` (at least one).
        A read of its last chunk fetches the start of `following` (the next segment) ahead."""
        key = segment.object_key(topic, partition, LOG)
        position = self._start_position(topic, partition, segment, offset)
        if following is not None and position // self.chunk_bytes >= (segment.size - 1) // self.chunk_bytes:
            self._read_next_segment_ahead(topic, partition, following)
        out = bytearray()
        while position + HEADER_SIZE <= segment.size:
            header = read_header(self._bytes(key, segment, position, HEADER_SIZE))
            size = header.size
            if size < HEADER_SIZE or position + size > segment.size:
                raise KafkaError(ErrorCode.CORRUPT_MESSAGE, f"archived segment {key} is damaged at {position}")
            if header.last_offset >= offset:
                if out and len(out) + size > max_bytes:
                    break
                out += self._bytes(key, segment, position, size)
            position += size
            if len(out) >= max_bytes:
                break
        return bytes(out)

    def offset_for_timestamp(self, topic: str, partition: int, segment: RemoteSegment, timestamp: int,
                             starting_offset: int) -> tuple[int, int, int] | None:
        """The first record of `segment` at or after `starting_offset` with timestamp >= `timestamp`:
        (offset, timestamp, the leader epoch of its batch). The scan starts where the time index says every earlier record is
        older, and decodes only the batches whose max timestamp reaches `timestamp`."""
        offset = max(self._time_indexed_offset(topic, partition, segment, timestamp), starting_offset)
        key = segment.object_key(topic, partition, LOG)
        position = self._start_position(topic, partition, segment, offset)
        while position + HEADER_SIZE <= segment.size:
            header = read_header(self._bytes(key, segment, position, HEADER_SIZE))
            if header.size < HEADER_SIZE or position + header.size > segment.size:
                raise KafkaError(ErrorCode.CORRUPT_MESSAGE, f"archived segment {key} is damaged at {position}")
            if header.max_timestamp >= timestamp and header.last_offset >= offset:
                batch = self._bytes(key, segment, position, header.size)
                for record in records_of(batch, header):
                    found, found_timestamp = header.base_offset + record.offset_delta, record_timestamp(header, record)
                    if found_timestamp >= timestamp and found >= offset:
                        return found, found_timestamp, header.partition_leader_epoch
            position += header.size
        return None

    def _time_indexed_offset(self, topic: str, partition: int, segment: RemoteSegment, timestamp: int) -> int:
        """The offset of the last time index entry at or below `timestamp` (the segment's base
        offset when none): no record before it is as new as `timestamp`."""
        entries = self._index(segment.object_key(topic, partition, TIME_INDEX))
        timestamps = [ts for ts, _ in _TIME_ENTRY.iter_unpack(entries[: len(entries) - len(entries) % _TIME_ENTRY.size])]
        slot = bisect_right(timestamps, timestamp) - 1
        return segment.base_offset + (_TIME_ENTRY.unpack_from(entries, slot * _TIME_ENTRY.size)[1] if slot >= 0 else 0)

    def aborted_transactions(self, topic: str, partition: int, segment: RemoteSegment) -> list[AbortedTxn]:
        return parse_entries(self._index(segment.object_key(topic, partition, TXN_INDEX)))

    def forget(self, segment: RemoteSegment) -> None:
        """A deleted segment's chunks and indexes go (they would only age out otherwise)."""
        with self._lock:
            for name in [n for n in self._chunks if n.startswith(segment.id)]:
                self._drop_chunk(name)
            for key in [k for k in self._indexes if segment.id in k]:
                self._index_bytes -= len(self._indexes.pop(key))

    @property
    def cached_bytes(self) -> int:
        return self._cached_bytes

    # -- positions ------------------------------------------------------------------------------

    def _start_position(self, topic: str, partition: int, segment: RemoteSegment, offset: int) -> int:
        """Where the scan for `offset` starts: the last offset index entry at or below it, found
        by a binary search of the index's bytes (an index of a large segment holds hundreds of
        thousands of entries: not unpacked for every fetch)."""
        entries = _IndexEntries(self._index(segment.object_key(topic, partition, OFFSET_INDEX)))
        slot = bisect_right(entries, offset - segment.base_offset) - 1
        return entries.position(slot) if slot >= 0 else 0

    def _index(self, key: str) -> bytes:
        with self._lock:
            if key in self._indexes:
                self._indexes.move_to_end(key)
                return self._indexes[key]
        data = self.store.get_bytes(key)
        with self._lock:
            if key not in self._indexes:
                self._indexes[key] = data
                self._index_bytes += len(data)
                while self._index_bytes > MAX_INDEX_BYTES and len(self._indexes) > 1:
                    _, dropped = self._indexes.popitem(last=False)
                    self._index_bytes -= len(dropped)
        return data

    # -- chunks ---------------------------------------------------------------------------------

    def _bytes(self, key: str, segment: RemoteSegment, start: int, length: int) -> bytes:
        """segment[start : start + length], from its chunks."""
        parts = []
        end = start + length
        while start < end:
            number = start // self.chunk_bytes
            within = start - number * self.chunk_bytes
            part = self._chunk_range(key, segment, number, within, min(end - start, self.chunk_bytes - within))
            if not part:
                raise KafkaError(ErrorCode.CORRUPT_MESSAGE, f"archived segment {key} ends before {end}")
            parts.append(part)
            start += len(part)
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def _chunk_range(self, key: str, segment: RemoteSegment, number: int, within: int, length: int) -> bytes:
        """`length` bytes at `within` of a chunk: read from its cache file (only those bytes),
        else fetched; the chunks after it are fetched ahead."""
        data = self._cached_range(segment, number, within, length)
        if data is None:
            data = self._fetched(key, segment, number)[within : within + length]
        self._read_ahead(key, segment, number)
        return data

    def _cached_range(self, segment: RemoteSegment, number: int, within: int, length: int) -> bytes | None:
        name = f"{segment.id}.{number}"
        with self._lock:
            if name not in self._chunks:
                return None
            self._chunks.move_to_end(name)
        try:
            fd = os.open(self.cache_dir / name, os.O_RDONLY)
        except FileNotFoundError:
            return None  # evicted meanwhile: fetched again
        try:
            return os.pread(fd, length, within)
        finally:
            os.close(fd)

    def _fetched(self, key: str, segment: RemoteSegment, number: int) -> bytes:
        """The whole chunk: from the read ahead fetching it, or fetched now."""
        with self._lock:
            fetching = self._fetching.get(f"{segment.id}.{number}")
        if fetching is not None:
            try:
                return fetching.result()
            except Exception:  # the read ahead failed: this read tries for itself
                pass
        return self._fetch(key, segment, number)

    def _read_ahead(self, key: str, segment: RemoteSegment, number: int) -> None:
        last = (segment.size - 1) // self.chunk_bytes
        for ahead in range(number + 1, min(number + READ_AHEAD_CHUNKS, last) + 1):
            name = f"{segment.id}.{ahead}"
            with self._lock:
                if name in self._chunks or name in self._fetching:
                    continue
                try:
                    future = self._ahead.submit(self._fetch, key, segment, ahead)
                except RuntimeError:
                    return  # closed
                self._fetching[name] = future
            future.add_done_callback(lambda _, n=name: self._done_fetching(n))

    def _read_next_segment_ahead(self, topic: str, partition: int, segment: RemoteSegment) -> None:
        """The next segment's offset index and first chunk, on the read-ahead threads."""
        index_key = segment.object_key(topic, partition, OFFSET_INDEX)
        name = f"{segment.id}.0"
        with self._lock:
            if name in self._chunks or name in self._fetching:
                return
            try:
                self._ahead.submit(self._index, index_key)
                future = self._ahead.submit(self._fetch, segment.object_key(topic, partition, LOG), segment, 0)
            except RuntimeError:
                return  # closed
            self._fetching[name] = future
        future.add_done_callback(lambda _: self._done_fetching(name))

    def _done_fetching(self, name: str) -> None:
        with self._lock:
            self._fetching.pop(name, None)

    def _fetch(self, key: str, segment: RemoteSegment, number: int) -> bytes:
        name = f"{segment.id}.{number}"
        path = self.cache_dir / name
        length = min(self.chunk_bytes, segment.size - number * self.chunk_bytes)
        data = self.store.get_range(key, number * self.chunk_bytes, length)
        partial = self.cache_dir / f"{name}.{threading.get_ident()}.part"
        partial.write_bytes(data)
        os.replace(partial, path)
        with self._lock:
            self.gets += 1
            if name not in self._chunks:
                self._chunks[name] = len(data)
                self._cached_bytes += len(data)
            while self._cached_bytes > self.cache_bytes and len(self._chunks) > 1:
                self._drop_chunk(next(iter(self._chunks)))
        return data

    def _drop_chunk(self, name: str) -> None:
        self._cached_bytes -= self._chunks.pop(name)
        (self.cache_dir / name).unlink(missing_ok=True)


class _IndexEntries:
    """An offset index's bytes as the sequence of its relative offsets (for `bisect`); a torn
    last entry is left out."""

    __slots__ = ("data", "count")

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.count = len(data) // _INDEX_ENTRY.size

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, slot: int) -> int:
        return _INDEX_ENTRY.unpack_from(self.data, slot * _INDEX_ENTRY.size)[0]

    def position(self, slot: int) -> int:
        return _INDEX_ENTRY.unpack_from(self.data, slot * _INDEX_ENTRY.size)[1]
