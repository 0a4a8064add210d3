"""One partition's log: an ordered run of segments in `<topic>-<partition>/`.

Appends validate batch headers (framing, magic, CRC, sizes), patch base offsets and leader
epochs in place and write the bytes: O(batches), records are never decoded except for the
null-key check of compacted topics. Reads return file slices. Recovery after an unclean stop
verifies batches from the recovery point, cuts at the first bad byte and rebuilds indexes.
"""

from __future__ import annotations

import logging
import os
import random
import shutil
import time
import uuid
from bisect import bisect_right
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from kbroker.storage.batch_scan import CorruptBatch, scan_batches
from kbroker.storage.index import CorruptIndex, segment_file_name
from kbroker.storage.leader_epoch import LeaderEpochCache
from kbroker.storage.log_config import LONG_MAX, LogConfig
from kbroker.storage.log_dir_health import LogDirHealth
from kbroker.storage.log_validator import validate_batches, validate_records
from kbroker.storage.producer_state import (
    AppendOrigin,
    ProducerAppend,
    ProducerStateManager,
    ProducerView,
)
from kbroker.storage.segment import DELETED_SUFFIX, LogSegment, ReadResult
from kbroker.storage.txn_index import AbortedTxn
from protocol.errors import ErrorCode, KafkaError
from protocol.record_batch import (
    ControlType,
    CorruptRecordError,
    decode_control_key,
    decode_end_txn_marker,
    decode_payload,
)
from protocol.records import (
    NO_TIMESTAMP,
    TIMESTAMP_TYPE_BIT,
    BatchHeader,
    set_base_offset,
    set_log_append_time,
    set_partition_leader_epoch,
)

log = logging.getLogger("kbroker.storage")

Clock = Callable[[], int]
CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"
HIGH_WATERMARK = -1  # DeleteRecords' "up to the high watermark"
# A replica being copied to another log dir of this broker: `<topic>-<partition>.<uuid>-future`.
FUTURE_DIR_SUFFIX = "-future"


def wall_clock_ms() -> int:
    return int(time.time() * 1000)


def parse_log_dir_name(name: str) -> tuple[str, int] | None:
    """`<topic>-<partition>` -> (topic, partition); None for anything else."""
    topic, sep, partition = name.rpartition("-")
    if not sep or not topic or not partition.isdigit():
        return None
    return topic, int(partition)


def future_dir_name(topic: str, partition: int) -> str:
    """Kafka's name for a future replica's directory: `<topic>-<partition>.<uuid>-future`."""
    return f"{topic}-{partition}.{uuid.uuid4().hex}{FUTURE_DIR_SUFFIX}"


def parse_future_dir_name(name: str) -> tuple[str, int] | None:
    """`<topic>-<partition>.<32 hex>-future` -> (topic, partition); None for anything else."""
    return _parse_suffixed_dir_name(name, FUTURE_DIR_SUFFIX)


def _parse_suffixed_dir_name(name: str, suffix: str) -> tuple[str, int] | None:
    if not name.endswith(suffix):
        return None
    base, dot, unique = name[: -len(suffix)].rpartition(".")
    if not dot or len(unique) != 32 or any(c not in "0123456789abcdef" for c in unique):
        return None
    return parse_log_dir_name(base)


class UnexpectedAppendOffset(KafkaError):
    """A follower append whose offsets do not continue the log (Kafka's UnexpectedAppendOffsetException)."""

    def __init__(self, message: str) -> None:
        super().__init__(ErrorCode.UNKNOWN_SERVER_ERROR, message)


@dataclass(frozen=True, slots=True)
class AppendInfo:
    first_offset: int
    last_offset: int
    log_append_time: int  # -1 for CreateTime
    log_start_offset: int
    max_timestamp: int
    record_count: int
    duplicate: bool = False  # a producer's retry of a batch already in the log: nothing was written


