"""The share partitions this broker leads (Kafka's SharePartitionManager): ShareFetch reads the
log and hands records out through each group's `SharePartition`; ShareAcknowledge settles them.

A share partition lives on the leader of its topic partition and starts, the first time a
group reads it, at the log's end (`share.auto.offset.reset=latest`) or start (`earliest`).
Record batches stay opaque: only their headers are read, to know which offsets a read covers
and to trim the answer after the last batch that holds an acquired record.

Locks expire on the caller's clock: `expire_locks(now_ms)` runs from a timer the broker keeps
at the earliest deadline (`next_lock_deadline_ms`). A fetch that finds nothing to acquire waits,
up to its max wait, for new data or for records coming back (released, expired).

The state is persisted through a `StatePersister` (the share coordinator, Kafka's persister): a
share partition is loaded from it before its first fetch (and created there, at the offset
`share.auto.offset.reset` names, when it has none); every change Kafka persists (acknowledgements,
releases, expired locks, archives, a moved start offset) is written, and an acknowledgement is
answered only once its write is. Writes of one share partition go one at a time, each the whole
in-flight window as it is then (so one write may carry many changes, and a failed write is
made good by the next). Acquisitions are not written: after a failover what was acquired is
available again. A share partition is dropped when this broker stops leading its partition
and loaded again by whoever leads it next.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from kbroker.clock import WallClock, wall_clock_ms
from kbroker.cluster.partition import FetchIsolation, Partition
from kbroker.cluster.replica_manager import ReplicaManager
from kbroker.coordinator.share_coordinator import UNINITIALIZED_START_OFFSET, StateRead
from kbroker.coordinator.share_reads import batch_extents, records_through
from kbroker.coordinator.share_state_records import PersistedBatch
from kbroker.share.share_partition import (
    AcknowledgementBatch,
    AcquiredRange,
    Archived,
    RecordState,
    ShareLimits,
    SharePartition,
    StateBatch,
)
from kbroker.storage.read_results import Read
from protocol.errors import ErrorCode

log = logging.getLogger("kbroker.share_partitions")

# At most this much of a partition's log is read per share fetch (a classic consumer's default
# max.partition.fetch.bytes). Every batch header of the read is read, yet only max_records of it
# (500 for librdkafka) are acquired: reading the client's max_bytes (50 MiB by default) cost a
# share consumer of a long backlog 90 % of its throughput.
SHARE_READ_MAX_BYTES = 1024 * 1024


@dataclass(frozen=True)
class ShareGroupSettings:
    limits: ShareLimits = field(default_factory=ShareLimits)
    start_at_earliest: bool = False  # share.auto.offset.reset
    read_committed: bool = False  # share.isolation.level
    start_by_duration_ms: int | None = None  # share.auto.offset.reset=by_duration:<duration>
    renew_enabled: bool = True  # share.renew.acknowledge.enable (KIP-1222)


@dataclass(frozen=True)
class ShareFetched:
    """One partition's answer: its error, the batches holding the acquired records, the ranges."""

    error: int
    records: Read | None = None
    acquired: tuple[AcquiredRange, ...] = ()


# (group, topic, partition, archived records): for dead letters and metrics.
ArchiveListener = Callable[[str, str, int, list[Archived]], None]
ShareKey = tuple[str, str, int]  # (group, topic, partition)


class StatePersister(Protocol):
    """Where share-partition state is kept (Kafka's Persister): the share coordinator."""

    async def read(self, group_id: str, topic_id: uuid.UUID, partition: int, leader_epoch: int) -> StateRead: ...

    async def initialize(self, group_id: str, topic_id: uuid.UUID, partition: int, state_epoch: int,
                         start_offset: int) -> int: ...

    async def write(self, group_id: str, topic_id: uuid.UUID, partition: int, state_epoch: int, leader_epoch: int,
                    start_offset: int, batches: Sequence[PersistedBatch]) -> int: ...


