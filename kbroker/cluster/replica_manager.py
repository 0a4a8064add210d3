"""The partitions this broker hosts: their roles, appends, reads and waits for data.

As Kafka's ReplicaManager, it owns the data path: `append` (Produce: the appends, transaction
verification and, for acks=all, the wait for the ISR) and `fetch` (Fetch: the read bounds for
consumers and followers, the followers' positions, the long poll), and the other reads of
partition state (ListOffsets, OffsetForLeaderEpoch, DeleteRecords, DescribeProducers,
DescribeLogDirs). Handlers translate between the wire and these calls; they never see a `Log`.

On one node every partition is led here. In a cluster the controller's decisions arrive as
`become_leader` / `become_follower` / `stop_replica`, as Kafka's LeaderAndIsr and StopReplica
do; followers are fed by one `ReplicaFetcher` per leader broker, and the leaders shrink their
ISR on the periodic tick (`replica.lag.time.max.ms`).
"""

from __future__ import annotations

import asyncio
import logging
import shutil
import ssl
import uuid
from collections import defaultdict
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from kbroker.cluster.partition import (
    QUIET,
    ArchiveSummary,
    DelayedSummary,
    FetchIsolation,
    IsrWriter,
    LogReadResult,
    Partition,
    TimestampAndOffset,
)
from kbroker.cluster.replica_fetcher import FetcherConfig, ReplicaFetcher
from kbroker.metrics.stats import BrokerStats
from kbroker.pacing import Pacer
from kbroker.security.sasl_config import SaslCredentials
from kbroker.storage.log import Log
from kbroker.storage.log_config import LogConfig
from kbroker.storage.log_manager import LogManager
from kbroker.storage.log_validator import RecordValidationError
from kbroker.storage.producer_state import AppendOrigin, ProducerView
from kbroker.storage.read_results import BatchBytes
from kbroker.views.view import View
from kbroker.views.view_indexer import ViewIndexer
from kbroker.views.view_reader import ViewReader
from protocol.errors import ErrorCode, KafkaError
from protocol.records import peek_transactional, read_header

if TYPE_CHECKING:  # the archive brings boto3: imported only by a broker that archives
    from kbroker.archive.archiver import Archiver

log = logging.getLogger("kbroker.replication")

EndpointLookup = Callable[[int], "tuple[str, int] | None"]  # broker id -> (host, port) it listens on

# Topics only the broker's own coordinators write (Kafka's Topic.isInternal).
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})
VALID_ACKS = (-1, 0, 1)

# KIP-890's check of a producer's first transactional write to a partition, by its transaction
# coordinator: (transactional id, producer id, producer epoch, topic, partition); raises KafkaError.
VerifyTransaction = Callable[[str | None, int, int, str, int], None]


@dataclass(slots=True)
class AppendResult:
    """One partition's outcome of a produce (Kafka's PartitionResponse)."""

    error: int = ErrorCode.NO_ERROR
    base_offset: int = -1
    log_append_time: int = -1  # -1 for CreateTime
    log_start_offset: int = -1
    message: str | None = None
    record_errors: list[tuple[int, str]] = field(default_factory=list)  # (batch index, message), KIP-467

    @classmethod
    def failed(cls, error: KafkaError) -> AppendResult:
        # record_errors name the refused records of a batch, so a client fails only those.
        record_errors = error.record_errors if isinstance(error, RecordValidationError) else []
        return cls(error.code, message=error.message, record_errors=record_errors)


@dataclass(slots=True)
class Appended:
    """What `append` did: a result per entry, in their order, and what its answer waits for
    (None when nothing does): appends still being written by a log dir's writer thread, then for
    acks=all the ISR. Awaiting it turns the results of writes that failed or could not be
    replicated into errors (KAFKA_STORAGE_ERROR, REQUEST_TIMED_OUT,
    NOT_ENOUGH_REPLICAS_AFTER_APPEND, ...)."""

    results: list[AppendResult]
    replicated: Awaitable[None] | None = None


