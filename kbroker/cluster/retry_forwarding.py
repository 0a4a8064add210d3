"""Retry topics' mover (docs/delayed-and-retry.md): on the leader of a retry topic's partition,
append its due records to the target topic, or to the dead-letter topic, exactly once.

A pass over a partition (one task at a time per partition, started by the delayed-delivery
scheduler when records are due or a forward batch is unconfirmed):

1. If the partition's newest forward batch is unconfirmed (a leader before this one may have
   died before every target acknowledged it), wait until it is committed and append its target
   batches again: each carries the producer id, epoch and sequence the forward record names,
   so a target that has it answers with the offsets it got the first time.
2. Take the due records below the high watermark (in due order, ties in produce order), decide
   each one's route (target, or dead letters when its attempts are used up or the target topic
   is gone) and target partition, and append one *forward batch* naming all of it (producer id,
   sequences, pending offsets) with acks=all. The delay index marks those records done as it
   sees the batch, as it would a delivery.
3. Once the forward batch is committed, append the target batches (acks=all, idempotent),
   concurrently, each retried until acknowledged or this broker stops leading.
4. Repeat while records are due; then append a done marker, which confirms the last forward
   batch (a forward batch confirms all before it, as it is written only once they are).

Only a committed forward batch is acted on, so what a new leader finds in the log is exactly
what may have reached a target: a forward batch lost with an old leader was never sent on.
The producer id is the broker's own (its producer id block), one per partition and leader epoch,
epoch 0, sequences counted per target partition.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from kbroker.clock import WallClock, wall_clock_ms
from kbroker.cluster.broker_client import BrokerUnavailable
from kbroker.cluster.metadata_cache import MetadataCache
from kbroker.cluster.partition import Partition
from kbroker.cluster.partition_writer import PartitionWriter
from kbroker.cluster.replica_manager import ReplicaManager
from kbroker.delay.forward_batches import ForwardRecord, encode_forward_batch, encode_forward_done_batch
from kbroker.delay.pending_batches import PendingRecord, batches_fitting
from kbroker.delay.retries import Route, attempts_made, forwarded_record, route_of, target_partition
from kbroker.storage.log_config import LogConfig
from kbroker.storage.producer_state import AppendOrigin
from protocol.errors import ErrorCode, KafkaError
from protocol.record_batch import encode_batch

log = logging.getLogger("kbroker.retry")

BATCH_LIMIT = 1000  # due records taken from a partition's index per forward batch
INT32_MAX = (1 << 31) - 1
FIRST_BACKOFF_S = 0.05
RETRY_BACKOFF_MS = 1000  # after a failed append to the retry partition itself
UNROUTABLE_BACKOFF_MS = 5000  # records with no topic to go to: until the configs may have changed
MAX_BACKOFF_S = 5.0
COMMIT_WAIT_S = 5.0  # one wait for the high watermark; repeated while this broker leads
TARGET_BATCH_BYTES = 900_000  # a target batch's records, below Kafka's default max.message.bytes
_RECORD_OVERHEAD = 160  # a forwarded record's framing and the headers the broker adds, generously

PartitionKey = tuple[str, int]
TopicConfig = Callable[[str], "LogConfig | None"]  # a topic's LogConfig, None if it does not exist


class LostLeadership(Exception):
    """This broker no longer leads the retry partition (at the epoch the pass started with)."""


class Step(enum.Enum):
    """What one forward round found."""

    MORE = "more"  # a full batch was forwarded: more may be due
    DONE = "done"  # nothing more is due now
    WAITING = "waiting"  # due records wait for the high watermark


@dataclass(slots=True)
class _Producer:
    """The idempotent producer a partition's leader forwards as, for one leader epoch."""

    leader_epoch: int
    producer_id: int
    sequences: dict[PartitionKey, int] = field(default_factory=dict)