class MemoryPersister:
    """State kept in this object only: for tests of the manager alone."""

    def __init__(self) -> None:
        self.states: dict[tuple[str, uuid.UUID, int], StateRead] = {}

    async def read(self, group_id: str, topic_id: uuid.UUID, partition: int, leader_epoch: int) -> StateRead:
        return self.states.get((group_id, topic_id, partition), StateRead(ErrorCode.NO_ERROR))

    async def initialize(self, group_id: str, topic_id: uuid.UUID, partition: int, state_epoch: int,
                         start_offset: int) -> int:
        self.states[(group_id, topic_id, partition)] = StateRead(ErrorCode.NO_ERROR, state_epoch, start_offset)
        return ErrorCode.NO_ERROR

    async def write(self, group_id: str, topic_id: uuid.UUID, partition: int, state_epoch: int, leader_epoch: int,
                    start_offset: int, batches: Sequence[PersistedBatch]) -> int:
        self.states[(group_id, topic_id, partition)] = StateRead(ErrorCode.NO_ERROR, state_epoch, start_offset,
                                                                 tuple(batches))
        return ErrorCode.NO_ERROR


@dataclass
class _Writer:
    """The writes of one share partition: one in flight, the callers waiting for the next."""

    waiting: list[asyncio.Future[int]] = field(default_factory=list)
    task: asyncio.Task[None] | None = None


# Errors of a write that mean another leader (or a reset) owns the state now.
_FENCED = frozenset({ErrorCode.FENCED_LEADER_EPOCH, ErrorCode.FENCED_STATE_EPOCH})


