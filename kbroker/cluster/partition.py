"""A partition replica hosted by this broker: its role, and on the leader the followers' progress.

As in Kafka's Partition: the leader tracks each follower's log end offset (from the offsets its
fetches ask for) and when it was last caught up; the in-sync replicas are the leader and the
followers caught up within `replica.lag.time.max.ms`; the high watermark is the smallest log end
offset in the ISR. `acks=all` produces wait until the high watermark passes their last offset;
consumers only see data below it.

ISR changes go through `isr_writer` (the metadata store, with compare-and-set) and take effect
only once written, as Kafka's AlterPartition does: the write runs in the background (a follower's
fetch never waits for it) while the partition keeps one pending change, and proposes no other
until it is settled. Meanwhile the high watermark and acks=all count the *maximal* ISR: the
committed ISR plus a joining replica (it has caught up to the high watermark already), and a
leaving replica until its removal is committed, so nothing is acknowledged on the strength of
an ISR the store does not hold.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from kbroker.metrics.stats import BrokerStats
from kbroker.storage.log import AppendInfo, Log
from kbroker.storage.producer_state import AppendOrigin, ProducerView
from kbroker.storage.read_results import Read, ReadResult
from protocol.errors import ErrorCode, KafkaError

if TYPE_CHECKING:
    from kbroker.archive.remote_log import RemoteLog

log = logging.getLogger("kbroker.replication")

# Persist a new ISR; resolves to the ISR now committed, or None when the write did not happen
# (the state moved on: a newer leader epoch or another ISR, which the store's watch brings).
IsrWriter = Callable[["Partition", list[int]], Awaitable["list[int] | None"]]


@dataclass(eq=False, slots=True)
class PendingIsrChange:
    """An ISR change written to the store and not yet settled (Kafka's PendingExpandIsr /
    PendingShrinkIsr). Compared by identity: a change superseded by a new role is ignored when
    its write completes."""

    isr: list[int]
    expands: bool
    write: asyncio.Task[None] | None = None  # held here: the loop keeps only weak references to tasks

# ListOffsets' special timestamps (Kafka's ListOffsetsRequest constants).
LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
MAX_TIMESTAMP = -3
EARLIEST_LOCAL_TIMESTAMP = -4
LATEST_TIERED_TIMESTAMP = -5


class FetchIsolation(enum.Enum):
    """How far a fetch may read (Kafka's FetchIsolation): followers copy the whole log,
    consumers see what the ISR has, read_committed consumers only decided transactions."""

    LOG_END = enum.auto()
    HIGH_WATERMARK = enum.auto()
    TXN_COMMITTED = enum.auto()


@dataclass(slots=True)
class LogReadResult:
    """What one partition gives a fetch (Kafka's LogReadResult). `records` is the log's slice,
    never copied; `hosted` is False for a partition this broker does not have (whose offsets
    are then unknown, -1)."""

    error: int = ErrorCode.NO_ERROR
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1
    records: ReadResult | None = None
    # (producer id, first offset) for read_committed; None for the other isolations.
    aborted_transactions: list[tuple[int, int]] | None = None
    hosted: bool = True

    @property
    def size(self) -> int:
        return 0 if self.records is None else self.records.size


# A follower's read of a partition with nothing to read or tell it (`Partition.is_quiet_for`):
# one shared result, never changed, that a session's answer leaves out.
QUIET = LogReadResult()


@dataclass(frozen=True, slots=True)
class TimestampAndOffset:
    """ListOffsets' answer for one partition: offset -1 when nothing qualifies."""

    offset: int
    timestamp: int
    leader_epoch: int


@dataclass(frozen=True, slots=True)
class DelayedSummary:
    """DescribeDelayed's answer for one partition: its delayed records not delivered yet."""

    pending_count: int
    pending_bytes: int
    held_count: int  # of transactions not decided yet: no due time until they commit
    next_due_ms: int | None  # the earliest due time of the scheduled records


@dataclass(frozen=True, slots=True)
class ArchiveSummary:
    """DescribeArchive's answer for one partition: what its leader's disk and the archive hold."""

    local_log_start_offset: int
    local_size: int  # bytes of the local segments, DescribeLogDirs' partition size
    log_start_offset: int  # the partition's: in the archive, for a tiered log
    archived_size: int  # bytes of the archived segments' records (their .log objects)
    archived_segment_count: int
    highest_archived_offset: int  # -1: nothing archived


@dataclass(slots=True)
class FollowerState:
    log_end_offset: int = -1  # unknown until the follower's first fetch
    last_caught_up_ms: int = 0
    leader_end_at_last_fetch: int = 0


@dataclass(eq=False)
class Partition:
    topic: str
    index: int
    topic_id: uuid.UUID
    log: Log
    leader_id: int
    leader_epoch: int = 0
    replicas: list[int] = field(default_factory=list)
    isr: list[int] = field(default_factory=list)
    local_id: int = -1  # this broker; -1: the leader is local (single node)
    isr_writer: IsrWriter | None = None
    followers: dict[int, FollowerState] = field(default_factory=dict)
    pending_isr: PendingIsrChange | None = None
    # Called when delayed delivery may have work sooner: an append, the HW moving, leadership.
    on_delayed: Callable[[Partition], None] | None = None
    stats: BrokerStats | None = None  # counts ISR shrinks and expansions (kbroker/metrics)
    _waiters: set[asyncio.Future[None]] = field(default_factory=set)
    # acks=all answers waiting for the HW: (end offset, waiter). Whatever ends a wait takes its
    # entry out: the release (result None), the timer (the error it timed out with), a failure
    # of them all, or the wait's cancellation.
    _acks_waiters: list[tuple[int, asyncio.Future[int | None]]] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.local_id < 0:
            self.local_id = self.leader_id

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.index}"

    @property
    def is_leader(self) -> bool:
        return self.leader_id == self.local_id

    @property
    def high_watermark(self) -> int:
        return self.log.high_watermark

    @property
    def last_stable_offset(self) -> int:
        """Below it every transaction is decided: what read_committed consumers may see."""
        return self.log.last_stable_offset

    @property
    def log_start_offset(self) -> int:
        return self.log.log_start_offset

    @property
    def log_end_offset(self) -> int:
        return self.log.log_end_offset

    @property
    def min_insync_replicas(self) -> int:
        return self.log.config.min_insync_replicas

    @property
    def maximal_isr(self) -> list[int]:
        """The ISR the high watermark and acks=all count: the committed one, plus a replica whose
        joining is being written (a leaving one stays counted until its removal is written)."""
        pending = self.pending_isr
        if pending is not None and pending.expands:
            return [*self.isr, *(r for r in pending.isr if r not in self.isr)]
        return self.isr

    # -- roles ------------------------------------------------------------------------------------

    def make_leader(self, leader_epoch: int, replicas: list[int], isr: list[int], now_ms: int) -> None:
        """Lead from `leader_epoch`: the epoch starts at the log end, followers start unknown but
        counted as caught up now (as Kafka does), so none leaves the ISR before it could fetch."""
        self.leader_id, self.leader_epoch = self.local_id, leader_epoch
        self.replicas, self.isr = list(replicas), list(isr)
        self.pending_isr = None  # a change proposed in an earlier epoch can no longer be written
        self.log.epochs.assign(leader_epoch, self.log.log_end_offset)
        self.followers = {r: FollowerState(last_caught_up_ms=now_ms) for r in replicas if r != self.local_id}
        self.advance_high_watermark()
        self._notify_delayed()

    def update_membership(self, replicas: list[int], isr: list[int], now_ms: int) -> None:
        """Same leader and epoch, other replicas or ISR (a reassignment, or the controller
        dropping a dead follower): new followers are tracked, removed ones forgotten."""
        self.replicas, self.isr = list(replicas), list(isr)
        for replica in replicas:
            if replica != self.local_id and replica not in self.followers:
                self.followers[replica] = FollowerState(last_caught_up_ms=now_ms)
        for replica in [r for r in self.followers if r not in replicas]:
            del self.followers[replica]
        self.advance_high_watermark()  # a smaller ISR may let the HW (and acks=all) move on

    def make_follower(self, leader_id: int, leader_epoch: int, replicas: list[int], isr: list[int]) -> None:
        self.leader_id, self.leader_epoch = leader_id, leader_epoch
        self.replicas, self.isr = list(replicas), list(isr)
        self.pending_isr = None
        self.followers = {}
        self._fail_acks_waiters(ErrorCode.NOT_LEADER_OR_FOLLOWER)
        self.wake_waiters()

    def require_leader(self) -> None:
        if not self.is_leader:
            raise KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER, f"broker {self.local_id} does not lead {self.name}")

    # -- appends ----------------------------------------------------------------------------------

    def append_as_leader(
        self, records: bytes, now_ms: int, origin: AppendOrigin = AppendOrigin.CLIENT, required_acks: int = 1
    ) -> AppendInfo:
        self._check_can_append(required_acks)
        info = self.log.append_as_leader(records, self.leader_epoch, now_ms, origin=origin)
        self._appended()
        return info

    def start_append_as_leader(
        self, records: bytes, now_ms: int, origin: AppendOrigin = AppendOrigin.CLIENT, required_acks: int = 1,
        behind: bool = True, in_place: bool = False,
    ) -> tuple[AppendInfo, asyncio.Future[None] | None]:
        """`append_as_leader`, but with `behind` a large append may be written by the log dir's
        writer thread (Log.start_append_as_leader): then also the future of its publication,
        after which the high watermark moves and readers wake. `in_place`: the log may patch
        `records` rather than a copy (with `behind` only)."""
        if not behind:
            return self.append_as_leader(records, now_ms, origin, required_acks), None
        self._check_can_append(required_acks)
        info, written = self.log.start_append_as_leader(records, self.leader_epoch, now_ms, origin=origin,
                                                        in_place=in_place)
        if written is None:
            self._appended()
        else:
            written.add_done_callback(self._written)
        return info, written

    def _written(self, written: asyncio.Future[None]) -> None:
        if not written.cancelled():
            written.exception()  # a failure is its producer's answer (ReplicaManager.append)
        self._appended()

    def _appended(self) -> None:
        if self.is_leader:  # it may have stopped leading while the append was written
            self.advance_high_watermark()
            self._notify_delayed()
        self.wake_waiters()

    def _check_can_append(self, required_acks: int) -> None:
        self.require_leader()
        if required_acks == -1 and len(self.isr) < self.min_insync_replicas:
            raise KafkaError(ErrorCode.NOT_ENOUGH_REPLICAS,
                             f"the ISR of {self.name} is {self.isr}, below min.insync.replicas="
                             f"{self.min_insync_replicas}")

    def _notify_delayed(self) -> None:
        index = self.log.delay_index
        if self.on_delayed is not None and (index.pending_count or index.unconfirmed_forward_batch() is not None):
            self.on_delayed(self)

    async def wait_for_replication(self, end_offset: int, timeout_s: float) -> int:
        """For acks=all: an error code once the high watermark reaches `end_offset`, the ISR falls
        below min.insync.replicas, this broker stops leading, or `timeout_s` passes."""
        if self.high_watermark >= end_offset:
            return self._acks_result()
        # A bare timer on the waiter rather than asyncio.timeout: one of these per acks=all
        # request, and the timeout's cancellation machinery cost more than the wait's bookkeeping.
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[int | None] = loop.create_future()
        entry = (end_offset, waiter)
        self._acks_waiters.append(entry)
        timer = loop.call_later(timeout_s, self._time_out, entry)
        try:
            timed_out = await waiter
        except KafkaError as e:
            return e.code
        finally:
            timer.cancel()
            if waiter.cancelled():  # the producer's connection went: nothing else takes it out
                self._drop_acks_waiter(entry)
        return timed_out if timed_out is not None else self._acks_result()

    def _time_out(self, entry: tuple[int, asyncio.Future[int | None]]) -> None:
        self._drop_acks_waiter(entry)
        if not entry[1].done():
            entry[1].set_result(ErrorCode.REQUEST_TIMED_OUT)

    def _drop_acks_waiter(self, entry: tuple[int, asyncio.Future[int | None]]) -> None:
        with contextlib.suppress(ValueError):  # released or failed since: already out
            self._acks_waiters.remove(entry)

    def _acks_result(self) -> int:
        if len(self.maximal_isr) < self.min_insync_replicas:
            return ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND
        return ErrorCode.NO_ERROR

    # -- followers (leader side) ------------------------------------------------------------------

    def record_follower_fetch(self, replica_id: int, fetch_offset: int, now_ms: int) -> None:
        """A follower asked for `fetch_offset`: it holds everything below it."""
        state = self.followers.get(replica_id)
        if state is None:
            raise KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER, f"broker {replica_id} is not a replica of {self.name}")
        leader_end = self.log.log_end_offset
        # Caught up: it reached the leader's end as of now, or as of its previous fetch (Kafka's rule,
        # so a follower of a busy leader is not dropped just because data keeps arriving).
        if fetch_offset >= leader_end or fetch_offset >= state.leader_end_at_last_fetch:
            state.last_caught_up_ms = now_ms
        moved = fetch_offset != state.log_end_offset
        state.log_end_offset = fetch_offset
        state.leader_end_at_last_fetch = leader_end
        self._maybe_expand_isr(replica_id, state)
        if moved:
            # Only a follower's move can lift the HW here: every other input of it (the
            # leader's end, the ISR) advances it where it changes. A follower's session
            # fetch names every partition it follows from this leader, moved or not.
            self.advance_high_watermark()

    def record_quiet_follower_fetch(self, replica_id: int, fetch_offset: int, leader_epoch: int,
                                    told_high_watermark: int, told_log_start_offset: int, now_ms: int) -> bool:
        """`record_follower_fetch` for a quiet partition (`is_quiet_for`), where all it would
        change is the follower's caught-up time; False, and nothing recorded, when not quiet."""
        if not self.is_quiet_for(replica_id, fetch_offset, leader_epoch, told_high_watermark, told_log_start_offset):
            return False
        # Still refreshed: an append may come just before an ISR check, which must find the
        # follower caught up a moment ago, as Kafka's, which records every session partition.
        self.followers[replica_id].last_caught_up_ms = now_ms
        return True

    def is_quiet_for(self, replica_id: int, fetch_offset: int, leader_epoch: int, told_high_watermark: int,
                     told_log_start_offset: int) -> bool:
        """Whether an in-sync follower's fetch of this partition, at the log end, with the high
        watermark and log start it was last told (its fetch session's), can be passed over:
        reading finds nothing, there is nothing to tell it, and recording it changes only its
        caught-up time. The usual case of a session's idle partitions."""
        log = self.log
        if (fetch_offset != log.log_end_offset or told_high_watermark != log.high_watermark
                or told_log_start_offset != log.log_start_offset or self.leader_id != self.local_id):
            return False
        state = self.followers.get(replica_id)
        # Recorded at this offset already (not since a new leadership reset it), and in the ISR.
        return (state is not None and state.log_end_offset == fetch_offset and replica_id in self.isr
                and (leader_epoch < 0 or leader_epoch == self.leader_epoch) and log.health.readable)

    def _maybe_expand_isr(self, replica_id: int, state: FollowerState) -> None:
        if replica_id in self.isr or replica_id not in self.replicas or self.pending_isr is not None:
            return
        epoch_start = self.log.epochs.entries[-1].start_offset if self.log.epochs.entries else 0
        if state.log_end_offset >= self.high_watermark and state.log_end_offset >= epoch_start:
            self._change_isr([*self.isr, replica_id])

    def shrink_isr(self, now_ms: int, max_lag_ms: int) -> list[int]:
        """Drop followers not caught up within `max_lag_ms`; returns those leaving (at once on
        one node; in a cluster once the store has the new ISR)."""
        if not self.is_leader or self.pending_isr is not None:
            return []
        # Kafka's isCaughtUp: a follower at the leader's end is caught up however long ago it
        # fetched (a broker that died leaves the ISRs through the controller).
        end = self.log.log_end_offset
        lagging = [r for r in self.isr if r != self.local_id and r in self.followers
                   and self.followers[r].log_end_offset != end
                   and now_ms - self.followers[r].last_caught_up_ms > max_lag_ms]
        if lagging:
            self._change_isr([r for r in self.isr if r not in lagging])
        return lagging

    def _change_isr(self, isr: list[int]) -> None:
        if self.isr_writer is None:  # one node: no store to agree with
            self._commit_isr(isr)
            return
        pending = PendingIsrChange(isr, expands=set(isr) > set(self.isr))
        self.pending_isr = pending
        pending.write = asyncio.get_running_loop().create_task(self._write_isr(pending))

    async def _write_isr(self, pending: PendingIsrChange) -> None:
        assert self.isr_writer is not None
        try:
            committed = await self.isr_writer(self, pending.isr)
        except Exception:
            log.exception("%s: writing the ISR %s failed", self.name, pending.isr)
            committed = None
        if self.pending_isr is not pending:
            return  # a new role or epoch came meanwhile; its state is what counts
        self.pending_isr = None
        if committed is not None and self.is_leader:
            self._commit_isr(committed)
        else:
            self.advance_high_watermark()  # the maximal ISR is the committed one again

    def _commit_isr(self, isr: list[int]) -> None:
        self._count_isr_change(isr)
        self.isr = list(isr)
        if len(isr) < self.min_insync_replicas:
            self._fail_acks_waiters(ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND)
        self.advance_high_watermark()  # a smaller ISR may let the HW (and acks=all) move on

    def _count_isr_change(self, isr: list[int]) -> None:
        if self.stats is None:
            return
        before, after = set(self.isr), set(isr)
        if after < before:
            self.stats.isr_shrinks += 1
        elif after > before:
            self.stats.isr_expands += 1

    def advance_high_watermark(self) -> None:
        if not self.is_leader:
            return
        ends = [self.log.log_end_offset]
        ends += [self.followers[r].log_end_offset for r in self.maximal_isr if r in self.followers]
        new_hw = min(ends)
        if new_hw > self.log.high_watermark:
            self.log.high_watermark = new_hw
            self._release_acks_waiters()
            self.wake_waiters()
            self._notify_delayed()

    def _release_acks_waiters(self) -> None:
        hw = self.log.high_watermark
        waiting = []
        for entry in self._acks_waiters:
            end_offset, waiter = entry
            if end_offset > hw:
                waiting.append(entry)
            elif not waiter.done():  # a cancelled one leaves the list here too
                waiter.set_result(None)
        self._acks_waiters = waiting

    def _fail_acks_waiters(self, code: ErrorCode) -> None:
        for _, waiter in self._acks_waiters:
            if not waiter.done():
                waiter.set_exception(KafkaError(code))
        self._acks_waiters.clear()

    # -- follower side ----------------------------------------------------------------------------

    def update_follower_high_watermark(self, leader_high_watermark: int) -> None:
        """A follower's HW: the leader's, as far as this replica has the data."""
        new_hw = min(leader_high_watermark, self.log.log_end_offset)
        if new_hw > self.log.high_watermark:
            self.log.high_watermark = new_hw

    # -- reads ------------------------------------------------------------------------------------

    def read_records(self, fetch_offset: int, max_bytes: int, current_leader_epoch: int, isolation: FetchIsolation,
                     min_one_batch: bool) -> LogReadResult:
        """A fetch's read of this partition (Kafka's Partition.fetchRecords): the leader's offsets as
        of now, and the batches from `fetch_offset` below the bound `isolation` sets."""
        log = self.log
        committed = isolation is FetchIsolation.TXN_COMMITTED
        result = LogReadResult(ErrorCode.NO_ERROR, log.high_watermark, log.last_stable_offset, log.log_start_offset,
                               None, [] if committed else None)
        try:
            self.require_leader()
            self.check_leader_epoch(current_leader_epoch)
            if fetch_offset == log.log_end_offset and log.health.readable:
                # A fetcher at the end, the usual case of a session's idle partitions: nothing
                # to read whatever the isolation (each bound is at most the log end).
                return result
            # Followers copy the whole log; consumers see what the ISR has, read_committed ones
            # only decided transactions.
            upper = None if isolation is FetchIsolation.LOG_END else \
                result.last_stable_offset if committed else result.high_watermark
            data = log.read(fetch_offset, max_bytes, max_offset_exclusive=upper, min_one_batch=min_one_batch)
        except KafkaError as e:
            result.error = e.code
            return result
        if data is None or data.size == 0:
            return result
        result.records = data
        if committed and upper is not None:
            # The consumer drops records of these producers from first_offset up to their ABORT marker.
            result.aborted_transactions = log.collect_aborted_transactions(fetch_offset, upper)
        return result

    def empty_read(self, isolation: FetchIsolation) -> LogReadResult:
        """This partition's offsets as of now and no records: a fetch's answer before (or instead of) a read."""
        return LogReadResult(ErrorCode.NO_ERROR, self.high_watermark, self.last_stable_offset, self.log_start_offset,
                             aborted_transactions=[] if isolation is FetchIsolation.TXN_COMMITTED else None)

    def read_committed_log(self, offset: int, max_bytes: int) -> Read | None:
        """Whole batches from `offset` below the high watermark, for this broker's own readers
        of what no truncation takes back (the view indexer)."""
        return self.log.read(offset, max_bytes, max_offset_exclusive=self.high_watermark)

    def read_log(self, offset: int, max_bytes: int) -> ReadResult | None:
        """Whole batches from `offset` up to the log end, for this broker's own readers (the
        coordinators replaying their partitions)."""
        return self.log.read(offset, max_bytes)

    def fetch_offset_for_timestamp(self, timestamp: int, current_leader_epoch: int,
                                   committed: bool) -> TimestampAndOffset:
        """ListOffsets (Kafka's Partition.fetchOffsetForTimestamp): the special timestamps, or the
        first record at or after `timestamp`; offsets a consumer cannot fetch yet are not told."""
        self.require_leader()
        self.check_leader_epoch(current_leader_epoch)
        upper = self.last_stable_offset if committed else self.high_watermark
        if timestamp == LATEST_TIMESTAMP:
            found: tuple[int, int] | None = (upper, -1)
        elif timestamp == EARLIEST_TIMESTAMP:
            found = (self.log_start_offset, -1)  # a tiered log's is in the archive
        elif timestamp == EARLIEST_LOCAL_TIMESTAMP:
            found = (self.log.local_log_start_offset, -1)
        elif timestamp == LATEST_TIERED_TIMESTAMP:
            highest = self.log.highest_offset_in_remote
            found = (highest, -1) if highest >= 0 else None
        elif timestamp == MAX_TIMESTAMP:
            found = self._visible(self.log.max_timestamp_offset(), upper)
        elif timestamp < 0:
            raise KafkaError(ErrorCode.INVALID_REQUEST, f"unknown special timestamp {timestamp}")
        else:
            found = self._visible(self.log.offset_for_timestamp(timestamp), upper)
        if found is None:
            return TimestampAndOffset(-1, -1, -1)
        offset, found_timestamp = found
        if timestamp == LATEST_TIERED_TIMESTAMP:  # as Kafka: the epoch of that offset
            return TimestampAndOffset(offset, found_timestamp, self.log.epochs.epoch_for_offset(offset))
        return TimestampAndOffset(offset, found_timestamp, self.leader_epoch if offset >= 0 else -1)

    @staticmethod
    def _visible(found: tuple[int, int] | None, upper: int) -> tuple[int, int] | None:
        return None if found is None or found[0] >= upper else found

    # -- producers --------------------------------------------------------------------------------

    def has_open_transaction(self, producer_id: int) -> bool:
        return self.log.has_open_transaction(producer_id)

    def active_producers(self) -> list[ProducerView]:
        return self.log.active_producers()

    # -- delayed delivery -------------------------------------------------------------------------

    def delayed_summary(self) -> DelayedSummary:
        """DescribeDelayed: the leader's pending delayed records. A follower's index is the same
        (it is a function of the log), but its due times are the leader's to act on, so only the
        leader answers, as for ListOffsets."""
        self.require_leader()
        index = self.log.delay_index
        if not index.pending_count:  # the common case costs no scan
            return DelayedSummary(0, 0, 0, None)
        return DelayedSummary(index.pending_count, index.pending_bytes, index.held_count(), index.earliest_due())

    # -- the archive ------------------------------------------------------------------------------

    def archive_summary(self, remote: RemoteLog | None) -> ArchiveSummary:
        """DescribeArchive: the leader's local log and `remote`, what the archive holds of it
        (None: the log is not tiered). Only the leader answers: a follower's local window and
        its knowledge of the archive lag behind the leader's."""
        self.require_leader()
        log_ = self.log
        if remote is None:
            archived_size, archived_count, highest = 0, 0, -1
        else:
            archived_size, archived_count, highest = remote.size, len(remote.finished), remote.highest_offset
        return ArchiveSummary(log_.local_log_start_offset, log_.size_in_bytes, log_.log_start_offset,
                              archived_size, archived_count, highest)

    # -- other ------------------------------------------------------------------------------------

    def delete_records(self, before_offset: int) -> int:
        """DeleteRecords: move the log start offset up (-1: to the high watermark); returns it."""
        self.require_leader()
        return self.log.delete_records_before(before_offset)

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """OffsetForLeaderEpoch: the largest epoch <= `epoch` this log knows, and where it ends."""
        return self.log.end_offset_for_epoch(epoch)

    def check_leader_epoch(self, current_leader_epoch: int) -> None:
        """Validate a client's view of the leader epoch (-1 means it does not know)."""
        if current_leader_epoch < 0 or current_leader_epoch == self.leader_epoch:
            return
        if current_leader_epoch < self.leader_epoch:
            raise KafkaError(ErrorCode.FENCED_LEADER_EPOCH)
        raise KafkaError(ErrorCode.UNKNOWN_LEADER_EPOCH)

    def add_waiter(self, waiter: asyncio.Future[None]) -> None:
        self._waiters.add(waiter)

    def remove_waiter(self, waiter: asyncio.Future[None]) -> None:
        self._waiters.discard(waiter)

    def wake_waiters(self) -> None:
        if not self._waiters:
            return
        for waiter in self._waiters:
            if not waiter.done():
                waiter.set_result(None)
        self._waiters.clear()