@dataclass(frozen=True, slots=True)
class FetchParams:
    """A fetch's terms (Kafka's FetchParams)."""

    replica_id: int  # the fetching follower's broker id; -1 for a consumer
    max_wait_ms: int
    min_bytes: int
    max_bytes: int
    read_committed: bool = False

    @property
    def is_follower(self) -> bool:
        return self.replica_id >= 0

    @property
    def isolation(self) -> FetchIsolation:
        """Followers copy the whole log; consumers see only what the ISR has (and, read_committed,
        only decided transactions)."""
        if self.is_follower:
            return FetchIsolation.LOG_END
        return FetchIsolation.TXN_COMMITTED if self.read_committed else FetchIsolation.HIGH_WATERMARK


@dataclass(slots=True)  # not frozen: one per partition of every fetch, and frozen costs 4x to make
class PartitionFetch:
    """One partition of a fetch (Kafka's FetchRequest.PartitionData); `topic` None names a topic
    id this broker does not know (UNKNOWN_TOPIC_ID)."""

    topic: str | None
    index: int
    fetch_offset: int
    max_bytes: int
    current_leader_epoch: int = -1
    view: View | None = None  # a consumer's read of a filtered view: `topic` is the view
    # What the fetcher's session last told it of the partition (-1: nothing, or no session).
    told_high_watermark: int = -1
    told_log_start_offset: int = -1


@dataclass(frozen=True, slots=True)
class ReplicaInfo:
    """A replica in a log dir (DescribeLogDirs)."""

    topic: str
    partition: int
    size: int
    offset_lag: int
    is_future: bool


@dataclass(frozen=True, slots=True)
class LogDirDescription:
    path: Path
    writable: bool  # False: full or failed
    replicas: list[ReplicaInfo]
    total_bytes: int
    usable_bytes: int


