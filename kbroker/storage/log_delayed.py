"""The delayed-delivery side of a partition's log (docs/delayed-and-retry.md): its delay index
of pending delayed records, fed by every append, snapshotted at rolls and clean shutdowns,
rebuilt from the log after a truncation below the high watermark, and the reads of pending and
forward batches the mover and the retry forwarder make. A part of `Log`, kept apart so the log's
own file reads as appends, reads, retention and truncation.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

from kbroker.clock import WallClock
from kbroker.delay.delay_index import DelayIndex, EntryState, IndexState, TruncatedBelowHighWatermark
from kbroker.delay.delay_snapshot import (
    delete_snapshots_above,
    load_index,
    snapshot_offsets,
    snapshot_path,
    write_snapshot,
)
from kbroker.delay.forward_batches import ForwardRecord, decode_forward_batch, is_forward_batch
from kbroker.delay.pending_batches import PendingRecord, decode_pending_value, pending_values
from kbroker.delay.pending_cache import PendingValueCache
from kbroker.storage.log_config import LogConfig
from kbroker.storage.log_segments import LogSegments
from protocol.records import BatchHeader

log = logging.getLogger("kbroker.storage")


class LogDelayedRecords:
    """Mixed into `Log`: what it keeps for delayed delivery, on the log's own state."""

    directory: Path
    topic: str
    partition: int
    name: str
    config: LogConfig
    clock: WallClock
    log_start_offset: int
    delay_index: DelayIndex
    _segments: LogSegments
    _log_end_offset: int
    _high_watermark: int
    _pending_cache: PendingValueCache
    _cache_owner: int

    def _load_delay_index(self) -> DelayIndex:
        """The partition's pending delayed records: the newest snapshot, then the log after it.

        Without a usable snapshot the scan starts at the first segment: every pending record is
        in the log (retention keeps it, see `_delete_prefix`), and its delivery comes after it.
        """
        end = self._log_end_offset
        index = load_index(self.directory, self.topic, self.partition, log_end_offset=end, clock=self.clock,
                           tick_ms=self.config.delay_tick_ms)
        first = self._segments.first.base_offset if self._segments else end
        if index.end_offset < first:
            index = self._empty_delay_index(first)
        self._scan_into_delay_index(index, index.end_offset)
        return index

    def _empty_delay_index(self, start: int) -> DelayIndex:
        return DelayIndex(self.topic, self.partition, clock=self.clock, tick_ms=self.config.delay_tick_ms,
                          state=IndexState(end_offset=start, floor=start))

    def _scan_into_delay_index(self, index: DelayIndex, start: int) -> None:
        """Feed `index` the batches from `start` on; only the batches it looks inside are read."""
        for segment in self._segments.from_offset(start):
            found = segment.translate_offset(start)
            if found is None:
                continue
            for position, header in segment.batches(found[0]):
                if header.last_offset < start:
                    continue
                if index.needs_batch(header):
                    batch, plain = segment.read_batch(position, header)
                    index.on_batch(plain.base_offset, batch)
                else:
                    index.skip_to(header.last_offset + 1)
        index.skip_to(self._log_end_offset)

    def _index_appended(self, data: bytes | bytearray | memoryview, headers: Sequence[BatchHeader]) -> None:
        """Tell the delay index about batches just appended (their plain bytes, in order)."""
        index = self.delay_index
        view = memoryview(data)
        position = 0
        for header in headers:
            if index.needs_batch(header):
                index.on_batch(header.base_offset, view[position : position + header.size])
            else:
                index.skip_to(header.last_offset + 1)
            position += header.size

    def _snapshot_delay_index(self, *, durable: bool = False) -> None:
        """A snapshot as of the log end (at a roll, a clean shutdown): a restart reads it and
        scans only the log after it. The two newest are kept, for a truncation to fall back on."""
        index = self.delay_index
        if index.end_offset != self._log_end_offset:
            return
        write_snapshot(self.directory, index.state(), durable=durable)
        for offset in snapshot_offsets(self.directory)[:-2]:
            snapshot_path(self.directory, offset).unlink(missing_ok=True)

    def _truncate_delay_index(self, offset: int) -> None:
        delete_snapshots_above(self.directory, offset)
        self._pending_cache.drop(self._cache_owner, offset)
        try:
            self.delay_index.truncate(offset)
        except TruncatedBelowHighWatermark as e:
            log.warning("%s: %s; rebuilding the delay index from the log", self.name, e)
            self.delay_index = self._load_delay_index()
            self.delay_index.on_high_watermark(self._high_watermark)

    def pending_records(self, offsets: Sequence[int]) -> list[PendingRecord]:
        """The delayed records held by the pending records at `offsets` (ascending or not), read
        from the log; an offset no longer in the log (or not a pending record) is left out.

        A batch read for some of its records leaves the values of its other pending records in
        the broker's `PendingValueCache`, for the next passes (see pending_cache.py)."""
        wanted = set(offsets)
        found: dict[int, PendingRecord] = {}
        for offset in wanted:
            if (value := self._pending_cache.take(self._cache_owner, offset)) is not None:
                found[offset] = decode_pending_value(value, offset)
        for offset in sorted(wanted - found.keys()):
            if offset in found or offset < self.log_start_offset or offset >= self._log_end_offset:
                continue
            located = None
            for segment in self._segments.from_offset(offset):
                if (located := segment.translate_offset(offset)) is not None:
                    break
            if located is None:
                continue
            batch, header = segment.read_batch(*located)
            if header.is_control:
                self._read_pending_batch(batch, header, wanted, found)
        return [found[o] for o in offsets if o in found]

    def _read_pending_batch(self, batch: bytes, header: BatchHeader, wanted: set[int],
                            found: dict[int, PendingRecord]) -> None:
        kept = []
        index = self.delay_index
        for offset, value in pending_values(batch, header):
            if offset in wanted:
                found[offset] = decode_pending_value(value, offset)
            elif value is not None and index.state_of(offset) == EntryState.SCHEDULED:
                kept.append((offset, value))
        self._pending_cache.put_all(self._cache_owner, kept)

    def forward_batch(self, offset: int) -> list[ForwardRecord]:
        """The forward records of the forward batch at `offset` (a retry topic's), read from the
        log; empty if the log has no forward batch there."""
        if offset < self.log_start_offset or offset >= self._log_end_offset:
            return []
        for segment in self._segments.from_offset(offset):
            if (located := segment.translate_offset(offset)) is not None:
                batch, header = segment.read_batch(*located)
                return decode_forward_batch(batch, header) if is_forward_batch(batch, header) else []
        return []