class RetryForwarder:
    def __init__(self, replicas: ReplicaManager, cache: MetadataCache, writer: PartitionWriter,
                 next_producer_id: Callable[[], int], topic_config: TopicConfig, *,
                 clock: WallClock = wall_clock_ms) -> None:
        self._replicas = replicas
        self._cache = cache
        self._writer = writer
        self._next_producer_id = next_producer_id
        self._topic_config = topic_config
        self._clock = clock
        self.on_pass_done: Callable[[], None] | None = None  # the scheduler's wake-up
        self._tasks: dict[PartitionKey, asyncio.Task[None]] = {}
        self._producers: dict[PartitionKey, _Producer] = {}
        # Read by the scheduler: partitions whose due records wait for the high watermark to pass
        # this value, and partitions not to be tried before a time (records with nowhere to go,
        # a failed append).
        self.waiting_for_hw: dict[PartitionKey, int] = {}
        self.held_until: dict[PartitionKey, int] = {}
        self.forwarded = 0  # records acknowledged by their target (tests, metrics)

    def busy(self, partition: Partition) -> bool:
        return (partition.topic, partition.index) in self._tasks

    def start(self, partition: Partition) -> None:
        """Start a pass over `partition` unless one runs."""
        key = (partition.topic, partition.index)
        if key in self._tasks:
            return
        self.waiting_for_hw.pop(key, None)
        self.held_until.pop(key, None)
        task = asyncio.get_running_loop().create_task(self._pass(partition), name=f"retry-forward-{partition.name}")
        self._tasks[key] = task
        task.add_done_callback(lambda _: self._pass_done(key))

    async def stop(self) -> None:
        tasks = list(self._tasks.values())
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks.clear()
        await self._writer.close()

    def _pass_done(self, key: PartitionKey) -> None:
        self._tasks.pop(key, None)
        if self.on_pass_done is not None:
            self.on_pass_done()

    # -- a pass ---------------------------------------------------------------------------------

    async def _pass(self, partition: Partition) -> None:
        epoch = partition.leader_epoch
        index = partition.log.delay_index
        try:
            unconfirmed = index.unconfirmed_forward_batch()
            if unconfirmed is not None:
                forwards = partition.log.forward_batch(unconfirmed)
                await self._committed(partition, epoch, _end_of(forwards, unconfirmed))
                await self._append_targets(partition, epoch, forwards)
            while partition.log.config.is_retry_topic and await self._forward_due(partition, epoch) is Step.MORE:
                pass
            unconfirmed = index.unconfirmed_forward_batch()
            if unconfirmed is not None:
                self._append_done(partition, epoch, unconfirmed)
        except (LostLeadership, asyncio.CancelledError) as e:
            index.release_in_flight()  # what was collected but not in a forward batch is scheduled again
            if isinstance(e, asyncio.CancelledError):
                raise
        except Exception:  # a bug must not leave records in flight for good, nor loop hot
            index.release_in_flight()
            self._hold(partition, RETRY_BACKOFF_MS)
            log.exception("%s: forwarding retry records failed", partition.name)

    async def _forward_due(self, partition: Partition, epoch: int) -> Step:
        """One forward batch of due records, written, committed and acknowledged by its targets."""
        self._require_leader(partition, epoch)
        index = partition.log.delay_index
        high_watermark = partition.high_watermark
        due = index.collect_due(self._clock(), BATCH_LIMIT)
        ready, waiting = _committed_prefix(due, high_watermark)
        if waiting:
            # A pending record not yet committed may be truncated away; what follows it in due
            # order waits with it.
            index.release_in_flight(waiting)
            self.waiting_for_hw[(partition.topic, partition.index)] = high_watermark
        records = partition.log.pending_records(ready)
        if len(records) < len(ready):
            # Left in flight, never handed out again: retention keeps pending records, so only a
            # damaged segment gets here.
            lost = sorted(set(ready) - {r.offset for r in records})
            log.error("%s: pending retry records %s are no longer readable; they cannot be forwarded",
                      partition.name, lost[:10])
        forwards = self._plan(partition, epoch, records)
        if forwards:
            try:
                end = self._append_forward_batch(partition, forwards)
            except (KafkaError, OSError) as e:
                log.warning("%s: appending a forward batch failed, retrying: %s", partition.name, e)
                index.release_in_flight()
                self._hold(partition, RETRY_BACKOFF_MS)
                return Step.DONE
            await self._committed(partition, epoch, end)
            await self._append_targets(partition, epoch, forwards, records)
        if waiting:
            return Step.WAITING
        return Step.MORE if len(due) == BATCH_LIMIT else Step.DONE

    def _plan(self, partition: Partition, epoch: int, records: Sequence[PendingRecord]) -> list[ForwardRecord]:
        """The forward records for `records` (in due order). Records with no topic to go to are
        put back and the partition held for a while."""
        config = partition.log.config
        groups: dict[tuple[Route, str, int], list[PendingRecord]] = defaultdict(list)
        unroutable: list[int] = []
        for record in records:
            destination = self._destination(partition, config, record)
            if destination is None:
                unroutable.append(record.offset)
            else:
                groups[destination].append(record)
        if unroutable:
            log.warning("%s: %d due retry record(s) have no topic to go to (retry.target.topic %r, "
                        "retry.dead.letter.topic %r); they wait", partition.name, len(unroutable),
                        config.retry_target_topic, config.retry_dead_letter_topic)
            partition.log.delay_index.release_in_flight(unroutable)
            self._hold(partition, UNROUTABLE_BACKOFF_MS)
        return self._forward_records(partition, epoch, groups)

    def _forward_records(self, partition: Partition, epoch: int,
                         groups: dict[tuple[Route, str, int], list[PendingRecord]]) -> list[ForwardRecord]:
        """A forward record per target batch: each group's records, in order, in batches that fit
        the target, with this leader's producer id and the next sequences of each target."""
        now = self._clock()
        producer = self._producer(partition, epoch)
        forwards = []
        for (route, topic, target), members in groups.items():
            for chunk in batches_fitting(members, self._max_batch_bytes(topic), _RECORD_OVERHEAD):
                if producer.sequences.get((topic, target), 0) + len(chunk) > INT32_MAX:
                    producer = self._producer(partition, epoch, fresh=True)
                sequence = producer.sequences.get((topic, target), 0)
                producer.sequences[(topic, target)] = sequence + len(chunk)
                forwards.append(ForwardRecord(route, now, producer.producer_id, 0, sequence, topic, target,
                                              tuple(r.offset for r in chunk)))
        return forwards

    def _destination(self, partition: Partition, config: LogConfig, record: PendingRecord
                     ) -> tuple[Route, str, int] | None:
        """(route, topic, partition) for a due record; None when no topic can take it."""
        try:
            route, _ = route_of(record.headers, len(config.retry_backoff_ms))
        except KafkaError:  # checked at produce; a stored header cannot change since
            route = Route.EXHAUSTED
        topic = config.retry_target_topic if route is Route.TARGET else config.retry_dead_letter_topic
        if route is Route.TARGET and self._cache.topic(topic) is None:
            route, topic = Route.NO_TARGET, config.retry_dead_letter_topic
        found = self._cache.topic(topic) if topic else None
        if found is None or not found.assignment:
            return None
        return route, topic, target_partition(record, partition.index, len(found.assignment))

    def _max_batch_bytes(self, topic: str) -> int:
        config = self._topic_config(topic)
        return min(TARGET_BATCH_BYTES, config.max_message_bytes) if config is not None else TARGET_BATCH_BYTES

    def _producer(self, partition: Partition, epoch: int, fresh: bool = False) -> _Producer:
        key = (partition.topic, partition.index)
        producer = self._producers.get(key)
        if producer is None or producer.leader_epoch != epoch or fresh:
            producer = self._producers[key] = _Producer(epoch, self._next_producer_id())
        return producer

    def _hold(self, partition: Partition, ms: int) -> None:
        self.held_until[(partition.topic, partition.index)] = self._clock() + ms

    # -- the retry partition --------------------------------------------------------------------

    def _append_forward_batch(self, partition: Partition, forwards: list[ForwardRecord]) -> int:
        """Append the forward batch; returns its end offset. No await between collecting the
        records and this append, so leadership cannot change in between."""
        info = partition.append_as_leader(encode_forward_batch(forwards), self._clock(),
                                          origin=AppendOrigin.COORDINATOR, required_acks=-1)
        return info.last_offset + 1

    def _append_done(self, partition: Partition, epoch: int, forward_batch: int) -> None:
        try:
            self._require_leader(partition, epoch)
            partition.append_as_leader(encode_forward_done_batch(forward_batch, self._clock()), self._clock(),
                                       origin=AppendOrigin.COORDINATOR)
        except (KafkaError, OSError, LostLeadership) as e:
            # The next pass appends that batch's target batches again, as duplicates, and retries.
            log.info("%s: no done marker for forward batch %d: %s", partition.name, forward_batch, e)
            self._hold(partition, RETRY_BACKOFF_MS)

    async def _committed(self, partition: Partition, epoch: int, end_offset: int) -> None:
        """Wait until the high watermark reaches `end_offset`, as long as this broker leads."""
        while partition.high_watermark < end_offset:
            self._require_leader(partition, epoch)
            code = await partition.wait_for_replication(end_offset, COMMIT_WAIT_S)
            if code != ErrorCode.NO_ERROR and partition.high_watermark < end_offset:
                await asyncio.sleep(FIRST_BACKOFF_S)  # the ISR is too small, or the wait timed out
        self._require_leader(partition, epoch)

    @staticmethod
    def _require_leader(partition: Partition, epoch: int) -> None:
        if not partition.is_leader or partition.leader_epoch != epoch:
            raise LostLeadership(partition.name)

    # -- the targets ----------------------------------------------------------------------------

    async def _append_targets(self, partition: Partition, epoch: int, forwards: Sequence[ForwardRecord],
                              records: Sequence[PendingRecord] | None = None) -> None:
        """Append the target batch of every forward record; returns once each is acknowledged,
        or refused for good by its target and sent on to the dead-letter topic."""
        if not forwards:
            return
        wanted = [o for forward in forwards for o in forward.pending_offsets]
        found = {r.offset: r for r in (records if records is not None else partition.log.pending_records(wanted))}
        missing = [o for o in wanted if o not in found]
        if missing:
            log.error("%s: retry records %s of an unconfirmed forward batch are no longer readable; they are "
                      "not forwarded", partition.name, missing[:10])
        dead_letter_topic = partition.log.config.retry_dead_letter_topic
        refusals = await asyncio.gather(*(self._append_target(partition, epoch, forward, found, dead_letter_topic)
                                          for forward in forwards))
        refused = [(forward, offsets) for forward, offsets in zip(forwards, refusals, strict=True) if offsets]
        if refused:
            await self._reroute(partition, epoch, refused, found, dead_letter_topic)

    async def _reroute(self, partition: Partition, epoch: int, refused: Sequence[tuple[ForwardRecord, set[int]]],
                       found: dict[int, PendingRecord], dead_letter_topic: str) -> None:
        """Target batches refused for good: their refused records go to the dead-letter topic,
        the rest to their target again, in a forward batch of their own (which confirms the one
        refused, as any later forward batch does) and then its target batches."""
        partitions = len(self._cache.require(dead_letter_topic).assignment)
        groups: dict[tuple[Route, str, int], list[PendingRecord]] = defaultdict(list)
        records = []
        for forward, offsets in refused:
            for offset in forward.pending_offsets:
                record = found.get(offset)
                if record is None:
                    continue
                records.append(record)
                if offset in offsets:
                    groups[(Route.REFUSED, dead_letter_topic,
                            target_partition(record, partition.index, partitions))].append(record)
                else:
                    groups[(forward.route, forward.target_topic, forward.target_partition)].append(record)
        # The refused batches' sequences never reached their targets: a new producer id starts afresh.
        self._producer(partition, epoch, fresh=True)
        forwards = self._forward_records(partition, epoch, groups)
        self._require_leader(partition, epoch)
        end = self._append_forward_batch(partition, forwards)
        await self._committed(partition, epoch, end)
        await self._append_targets(partition, epoch, forwards, records)

    async def _append_target(self, partition: Partition, epoch: int, forward: ForwardRecord,
                             found: dict[int, PendingRecord], dead_letter_topic: str) -> set[int]:
        """Append the forward record's target batch: returns once it is acknowledged (an empty
        set), or with the pending offsets its target refused for good when the dead-letter topic
        can take them instead. Otherwise retries while this broker leads."""
        built = _target_batch(partition, forward, found)
        if built is None:
            return set()
        batch, offsets = built
        backoff = FIRST_BACKOFF_S
        while True:
            self._require_leader(partition, epoch)
            try:
                await self._writer.append(forward.target_topic, forward.target_partition, batch)
                self.forwarded += len(offsets)
                return set()
            except KafkaError as e:
                if e.code == ErrorCode.DUPLICATE_SEQUENCE_NUMBER:
                    return set()
                if not _retriable(e.code) and dead_letter_topic and forward.target_topic != dead_letter_topic \
                        and self._cache.topic(dead_letter_topic) is not None:
                    refused = _refused_offsets(e, offsets)
                    log.warning("%s: %s-%d refused %d of %d retry record(s) (%s); they go to %s", partition.name,
                                forward.target_topic, forward.target_partition, len(refused), len(offsets), e,
                                dead_letter_topic)
                    return refused
                level = logging.INFO if _retriable(e.code) else logging.ERROR
                log.log(level, "%s: appending %d retry record(s) to %s-%d failed, retrying: %s", partition.name,
                        len(offsets), forward.target_topic, forward.target_partition, e)
            except BrokerUnavailable as e:
                log.info("%s: appending retry records to %s-%d: %s; retrying", partition.name, forward.target_topic,
                         forward.target_partition, e)
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, MAX_BACKOFF_S)