class ReplicaManager:
    def __init__(
        self, broker_id: int, log_manager: LogManager, *, endpoint_of: EndpointLookup | None = None,
        isr_writer: IsrWriter | None = None, fetcher_config: FetcherConfig | None = None,
        stats: BrokerStats | None = None,
    ) -> None:
        self.broker_id = broker_id
        self.stats = stats or BrokerStats()  # bytes in and out per topic, ISR changes (kbroker/metrics)
        self.log_manager = log_manager
        self.endpoint_of = endpoint_of  # the leader's address on the inter-broker listener
        self.inter_broker_ssl: ssl.SSLContext | None = None  # TLS when that listener is SSL
        self.inter_broker_sasl: SaslCredentials | None = None  # the login when it is SASL
        self.isr_writer = isr_writer
        self.fetcher_config = fetcher_config or FetcherConfig()
        self._partitions: dict[tuple[str, int], Partition] = {}
        # Delayed delivery's wake-up, handed to every partition (see delayed_delivery.py).
        self.on_delayed: Callable[[Partition], None] | None = None
        self._fetchers: dict[int, ReplicaFetcher] = {}
        # Filtered views by name (the metadata cache's, set by the broker): read-only topics
        # served from their source's partitions.
        self.views: Mapping[str, View] = {}
        self.view_reader = ViewReader()
        # Verdicts of sources' new batches, learnt as they are appended (kbroker/views/view_indexer.py).
        self.view_indexer = ViewIndexer(self.view_reader.verdicts, self._views_of)
        self.archive: Archiver | None = None  # tiered storage (remote.log.storage.system.enable)

    def host(
        self,
        topic: str,
        index: int,
        topic_id: uuid.UUID,
        config: LogConfig,
        replicas: list[int],
        leader_epoch: int = 0,
    ) -> Partition:
        """Open (or create) the log of a partition this broker leads."""
        key = (topic, index)
        partition = self._partitions.get(key)
        if partition is None:
            log = self.log_manager.get_or_create_log(topic, index, config)
            # A single replica's whole log is committed: the HW is the log end.
            log.high_watermark = log.log_end_offset
            # As a new leader does in Kafka: its epoch starts at the log end, so OffsetForLeaderEpoch
            # answers for the current epoch even before anything is written in it.
            log.epochs.assign(leader_epoch, log.log_end_offset)
            partition = Partition(topic, index, topic_id, log, self.broker_id, leader_epoch, replicas, list(replicas),
                                  on_delayed=self.on_delayed, stats=self.stats)
            self._partitions[key] = partition
        return partition

    # -- roles (what the controller decides) --------------------------------------------------

    def _open(self, topic: str, index: int, topic_id: uuid.UUID, config: LogConfig, leader_id: int) -> Partition:
        key = (topic, index)
        partition = self._partitions.get(key)
        if partition is None:
            log_ = self.log_manager.get_or_create_log(topic, index, config)
            partition = Partition(topic, index, topic_id, log_, leader_id, -1, local_id=self.broker_id,
                                  isr_writer=self.isr_writer, on_delayed=self.on_delayed, stats=self.stats)
            self._partitions[key] = partition
        return partition

    def become_leader(
        self, topic: str, index: int, topic_id: uuid.UUID, config: LogConfig, leader_epoch: int,
        replicas: list[int], isr: list[int], now_ms: int,
    ) -> Partition:
        partition = self._open(topic, index, topic_id, config, self.broker_id)
        self._stop_fetching(partition)
        if partition.is_leader and partition.leader_epoch == leader_epoch:
            partition.update_membership(replicas, isr, now_ms)  # ISR or replica changes only
            return partition
        partition.make_leader(leader_epoch, replicas, isr, now_ms)
        return partition

    def become_follower(
        self, topic: str, index: int, topic_id: uuid.UUID, config: LogConfig, leader_id: int, leader_epoch: int,
        replicas: list[int], isr: list[int],
    ) -> Partition:
        partition = self._open(topic, index, topic_id, config, leader_id)
        if not partition.is_leader and partition.leader_id == leader_id and partition.leader_epoch == leader_epoch:
            partition.replicas, partition.isr = list(replicas), list(isr)
            return partition
        self._stop_fetching(partition)
        partition.make_follower(leader_id, leader_epoch, replicas, isr)
        if leader_id >= 0:
            self._fetcher_for(leader_id).add(partition)
        return partition

    def stop_replica(self, topic: str, index: int, delete: bool) -> None:
        partition = self._partitions.pop((topic, index), None)
        if partition is None:
            return
        self._stop_fetching(partition)
        partition.make_follower(-1, partition.leader_epoch, partition.replicas, partition.isr)
        if delete:
            self.log_manager.delete_log(topic, index)

    def _fetcher_for(self, leader_id: int) -> ReplicaFetcher:
        fetcher = self._fetchers.get(leader_id)
        if fetcher is None:
            endpoint = self.endpoint_of(leader_id) if self.endpoint_of is not None else None
            if endpoint is None:
                raise KafkaError(ErrorCode.BROKER_NOT_AVAILABLE, f"no address for broker {leader_id}")
            fetcher = ReplicaFetcher(self.broker_id, leader_id, *endpoint, self.fetcher_config, self.inter_broker_ssl,
                                     self.inter_broker_sasl, archive=lambda: self.archive)
            self._fetchers[leader_id] = fetcher
        return fetcher

    def _stop_fetching(self, partition: Partition) -> None:
        for fetcher in self._fetchers.values():
            fetcher.remove(partition.topic, partition.index)

    def shrink_isrs(self, now_ms: int, max_lag_ms: int) -> None:
        """Leaders drop followers that have not caught up within `replica.lag.time.max.ms`."""
        for partition in list(self._partitions.values()):
            for replica in partition.shrink_isr(now_ms, max_lag_ms):
                log.info("%s: broker %d fell behind; leaving the ISR %s", partition.name, replica, partition.isr)

    async def stop(self) -> None:
        await self.view_indexer.stop()
        for fetcher in self._fetchers.values():
            await fetcher.stop()
        self._fetchers.clear()

    # -- lookups --------------------------------------------------------------------------------

    def get(self, topic: str, index: int) -> Partition:
        partition = self._partitions.get((topic, index))
        if partition is None:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        return partition

    def find(self, topic: str, index: int) -> Partition | None:
        return self._partitions.get((topic, index))

    def partitions(self) -> Iterable[Partition]:
        return self._partitions.values()

    def partitions_of(self, topic: str) -> list[Partition]:
        return sorted((p for p in self._partitions.values() if p.topic == topic), key=lambda p: p.index)

    def remove_topic(self, topic: str) -> None:
        for _ in self.remove_topic_steps(topic):
            pass

    def remove_topic_steps(self, topic: str) -> Iterator[None]:
        """Remove a topic's partitions one at a time (a step each)."""
        partitions = self.partitions_of(topic)
        if self.archive is not None and any(p.log.tiered for p in partitions):
            self.archive.forget_topic(topic, partitions[0].topic_id)  # its archive goes too
        for partition in partitions:
            del self._partitions[(topic, partition.index)]
            # A follower stops fetching it here: this broker's own DeleteTopics comes before the
            # ZooKeeper watch, which then finds nothing to stop, and a fetcher still asking for a
            # deleted partition gets UNKNOWN_TOPIC_OR_PARTITION from the leader on every round.
            self._stop_fetching(partition)
            partition.wake_waiters()
            self.log_manager.delete_log(topic, partition.index)
            yield
        self.stats.forget_topic(topic)
        self.view_reader.forget(topic)
        self.view_indexer.forget(topic)

    def update_config(self, topic: str, config: LogConfig) -> None:
        self.log_manager.update_config(topic, config)

    # -- produce ----------------------------------------------------------------------------------

    async def append(
        self, entries: Sequence[tuple[str, int, bytes]], required_acks: int, timeout_ms: int, now_ms: int, *,
        transactional_id: str | None = None, verify_transaction: VerifyTransaction | None = None,
        origin: AppendOrigin = AppendOrigin.CLIENT, internal_topics_allowed: bool = False,
        pacer: Pacer | None = None, in_place: bool = False,
    ) -> Appended:
        """Append each entry's record batches (opaque bytes, written as they are) to the partition
        it names, as leader (Kafka's appendRecords). `verify_transaction`, if given, checks a
        producer's first transactional batch on a partition with its coordinator. With
        `in_place`, writable batches are the caller's to give: offsets are assigned in them
        rather than in a copy (a produce request's frame)."""
        if required_acks not in VALID_ACKS:
            return Appended([AppendResult.failed(KafkaError(ErrorCode.INVALID_REQUIRED_ACKS)) for _ in entries])
        pacer = pacer or Pacer()
        results: list[AppendResult] = []
        writes: list[tuple[AppendResult, asyncio.Future[None]]] = []  # being written by a writer thread
        waits: list[tuple[AppendResult, Partition, int]] = []  # acks=all: result, partition, end offset
        for topic, index, records in entries:
            await pacer.tick()
            try:
                if topic in INTERNAL_TOPICS and not internal_topics_allowed:
                    raise KafkaError(ErrorCode.INVALID_TOPIC, f"Cannot append to internal topic {topic}")
                if topic in self.views:
                    raise KafkaError(ErrorCode.INVALID_TOPIC, f"Cannot append to {topic}: it is a view of "
                                     f"{self.views[topic].source}, and views are read-only")
                partition = self.get(topic, index)
                if partition.log.writing:  # the previous append to it is published first
                    await partition.log.wait_idle()
                    partition = self.get(topic, index)
                if verify_transaction is not None:
                    _verify_transaction(partition, records, transactional_id, verify_transaction)
                # acks=0 has no answer to hold back: written on the loop, as it comes.
                info, written = partition.start_append_as_leader(records, now_ms, origin=origin,
                                                                 required_acks=required_acks,
                                                                 behind=required_acks != 0, in_place=in_place)
            except KafkaError as e:
                results.append(AppendResult.failed(e))
                continue
            result = AppendResult(ErrorCode.NO_ERROR, info.first_offset, info.log_append_time, info.log_start_offset)
            results.append(result)
            if not info.duplicate:  # a retried batch already in the log brought nothing in
                counted = self.stats.topic(topic)
                counted.bytes_in += len(records)
                counted.messages_in += info.record_count
                if self.views and any(view.source == topic for view in self.views.values()):
                    self.view_indexer.appended(partition, info.first_offset, len(records))
            if written is not None:
                writes.append((result, written))
            end = info.last_offset + 1
            # On one node (or when the ISR is the leader alone) the HW is already past: no waiting.
            if required_acks == -1 and (written is not None or partition.high_watermark < end):
                waits.append((result, partition, end))
        if not writes and not waits:
            return Appended(results)
        return Appended(results, _when_done(writes, waits, timeout_ms / 1000))

    # -- fetch ------------------------------------------------------------------------------------

    async def fetch(self, params: FetchParams, partitions: Sequence[PartitionFetch], now_ms: int,
                    pacer: Pacer | None = None) -> list[LogReadResult]:
        """Read `partitions` (Kafka's fetchMessages), long-polling until `min_bytes` are readable,
        a partition fails, or `max_wait_ms` passes; a result per partition, in their order. A
        follower's fetch offsets first update its position on the leader (ISR and HW)."""
        pacer = pacer or Pacer()
        hosted: list[Partition | None] = []  # by position; consumers' are looked up by the first read
        refused: dict[int, KafkaError] = {}
        if params.is_follower:
            hosted = await self._hosted(partitions, pacer)
            refused = self._record_follower_fetches(params.replica_id, partitions, hosted, now_ms)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + params.max_wait_ms / 1000
        while True:
            results, total, errors = await self._read_from_log(params, partitions, hosted, refused, pacer)
            remaining = deadline - loop.time()
            # Nothing readable (no partitions, or only unknown ones) answers at once, as in
            # Kafka: e.g. the Java consumer's close sends an empty fetch to end its session.
            if total >= params.min_bytes or errors or remaining <= 0 or not partitions:
                if total:
                    self._count_bytes_out(params, partitions, results)
                return results
            await self.wait_for_data((p for p in hosted if p is not None), remaining)

    def _count_bytes_out(self, params: FetchParams, partitions: Sequence[PartitionFetch],
                         results: list[LogReadResult]) -> None:
        """What a fetch answers with, per topic: every record read goes into the answer (a
        fetch session leaves out only partitions without news)."""
        follower = params.is_follower
        for wanted, result in zip(partitions, results, strict=True):
            if result.records is not None and wanted.topic is not None:
                counted = self.stats.topic(wanted.topic)
                if follower:
                    counted.replication_bytes_out += result.records.size
                else:
                    counted.bytes_out += result.records.size

    def _lookup(self, wanted: PartitionFetch) -> Partition | None:
        if wanted.view is not None:
            return self._partitions.get((wanted.view.source, wanted.index))
        return None if wanted.topic is None else self._partitions.get((wanted.topic, wanted.index))

    async def _hosted(self, partitions: Sequence[PartitionFetch], pacer: Pacer) -> list[Partition | None]:
        hosted = []
        for wanted in partitions:
            if pacer.due():
                await pacer.pause()
            hosted.append(self._lookup(wanted))
        return hosted

    @staticmethod
    def _record_follower_fetches(replica_id: int, partitions: Sequence[PartitionFetch],
                                 hosted: list[Partition | None], now_ms: int) -> dict[int, KafkaError]:
        """A follower's fetch offsets say what it holds: the leader's ISR and HW follow from them.
        Returns why the follower may not read some partitions at all, by position."""
        refused: dict[int, KafkaError] = {}
        for position, (wanted, partition) in enumerate(zip(partitions, hosted, strict=True)):
            if partition is None or not partition.is_leader or partition.record_quiet_follower_fetch(
                    replica_id, wanted.fetch_offset, wanted.current_leader_epoch, wanted.told_high_watermark,
                    wanted.told_log_start_offset, now_ms):
                continue
            try:
                partition.record_follower_fetch(replica_id, wanted.fetch_offset, now_ms)
            except KafkaError as e:
                refused[position] = e
        return refused

    async def _read_from_log(self, params: FetchParams, partitions: Sequence[PartitionFetch],
                             hosted: list[Partition | None], refused: dict[int, KafkaError],
                             pacer: Pacer) -> tuple[list[LogReadResult], int, bool]:
        """One read of every partition within `max_bytes` (Kafka's readFromLog): the results, the
        record bytes read and whether any partition failed. An empty `hosted` is filled in."""
        isolation = params.isolation
        look_up = not hosted
        follower = params.replica_id if params.is_follower else None
        results: list[LogReadResult] = []
        total = 0
        errors = False
        for position, wanted in enumerate(partitions):
            if pacer.due():
                await pacer.pause()
            if look_up:
                hosted.append(self._lookup(wanted))
            partition = hosted[position]
            if partition is None:
                code = ErrorCode.UNKNOWN_TOPIC_ID if wanted.topic is None else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                results.append(LogReadResult(code, hosted=False))
                errors = True
                continue
            if follower is not None and partition.is_quiet_for(
                    follower, wanted.fetch_offset, wanted.current_leader_epoch, wanted.told_high_watermark,
                    wanted.told_log_start_offset):
                results.append(QUIET)
                continue
            if refused and position in refused:
                result = partition.empty_read(isolation)
                result.error = refused[position].code
            else:
                budget = min(wanted.max_bytes, max(params.max_bytes - total, 0))
                # The first partition with data returns a whole batch even over the limits, so a
                # fetcher always makes progress.
                if wanted.view is None:
                    result = partition.read_records(wanted.fetch_offset, budget, wanted.current_leader_epoch,
                                                    isolation, total == 0)
                    if result.error == ErrorCode.OFFSET_MOVED_TO_TIERED_STORAGE and \
                            isolation is not FetchIsolation.LOG_END:
                        # A follower behind the local log start is told so (as Kafka).
                        result = await self._read_archived(partition, result, wanted.fetch_offset, budget, isolation)
                else:
                    result = await self._read_view(partition, wanted, budget, isolation, total == 0, pacer)
            results.append(result)
            if result.error:
                errors = True
            if result.records is not None:
                total += result.records.size
        return results, total, errors

    async def _read_view(self, partition: Partition, wanted: PartitionFetch, budget: int, isolation: FetchIsolation,
                         first: bool, pacer: Pacer) -> LogReadResult:
        """A consumer's read of a filtered view, from its source `partition`."""
        def read_at(offset: int) -> LogReadResult:
            return partition.read_records(offset, budget, wanted.current_leader_epoch, isolation, first)

        assert wanted.view is not None
        result = await self.view_reader.read(wanted.view, wanted.index, wanted.fetch_offset, read_at, pacer)
        assert isinstance(result, LogReadResult)
        return result

    async def _read_archived(self, partition: Partition, result: LogReadResult, offset: int, budget: int,
                             isolation: FetchIsolation) -> LogReadResult:
        """A consumer's read below the local log start, from the archive (its errors: see
        `Archiver.read`)."""
        if self.archive is None:
            return result
        try:
            read = await self.archive.read(partition, offset, budget, isolation is FetchIsolation.TXN_COMMITTED)
        except KafkaError as e:
            result.error = e.code
            return result
        result.error = ErrorCode.NO_ERROR
        result.records = BatchBytes(read.data, read.first_offset) if read.data else None
        if isolation is FetchIsolation.TXN_COMMITTED:
            result.aborted_transactions = read.aborted
        return result

    # -- other reads and writes of partition state -------------------------------------------------

    async def list_offset(self, topic: str, index: int, timestamp: int, current_leader_epoch: int,
                          committed: bool) -> TimestampAndOffset:
        """ListOffsets (Kafka's fetchOffsetForTimestamp); a view answers with its source's
        offsets. By time, a tiered partition's archive is searched first, as Kafka does: its
        records are older than the local log's."""
        partition = self._readable(topic, index)
        if timestamp >= 0 and self.archive is not None and partition.log.tiered:
            partition.require_leader()
            partition.check_leader_epoch(current_leader_epoch)
            found = await self.archive.offset_for_timestamp(partition, timestamp)
            if found is not None:  # archived: below the last stable offset, visible to all
                return TimestampAndOffset(*found)
        return partition.fetch_offset_for_timestamp(timestamp, current_leader_epoch, committed)

    def last_offset_for_leader_epoch(self, topic: str, index: int, current_leader_epoch: int,
                                     leader_epoch: int) -> tuple[int, int]:
        """OffsetForLeaderEpoch: the largest epoch <= `leader_epoch` the leader knows, and its end offset."""
        partition = self._readable(topic, index)
        partition.require_leader()
        partition.check_leader_epoch(current_leader_epoch)
        return partition.end_offset_for_epoch(leader_epoch)

    def delete_records(self, topic: str, index: int, before_offset: int) -> int:
        """DeleteRecords: the partition's new log start offset (its low watermark)."""
        if topic in self.views:
            raise KafkaError(ErrorCode.INVALID_TOPIC, f"{topic} is a view: delete records of its source "
                             f"{self.views[topic].source}")
        return self.get(topic, index).delete_records(before_offset)

    def _views_of(self, topic: str) -> list[View]:
        """The views of a source topic."""
        return [view for view in self.views.values() if view.source == topic]

    def _readable(self, topic: str, index: int) -> Partition:
        """The partition a read of `topic` reads: a view's source's."""
        view = self.views.get(topic)
        return self.get(view.source if view is not None else topic, index)

    def active_producers(self, topic: str, index: int) -> list[ProducerView]:
        """DescribeProducers: the idempotent and transactional producers a partition knows."""
        return self.get(topic, index).active_producers()

    def delayed_summary(self, topic: str, index: int) -> DelayedSummary:
        """DescribeDelayed: a partition's pending delayed records, from its leader. The caller
        has checked that the partition exists: one not hosted here is another broker's."""
        partition = self.find(topic, index)
        if partition is None:
            raise KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER, f"{topic}-{index} is not hosted on this broker")
        return partition.delayed_summary()

    async def archive_summary(self, topic: str, index: int) -> ArchiveSummary:
        """DescribeArchive: a partition's local and archived sizes and offsets, from its leader.
        The caller has checked that the partition exists: one not hosted here is another broker's."""
        partition = self.find(topic, index)
        if partition is None:
            raise KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER, f"{topic}-{index} is not hosted on this broker")
        partition.require_leader()
        # None before the archiver starts (the listeners open after it), or for a topic not tiered.
        archive = self.archive if partition.log.tiered else None
        remote = await archive.remote_log(partition) if archive is not None else None
        return partition.archive_summary(remote)  # asks again: leadership may have moved meanwhile

    def describe_log_dirs(self, wanted: set[tuple[str, int]] | None) -> list[LogDirDescription]:
        """DescribeLogDirs (Kafka's describeLogDirs): every log dir with the replicas it holds
        (all, or those in `wanted`), future replicas of moves between dirs included."""
        manager = self.log_manager
        by_dir: dict[Path, list[Log]] = defaultdict(list)
        for log_ in [*manager.logs(), *manager.future_logs.values()]:
            if wanted is None or (log_.topic, log_.partition) in wanted:
                by_dir[log_.directory.parent].append(log_)
        descriptions = []
        for directory in manager.log_dirs:
            usage = shutil.disk_usage(directory)
            replicas = [ReplicaInfo(log_.topic, log_.partition, log_.size_in_bytes, self._offset_lag(log_),
                                    log_.is_future)
                        for log_ in sorted(by_dir[directory], key=lambda log_: (log_.topic, log_.partition))]
            descriptions.append(LogDirDescription(directory, manager.health[directory].writable, replicas,
                                                  usage.total, usage.free))
        return descriptions

    def _offset_lag(self, log_: Log) -> int:
        """Kafka's getLogEndOffsetLag: a future replica's distance to the current one's log end; a
        current replica's to the high watermark (0 for a leader); -1 when there is nothing to compare."""
        current = self.log_manager.get_log(log_.topic, log_.partition)
        if current is None:
            return -1
        if log_.is_future:
            return current.log_end_offset - log_.log_end_offset
        return max(current.high_watermark - log_.log_end_offset, 0)

    async def wait_for_data(self, partitions: Iterable[Partition], timeout_s: float) -> None:
        """Return when any of `partitions` gets new data, or after `timeout_s`."""
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        watched = list(partitions)
        for partition in watched:
            partition.add_waiter(waiter)
        try:
            await asyncio.wait_for(waiter, timeout_s)
        except TimeoutError:
            pass
        finally:
            for partition in watched:
                partition.remove_waiter(waiter)