class Log:
    def __init__(
        self,
        directory: Path,
        config: LogConfig,
        *,
        log_start_offset: int = 0,
        recovery_point: int = 0,
        high_watermark: int = 0,
        had_clean_shutdown: bool = False,
        clock: Clock = wall_clock_ms,
        health: LogDirHealth | None = None,
    ) -> None:
        parsed = parse_log_dir_name(directory.name) or parse_future_dir_name(directory.name)
        if parsed is None:
            raise ValueError(f"{directory} is not named <topic>-<partition> (or <topic>-<partition>.<id>-future)")
        self.topic, self.partition = parsed
        self.directory = directory
        self.is_future = directory.name.endswith(FUTURE_DIR_SUFFIX)
        # Compaction waits while the log is copied to another log dir (Kafka's abortAndPauseCleaning):
        # a rewritten segment would no longer match the copy.
        self.cleaning_paused = False
        self.config = config
        self.clock = clock
        # Shared by every log of the dir: a full or failed disk stops writes to all of them.
        self.health = health or LogDirHealth(directory.parent)
        self.log_start_offset = log_start_offset
        self.recovery_point = recovery_point
        self.cleaner_checkpoint = 0  # first offset the cleaner has not compacted yet
        self.earliest_delete_horizon = LONG_MAX  # when retained tombstones become removable
        self.last_flush_ms = clock()
        self._segments: list[LogSegment] = []
        self._bases: list[int] = []
        self._doomed: list[tuple[int, LogSegment]] = []  # (delete at ms, renamed segment)
        self._log_end_offset = 0
        self._high_watermark = 0
        directory.mkdir(parents=True, exist_ok=True)
        self.epochs = LeaderEpochCache(directory)
        self.producer_state = ProducerStateManager(directory, self.name)
        self._load(had_clean_shutdown)
        self.high_watermark = high_watermark

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.partition}"

    def __repr__(self) -> str:
        return f"Log({self.name}, start={self.log_start_offset}, end={self._log_end_offset})"

    # -- state ------------------------------------------------------------------------------------

    @property
    def log_end_offset(self) -> int:
        return self._log_end_offset

    @property
    def high_watermark(self) -> int:
        return self._high_watermark

    @high_watermark.setter
    def high_watermark(self, offset: int) -> None:
        self._high_watermark = min(max(offset, self.log_start_offset), self._log_end_offset)

    @property
    def segments(self) -> tuple[LogSegment, ...]:
        return tuple(self._segments)

    @property
    def active_segment(self) -> LogSegment:
        return self._segments[-1]

    @property
    def size_in_bytes(self) -> int:
        return sum(segment.size for segment in self._segments)

    @property
    def latest_epoch(self) -> int:
        return self.epochs.latest_epoch

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """OffsetForLeaderEpoch: (epoch, end offset), Kafka's semantics (see LeaderEpochCache)."""
        return self.epochs.end_offset_for(epoch, self._log_end_offset)

    # -- loading and recovery -------------------------------------------------------------------

    def _load(self, had_clean_shutdown: bool) -> None:
        self._remove_leftovers()
        self._complete_swaps()
        bases = sorted(_segment_bases(self.directory, ".log"))
        now = self.clock()
        for base in bases:
            self._add_segment(self._segment(base, now, fresh=False))
        recover_from = None if had_clean_shutdown else self._segment_base_for(self.recovery_point)
        first_recovered: int | None = None
        last = len(self._segments) - 1
        # Corruption costs only itself: a damaged batch is kept and refused to readers, and the
        # only bytes ever cut are a torn tail of the last segment (see LogSegment.recover).
        for position, segment in enumerate(list(self._segments)):
            if recover_from is not None and segment.base_offset >= recover_from:
                self._recover_segment(segment, is_last=position == last)
                recovered = True
            else:
                recovered = self._load_segment(segment, is_last=position == last)
            if recovered and first_recovered is None:
                first_recovered = segment.base_offset
        if not self._segments:
            self._add_segment(self._segment(self.log_start_offset, now, fresh=True))
        self._log_end_offset = self.active_segment.next_offset
        self.log_start_offset = max(self.log_start_offset, self._segments[0].base_offset)
        if self.log_start_offset > self._log_end_offset:
            self.truncate_fully_and_start_at(self.log_start_offset)
        if recover_from is not None:
            self._flush_segments(self._segments)  # what recovery kept is now known to be on disk
        self.recovery_point = self._log_end_offset
        self.cleaner_checkpoint = self.log_start_offset
        self.epochs.truncate_from_end(self._log_end_offset, keep_epoch_at_end=had_clean_shutdown)
        self.epochs.truncate_from_start(self.log_start_offset)
        self._load_producer_state(replay_from_at_most=first_recovered)

    def _remove_leftovers(self) -> None:
        """Files a previous run left half-done: deletions, unfinished cleanings, orphan indexes."""
        for path in self.directory.iterdir():
            name = path.name
            if name.endswith((DELETED_SUFFIX, CLEANED_SUFFIX, ".tmp")):
                path.unlink(missing_ok=True)
        logs = set(_segment_bases(self.directory, ".log")) | set(_segment_bases(self.directory, ".log.swap"))
        for suffix in (".index", ".timeindex", ".txnindex"):
            for base in set(_segment_bases(self.directory, suffix)) - logs:
                (self.directory / segment_file_name(base, suffix)).unlink(missing_ok=True)

    def _complete_swaps(self) -> None:
        """A `.log.swap` is a finished cleaning: it replaces the segments whose offsets it covers."""
        for base in sorted(_segment_bases(self.directory, ".log.swap")):
            swap = self.directory / segment_file_name(base, ".log.swap")
            last = _last_offset_in_file(swap, base)
            for old in _segment_bases(self.directory, ".log"):
                if base <= old <= last:
                    for suffix in (".log", ".index", ".timeindex", ".txnindex"):
                        (self.directory / segment_file_name(old, suffix)).unlink(missing_ok=True)
            for suffix in (".index", ".timeindex", ".txnindex"):
                (self.directory / segment_file_name(base, suffix)).unlink(missing_ok=True)
            os.replace(swap, self.directory / segment_file_name(base, ".log"))
            log.info("%s: completed an interrupted compaction swap of segment %d", self.name, base)

    def _load_segment(self, segment: LogSegment, *, is_last: bool) -> bool:
        """Open a segment after a clean stop; True if it had to be recovered."""
        try:
            segment.load()
            return False
        except (CorruptIndex, CorruptBatch) as e:
            log.info("%s: verifying segment %s and rebuilding its indexes: %s", self.name, segment.name, e)
            self._recover_segment(segment, is_last=is_last)
            return True

    def _recover_segment(self, segment: LogSegment, *, is_last: bool) -> int:
        size = segment.size
        cut, position, reason = segment.recover(is_last=is_last)
        if cut:
            log.warning(
                "%s: recovery truncated segment %s at position %d (of %d bytes), cutting %d bytes: %s",
                self.name, segment.name, position, size, cut, reason,
            )
        return cut

    @property
    def damaged_segments(self) -> list[LogSegment]:
        """Segments holding bytes that failed verification (kept, and refused to readers)."""
        return [segment for segment in self._segments if segment.damage]

    # -- segments ---------------------------------------------------------------------------------

    def _segment(self, base_offset: int, now_ms: int, *, fresh: bool) -> LogSegment:
        jitter = self.config.segment_jitter_ms
        return LogSegment(
            self.directory,
            base_offset,
            index_interval_bytes=self.config.index_interval_bytes,
            max_index_bytes=self.config.segment_index_bytes,
            now_ms=now_ms,
            roll_jitter_ms=random.randrange(jitter) if jitter > 0 else 0,
            fresh=fresh,
        )

    def _add_segment(self, segment: LogSegment) -> None:
        slot = bisect_right(self._bases, segment.base_offset)
        self._segments.insert(slot, segment)
        self._bases.insert(slot, segment.base_offset)

    def _segment_base_for(self, offset: int) -> int:
        slot = max(bisect_right(self._bases, offset) - 1, 0)
        return self._bases[slot] if self._bases else 0

    def _segment_slot(self, offset: int) -> int:
        return max(bisect_right(self._bases, offset) - 1, 0)

    def _schedule_deletion(self, segments: Sequence[LogSegment], now_ms: int) -> None:
        """Take segments out of the log; their files go after file.delete.delay.ms (reads in flight)."""
        doomed = {id(segment) for segment in segments}
        kept = [segment for segment in self._segments if id(segment) not in doomed]
        self._segments = kept
        self._bases = [segment.base_offset for segment in kept]
        due = now_ms + self.config.file_delete_delay_ms
        for segment in segments:
            segment.rename_to_deleted()
            self._doomed.append((due, segment))

    def delete_expired_files(self, now_ms: int) -> int:
        """Close and unlink segments whose deletion delay has passed."""
        due = [segment for at, segment in self._doomed if at <= now_ms]
        self._doomed = [(at, segment) for at, segment in self._doomed if at > now_ms]
        for segment in due:
            segment.delete_files()
        return len(due)

    def replace_segments(self, old: Sequence[LogSegment], swap: Path, now_ms: int) -> LogSegment:
        """Put the cleaner's `swap` file (`<base>.log.swap`) in place of the segments `old`.

        Kafka's order, so a crash at any point recovers (see `_complete_swaps`): the old files
        are renamed `.deleted`, then the swap file takes the first one's name.
        """
        base = old[0].base_offset
        aborted = [txn for segment in old for txn in segment.txn_index.entries]
        self._schedule_deletion(old, now_ms)
        os.replace(swap, self.directory / segment_file_name(base, ".log"))
        segment = self._segment(base, now_ms, fresh=False)
        segment.recover(is_last=False)  # builds its indexes
        for txn in aborted:  # the cleaner dropped the aborted records, but not their markers
            segment.txn_index.append(txn)
        segment.on_become_inactive()
        self._add_segment(segment)
        return segment

    def roll(self, now_ms: int | None = None, base_offset: int | None = None) -> LogSegment:
        """Start a new active segment at the log end (or at `base_offset` if that is later)."""
        now = self.clock() if now_ms is None else now_ms
        new_base = max(self._log_end_offset, base_offset or 0)
        active = self.active_segment
        if active.is_empty:
            if active.base_offset == new_base:
                return active
            self._segments.pop()
            self._bases.pop()
            active.delete_files()
        else:
            active.on_become_inactive()
        segment = self._segment(new_base, now, fresh=True)
        self._add_segment(segment)
        # As Kafka: a snapshot per segment, so a restart or truncation replays at most one segment.
        self.producer_state.map_end_offset = self._log_end_offset
        self.producer_state.take_snapshot()
        return segment

    def _maybe_roll(self, size: int, headers: Sequence[BatchHeader], now_ms: int) -> LogSegment:
        segment = self.active_segment
        max_timestamp = max(header.max_timestamp for header in headers)
        config = self.config
        if (
            segment.size > config.segment_bytes - size
            or (not segment.is_empty
                and segment.time_waited_for_roll(now_ms, max_timestamp) > config.segment_ms - segment.roll_jitter_ms)
            or segment.offset_index.is_full
            or segment.time_index.is_full
            or not segment.can_hold_offset(headers[-1].last_offset)
        ):
            return self.roll(now_ms, headers[0].base_offset)
        return segment

    # -- appending --------------------------------------------------------------------------------

    def append_as_leader(
        self,
        batches: bytes | bytearray | memoryview,
        leader_epoch: int,
        now_ms: int,
        origin: AppendOrigin = AppendOrigin.CLIENT,
    ) -> AppendInfo:
        """Validate batches, assign offsets from the log end, and append them.

        Raises KafkaError: CORRUPT_MESSAGE (framing, CRC), UNSUPPORTED_FOR_MESSAGE_FORMAT
        (magic 0/1), MESSAGE_TOO_LARGE (a batch above max.message.bytes), RECORD_LIST_TOO_LARGE
        (more than segment.bytes), INVALID_RECORD (bad counts, control batches from clients,
        non-zero base offset, null keys on a compacted topic), INVALID_TIMESTAMP, and the
        producer-state errors INVALID_PRODUCER_EPOCH, OUT_OF_ORDER_SEQUENCE_NUMBER,
        INVALID_TXN_STATE. A client's retry of one of its last five batches returns the offsets
        that batch got, with `duplicate` set, and writes nothing.
        """
        self.health.check_writable(self.name)
        try:
            return self._append_as_leader(batches, leader_epoch, now_ms, origin)
        except OSError as e:
            raise self.health.failed(e, f"appending to {self.name}") from e

    def _append_as_leader(
        self, batches: bytes | bytearray | memoryview, leader_epoch: int, now_ms: int, origin: AppendOrigin
    ) -> AppendInfo:
        buf = bytearray(batches)  # the one copy: offsets, epochs and append times are patched in place
        headers = validate_batches(buf, self.config, self.name, from_client=True,
                                   coordinator=origin is AppendOrigin.COORDINATOR)
        if origin is AppendOrigin.CLIENT:
            duplicate = self._find_duplicate(headers)
            if duplicate is not None:
                return duplicate
            validate_records(buf, headers, self.config, self.name, now_ms)
        append_time = now_ms if self.config.log_append_time else NO_TIMESTAMP
        offset = self._log_end_offset
        patched = []
        position = 0
        for header in headers:
            set_base_offset(buf, position, offset)
            set_partition_leader_epoch(buf, position, leader_epoch)
            changes = {"base_offset": offset, "partition_leader_epoch": leader_epoch}
            if append_time != NO_TIMESTAMP:
                set_log_append_time(buf, position, header.size, append_time)
                changes.update(max_timestamp=append_time, attributes=header.attributes | TIMESTAMP_TYPE_BIT)
            patched.append(header._replace(**changes))
            offset += header.last_offset_delta + 1
            position += header.size
        producers = self._check_producers(buf, patched, origin)
        self.epochs.assign(leader_epoch, self._log_end_offset)
        self._append(buf, patched, now_ms)
        self._update_producers(producers)
        return AppendInfo(
            first_offset=patched[0].base_offset,
            last_offset=patched[-1].last_offset,
            log_append_time=append_time,
            log_start_offset=self.log_start_offset,
            max_timestamp=max(header.max_timestamp for header in patched),
            record_count=sum(header.record_count for header in patched),
        )

    def append_as_follower(self, batches: bytes | bytearray | memoryview, now_ms: int | None = None) -> AppendInfo:
        """Append batches whose offsets and epochs the leader assigned, as they are."""
        self.health.check_writable(self.name)
        try:
            return self._append_as_follower(batches, now_ms)
        except OSError as e:
            raise self.health.failed(e, f"appending to {self.name}") from e

    def _append_as_follower(self, batches: bytes | bytearray | memoryview, now_ms: int | None) -> AppendInfo:
        headers = validate_batches(batches, self.config, self.name, from_client=False)
        previous = self._log_end_offset - 1
        for header in headers:
            if header.base_offset <= previous or header.last_offset < header.base_offset:
                raise UnexpectedAppendOffset(
                    f"{self.name}: batch at offset {header.base_offset} does not follow offset {previous}"
                )
            previous = header.last_offset
        producers = self._check_producers(batches, headers, AppendOrigin.REPLICATION)
        for header in headers:
            if header.partition_leader_epoch > self.epochs.latest_epoch:
                self.epochs.assign(header.partition_leader_epoch, header.base_offset)
        self._append(batches, headers, self.clock() if now_ms is None else now_ms)
        self._update_producers(producers)
        return AppendInfo(
            first_offset=headers[0].base_offset,
            last_offset=headers[-1].last_offset,
            log_append_time=NO_TIMESTAMP,
            log_start_offset=self.log_start_offset,
            max_timestamp=max(header.max_timestamp for header in headers),
            record_count=sum(header.record_count for header in headers),
        )

    # -- producer state ---------------------------------------------------------------------------

    def _find_duplicate(self, headers: Sequence[BatchHeader]) -> AppendInfo | None:
        # Produce requests carry one batch per partition, so a duplicate is the whole request.
        header = headers[0]
        if header.producer_id < 0:
            return None
        batch = self.producer_state.find_duplicate(header)
        if batch is None:
            return None
        log.debug("%s: batch %d..%d of producer %d is a retry of offsets %d..%d", self.name,
                  header.base_sequence, header.base_sequence + header.last_offset_delta, header.producer_id,
                  batch.first_offset, batch.last_offset)
        return AppendInfo(batch.first_offset, batch.last_offset, NO_TIMESTAMP, self.log_start_offset,
                          batch.timestamp, header.record_count, duplicate=True)

    def _check_producers(
        self, buf: bytes | bytearray | memoryview, headers: Sequence[BatchHeader], origin: AppendOrigin
    ) -> ProducerAppend | None:
        """Check the producer fields of batches with assigned offsets; None when no batch has a producer."""
        append = None
        position = 0
        for header in headers:
            if header.producer_id >= 0:
                append = append or self.producer_state.begin(origin)
                self._stage_batch(append, header, buf, position)
            position += header.size
        return append

    def _stage_batch(
        self, append: ProducerAppend, header: BatchHeader, buf: bytes | bytearray | memoryview, position: int
    ) -> None:
        if not header.is_control:
            append.data_batch(header)
            return
        marker = _end_txn_marker(memoryview(buf)[position : position + header.size], header)
        if marker is not None:
            aborted, coordinator_epoch, timestamp = marker
            append.end_marker(header, aborted, coordinator_epoch, timestamp)

    def _update_producers(self, append: ProducerAppend | None) -> None:
        """Apply checked producer changes once their batches are in the active segment."""
        if append is None:
            return
        state = self.producer_state
        state.commit(append, self._log_end_offset)
        for txn in append.completed:
            if txn.aborted:
                self.active_segment.txn_index.append(
                    AbortedTxn(txn.producer_id, txn.first_offset, txn.last_offset, state.stable_offset_after(txn))
                )

    def _load_producer_state(self, replay_from_at_most: int | None = None) -> None:
        """Newest snapshot at or below the log end (and `replay_from_at_most`), then replay the batches after it.

        The replay also rewrites the aborted-transaction index entries of the markers it passes.
        """
        state = self.producer_state
        end = self._log_end_offset
        state.delete_snapshots(above=end)
        bound = end if replay_from_at_most is None else min(end, replay_from_at_most)
        first_base = self._segments[0].base_offset
        loaded = state.load_snapshot(bound)
        start = max(loaded if loaded is not None else first_base, first_base)
        if loaded is None or loaded < first_base:
            if loaded is None:
                state.reset(start)
            state.map_end_offset = start
        if start < end:
            self._replay_producers(start)
        state.map_end_offset = end

    def _replay_producers(self, start: int) -> None:
        replayed = 0
        for segment in self._segments[self._segment_slot(start) :]:
            segment.txn_index.truncate_to(start)
            found = segment.translate_offset(start)
            if found is None:
                continue
            for position, header in segment.batches(found[0]):
                if header.producer_id < 0 or header.last_offset < start:
                    continue
                append = self.producer_state.begin(AppendOrigin.REPLICATION)
                if header.is_control:
                    marker = _end_txn_marker(segment.read_at(position, header.size), header)
                    if marker is not None:
                        append.end_marker(header, *marker)
                else:
                    append.data_batch(header)
                self.producer_state.commit(append, header.last_offset + 1)
                for txn in append.completed:
                    if txn.aborted:
                        segment.txn_index.append(AbortedTxn(txn.producer_id, txn.first_offset, txn.last_offset,
                                                            self.producer_state.stable_offset_after(txn)))
                replayed += 1
        if replayed:
            log.info("%s: rebuilt producer state from offset %d (%d producer batches)", self.name, start, replayed)

    def first_unstable_offset(self) -> int | None:
        """The first offset of the oldest open transaction, if any."""
        return self.producer_state.first_unstable_offset()

    @property
    def last_stable_offset(self) -> int:
        """Below it every transaction is decided and the data is replicated: the read_committed horizon."""
        unstable = self.producer_state.first_unstable_offset()
        return self._high_watermark if unstable is None else min(unstable, self._high_watermark)

    def has_open_transaction(self, producer_id: int) -> bool:
        return producer_id in self.producer_state.ongoing

    def ongoing_transactions(self) -> dict[int, int]:
        """producer id -> first offset of each open transaction."""
        return dict(self.producer_state.ongoing)

    def active_producers(self) -> list[ProducerView]:
        return self.producer_state.views()

    def remove_expired_producers(self, now_ms: int, expiration_ms: int) -> int:
        return self.producer_state.remove_expired(now_ms, expiration_ms)

    def collect_aborted_transactions(self, start: int, upper: int) -> list[tuple[int, int]]:
        """(producer id, first offset) of aborted transactions overlapping [start, upper), for read_committed."""
        found: list[tuple[int, int]] = []
        for segment in self._segments[self._segment_slot(start) :]:
            txns, complete = segment.txn_index.collect(start, upper)
            found.extend((txn.producer_id, txn.first_offset) for txn in txns)
            if complete:
                break
        return found

    def aborted_transactions(self, start: int, upper: int) -> list[AbortedTxn]:
        """Every aborted transaction overlapping [start, upper) in full (the cleaner drops their records)."""
        found: list[AbortedTxn] = []
        for segment in self._segments[self._segment_slot(start) :]:
            found.extend(txn for txn in segment.txn_index.entries if txn.last_offset >= start and txn.first_offset < upper)
        return found

    def _append(self, data: bytes | bytearray | memoryview, headers: Sequence[BatchHeader], now_ms: int) -> None:
        segment = self._maybe_roll(len(data), headers, now_ms)
        segment.append(data, headers)
        self._log_end_offset = headers[-1].last_offset + 1
        if self._log_end_offset - self.recovery_point >= self.config.flush_messages:
            self.flush()

    # -- reading ----------------------------------------------------------------------------------

    def read(
        self, offset: int, max_bytes: int, max_offset_exclusive: int | None = None, min_one_batch: bool = True
    ) -> ReadResult | None:
        """Batches from the one holding `offset`, within one segment; None when there is nothing.

        `max_offset_exclusive` (the high watermark for consumers) excludes batches starting at or
        after it. Raises OFFSET_OUT_OF_RANGE outside [log start, log end], and CORRUPT_MESSAGE
        for an offset that may lie in damaged bytes (a slice stops before them).
        """
        self.health.check_readable(self.name)
        end = self._log_end_offset
        if offset < self.log_start_offset or offset > end:
            raise KafkaError(
                ErrorCode.OFFSET_OUT_OF_RANGE,
                f"offset {offset} is outside [{self.log_start_offset}, {end}] of {self.name}",
            )
        upper = end if max_offset_exclusive is None else min(max_offset_exclusive, end)
        if offset >= upper:
            return None
        first = self._segment_slot(offset)
        for slot in range(first, len(self._segments)):
            segment = self._segments[slot]
            if segment.base_offset >= upper:
                break
            if segment.damage:
                following = self._segments[slot + 1].base_offset if slot + 1 < len(self._segments) else end
                segment.check_readable(offset, following)
            max_position = segment.bound_position(upper) if upper < segment.next_offset else None
            result = segment.read(offset, max_bytes, max_position, min_one_batch)
            if result is not None:
                return result
            # Nothing at or after `offset` in this segment (a compaction gap): the next one has it.
        return None

    def offset_for_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        """ListOffsets by time: the first record with timestamp >= `timestamp`, as (offset, timestamp)."""
        for segment in self._segments:
            if segment.largest_timestamp >= timestamp:
                found = segment.find_offset_by_timestamp(timestamp, self.log_start_offset)
                if found is not None:
                    return found
        return None

    def max_timestamp_offset(self) -> tuple[int, int] | None:
        """ListOffsets MAX_TIMESTAMP: (offset, timestamp) of the first record with the largest timestamp."""
        best: LogSegment | None = None
        for segment in self._segments:
            if segment.max_timestamp >= 0 and (best is None or segment.max_timestamp > best.max_timestamp):
                best = segment
        return best.max_timestamp_record() if best is not None else None

    # -- deleting ---------------------------------------------------------------------------------

    def delete_records_before(self, offset: int, now_ms: int | None = None) -> int:
        """DeleteRecords: move the log start up to `offset` (-1: the high watermark); returns it.

        Raises OFFSET_OUT_OF_RANGE when `offset` is beyond the high watermark.
        """
        if offset == HIGH_WATERMARK:
            offset = self._high_watermark
        if offset < 0 or offset > self._high_watermark:
            raise KafkaError(
                ErrorCode.OFFSET_OUT_OF_RANGE,
                f"cannot delete records of {self.name} before {offset}: high watermark is {self._high_watermark}",
            )
        if offset > self.log_start_offset:
            self._advance_log_start(offset)
        self._delete_segments_below_log_start(self.clock() if now_ms is None else now_ms)
        return self.log_start_offset

    def _advance_log_start(self, offset: int) -> None:
        self.log_start_offset = offset
        self.epochs.truncate_from_start(offset)
        self.cleaner_checkpoint = max(self.cleaner_checkpoint, offset)

    def delete_old_segments(self, now_ms: int) -> int:
        """Retention: segments below the log start; by retention.bytes and retention.ms when the
        cleanup policy includes delete. Returns how many segments went."""
        deleted = self._delete_segments_below_log_start(now_ms)
        if self.config.delete:
            deleted += self._delete_by_size(now_ms)
            deleted += self._delete_by_time(now_ms)
        return deleted

    def _delete_segments_below_log_start(self, now_ms: int) -> int:
        return self._delete_prefix(lambda segment, upper: upper <= self.log_start_offset, now_ms, "log start")

    def _delete_by_size(self, now_ms: int) -> int:
        if self.config.retention_bytes < 0:
            return 0
        excess = self.size_in_bytes - self.config.retention_bytes

        def over(segment: LogSegment, upper: int) -> bool:
            nonlocal excess
            if excess - segment.size < 0:
                return False
            excess -= segment.size
            return True

        return self._delete_prefix(over, now_ms, "retention.bytes")

    def _delete_by_time(self, now_ms: int) -> int:
        retention = self.config.retention_ms
        if retention < 0:
            return 0
        return self._delete_prefix(
            lambda segment, upper: now_ms - segment.largest_timestamp > retention, now_ms, "retention.ms"
        )

    def _delete_prefix(self, deletable: Callable[[LogSegment, int], bool], now_ms: int, reason: str) -> int:
        """Delete the oldest segments while `deletable(segment, next offset)` holds.

        Only segments wholly below the high watermark go; the active one only if non-empty,
        after rolling a new one so the log never runs out of segments.
        """
        doomed = []
        for slot, segment in enumerate(self._segments):
            is_active = slot == len(self._segments) - 1
            upper = self._log_end_offset if is_active else self._segments[slot + 1].base_offset
            if (is_active and segment.is_empty) or upper > self._high_watermark or not deletable(segment, upper):
                break
            doomed.append(segment)
        if not doomed:
            return 0
        if doomed[-1] is self.active_segment:
            self.roll(now_ms)
        self._schedule_deletion(doomed, now_ms)
        new_start = self._segments[0].base_offset
        if new_start > self.log_start_offset:
            self._advance_log_start(new_start)
        snapshots = self.producer_state.snapshot_offsets()
        self.producer_state.delete_snapshots(below=new_start, keep=snapshots[-1:])
        log.info("%s: deleted %d segment(s) by %s; log start is now %d",
                 self.name, len(doomed), reason, self.log_start_offset)
        return len(doomed)

    def truncate_to(self, offset: int) -> bool:
        """Remove everything from `offset` on (a follower's divergent tail). False if nothing changed."""
        if offset < 0:
            raise ValueError(f"cannot truncate {self.name} to {offset}")
        if offset >= self._log_end_offset:
            return False
        if offset < self._segments[0].base_offset:
            self.truncate_fully_and_start_at(offset)
            return True
        now = self.clock()
        self._schedule_deletion([s for s in self._segments if s.base_offset > offset], now)
        self.active_segment.truncate_to(offset, now)
        self._log_end_offset = self.active_segment.next_offset
        self._after_truncation()
        self._load_producer_state()
        return True

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Drop every segment and restart the log, empty, at `offset`."""
        now = self.clock()
        self._schedule_deletion(list(self._segments), now)
        self._add_segment(self._segment(offset, now, fresh=True))
        self._log_end_offset = self.log_start_offset = offset
        self._high_watermark = self.recovery_point = self.cleaner_checkpoint = offset
        self.epochs.clear()
        self.producer_state.reset(offset)
        self.producer_state.delete_snapshots(above=-1)

    def _after_truncation(self) -> None:
        end = self._log_end_offset
        self.log_start_offset = min(self.log_start_offset, end)
        self.recovery_point = min(self.recovery_point, end)
        self.cleaner_checkpoint = min(self.cleaner_checkpoint, end)
        self._high_watermark = min(self._high_watermark, end)
        self.epochs.truncate_from_end(end)

    # -- moving between log dirs -----------------------------------------------------------------

    def adopt_state_of(self, source: Log, now_ms: int) -> None:
        """A complete copy (a future replica) takes over what the batches alone do not say: the
        source's log start, high watermark, leader epochs, producer state and segment layout.

        Call only when this log holds every batch of `source` (same log end)."""
        if self._log_end_offset != source.log_end_offset:
            raise ValueError(f"{self.name}: the copy ends at {self._log_end_offset}, the source at "
                             f"{source.log_end_offset}")
        source_active = source.active_segment.base_offset
        if source_active > self.active_segment.base_offset:
            self.roll(now_ms, source_active)  # the source rolled an empty segment at its end
        self.high_watermark = source.high_watermark
        if source.log_start_offset > self.log_start_offset:
            self._advance_log_start(source.log_start_offset)
        self._delete_segments_below_log_start(now_ms)
        self.epochs.replace_entries(source.epochs.entries)
        state, theirs = self.producer_state, source.producer_state
        state.producers = {pid: entry.copy() for pid, entry in theirs.producers.items()}
        state.ongoing = dict(theirs.ongoing)
        state.map_end_offset = self._log_end_offset
        self.cleaner_checkpoint = source.cleaner_checkpoint
        self.earliest_delete_horizon = source.earliest_delete_horizon

    def flush_everything(self) -> None:
        """fsync every segment, its indexes, the producer state and the directory: a copy about to
        replace its source must be wholly on disk first."""
        self._flush_segments(self._segments)
        self.recovery_point = self._log_end_offset
        self.producer_state.map_end_offset = self._log_end_offset
        self.producer_state.take_snapshot(sync=True)  # also fsyncs the directory

    def repoint(self, directory: Path) -> None:
        """The log's directory was renamed to `directory`: point every path at the new name.

        Open files need nothing (a rename does not touch them); files opened from now on are
        opened under the new name."""
        self.directory = directory
        self.is_future = directory.name.endswith(FUTURE_DIR_SUFFIX)
        self.epochs.path = directory / self.epochs.path.name
        self.producer_state.directory = directory
        for segment in [*self._segments, *(segment for _, segment in self._doomed)]:
            segment.repoint(directory)

    # -- durability and lifecycle -------------------------------------------------------------

    def flush(self, up_to: int | None = None) -> None:
        """fsync segments holding offsets below `up_to` (default: the log end); moves the recovery point."""
        target = self._log_end_offset if up_to is None else min(up_to, self._log_end_offset)
        if target <= self.recovery_point:
            return
        first = self._segment_slot(self.recovery_point)
        self._flush_segments([s for s in self._segments[first:] if s.base_offset < target])
        self.recovery_point = target
        self.last_flush_ms = self.clock()

    def _flush_segments(self, segments: Sequence[LogSegment]) -> None:
        for segment in segments:
            segment.flush()

    def flush_if_due(self, now_ms: int) -> None:
        """Periodic: honour flush.ms, and flush rolled segments."""
        if now_ms - self.last_flush_ms >= self.config.flush_ms:
            self.flush()
            self.last_flush_ms = now_ms
        else:
            self.flush_rolled()

    def flush_rolled(self) -> None:
        """Flush the segments rolled since the last flush (Kafka does so right after a roll)."""
        if self.recovery_point < self.active_segment.base_offset:
            self.flush(self.active_segment.base_offset)

    def close(self) -> None:
        """Finish the active segment's time index, snapshot the producer state, close every file.

        The log's data is not flushed here (see `flush`); the snapshot is, so a clean restart
        need not replay anything.
        """
        if self._segments:
            self.active_segment.on_become_inactive()
            state = self.producer_state
            state.map_end_offset = self._log_end_offset
            if state.latest_snapshot != self._log_end_offset:
                state.take_snapshot(sync=False)
        self.release()

    def release(self) -> None:
        """Close every file without writing anything (the directory may already be gone)."""
        for segment in self._segments:
            segment.close()
        for _, segment in self._doomed:
            segment.delete_files()
        self._doomed = []

    def delete(self) -> None:
        """Remove the whole partition directory."""
        self.release()
        shutil.rmtree(self.directory, ignore_errors=True)


def _end_txn_marker(batch: bytes | memoryview, header: BatchHeader) -> tuple[bool, int, int] | None:
    """(aborted, coordinator epoch, timestamp) of a COMMIT/ABORT control batch; None for other control batches."""
    try:
        records = decode_payload(batch, header)
        if not records:
            return None  # emptied by the cleaner
        key = decode_control_key(records[0].key)
        if key.type not in (ControlType.COMMIT, ControlType.ABORT):
            return None
        marker = decode_end_txn_marker(records[0].value)
    except (CorruptRecordError, KafkaError) as e:
        raise KafkaError(ErrorCode.INVALID_RECORD, f"unreadable transaction marker: {e}") from e
    return key.type == ControlType.ABORT, marker.coordinator_epoch, records[0].timestamp


def _segment_bases(directory: Path, suffix: str) -> list[int]:
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