def _refused_offsets(error: KafkaError, offsets: Sequence[int]) -> set[int]:
    """The pending offsets of the records a target refused: those its record errors name (KIP-467),
    else the whole batch."""
    indexes = [index for index, _ in getattr(error, "record_errors", [])]
    named = {offsets[i] for i in indexes if 0 <= i < len(offsets)}
    return named or set(offsets)


def _target_batch(partition: Partition, forward: ForwardRecord, found: dict[int, PendingRecord]
                  ) -> tuple[bytes, list[int]] | None:
    """The target batch of a forward record and the pending offsets of its records, in order: a
    function of the forward record and its pending records, so a new leader builds the same one.
    A record no longer readable is left out: only the unconfirmed batch is ever built again, and
    its producer id sends nothing after it."""
    records = []
    offsets = []
    for offset in forward.pending_offsets:
        pending = found.get(offset)
        if pending is None:
            continue
        attempt = _attempts_made(pending) + (1 if forward.route is Route.TARGET else 0)
        records.append(forwarded_record(pending, offset_delta=len(records), timestamp=forward.forward_ms,
                                        route=forward.route, attempt=attempt, source_topic=partition.topic,
                                        source_partition=partition.index))
        offsets.append(offset)
    if not records:
        return None
    batch = encode_batch(records, producer_id=forward.producer_id, producer_epoch=forward.producer_epoch,
                         base_sequence=forward.base_sequence)
    return batch, offsets


def _committed_prefix(due: list[int], high_watermark: int) -> tuple[list[int], list[int]]:
    """(the due records before the first one at or above the high watermark, the rest)."""
    for position, offset in enumerate(due):
        if offset >= high_watermark:
            return due[:position], due[position:]
    return due, []


def _attempts_made(record: PendingRecord) -> int:
    try:
        return attempts_made(record.headers)
    except KafkaError:  # stored before its topic was a retry topic, with a header of its own
        return 0


def _end_of(forwards: Sequence[ForwardRecord], base_offset: int) -> int:
    return max((f.offset for f in forwards), default=base_offset) + 1


def _retriable(code: int) -> bool:
    return code in (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                    ErrorCode.LEADER_NOT_AVAILABLE, ErrorCode.NOT_ENOUGH_REPLICAS,
                    ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND, ErrorCode.REQUEST_TIMED_OUT,
                    ErrorCode.KAFKA_STORAGE_ERROR, ErrorCode.FENCED_LEADER_EPOCH, ErrorCode.UNKNOWN_LEADER_EPOCH)