def _verify_transaction(partition: Partition, records: bytes, transactional_id: str | None,
                        verify: VerifyTransaction) -> None:
    """The first transactional batch of a producer on a partition must belong to its coordinator's
    transaction (KIP-890 part 1): later ones are in a transaction the partition already knows."""
    if not peek_transactional(records):
        return
    header = read_header(records)
    if partition.has_open_transaction(header.producer_id):
        return
    verify(transactional_id, header.producer_id, header.producer_epoch, partition.topic, partition.index)


async def _when_done(writes: list[tuple[AppendResult, asyncio.Future[None]]],
                     waits: list[tuple[AppendResult, Partition, int]], timeout_s: float) -> None:
    """Once every append's bytes are written and published (a failed write becomes its result's
    error), then for acks=all once replicated."""
    if writes:
        await asyncio.wait([written for _, written in writes])
        for result, written in writes:
            error = written.exception()
            if error is not None:
                result.error = error.code if isinstance(error, KafkaError) else ErrorCode.UNKNOWN_SERVER_ERROR
                result.message = str(error)
                result.base_offset = result.log_append_time = result.log_start_offset = -1
        waits = [wait for wait in waits if wait[0].error == ErrorCode.NO_ERROR]  # a failed write waits no more
    if waits:
        await _when_replicated(waits, timeout_s)


async def _when_replicated(waits: list[tuple[AppendResult, Partition, int]], timeout_s: float) -> None:
    """acks=all: done once every ISR member has the data (the HW passed it), as Kafka's delayed
    produce; a write that could not be replicated becomes its result's error."""
    if len(waits) == 1:  # the usual produce: no task to run one wait beside nothing
        _, partition, end = waits[0]
        codes = [await partition.wait_for_replication(end, timeout_s)]
    else:
        codes = await asyncio.gather(*(partition.wait_for_replication(end, timeout_s) for _, partition, end in waits))
    for (result, _, _), code in zip(waits, codes, strict=True):
        if code != ErrorCode.NO_ERROR:
            result.error = code
            result.base_offset = result.log_append_time = result.log_start_offset = -1