class SharePartitionManager:
    def __init__(self, replica_manager: ReplicaManager, settings_of: Callable[[str], ShareGroupSettings],
                 clock: WallClock = wall_clock_ms, on_archived: ArchiveListener | None = None,
                 persister: StatePersister | None = None) -> None:
        self.replica_manager = replica_manager
        self.settings_of = settings_of
        self.clock = clock
        self.on_archived = on_archived
        self.persister: StatePersister = persister if persister is not None else MemoryPersister()
        self._partitions: dict[ShareKey, SharePartition] = {}
        self._leader_epochs: dict[ShareKey, int] = {}  # the epoch each share partition was loaded under
        # The topic partition each was loaded for: a topic deleted and created again under the
        # same name is another partition (another topic id), whose share state starts afresh.
        self._hosts: dict[ShareKey, Partition] = {}
        self._loads: dict[ShareKey, asyncio.Task[int]] = {}
        self._writers: dict[ShareKey, _Writer] = {}
        self._forget_when_written: set[ShareKey] = set()
        # Fetches waiting for records to come back (released, expired, a slot freed).
        self._return_waiters: set[asyncio.Future[None]] = set()
        self._lock_timer: asyncio.TimerHandle | None = None
        self._lock_timer_at = 0

    def lock_duration_ms(self, group_id: str = "") -> int:
        return self.settings_of(group_id).limits.lock_duration_ms

    def initialize(self, group_id: str, topic: str, index: int) -> None:
        """Start a group's share partition now if this broker leads it (as Kafka does when the
        partition is first assigned): `latest` then means records produced from now on."""
        partition = self.replica_manager.find(topic, index)
        key = (group_id, topic, index)
        if partition is None or not partition.is_leader or key in self._partitions or key in self._loads:
            return
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return  # no loop (tests of the state alone): the first fetch loads it
        self._start_load(key, partition, self._start_offset(group_id, partition))

    def share_partition(self, group_id: str, topic: str, index: int) -> SharePartition | None:
        return self._partitions.get((group_id, topic, index))

    def on_leadership_change(self, topic: str, index: int, leads: bool) -> None:
        """Another broker leads the partition now: its share partitions go (their state is in the
        share coordinator; the new leader loads it). Locks do not move with them."""
        if leads:
            return
        for key in [k for k in (*self._partitions, *self._loads) if k[1] == topic and k[2] == index]:
            self._drop(key)

    # -- loading ---------------------------------------------------------------------------------

    def _start_offset(self, group_id: str, partition: Partition) -> int:
        """Where a group starts reading a partition (Kafka's share.auto.offset.reset): the log start,
        the first record at or after now minus a duration (the end if there is none), or the end."""
        settings = self.settings_of(group_id)
        if settings.start_at_earliest:
            return partition.log_start_offset
        if settings.start_by_duration_ms is not None:
            found = partition.fetch_offset_for_timestamp(self.clock() - settings.start_by_duration_ms, -1, False)
            if found.offset >= 0:
                return found.offset
        return partition.high_watermark

    def _start_load(self, key: ShareKey, partition: Partition, start_if_new: int) -> asyncio.Task[int]:
        task = asyncio.get_running_loop().create_task(self._load(key, partition, start_if_new))
        self._loads[key] = task
        task.add_done_callback(lambda done: self._loads.pop(key, None) if self._loads.get(key) is done else None)
        return task

    async def _load(self, key: ShareKey, partition: Partition, start_if_new: int) -> int:
        """Read the share partition's state (creating it when there is none); an error code."""
        group_id, _, index = key
        epoch = partition.leader_epoch
        limits = self.settings_of(group_id).limits
        try:
            state = await self.persister.read(group_id, partition.topic_id, index, epoch)
            if state.error != ErrorCode.NO_ERROR:
                return _load_error(state.error)
            if state.start_offset == UNINITIALIZED_START_OFFSET:
                code = await self.persister.initialize(group_id, partition.topic_id, index, state.state_epoch,
                                                       start_if_new)
                if code != ErrorCode.NO_ERROR:
                    return _load_error(code)
                share = SharePartition(start_if_new, limits, state_epoch=state.state_epoch)
            else:
                batches = [StateBatch(b.first_offset, b.last_offset, RecordState(b.delivery_state), b.delivery_count)
                           for b in state.batches if b.delivery_state in _PERSISTED_STATES]
                share = SharePartition.restore(state.start_offset, batches, limits, state.state_epoch)
        except Exception:
            log.exception("loading the share partition %s failed", key)
            return ErrorCode.UNKNOWN_SERVER_ERROR
        current = self.replica_manager.find(key[1], index)
        if current is not partition or not partition.is_leader or partition.leader_epoch != epoch:
            return ErrorCode.NOT_LEADER_OR_FOLLOWER  # leadership moved while it loaded
        self._partitions[key] = share
        self._leader_epochs[key] = epoch
        self._hosts[key] = partition
        return ErrorCode.NO_ERROR

    async def _ensure_loaded(self, group_id: str, wanted: Sequence[tuple[str, int]],
                             timeout_s: float) -> dict[tuple[str, int], int]:
        """Load the share partitions of `wanted` that this broker leads and has not loaded,
        waiting at most `timeout_s` (a fetch's wait: a load still running when it ends goes on,
        and the fetch answers that partition empty); the error of each one that failed."""
        pending: dict[tuple[str, int], asyncio.Task[int]] = {}
        for topic, index in wanted:
            partition = self.replica_manager.find(topic, index)
            if partition is None or not partition.is_leader:
                continue
            key = (group_id, topic, index)
            if self._loaded(key, partition) is not None:
                continue
            task = self._loads.get(key) or self._start_load(key, partition, self._start_offset(group_id, partition))
            pending[(topic, index)] = task
        if not pending:
            return {}
        # Even with no time left, a load that needs no IO (a local coordinator) finishes first.
        await asyncio.wait(pending.values(), timeout=max(timeout_s, 0.001))
        failed = {}
        for where, task in pending.items():
            if not task.done():
                failed[where] = ErrorCode.NO_ERROR  # still loading: nothing to give yet
            elif task.cancelled():
                failed[where] = ErrorCode.NOT_LEADER_OR_FOLLOWER
            elif task.result() == ErrorCode.COORDINATOR_NOT_AVAILABLE:
                # The share coordinator is starting or moving (its topic being created, say): as
                # while loading, nothing to give yet; the next fetch loads again. Clients take a
                # coordinator error on a fetched partition as fatal.
                failed[where] = ErrorCode.NO_ERROR
            elif task.result() != ErrorCode.NO_ERROR:
                failed[where] = task.result()
        return failed

    def _loaded(self, key: ShareKey, partition: Partition) -> SharePartition | None:
        """The loaded share partition, unless it was loaded under an older leadership (then it
        is dropped, to be loaded again)."""
        share = self._partitions.get(key)
        if share is not None and (self._leader_epochs.get(key) != partition.leader_epoch
                                  or self._hosts.get(key) is not partition):
            self._drop(key)
            return None
        return share

    def forget_gone(self) -> None:
        """Drop the share partitions of topic partitions this broker no longer leads or that are
        gone (a deleted topic): nothing else would, for a topic no one fetches any more."""
        for key in list(self._partitions):
            partition = self.replica_manager.find(key[1], key[2])
            if partition is None or not partition.is_leader or self._hosts.get(key) is not partition:
                self._drop(key)

    def forget(self, group_id: str, topic: str, index: int) -> None:
        """Let a share partition go (no session reads it, or its state was reset or deleted):
        the next fetch loads it again from the share coordinator. A write under way (a release)
        is finished first."""
        key = (group_id, topic, index)
        if key in self._writers:
            self._forget_when_written.add(key)
        else:
            self._drop(key)

    def _drop(self, key: ShareKey) -> None:
        self._partitions.pop(key, None)
        self._leader_epochs.pop(key, None)
        self._hosts.pop(key, None)
        load = self._loads.pop(key, None)
        if load is not None:
            load.cancel()

    # -- fetching --------------------------------------------------------------------------------

    async def fetch(self, group_id: str, member_id: str, wanted: Sequence[tuple[str, int]], max_records: int,
                    max_bytes: int, max_wait_ms: int) -> list[ShareFetched]:
        """Acquire records of `wanted` for a member: one answer per partition, in order. Waits up
        to `max_wait_ms` while nothing at all could be acquired."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max_wait_ms / 1000
        while True:
            failed = await self._ensure_loaded(group_id, wanted, max(0.0, deadline - loop.time()))
            answers = self._fetch_once(group_id, member_id, wanted, max_records, max_bytes, failed)
            self._arm_lock_timer()
            remaining = deadline - loop.time()
            if remaining <= 0 or any(a.acquired or a.error for a in answers) or not wanted:
                return answers
            await self._wait_for_records(wanted, remaining)

    def _fetch_once(self, group_id: str, member_id: str, wanted: Sequence[tuple[str, int]], max_records: int,
                    max_bytes: int, failed: dict[tuple[str, int], int]) -> list[ShareFetched]:
        answers: list[ShareFetched] = []
        records_left, bytes_left = max_records, max_bytes
        for topic, index in wanted:
            if (topic, index) in failed:
                answers.append(ShareFetched(failed[(topic, index)]))
                continue
            answer = self._fetch_partition(group_id, member_id, topic, index, records_left, bytes_left)
            answers.append(answer)
            records_left -= sum(r.last_offset - r.first_offset + 1 for r in answer.acquired)
            bytes_left -= answer.records.size if answer.records is not None else 0
        return answers

    def _fetch_partition(self, group_id: str, member_id: str, topic: str, index: int, max_records: int,
                         max_bytes: int) -> ShareFetched:
        partition = self.replica_manager.find(topic, index)
        if partition is None:
            return ShareFetched(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        if not partition.is_leader:
            return ShareFetched(ErrorCode.NOT_LEADER_OR_FOLLOWER)
        if max_records <= 0 or max_bytes <= 0:
            return ShareFetched(ErrorCode.NO_ERROR)
        settings = self.settings_of(group_id)
        key = (group_id, topic, index)
        share = self._loaded(key, partition)
        if share is None:  # it lost leadership and got it back while this fetch waited
            return ShareFetched(ErrorCode.NOT_LEADER_OR_FOLLOWER)
        if partition.log_start_offset > share.start_offset:
            share.move_start(partition.log_start_offset)
            self._persist_later(key)
        isolation = FetchIsolation.TXN_COMMITTED if settings.read_committed else FetchIsolation.HIGH_WATERMARK
        # The first batch even over max_bytes, so a large record is never stuck.
        read = partition.read_records(share.next_fetch_offset(), min(max_bytes, SHARE_READ_MAX_BYTES), -1,
                                      isolation, min_one_batch=True)
        if read.error or read.records is None:
            return ShareFetched(read.error)
        extents = batch_extents(read.records)
        if not extents:
            return ShareFetched(ErrorCode.NO_ERROR)
        acquired = share.acquire(member_id, extents[0][0], extents[-1][1], max_records, self.clock())
        if not acquired:
            return ShareFetched(ErrorCode.NO_ERROR)
        last_acquired = acquired[-1].last_offset
        end = next(end for _, last, end in extents if last >= last_acquired)
        return ShareFetched(ErrorCode.NO_ERROR, records_through(read.records, end), tuple(acquired))

    def settings_changed(self, group_id: str) -> None:
        """A group's configs changed: its share partitions take the new lock duration, delivery
        limit and in-flight limit from now on (their start offsets stay)."""
        limits = self.settings_of(group_id).limits
        for (group, _, _), share in self._partitions.items():
            if group == group_id:
                share.limits = limits

    async def _wait_for_records(self, wanted: Sequence[tuple[str, int]], timeout_s: float) -> None:
        # Registered before yielding to the loop: data or a settlement in between must wake us.
        woken: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        hosted = [p for p in (self.replica_manager.find(t, i) for t, i in wanted) if p is not None]
        for partition in hosted:
            partition.add_waiter(woken)
        self._return_waiters.add(woken)
        try:
            await asyncio.wait({woken}, timeout=timeout_s)
        finally:
            self._return_waiters.discard(woken)
            for partition in hosted:
                partition.remove_waiter(woken)

    # -- settling --------------------------------------------------------------------------------

    async def acknowledge(self, group_id: str, member_id: str, topic: str, index: int,
                          batches: Sequence[AcknowledgementBatch]) -> int:
        """Apply a member's acknowledgements to one partition and write them to the share
        coordinator; its error code, once written."""
        partition = self.replica_manager.find(topic, index)
        if partition is None:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        if not partition.is_leader:
            return ErrorCode.NOT_LEADER_OR_FOLLOWER
        key = (group_id, topic, index)
        share = self._loaded(key, partition)
        if share is None:
            return ErrorCode.INVALID_RECORD_STATE  # nothing was acquired here under this leadership
        code, archived = share.acknowledge(member_id, batches, self.clock())
        if code != ErrorCode.NO_ERROR:
            return code
        self._settled(group_id, topic, index, archived)
        written = await self._persist(key)
        # An older leader's write is fenced: for the client, this broker no longer leads.
        return ErrorCode.NOT_LEADER_OR_FOLLOWER if written == ErrorCode.FENCED_LEADER_EPOCH else written

    def release_member(self, group_id: str, member_id: str, partitions: Sequence[tuple[str, int]]) -> None:
        """A member's share session ended: what it holds goes back to the queue."""
        for topic, index in partitions:
            key = (group_id, topic, index)
            share = self._partitions.get(key)
            if share is not None and share.acquired_by(member_id):
                self._settled(group_id, topic, index, share.release_member(member_id))
                self._persist_later(key)

    def expire_locks(self, now_ms: int) -> None:
        for key, share in list(self._partitions.items()):
            deadline = share.next_lock_deadline_ms()
            if deadline is not None and deadline <= now_ms:
                self._settled(*key, share.expire_locks(now_ms))
                self._persist_later(key)

    # -- persisting ------------------------------------------------------------------------------

    def _persist(self, key: ShareKey) -> asyncio.Future[int]:
        """The share partition's state as it is when its turn comes, written; the write's error."""
        loop = asyncio.get_running_loop()
        done: asyncio.Future[int] = loop.create_future()
        writer = self._writers.setdefault(key, _Writer())
        writer.waiting.append(done)
        if writer.task is None:
            writer.task = loop.create_task(self._write_in_turn(key, writer))
        return done

    def _persist_later(self, key: ShareKey) -> None:
        """A change no answer waits for (released, expired, moved): written in the background."""
        with contextlib.suppress(RuntimeError):  # no loop (tests of the state alone)
            self._persist(key)

    async def _write_in_turn(self, key: ShareKey, writer: _Writer) -> None:
        try:
            while writer.waiting:
                waiting, writer.waiting = writer.waiting, []
                code = await self._write(key)
                for done in waiting:
                    if not done.done():
                        done.set_result(code)
        finally:
            for done in writer.waiting:
                if not done.done():
                    done.set_result(ErrorCode.UNKNOWN_SERVER_ERROR)
            writer.waiting = []
            if self._writers.get(key) is writer:
                del self._writers[key]
                if key in self._forget_when_written:
                    self._forget_when_written.discard(key)
                    self._drop(key)

    async def _write(self, key: ShareKey) -> int:
        share = self._partitions.get(key)
        partition = self.replica_manager.find(key[1], key[2])
        if share is None or partition is None:
            return ErrorCode.NOT_LEADER_OR_FOLLOWER
        batches = [PersistedBatch(b.first_offset, b.last_offset, int(b.state), b.delivery_count)
                   for b in share.snapshot()]
        try:
            code = await self.persister.write(key[0], partition.topic_id, key[2], share.state_epoch,
                                              self._leader_epochs.get(key, -1), share.start_offset, batches)
        except Exception:
            log.exception("writing the state of share partition %s failed", key)
            return ErrorCode.UNKNOWN_SERVER_ERROR
        if code in _FENCED and self._partitions.get(key) is share:
            log.info("share partition %s: state write fenced (%s); loading it again", key, ErrorCode(code).name)
            self._drop(key)
        elif code != ErrorCode.NO_ERROR:
            log.warning("share partition %s: state write failed: %s", key, ErrorCode(code).name)
        return code

    def _arm_lock_timer(self) -> None:
        """Keep one loop timer at the earliest lock deadline, so a lock expires on time (not
        only when someone next fetches)."""
        deadline = self.next_lock_deadline_ms()
        if self._lock_timer is not None and (deadline is None or deadline < self._lock_timer_at):
            self._lock_timer.cancel()
            self._lock_timer = None
        if deadline is None or self._lock_timer is not None:
            return
        delay_s = max(0.0, (deadline - self.clock()) / 1000)
        self._lock_timer_at = deadline
        self._lock_timer = asyncio.get_running_loop().call_later(delay_s, self._on_lock_timer)

    def _on_lock_timer(self) -> None:
        self._lock_timer = None
        self.expire_locks(self.clock())
        self._arm_lock_timer()

    def stop(self) -> None:
        if self._lock_timer is not None:
            self._lock_timer.cancel()
            self._lock_timer = None
        for task in [*self._loads.values(), *(w.task for w in self._writers.values() if w.task is not None)]:
            task.cancel()

    def next_lock_deadline_ms(self) -> int | None:
        deadlines = [d for d in (s.next_lock_deadline_ms() for s in self._partitions.values()) if d is not None]
        return min(deadlines) if deadlines else None

    def _settled(self, group_id: str, topic: str, index: int, archived: list[Archived]) -> None:
        # Any settlement may free a record or an in-flight slot for a waiting fetch.
        for waiter in self._return_waiters:
            if not waiter.done():
                waiter.set_result(None)
        self._return_waiters.clear()
        if archived and self.on_archived is not None:
            self.on_archived(group_id, topic, index, archived)


_PERSISTED_STATES = frozenset({RecordState.AVAILABLE, RecordState.ACQUIRED, RecordState.ACKNOWLEDGED,
                               RecordState.ARCHIVED})
# Errors of the share coordinator that a fetch passes on as "try again" (Kafka's
# CoordinatorNotAvailableException for a share partition it could not initialize).
_COORDINATOR_BUSY = frozenset({ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
                               ErrorCode.REQUEST_TIMED_OUT})


def _load_error(code: int) -> int:
    if code in _COORDINATOR_BUSY:
        return ErrorCode.COORDINATOR_NOT_AVAILABLE
    if code == ErrorCode.FENCED_LEADER_EPOCH:
        return ErrorCode.NOT_LEADER_OR_FOLLOWER
    return code

