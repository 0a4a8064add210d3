"""The mover of delayed delivery (docs/delayed-and-retry.md): on the leader of a partition, at
each pending record's due time, append its delivery to the same partition.

One task per broker sleeps until the earliest due time over the partitions it leads (the
timing wheels' `next_due`), and is woken earlier only when that could change: an append adds
a record due sooner, a partition whose due records waited for the high watermark sees it move,
or this broker becomes a leader. There is no polling loop.

A pass over a partition takes what is due (`collect_due`, in due-time order, ties in produce
order), keeps the run below the high watermark (a pending record not yet committed may still
be truncated away, and what follows it in due order waits with it), reads those pending records
from the log and appends their deliveries as the broker, with acks=all's ISR check. The index
marks a record delivered when it sees its delivery appended, and makes it pending again if a
truncation removes that delivery, so every replica's index agrees with its log and a new leader
delivers exactly what the old one had not. Collecting and appending run without an await in
between, so leadership cannot move in the middle; a failed append puts the records back.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterator, Sequence

from kbroker.clock import WallClock, wall_clock_ms
from kbroker.cluster.partition import Partition
from kbroker.cluster.replica_manager import ReplicaManager
from kbroker.cluster.retry_forwarding import RetryForwarder
from kbroker.delay.pending_batches import batches_fitting, encode_delivery_batch
from kbroker.storage.producer_state import AppendOrigin
from kbroker.tasks import cancel_and_wait
from protocol.errors import KafkaError

log = logging.getLogger("kbroker.delay")

BATCH_LIMIT = 1000  # records taken from a partition's index at a time
RETRY_BACKOFF_MS = 1000  # after a failed delivery append: not a busy loop on a full disk
_RECORD_OVERHEAD = 96  # a record's framing and the kbroker.delayed.from header, generously

PartitionKey = tuple[str, int]


class DelayedDeliveries:
    def __init__(self, replicas: ReplicaManager, *, clock: WallClock = wall_clock_ms,
                 forwarder: RetryForwarder | None = None) -> None:
        self._replicas = replicas
        self._clock = clock
        # Retry topics' partitions are handed to it: their records go to other topics.
        self._forwarder = forwarder
        if forwarder is not None:
            forwarder.on_pass_done = self._wake_now
        self._wake: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None
        self._sleep_until: int | None = None  # the due time the task sleeps until; None: no due record
        self._waiting_for_hw: dict[PartitionKey, int] = {}  # partition -> the high watermark its due records wait past
        self._backoff_until: dict[PartitionKey, int] = {}

    # -- lifecycle ------------------------------------------------------------------------------

    def start(self) -> None:
        self._wake = asyncio.Event()
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        await cancel_and_wait(self._task)
        self._task = None
        if self._forwarder is not None:
            await self._forwarder.stop()

    def wake(self, partition: Partition) -> None:
        """Something changed on `partition` (an append, its high watermark, its leadership):
        wake the task if it may have to deliver sooner than it planned."""
        if self._wake is None or self._wake.is_set():
            return
        key = (partition.topic, partition.index)
        forwarder = self._forwarder
        if forwarder is not None and self._forwards(partition):
            if forwarder.busy(partition):
                return  # the running pass goes on while records are due, and wakes the task when done
            if partition.log.delay_index.unconfirmed_forward_batch() is not None and partition.is_leader \
                    and key not in forwarder.held_until:
                self._wake.set()  # a new leader confirms its predecessor's last forward batch
                return
        waiting_for_hw = self._waiting_for(key)
        if waiting_for_hw is not None:
            if partition.high_watermark > waiting_for_hw:
                self._wake.set()
            return
        due = partition.log.delay_index.next_due()
        if due is not None and (self._sleep_until is None or due < self._sleep_until):
            self._wake.set()

    def _wake_now(self) -> None:
        if self._wake is not None:
            self._wake.set()

    def _waiting_for(self, key: PartitionKey) -> int | None:
        """The high watermark a partition's due records wait past, None if they do not wait."""
        if key in self._waiting_for_hw:
            return self._waiting_for_hw[key]
        return self._forwarder.waiting_for_hw.get(key) if self._forwarder is not None else None

    async def _run(self) -> None:
        assert self._wake is not None
        while True:
            self._wake.clear()
            try:
                earliest = self.deliver_due(self._clock())
            except Exception:  # a bug must not end delayed delivery for the whole broker
                log.exception("delivering delayed records failed")
                earliest = self._clock() + RETRY_BACKOFF_MS
            self._sleep_until = earliest
            timeout = None if earliest is None else max(earliest - self._clock(), 1) / 1000
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout):
                    await self._wake.wait()

    # -- a pass ---------------------------------------------------------------------------------

    def deliver_due(self, now_ms: int) -> int | None:
        """Deliver what is due by `now_ms` on every partition this broker leads; returns when the
        next pass is due (None: nothing is scheduled)."""
        earliest: int | None = None
        for partition in self._leading_with_pending():
            key = (partition.topic, partition.index)
            if self._forwards(partition):
                earliest = _earlier(earliest, self._forward(partition, now_ms))
                continue
            if self._backoff_until.get(key, 0) > now_ms:
                earliest = _earlier(earliest, self._backoff_until[key])
                continue
            self._backoff_until.pop(key, None)
            waited_for = self._waiting_for_hw.get(key)
            if waited_for is not None:
                if partition.high_watermark <= waited_for:
                    continue
                del self._waiting_for_hw[key]
            self._deliver_partition(partition, now_ms)
            if key in self._waiting_for_hw:
                continue
            earliest = _earlier(earliest, self._backoff_until.get(key) or partition.log.delay_index.next_due())
        return earliest

    def _leading_with_pending(self) -> Iterator[Partition]:
        for partition in list(self._replicas.partitions()):
            index = partition.log.delay_index
            if partition.is_leader and (index.pending_count or index.unconfirmed_forward_batch() is not None):
                yield partition

    def _forwards(self, partition: Partition) -> bool:
        """Whether the forwarder has `partition`: a retry topic's, or one with a forward batch
        to confirm (a topic that stopped being a retry topic finishes what it started)."""
        return self._forwarder is not None and (
            partition.log.config.is_retry_topic or partition.log.delay_index.unconfirmed_forward_batch() is not None)

    def _forward(self, partition: Partition, now_ms: int) -> int | None:
        """A retry topic's partition: start a forwarding pass if it has work now; returns when to
        look again (None: its pass, or its high watermark moving, will wake the task)."""
        forwarder = self._forwarder
        assert forwarder is not None
        key = (partition.topic, partition.index)
        if forwarder.busy(partition):
            return None
        held_until = forwarder.held_until.get(key)
        if held_until is not None and held_until > now_ms:
            return held_until
        waited_for = forwarder.waiting_for_hw.get(key)
        if waited_for is not None and partition.high_watermark <= waited_for:
            return None
        index = partition.log.delay_index
        due = index.next_due()
        if index.unconfirmed_forward_batch() is not None or (due is not None and due <= now_ms):
            forwarder.start(partition)
            return None
        return due

    def _deliver_partition(self, partition: Partition, now_ms: int) -> None:
        index = partition.log.delay_index
        key = (partition.topic, partition.index)
        while True:
            due = index.collect_due(now_ms, BATCH_LIMIT)
            if not due:
                return
            high_watermark = partition.high_watermark
            ready = len(due)
            for position, offset in enumerate(due):
                if offset >= high_watermark:
                    ready = position
                    break
            if ready < len(due):
                index.release_in_flight(due[ready:])
                self._waiting_for_hw[key] = high_watermark
            if ready and not self._append_deliveries(partition, due[:ready], now_ms):
                self._backoff_until[key] = now_ms + RETRY_BACKOFF_MS
                return
            if ready < len(due) or len(due) < BATCH_LIMIT:
                return

    def _append_deliveries(self, partition: Partition, offsets: Sequence[int], now_ms: int) -> bool:
        """Append the deliveries of `offsets` (in that order); False, with the records not
        delivered put back, if an append failed."""
        index = partition.log.delay_index
        records = partition.log.pending_records(offsets)
        if len(records) < len(offsets):
            # Left in flight, so never handed out again: retention keeps pending records, so only
            # a damaged segment or a log cut below them (DeleteRecords on an older version) gets here.
            lost = sorted(set(offsets) - {r.offset for r in records})
            log.error("%s: pending delayed records %s are no longer readable; they cannot be delivered",
                      partition.name, lost[:10])
        appended = 0
        try:
            for chunk in batches_fitting(records, partition.log.config.max_message_bytes, _RECORD_OVERHEAD):
                batch = encode_delivery_batch(partition.topic, partition.index, chunk)
                partition.append_as_leader(batch, now_ms, origin=AppendOrigin.COORDINATOR, required_acks=-1)
                appended += len(chunk)
        except (KafkaError, OSError) as e:
            log.warning("%s: delivering %d delayed record(s) failed, retrying: %s", partition.name,
                        len(records) - appended, e)
            index.release_in_flight([r.offset for r in records[appended:]])
            return False
        return True


def _earlier(a: int | None, b: int | None) -> int | None:
    if a is None:
        return b
    if b is None:
        return a
    return min(a, b)
