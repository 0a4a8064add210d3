"""Reads of archived segments: whole batches from an offset, out of the object store, through a
bounded cache of segment chunks on local disk.

A fetch below the local log start reads here, on a worker thread (every call blocks on the
object store). The segment's offset index (fetched whole, kept in memory) gives where to start;
the batches are read from chunks of `CHUNK_BYTES` fetched with ranged GETs and kept as files in
the cache directory, the least recently used going once the cache is over its size. A consumer
reading an archived segment from its start thus makes one GET per chunk, and a second consumer
none while the chunks are cached.
"""

from __future__ import annotations

import logging
import os
import shutil
import struct
import threading
from bisect import bisect_right
from collections import OrderedDict
from pathlib import Path

from kbroker.archive.object_store import ObjectStore
from kbroker.archive.remote_log import LOG, OFFSET_INDEX, TXN_INDEX, RemoteSegment
from kbroker.storage.txn_index import AbortedTxn, parse_entries
from protocol.errors import ErrorCode, KafkaError
from protocol.records import HEADER_SIZE, read_header

log = logging.getLogger("kbroker.archive")

CHUNK_BYTES = 4 << 20
# Offset indexes and transaction indexes of archived segments, in memory.
MAX_INDEX_BYTES = 64 << 20
_INDEX_ENTRY = struct.Struct(">ii")


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

    def read(self, topic: str, partition: int, segment: RemoteSegment, offset: int, max_bytes: int) -> bytes:
        """Whole batches of `segment` from the one holding `offset`, up to `max_bytes` (at least one)."""
        key = segment.object_key(topic, partition, LOG)
        position = self._start_position(topic, partition, segment, offset)
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
        """Where the scan for `offset` starts: the last offset index entry at or below it."""
        index = self._index(segment.object_key(topic, partition, OFFSET_INDEX))
        whole = len(index) - len(index) % _INDEX_ENTRY.size
        entries = list(_INDEX_ENTRY.iter_unpack(index[:whole]))
        slot = bisect_right([relative for relative, _ in entries], offset - segment.base_offset) - 1
        return entries[slot][1] if slot >= 0 else 0

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
            chunk = self._chunk(key, segment, number)
            within = start - number * self.chunk_bytes
            part = chunk[within : within + end - start]
            if not part:
                raise KafkaError(ErrorCode.CORRUPT_MESSAGE, f"archived segment {key} ends before {end}")
            parts.append(part)
            start += len(part)
        return b"".join(parts)

    def _chunk(self, key: str, segment: RemoteSegment, number: int) -> bytes:
        name = f"{segment.id}.{number}"
        path = self.cache_dir / name
        with self._lock:
            cached = name in self._chunks
            if cached:
                self._chunks.move_to_end(name)
        if cached:
            try:
                return path.read_bytes()
            except FileNotFoundError:
                pass  # evicted meanwhile: fetched again
        length = min(self.chunk_bytes, segment.size - number * self.chunk_bytes)
        data = self.store.get_range(key, number * self.chunk_bytes, length)
        self.gets += 1
        partial = self.cache_dir / f"{name}.{threading.get_ident()}.part"
        partial.write_bytes(data)
        os.replace(partial, path)
        with self._lock:
            if name not in self._chunks:
                self._chunks[name] = len(data)
                self._cached_bytes += len(data)
            while self._cached_bytes > self.cache_bytes and len(self._chunks) > 1:
                self._drop_chunk(next(iter(self._chunks)))
        return data

    def _drop_chunk(self, name: str) -> None:
        self._cached_bytes -= self._chunks.pop(name)
        (self.cache_dir / name).unlink(missing_ok=True)
