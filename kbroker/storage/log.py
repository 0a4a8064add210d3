"""One partition's log: an ordered run of segments in `<topic>-<partition>/` (Kafka's UnifiedLog).

Opening it is the loader's work (log_loader.py: leftovers, swaps, recovery, producer state);
what an append must satisfy is the validator's (log_validator.py). The log itself appends
(validated batches, offsets and leader epochs patched in place, bytes written as they came),
reads (file slices), rolls, deletes by retention and DeleteRecords, truncates and flushes.
With a key ring (encryption at rest, encryption.py) every batch is sealed just before it is
written and reads return the decrypted batches.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import os
import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from kbroker.clock import WallClock, wall_clock_ms
from kbroker.delay.delay_snapshot import (
    delete_snapshots_above,
)
from kbroker.delay.pending_cache import SHARED, PendingValueCache, new_owner
from kbroker.storage import write_behind
from kbroker.storage.delayed_appends import BatchPlan, pending_batch
from kbroker.storage.dir_names import FUTURE_DIR_SUFFIX, parse_future_dir_name, parse_log_dir_name
from kbroker.storage.encryption import BatchCipher, Keyring
from kbroker.storage.index import segment_file_name
from kbroker.storage.leader_epoch import LeaderEpochCache
from kbroker.storage.log_config import LONG_MAX, LogConfig
from kbroker.storage.log_delayed import LogDelayedRecords
from kbroker.storage.log_dir_health import LogDirHealth
from kbroker.storage.log_loader import LogLoader, rebuild_producer_state
from kbroker.storage.log_segments import LogSegments, open_segment
from kbroker.storage.log_tiered import LogTiering
from kbroker.storage.log_validator import (
    assign_offsets,
    check_follower_offsets,
    validate_batches,
    validate_records,
)
from kbroker.storage.producer_state import (
    AppendOrigin,
    ProducerAppend,
    ProducerStateManager,
    ProducerView,
)
from kbroker.storage.read_results import Read
from kbroker.storage.segment import LogSegment
from kbroker.storage.txn_index import AbortedTxn
from kbroker.storage.write_behind import DirWriter, PendingWrite, settled
from kbroker.storage.writeback import PacedWriteback
from protocol.errors import ErrorCode, KafkaError
from protocol.records import NO_TIMESTAMP, BatchHeader, read_header

log = logging.getLogger("kbroker.storage")

HIGH_WATERMARK = -1  # DeleteRecords' "up to the high watermark"


@dataclass(frozen=True, slots=True)
class AppendInfo:
    first_offset: int
    last_offset: int
    log_append_time: int  # -1 for CreateTime
    log_start_offset: int
    max_timestamp: int
    record_count: int
    duplicate: bool = False  # a producer's retry of a batch already in the log: nothing was written


@dataclass(slots=True)
class RolledFlush:
    """An fsync of rolled segments through descriptors of its own (`Log.start_rolled_flush`)."""

    descriptors: list[int]
    target: int  # the recovery point once they are on disk
    truncations: int  # the log's truncation count when it started
    segments: list[int] = field(default_factory=list)  # the rolled segments' descriptors, also in `descriptors`
    # Set on the event loop when the flush falls behind (another roll, flushes waiting behind
    # it): read by the flusher thread, it stops the paced writeback.
    hurried: bool = False

    def run(self, writeback: PacedWriteback | None = None) -> None:
        """Write the segments back paced by `writeback` while not hurried, then fsync every
        descriptor and close them (in a thread: both release the GIL)."""
        try:
            if writeback is not None:
                for descriptor in self.segments:
                    writeback.write_back(descriptor, lambda: self.hurried)
        finally:
            self.fsync_all(self.descriptors)

    @classmethod
    def fsync_all(cls, descriptors: list[int]) -> None:
        """fsync each descriptor in order, then close them all (also when one fails)."""
        try:
            for descriptor in descriptors:
                os.fsync(descriptor)
        finally:
            cls.close_all(descriptors)

    @staticmethod
    def close_all(descriptors: list[int]) -> None:
        for descriptor in descriptors:
            with contextlib.suppress(OSError):
                os.close(descriptor)


class Log(LogDelayedRecords, LogTiering):
    def __init__(
        self,
        directory: Path,
        config: LogConfig,
        *,
        log_start_offset: int = 0,
        recovery_point: int = 0,
        high_watermark: int = 0,
        had_clean_shutdown: bool = False,
        clock: WallClock = wall_clock_ms,
        health: LogDirHealth | None = None,
        keyring: Keyring | None = None,
        pending_cache: PendingValueCache = SHARED,
        writer: DirWriter | None = None,
        archiving: bool = False,
    ) -> None:
        parsed = parse_log_dir_name(directory.name) or parse_future_dir_name(directory.name)
        if parsed is None:
            raise ValueError(f"{directory} is not named <topic>-<partition> (or <topic>-<partition>.<id>-future)")
        self.topic, self.partition = parsed
        self.name = f"{self.topic}-{self.partition}"  # read on every append and fetch: made once
        # Batches are authenticated with their partition: a batch moved to another one fails.
        self.cipher = BatchCipher(keyring, self.name) if keyring is not None else None
        self.directory = directory
        self.is_future = directory.name.endswith(FUTURE_DIR_SUFFIX)
        # Compaction waits while the log is copied to another log dir (Kafka's abortAndPauseCleaning):
        # a rewritten segment would no longer match the copy.
        self.cleaning_paused = False
        # Truncations so far: a flush of rolled segments that ran across one proves nothing.
        self._truncations = 0
        self._rolled_flush: RolledFlush | None = None  # the one running, if any
        self._unsynced_snapshots: list[Path] = []  # producer state snapshots taken at rolls
        # The log dir's writer thread for large appends, and the append it is writing
        # (write_behind.py); without one every append is written on the caller's thread.
        self.writer = writer
        self._inflight: PendingWrite | None = None
        self.config = config
        self.archiving_enabled = archiving  # remote.log.storage.system.enable (log_tiered.py)
        self.clock = clock
        # Shared by every log of the dir: a full or failed disk stops writes to all of them.
        self.health = health or LogDirHealth(directory.parent)
        self.log_start_offset = log_start_offset
        self.recovery_point = recovery_point
        self.cleaner_checkpoint = 0  # first offset the cleaner has not compacted yet
        self.earliest_delete_horizon = LONG_MAX  # when retained tombstones become removable
        self.last_flush_ms = clock()
        self._segments = LogSegments()
        self._log_end_offset = 0
        self._high_watermark = 0
        directory.mkdir(parents=True, exist_ok=True)
        self.epochs = LeaderEpochCache(directory)
        self.producer_state = ProducerStateManager(directory, self.name)
        self._load(had_clean_shutdown)
        self._pending_cache = pending_cache
        self._cache_owner = new_owner()
        self.delay_index = self._load_delay_index()
        self._roll_if_key_changed()
        self.high_watermark = high_watermark

    def _load(self, had_clean_shutdown: bool) -> None:
        now = self.clock()
        loaded = LogLoader(
            self.directory, self.name, self.config, self._segments, self.epochs, self.producer_state,
            log_start_offset=self.log_start_offset, recovery_point=self.recovery_point,
            had_clean_shutdown=had_clean_shutdown, now_ms=now, cipher=self.cipher,
        ).load()
        self.checkpointed_log_start = self.log_start_offset  # a tiered log's may be in the archive
        self.log_start_offset = self.cleaner_checkpoint = loaded.log_start_offset
        self._log_end_offset = self.recovery_point = loaded.log_end_offset
        self.config_applied(final=False)

    def _roll_if_key_changed(self) -> None:
        """New batches go to a new segment when the key they are written with changed (a rotated
        key, or encryption switched on): each segment holds batches of one key, which the next
        start checks by reading one batch per segment."""
        active = self.active_segment
        writing_key = self.cipher.current_key_id if self.cipher is not None else None
        if not active.is_empty and active.key_id != writing_key:
            self.roll()

    def seal(self, batch: bytes) -> bytes:
        """One batch (offsets assigned) as this log stores it: encrypted when it has a key ring."""
        if self.cipher is None:
            return batch
        return self.cipher.seal(batch, 0, read_header(batch))

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
        self.delay_index.on_high_watermark(self._high_watermark)

    @property
    def segments(self) -> tuple[LogSegment, ...]:
        return self._segments.all()

    @property
    def active_segment(self) -> LogSegment:
        return self._segments.active

    @property
    def size_in_bytes(self) -> int:
        return self._segments.size_in_bytes

    @property
    def latest_epoch(self) -> int:
        return self.epochs.latest_epoch

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """OffsetForLeaderEpoch: (epoch, end offset), Kafka's semantics (see LeaderEpochCache)."""
        return self.epochs.end_offset_for(epoch, self._log_end_offset)

    @property
    def damaged_segments(self) -> list[LogSegment]:
        """Segments holding bytes that failed verification (kept, and refused to readers)."""
        return [segment for segment in self._segments if segment.damage]

    # -- segments ---------------------------------------------------------------------------------

    def _segment(self, base_offset: int, now_ms: int, *, fresh: bool) -> LogSegment:
        return open_segment(self.directory, self.config, base_offset, now_ms, fresh=fresh, cipher=self.cipher)

    def _schedule_deletion(self, segments: Sequence[LogSegment], now_ms: int) -> None:
        """Take segments out of the log; their files go after file.delete.delay.ms (reads in flight)."""
        self._segments.schedule_deletion(segments, now_ms + self.config.file_delete_delay_ms)

    def delete_expired_files(self, now_ms: int) -> int:
        """Close and unlink segments whose deletion delay has passed."""
        return self._segments.delete_expired(now_ms)

    @settled
    def replace_segments(self, old: Sequence[LogSegment], swap: Path, now_ms: int) -> LogSegment:
        """Put the cleaner's `swap` file (`<base>.log.swap`) in place of the segments `old`.

        Kafka's order, so a crash at any point recovers (see LogLoader._complete_swaps): the old files
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
        self._segments.add(segment)
        return segment

    @settled
    def roll(self, now_ms: int | None = None, base_offset: int | None = None) -> LogSegment:
        """Start a new active segment at the log end (or at `base_offset` if that is later)."""
        now = self.clock() if now_ms is None else now_ms
        new_base = max(self._log_end_offset, base_offset or 0)
        active = self.active_segment
        if active.is_empty:
            if active.base_offset == new_base:
                return active
            self._segments.pop_active()
            active.delete_files()
        else:
            active.on_become_inactive()
        segment = self._segment(new_base, now, fresh=True)
        self._segments.add(segment)
        # As Kafka: a snapshot per segment, so a restart or truncation replays at most one segment.
        # Not fsynced here: on the event loop an fsync waits for the file system's journal, which
        # may be writing out a whole rolled segment (tens of milliseconds for every client). It
        # is fsynced with the rolled segment, before the recovery point passes it; until then a
        # crash replays from an older snapshot (a torn one fails its CRC).
        self.producer_state.map_end_offset = self._log_end_offset
        self._unsynced_snapshots.append(self.producer_state.take_snapshot(sync=False))
        self._snapshot_delay_index()
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

    @settled
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
        info, _ = self._start_append_as_leader(batches, leader_epoch, now_ms, origin, behind=False)
        return info

    @settled
    def start_append_as_leader(
        self,
        batches: bytes | bytearray | memoryview,
        leader_epoch: int,
        now_ms: int,
        origin: AppendOrigin = AppendOrigin.CLIENT,
        *,
        in_place: bool = False,
    ) -> tuple[AppendInfo, asyncio.Future[None] | None]:
        """`append_as_leader`, but a large append's bytes may be written by the log dir's writer
        thread: then the info comes with a future that is done once the append is published
        (readable, in the log end) or has failed (KafkaStorageError). Call it with no append in
        flight (`wait_idle`) or it first waits for that one, blocking.

        With `in_place`, writable `batches` (a produce request's own frame, which nothing reads
        after its handler) get their offsets, epochs and append times patched where they are
        instead of in a copy."""
        return self._start_append_as_leader(batches, leader_epoch, now_ms, origin, behind=True, in_place=in_place)

    def _start_append_as_leader(
        self, batches: bytes | bytearray | memoryview, leader_epoch: int, now_ms: int, origin: AppendOrigin,
        behind: bool, in_place: bool = False,
    ) -> tuple[AppendInfo, asyncio.Future[None] | None]:
        self.health.check_writable(self.name)
        try:
            return self._append_as_leader(batches, leader_epoch, now_ms, origin, behind, in_place)
        except OSError as e:
            raise self.health.failed(e, f"appending to {self.name}") from e

    def _append_as_leader(
        self, batches: bytes | bytearray | memoryview, leader_epoch: int, now_ms: int, origin: AppendOrigin,
        behind: bool, in_place: bool,
    ) -> tuple[AppendInfo, asyncio.Future[None] | None]:
        # At most one copy: offsets, epochs and append times are patched in the bytes appended.
        buf = batches if in_place and _writable(batches) else bytearray(batches)
        headers = validate_batches(buf, self.config, self.name, from_client=True,
                                   coordinator=origin is AppendOrigin.COORDINATOR)
        if origin is AppendOrigin.CLIENT:
            duplicate = self._find_duplicate(headers)
            if duplicate is not None:
                return duplicate, None
            plans = validate_records(buf, headers, self.config, self.name, now_ms)
            if any(plans):
                buf, headers = self._hold_delayed(buf, headers, plans, now_ms)
        append_time = now_ms if self.config.log_append_time else NO_TIMESTAMP
        patched = assign_offsets(buf, headers, self._log_end_offset, leader_epoch, append_time)
        producers = self.producer_state.check_batches(buf, patched, origin)
        self.epochs.assign(leader_epoch, self._log_end_offset)
        info = self._append_info(patched, append_time)
        return info, self._append(buf, patched, now_ms, producers, behind=behind)

    def _hold_delayed(self, buf: bytearray, headers: Sequence[BatchHeader], plans: Sequence[BatchPlan | None],
                      now_ms: int) -> tuple[bytearray, list[BatchHeader]]:
        """Replace each batch holding delayed records by its pending batch (before offsets are
        assigned)."""
        view = memoryview(buf)
        pieces: list[bytes | memoryview] = []
        position = 0
        for header, plan in zip(headers, plans, strict=True):
            batch = view[position : position + header.size]
            position += header.size
            pieces.append(batch if plan is None else pending_batch(plan, header, now_ms))
        new_buf = bytearray(b"".join(pieces))
        new_headers = []
        position = 0
        while position < len(new_buf):
            header = read_header(new_buf, position)
            new_headers.append(header)
            position += header.size
        return new_buf, new_headers

    @settled
    def append_as_follower(self, batches: bytes | bytearray | memoryview, now_ms: int | None = None) -> AppendInfo:
        """Append batches whose offsets and epochs the leader assigned, as they are."""
        self.health.check_writable(self.name)
        try:
            return self._append_as_follower(batches, now_ms)
        except OSError as e:
            raise self.health.failed(e, f"appending to {self.name}") from e

    def _append_as_follower(self, batches: bytes | bytearray | memoryview, now_ms: int | None) -> AppendInfo:
        headers = validate_batches(batches, self.config, self.name, from_client=False)
        check_follower_offsets(headers, self._log_end_offset, self.name)
        producers = self.producer_state.check_batches(batches, headers, AppendOrigin.REPLICATION)
        for header in headers:
            if header.partition_leader_epoch > self.epochs.latest_epoch:
                self.epochs.assign(header.partition_leader_epoch, header.base_offset)
        self._append(batches, headers, self.clock() if now_ms is None else now_ms, producers)
        return self._append_info(headers, NO_TIMESTAMP)

    def _append(self, data: bytes | bytearray | memoryview, headers: Sequence[BatchHeader], now_ms: int,
                producers: ProducerAppend | None, *, behind: bool = False) -> asyncio.Future[None] | None:
        """Write the batches at the log end and publish them; with `behind`, a large write may go
        to the writer thread: then the future of its publication."""
        plain, plain_headers = data, headers
        if self.cipher is not None:
            data, headers = self.cipher.seal_all(data, headers)
        segment = self._maybe_roll(len(data), headers, now_ms)
        if behind:
            pending = write_behind.start(self.writer, segment, data, headers, plain, plain_headers, producers,
                                         self._write_done)
            if pending is not None:
                self._inflight = pending
                return pending.published
        segment.append(data, headers)
        self._publish(plain, plain_headers, producers)
        return None

    def _publish(self, plain: bytes | bytearray | memoryview, plain_headers: Sequence[BatchHeader],
                 producers: ProducerAppend | None) -> None:
        """Make appended batches part of the log: its end, the delay index, producer state."""
        self._log_end_offset = plain_headers[-1].last_offset + 1
        self._index_appended(plain, plain_headers)
        if self._log_end_offset - self.recovery_point >= self.config.flush_messages:
            self.flush()
        self._update_producers(producers)

    # -- the append being written (write_behind.py) ------------------------------------------------

    @property
    def writing(self) -> bool:
        """Whether an append's bytes are being written by the writer thread."""
        return self._inflight is not None

    async def wait_idle(self) -> None:
        """Until no append of this log is being written (its outcome is its caller's)."""
        while self._inflight is not None:
            await asyncio.wait([self._inflight.published])

    def settle(self) -> None:
        """Wait, blocking, for the append being written, and publish it."""
        pending = self._inflight
        if pending is not None:
            concurrent.futures.wait([pending.future])
            self._write_done(pending)

    def _write_done(self, pending: PendingWrite) -> None:
        """On the loop, once the writer thread is done with `pending`: publish it, or take it back."""
        if self._inflight is not pending:
            return  # settled already
        self._inflight = None
        error = pending.future.exception()
        if error is None:
            try:
                pending.segment.append(pending.data, pending.headers, written=True)
                self._publish(pending.plain, pending.plain_headers, pending.producers)
            except OSError as e:  # an fsync due by flush.messages: the append stays, as inline
                error = e
        else:
            pending.segment.take_back(pending.position)
        published = pending.published
        if error is not None:
            failure = error if isinstance(error, OSError) else OSError(f"{type(error).__name__}: {error}")
            error = self.health.failed(failure, f"appending to {self.name}")
        if published.get_loop().is_closed():
            return  # settled at shutdown after the loop ended: nobody waits
        if error is None:
            published.set_result(None)
        else:
            published.set_exception(error)

    def _append_info(self, headers: Sequence[BatchHeader], append_time: int) -> AppendInfo:
        return AppendInfo(
            first_offset=headers[0].base_offset,
            last_offset=headers[-1].last_offset,
            log_append_time=append_time,
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

    def _update_producers(self, append: ProducerAppend | None) -> None:
        """Apply checked producer changes once their batches are in the active segment."""
        if append is None:
            return
        for txn in self.producer_state.commit(append, self._log_end_offset):
            self.active_segment.txn_index.append(txn)

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

    @settled
    def remove_expired_producers(self, now_ms: int, expiration_ms: int) -> int:
        return self.producer_state.remove_expired(now_ms, expiration_ms)

    def collect_aborted_transactions(self, start: int, upper: int) -> list[tuple[int, int]]:
        """(producer id, first offset) of aborted transactions overlapping [start, upper), for read_committed."""
        return self._segments.collect_aborted_transactions(start, upper)

    def aborted_transactions(self, start: int, upper: int) -> list[AbortedTxn]:
        """Every aborted transaction overlapping [start, upper) in full (the cleaner drops their records)."""
        return self._segments.aborted_transactions(start, upper)

    # -- reading ----------------------------------------------------------------------------------

    def read(
        self, offset: int, max_bytes: int, max_offset_exclusive: int | None = None, min_one_batch: bool = True
    ) -> Read | None:
        """Batches from the one holding `offset`, within one segment; None when there is nothing.

        A file slice (for sendfile), or the decrypted batches of an encrypted segment.

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
        if offset < self.local_log_start_offset:
            # Below this disk's window, in the archive: the caller reads it there.
            raise KafkaError(ErrorCode.OFFSET_MOVED_TO_TIERED_STORAGE,
                             f"offset {offset} of {self.name} is archived (local log start "
                             f"{self.local_log_start_offset})")
        upper = end if max_offset_exclusive is None else min(max_offset_exclusive, end)
        if offset >= upper:
            return None
        return self._segments.read(offset, upper, end, max_bytes, min_one_batch)

    def offset_for_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        """ListOffsets by time: the first record with timestamp >= `timestamp`, as (offset, timestamp)."""
        return self._segments.offset_for_timestamp(timestamp, self.log_start_offset)

    def max_timestamp_offset(self) -> tuple[int, int] | None:
        """ListOffsets MAX_TIMESTAMP: (offset, timestamp) of the first record with the largest timestamp."""
        return self._segments.max_timestamp_offset()

    # -- deleting ---------------------------------------------------------------------------------

    @settled
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
        pending = self.delay_index.lowest_pending_offset()
        if pending is not None and offset > pending:
            # A pending delayed record is not deleted before its delivery: the log start stops
            # at it, and the answer's low watermark says so.
            log.info("%s: DeleteRecords before %d stops at pending delayed record %d", self.name, offset, pending)
            offset = pending
        if offset > self.log_start_offset:
            self._advance_log_start(offset)
        self._delete_segments_below_log_start(self.clock() if now_ms is None else now_ms)
        return self.log_start_offset

    def _advance_log_start(self, offset: int) -> None:
        self.log_start_offset = offset
        self.epochs.truncate_from_start(offset)
        self.cleaner_checkpoint = max(self.cleaner_checkpoint, offset)

    @settled
    def delete_old_segments(self, now_ms: int) -> int:
        """Retention: segments below the log start; by retention.bytes and retention.ms when the
        cleanup policy includes delete. Returns how many segments went."""
        deleted = self._delete_segments_below_log_start(now_ms)
        if self.tiered:
            # The total retention is the archive's (kbroker/archive); the disk keeps a window.
            deleted += self._delete_archived(now_ms)
        elif self.config.delete:
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

    def _delete_prefix(self, deletable: Callable[[LogSegment, int], bool], now_ms: int, reason: str,
                       advance_start: bool = True) -> int:
        """Delete the oldest segments while `deletable(segment, next offset)` holds.

        Only segments wholly below the high watermark go; the active one only if non-empty,
        after rolling a new one so the log never runs out of segments. `advance_start` False
        (local retention of a tiered log): the partition's log start stays, in the archive.
        """
        # A segment holding a pending delayed record stays until its delivery (the log is its store).
        pending = self.delay_index.lowest_pending_offset()
        limit = self._high_watermark if pending is None else min(self._high_watermark, pending)
        doomed = self._segments.prefix_below(limit, self._log_end_offset, deletable)
        if not doomed:
            return 0
        if doomed[-1] is self.active_segment:
            self.roll(now_ms)
        self._schedule_deletion(doomed, now_ms)
        new_start = self._segments.first.base_offset
        if advance_start and new_start > self.log_start_offset:
            self._advance_log_start(new_start)
        snapshots = self.producer_state.snapshot_offsets()
        self.producer_state.delete_snapshots(below=new_start, keep=snapshots[-1:])
        log.info("%s: deleted %d segment(s) by %s; log start is now %d, local log start %d",
                 self.name, len(doomed), reason, self.log_start_offset, self.local_log_start_offset)
        return len(doomed)

    @settled
    def truncate_to(self, offset: int) -> bool:
        """Remove everything from `offset` on (a follower's divergent tail). False if nothing changed."""
        if offset < 0:
            raise ValueError(f"cannot truncate {self.name} to {offset}")
        if offset >= self._log_end_offset:
            return False
        if offset < self._segments.first.base_offset:
            self.truncate_fully_and_start_at(offset)
            return True
        now = self.clock()
        self._schedule_deletion([s for s in self._segments if s.base_offset > offset], now)
        self.active_segment.truncate_to(offset, now)
        self._log_end_offset = self.active_segment.next_offset
        self._after_truncation()
        rebuild_producer_state(self.producer_state, self._segments, self._log_end_offset, self.name)
        self._truncate_delay_index(self._log_end_offset)
        return True

    @settled
    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Drop every segment and restart the log, empty, at `offset`."""
        now = self.clock()
        self._schedule_deletion(list(self._segments), now)
        self._segments.add(self._segment(offset, now, fresh=True))
        self._log_end_offset = self.log_start_offset = offset
        self._high_watermark = self.recovery_point = self.cleaner_checkpoint = offset
        self._truncations += 1
        self.epochs.clear()
        self.producer_state.reset(offset)
        self.producer_state.delete_snapshots(above=-1)
        delete_snapshots_above(self.directory, -1)
        self._pending_cache.drop(self._cache_owner)
        self.delay_index = self._empty_delay_index(offset)

    def _after_truncation(self) -> None:
        self._truncations += 1
        end = self._log_end_offset
        self.log_start_offset = min(self.log_start_offset, end)
        self.recovery_point = min(self.recovery_point, end)
        self.cleaner_checkpoint = min(self.cleaner_checkpoint, end)
        self._high_watermark = min(self._high_watermark, end)
        self.epochs.truncate_from_end(end)

    # -- moving between log dirs -----------------------------------------------------------------

    @settled
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
        self.producer_state.copy_from(source.producer_state, self._log_end_offset)
        self.cleaner_checkpoint = source.cleaner_checkpoint
        self.earliest_delete_horizon = source.earliest_delete_horizon

    @settled
    def flush_everything(self) -> None:
        """fsync every segment, its indexes, the producer state and the directory: a copy about to
        replace its source must be wholly on disk first."""
        for segment in self._segments:
            segment.flush()
        self.recovery_point = self._log_end_offset
        self.producer_state.map_end_offset = self._log_end_offset
        self._snapshot_delay_index(durable=True)
        self.producer_state.take_snapshot(sync=True)  # also fsyncs the directory

    @settled
    def repoint(self, directory: Path) -> None:
        """The log's directory was renamed to `directory`: point every path at the new name.

        Open files need nothing (a rename does not touch them); files opened from now on are
        opened under the new name."""
        self.directory = directory
        self.is_future = directory.name.endswith(FUTURE_DIR_SUFFIX)
        self.epochs.path = directory / self.epochs.path.name
        self.producer_state.directory = directory
        self._unsynced_snapshots = [directory / path.name for path in self._unsynced_snapshots]
        self._segments.repoint(directory)

    # -- durability and lifecycle -------------------------------------------------------------

    def flush(self, up_to: int | None = None) -> None:
        """fsync segments holding offsets below `up_to` (default: the log end); moves the recovery point."""
        target = self._log_end_offset if up_to is None else min(up_to, self._log_end_offset)
        if target <= self.recovery_point:
            return
        for segment in self._segments.from_offset(self.recovery_point):
            if segment.base_offset < target:
                segment.flush()
        self._sync_snapshots()
        self.recovery_point = target
        self.last_flush_ms = self.clock()

    def flush_if_due(self, now_ms: int) -> None:
        """Periodic: honour flush.ms, and flush rolled segments."""
        if not self.flush_whole_if_due(now_ms):
            self.flush_rolled()

    def flush_whole_if_due(self, now_ms: int) -> bool:
        """Flush the whole log if flush.ms has passed since its last flush; True if it did."""
        if now_ms - self.last_flush_ms < self.config.flush_ms:
            return False
        self.flush()
        self.last_flush_ms = now_ms
        return True

    def flush_rolled(self) -> None:
        """Flush the segments rolled since the last flush (Kafka does so right after a roll)."""
        if self.recovery_point < self.active_segment.base_offset:
            self.flush(self.active_segment.base_offset)

    def start_rolled_flush(self) -> RolledFlush | None:
        """The fsync of the segments rolled since the last flush, to be run off the event loop
        (`RolledFlush.run`, then `finish_rolled_flush`); None when there is none or one runs.

        As Kafka's flush of a rolled segment on its scheduler thread: an fsync of a segment of
        up to segment.bytes takes as long as the disk needs, and the event loop must not wait."""
        target = self.active_segment.base_offset
        running = self._rolled_flush
        if running is not None:
            if target > running.target:  # rolled again meanwhile: no more rests for that one
                running.hurried = True
            return None
        if self.recovery_point >= target:
            return None
        # Descriptors of their own: a segment deleted or closed meanwhile is still fsynced
        # whole, and no descriptor number can be reused under the flush.
        descriptors = []
        segments = []
        try:
            for segment in self._segments.from_offset(self.recovery_point):
                if segment.base_offset < target:
                    descriptors.append(os.dup(segment.fd))
                    segments.append(descriptors[-1])
                    if segment.txn_index.entries:  # as LogSegment.flush; its indexes are closed
                        descriptors.append(os.open(segment.txn_index.path, os.O_RDONLY))
            descriptors += self._snapshot_descriptors()
        except BaseException:
            RolledFlush.close_all(descriptors)
            raise
        self._rolled_flush = RolledFlush(descriptors, target, self._truncations, segments)
        return self._rolled_flush

    def _snapshot_descriptors(self) -> list[int]:
        """Descriptors of the snapshots taken at rolls and of the directory (their renames),
        for a flush to fsync; a snapshot deleted since (a truncation) is passed over."""
        if not self._unsynced_snapshots:
            return []
        descriptors = []
        try:
            for path in self._unsynced_snapshots:
                with contextlib.suppress(FileNotFoundError):
                    descriptors.append(os.open(path, os.O_RDONLY))
            descriptors.append(os.open(self.directory, os.O_RDONLY))
        except BaseException:
            RolledFlush.close_all(descriptors)
            raise
        self._unsynced_snapshots = []
        return descriptors

    def _sync_snapshots(self) -> None:
        RolledFlush.fsync_all(self._snapshot_descriptors())

    def finish_rolled_flush(self, flush: RolledFlush, succeeded: bool) -> None:
        """The flush has run: the recovery point passes the rolled segments if it succeeded and
        no truncation came meanwhile (their offsets may then hold other, unflushed data)."""
        self._rolled_flush = None
        if succeeded and flush.truncations == self._truncations:
            self.recovery_point = max(self.recovery_point, min(flush.target, self._log_end_offset))

    @settled
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
            self._snapshot_delay_index()
        self.release()

    @settled
    def release(self) -> None:
        """Close every file without writing anything (the directory may already be gone)."""
        self._pending_cache.drop(self._cache_owner)
        self._segments.release()

    @settled
    def delete(self) -> None:
        """Remove the whole partition directory."""
        self.release()
        shutil.rmtree(self.directory, ignore_errors=True)


def _writable(batches: bytes | bytearray | memoryview) -> bool:
    return isinstance(batches, bytearray) or (isinstance(batches, memoryview) and not batches.readonly)
