"""Opening a log: everything between finding its directory and its first append (Kafka's LogLoader).

In order:

1. Leftovers of an interrupted run go: `.deleted` files (deletions already decided), `.cleaned`
   files (a compaction cut short while writing), `.tmp` files (an atomic replace cut short) and
   index files whose segment is gone.
2. A `.swap` file is a compaction that finished writing: it replaces the segments it covers.
3. Every segment is opened. After an unclean stop those from the recovery point on are verified
   batch by batch and their indexes rebuilt; after a clean one a segment is verified only when it
   does not load. Corruption costs only itself: a damaged batch is kept, recorded and refused to
   readers, and the only bytes ever cut are a torn tail of the last segment (LogSegment.recover).
4. The log start moves up to the first segment (a log start beyond the log end restarts the log
   empty there), and the leader-epoch cache is cut to the offsets the log holds.
5. The producer state is rebuilt: the newest snapshot at or below the log end (and the first
   verified segment, whose batches may have changed), then the batches after it
   (`rebuild_producer_state`, which truncation uses too).
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path

from kbroker.storage.batch_scan import CorruptBatch, scan_batches
from kbroker.storage.encryption import BatchCipher
from kbroker.storage.index import CorruptIndex, segment_file_name
from kbroker.storage.leader_epoch import LeaderEpochCache
from kbroker.storage.log_config import LogConfig
from kbroker.storage.log_segments import LogSegments, open_segment
from kbroker.storage.producer_state import AppendOrigin, ProducerStateManager
from kbroker.storage.segment import DELETED_SUFFIX, LogSegment

log = logging.getLogger("kbroker.storage")

CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"
INDEX_SUFFIXES = (".index", ".timeindex", ".txnindex")


@dataclass(frozen=True, slots=True)
class LoadedLog:
    """Where the loaded log stands (Kafka's LoadedLogOffsets)."""

    log_start_offset: int
    log_end_offset: int
    recovery_point: int


class LogLoader:
    """Fills `segments`, `epochs` and `producer_state` from the files in `directory`."""

    def __init__(
        self,
        directory: Path,
        name: str,
        config: LogConfig,
        segments: LogSegments,
        epochs: LeaderEpochCache,
        producer_state: ProducerStateManager,
        *,
        log_start_offset: int,
        recovery_point: int,
        had_clean_shutdown: bool,
        now_ms: int,
        cipher: BatchCipher | None = None,
    ) -> None:
        self.directory = directory
        self.name = name
        self.config = config
        self.segments = segments
        self.epochs = epochs
        self.producer_state = producer_state
        self.log_start_offset = log_start_offset
        self.recovery_point = recovery_point
        self.had_clean_shutdown = had_clean_shutdown
        self.now_ms = now_ms
        self.cipher = cipher

    def load(self) -> LoadedLog:
        self._remove_leftovers()
        self._complete_swaps()
        first_recovered = self._open_segments()
        if not self.segments:
            self.segments.add(self._new_segment(self.log_start_offset))
        end = self.segments.active.next_offset
        log_start = max(self.log_start_offset, self.segments.first.base_offset)
        if log_start > end:
            self._start_over_at(log_start)
            end = log_start
        if not self.had_clean_shutdown:
            for segment in self.segments:  # what recovery kept is now known to be on disk
                segment.flush()
        self.epochs.truncate_from_end(end, keep_epoch_at_end=self.had_clean_shutdown)
        self.epochs.truncate_from_start(log_start)
        rebuild_producer_state(self.producer_state, self.segments, end, self.name,
                               replay_from_at_most=first_recovered)
        return LoadedLog(log_start, end, recovery_point=end)

    # -- files left by an earlier run ------------------------------------------------------------

    def _remove_leftovers(self) -> None:
        """Files a previous run left half-done: deletions, unfinished cleanings, orphan indexes."""
        for path in self.directory.iterdir():
            if path.name.endswith((DELETED_SUFFIX, CLEANED_SUFFIX, ".tmp")):
                path.unlink(missing_ok=True)
        logs = set(segment_bases(self.directory, ".log")) | set(segment_bases(self.directory, ".log.swap"))
        for suffix in INDEX_SUFFIXES:
            for base in set(segment_bases(self.directory, suffix)) - logs:
                (self.directory / segment_file_name(base, suffix)).unlink(missing_ok=True)

    def _complete_swaps(self) -> None:
        """A `.log.swap` is a finished cleaning: it replaces the segments whose offsets it covers.

        The log's own swap (Log.replace_segments) renames the old segments `.deleted` before
        renaming the swap file, so whichever step a crash interrupted, this finishes it.
        """
        for base in sorted(segment_bases(self.directory, ".log.swap")):
            swap = self.directory / segment_file_name(base, ".log.swap")
            last = _last_offset_in_file(swap, base)
            for old in segment_bases(self.directory, ".log"):
                if base <= old <= last:
                    for suffix in (".log", *INDEX_SUFFIXES):
                        (self.directory / segment_file_name(old, suffix)).unlink(missing_ok=True)
            for suffix in INDEX_SUFFIXES:  # rebuilt from the swapped-in log
                (self.directory / segment_file_name(base, suffix)).unlink(missing_ok=True)
            os.replace(swap, self.directory / segment_file_name(base, ".log"))
            log.info("%s: completed an interrupted compaction swap of segment %d", self.name, base)

    # -- segments ---------------------------------------------------------------------------------

    def _new_segment(self, base_offset: int, *, fresh: bool = True) -> LogSegment:
        return open_segment(self.directory, self.config, base_offset, self.now_ms, fresh=fresh, cipher=self.cipher)

    def _open_segments(self) -> int | None:
        """Open every segment, verifying what must be; returns the base of the first one verified."""
        for base in sorted(segment_bases(self.directory, ".log")):
            self.segments.add(self._new_segment(base, fresh=False))
        # After an unclean stop nothing from the recovery point on is known to have reached the disk.
        recover_from = None if self.had_clean_shutdown else self.segments.base_for(self.recovery_point)
        first_recovered: int | None = None
        last = len(self.segments) - 1
        for position, segment in enumerate(self.segments.all()):
            is_last = position == last
            if recover_from is not None and segment.base_offset >= recover_from:
                self._recover_segment(segment, is_last=is_last)
                recovered = True
            else:
                recovered = self._load_segment(segment, is_last=is_last)
            if recovered and first_recovered is None:
                first_recovered = segment.base_offset
        return first_recovered

    def _load_segment(self, segment: LogSegment, *, is_last: bool) -> bool:
        """Open a segment without verifying it; True if it had to be verified after all."""
        try:
            segment.load()
            return False
        except (CorruptIndex, CorruptBatch) as e:
            log.info("%s: verifying segment %s and rebuilding its indexes: %s", self.name, segment.name, e)
            self._recover_segment(segment, is_last=is_last)
            return True

    def _recover_segment(self, segment: LogSegment, *, is_last: bool) -> None:
        size = segment.size
        cut, position, reason = segment.recover(is_last=is_last)
        if cut:
            log.warning(
                "%s: recovery truncated segment %s at position %d (of %d bytes), cutting %d bytes: %s",
                self.name, segment.name, position, size, cut, reason,
            )

    def _start_over_at(self, offset: int) -> None:
        """The log start is past every batch (DeleteRecords, then a crash before the segments went):
        drop them all and begin empty at `offset`, as Log.truncate_fully_and_start_at does."""
        self.segments.schedule_deletion(self.segments.all(), self.now_ms + self.config.file_delete_delay_ms)
        self.segments.add(self._new_segment(offset))
        self.epochs.clear()
        self.producer_state.reset(offset)
        self.producer_state.delete_snapshots(above=-1)


# -- producer state -------------------------------------------------------------------------------


def rebuild_producer_state(
    state: ProducerStateManager, segments: LogSegments, log_end_offset: int, name: str,
    *, replay_from_at_most: int | None = None,
) -> None:
    """Newest snapshot at or below the log end (and `replay_from_at_most`), then replay the batches after it.

    Snapshots past the log end describe batches that are gone and are deleted. The replay also
    rewrites the aborted-transaction index entries of the markers it passes.
    """
    end = log_end_offset
    state.delete_snapshots(above=end)
    bound = end if replay_from_at_most is None else min(end, replay_from_at_most)
    first_base = segments.first.base_offset
    loaded = state.load_snapshot(bound)
    start = max(loaded if loaded is not None else first_base, first_base)
    if loaded is None or loaded < first_base:
        if loaded is None:
            state.reset(start)
        state.map_end_offset = start
    if start < end:
        _replay_producers(state, segments, start, name)
    state.map_end_offset = end


def _replay_producers(state: ProducerStateManager, segments: LogSegments, start: int, name: str) -> None:
    """Apply the producer fields of every batch from `start` on, as a replica's append would."""
    replayed = 0
    for segment in segments.from_offset(start):
        segment.txn_index.truncate_to(start)
        found = segment.translate_offset(start)
        if found is None:
            continue
        for position, header in segment.batches(found[0]):
            if header.producer_id < 0 or header.last_offset < start:
                continue
            append = state.begin(AppendOrigin.REPLICATION)
            if header.is_control:
                batch, plain = segment.read_batch(position, header)
                append.control_batch(plain, batch)
            else:
                append.data_batch(header)
            for txn in state.commit(append, header.last_offset + 1):
                segment.txn_index.append(txn)
            replayed += 1
    if replayed:
        log.info("%s: rebuilt producer state from offset %d (%d producer batches)", name, start, replayed)


# -- segment files --------------------------------------------------------------------------------


def segment_bases(directory: Path, suffix: str) -> list[int]:
    """Base offsets of the files `<20-digit base offset><suffix>` in `directory`."""
    bases = []
    for path in directory.glob(f"*{suffix}"):
        stem = path.name[: -len(suffix)]
        if len(stem) == 20 and stem.isdigit():
            bases.append(int(stem))
    return bases


def _last_offset_in_file(path: Path, base_offset: int) -> int:
    """The last offset of the sound batches of a segment file (base_offset - 1 if none)."""
    last = base_offset - 1
    fd = os.open(path, os.O_RDONLY)
    try:
        for _, header in scan_batches(fd, 0, os.fstat(fd).st_size):
            last = header.last_offset
    except CorruptBatch:
        pass
    finally:
        os.close(fd)
    return last
