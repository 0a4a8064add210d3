"""The share partitions this broker leads (Kafka's SharePartitionManager): ShareFetch reads the
log and hands records out through each group's `SharePartition`; ShareAcknowledge settles them.

A share partition lives on the leader of its topic partition and starts, the first time a
group reads it, at the log's end (`share.auto.offset.reset=latest`) or start (`earliest`).
Record batches stay opaque: only their headers are read, to know which offsets a read covers
and to trim the answer after the last batch that holds an acquired record.

Locks expire on the caller's clock: `expire_locks(now_ms)` runs from a timer the broker keeps
at the earliest deadline (`next_lock_deadline_ms`). A fetch that finds nothing to acquire waits,
up to its max wait, for new data or for records coming back (released, expired).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from kbroker.clock import WallClock, wall_clock_ms
from kbroker.cluster.partition import FetchIsolation, Partition
from kbroker.cluster.replica_manager import ReplicaManager
from kbroker.coordinator.share_reads import batch_extents, records_through
from kbroker.share.share_partition import (
    AcknowledgementBatch,
    AcquiredRange,
    Archived,
    ShareLimits,
    SharePartition,
)
from kbroker.storage.read_results import Read
from protocol.errors import ErrorCode

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


@dataclass(frozen=True)
class ShareFetched:
    """One partition's answer: its error, the batches holding the acquired records, the ranges."""

    error: int
    records: Read | None = None
    acquired: tuple[AcquiredRange, ...] = ()


# (group, topic, partition, archived records): for dead letters and metrics.
ArchiveListener = Callable[[str, str, int, list[Archived]], None]


class SharePartitionManager:
    def __init__(self, replica_manager: ReplicaManager, settings_of: Callable[[str], ShareGroupSettings],
                 clock: WallClock = wall_clock_ms, on_archived: ArchiveListener | None = None) -> None:
        self.replica_manager = replica_manager
        self.settings_of = settings_of
        self.clock = clock
        self.on_archived = on_archived
        self._partitions: dict[tuple[str, str, int], SharePartition] = {}
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
        if partition is not None and partition.is_leader:
            self._share_partition_of(group_id, partition, self.settings_of(group_id))

    def share_partition(self, group_id: str, topic: str, index: int) -> SharePartition | None:
        return self._partitions.get((group_id, topic, index))

    # -- fetching --------------------------------------------------------------------------------

    async def fetch(self, group_id: str, member_id: str, wanted: Sequence[tuple[str, int]], max_records: int,
                    max_bytes: int, max_wait_ms: int) -> list[ShareFetched]:
        """Acquire records of `wanted` for a member: one answer per partition, in order. Waits up
        to `max_wait_ms` while nothing at all could be acquired."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max_wait_ms / 1000
        while True:
            answers = self._fetch_once(group_id, member_id, wanted, max_records, max_bytes)
            self._arm_lock_timer()
            remaining = deadline - loop.time()
            if remaining <= 0 or any(a.acquired or a.error for a in answers) or not wanted:
                return answers
            await self._wait_for_records(wanted, remaining)

    def _fetch_once(self, group_id: str, member_id: str, wanted: Sequence[tuple[str, int]], max_records: int,
                    max_bytes: int) -> list[ShareFetched]:
        answers: list[ShareFetched] = []
        records_left, bytes_left = max_records, max_bytes
        for topic, index in wanted:
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
        share = self._share_partition_of(group_id, partition, settings)
        share.move_start(max(share.start_offset, partition.log_start_offset))
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

    def _share_partition_of(self, group_id: str, partition: Partition, settings: ShareGroupSettings) -> SharePartition:
        key = (group_id, partition.topic, partition.index)
        share = self._partitions.get(key)
        if share is None:
            start = partition.log_start_offset if settings.start_at_earliest else partition.high_watermark
            share = self._partitions[key] = SharePartition(start, settings.limits)
        return share

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

    def acknowledge(self, group_id: str, member_id: str, topic: str, index: int,
                    batches: Sequence[AcknowledgementBatch]) -> int:
        """Apply a member's acknowledgements to one partition; its error code."""
        share = self._partitions.get((group_id, topic, index))
        if share is None:
            return ErrorCode.INVALID_RECORD_STATE  # nothing was ever acquired here
        code, archived = share.acknowledge(member_id, batches, self.clock())
        if code == ErrorCode.NO_ERROR:
            self._settled(group_id, topic, index, archived)
        return code

    def release_member(self, group_id: str, member_id: str, partitions: Sequence[tuple[str, int]]) -> None:
        """A member's share session ended: what it holds goes back to the queue."""
        for topic, index in partitions:
            share = self._partitions.get((group_id, topic, index))
            if share is not None:
                self._settled(group_id, topic, index, share.release_member(member_id))

    def expire_locks(self, now_ms: int) -> None:
        for (group_id, topic, index), share in list(self._partitions.items()):
            self._settled(group_id, topic, index, share.expire_locks(now_ms))

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

