"""`__consumer_offsets`: where committed offsets and group metadata live as records.

A group belongs to partition `abs(hash(group id)) % offsets.topic.num.partitions` (Java's
String.hashCode, so a group maps to the partition Kafka would pick). Writes are ordinary
appends to that partition's log; on start every hosted partition is replayed to rebuild the
coordinator's state. The topic is compacted, so the latest record per key is what survives.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from dataclasses import dataclass

from kbroker.cluster.partition import Partition
from kbroker.cluster.replica_manager import ReplicaManager
from kbroker.cluster.topics import TopicManager, TopicSpec
from kbroker.storage.producer_state import AppendOrigin
from protocol import consumer_group_records
from protocol.consumer_group_records import ConsumerGroupRecordKey, ConsumerGroupRecordValue
from protocol.coordinator_records import (
    GroupKey,
    GroupValue,
    OffsetKey,
    OffsetValue,
    decode_group_value,
    decode_key,
    decode_offset_value,
    encode_group_key,
    encode_group_value,
    encode_offset_key,
    encode_offset_value,
)
from protocol.errors import ErrorCode, KafkaError
from protocol.primitives import ProtocolError
from protocol.record_batch import (
    ControlType,
    Record,
    RecordBatch,
    decode_batches,
    decode_control_key,
    encode_batch,
)

log = logging.getLogger("kbroker.coordinator")

TOPIC = "__consumer_offsets"
READ_CHUNK_BYTES = 1 << 20
REPLICATION_TIMEOUT_S = 5.0  # offsets.commit.timeout.ms


def java_string_hash(text: str) -> int:
    """Java's String.hashCode over UTF-16 code units, as a signed 32-bit int."""
    h = 0
    data = text.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for(group_id: str, partitions: int) -> int:
    h = java_string_hash(group_id)
    return (0 if h == -(1 << 31) else abs(h)) % partitions


@dataclass(frozen=True, slots=True)
class Replayed:
    """One record read back from the topic: a key and its value, or None for a tombstone:
    a committed offset, a classic group, or one of a consumer-protocol group's records.

    `producer_id` is set for records written inside a transaction (TxnOffsetCommit): they
    count only once a COMMIT marker of that producer follows."""

    key: OffsetKey | GroupKey | ConsumerGroupRecordKey
    value: OffsetValue | GroupValue | ConsumerGroupRecordValue | None
    producer_id: int | None = None


@dataclass(frozen=True, slots=True)
class Marker:
    """A transaction marker in partition `partition`: the end of `producer_id`'s pending offsets there."""

    producer_id: int
    committed: bool
    partition: int


class InternalTopic:
    """An internal topic whose partitions own keys by Java's string hash: compacted unless
    `configs` says otherwise (they override the defaults; `min.insync.replicas` is capped at the
    replication factor the topic gets)."""

    def __init__(
        self, name: str, topics: TopicManager, replicas: ReplicaManager, partitions: int, replication_factor: int,
        segment_bytes: int, configs: dict[str, str] | None = None,
    ) -> None:
        self.name = name
        self.topics = topics
        self.replicas = replicas
        self.partitions = partitions
        self.replication_factor = replication_factor
        self.segment_bytes = segment_bytes
        self.configs = configs or {}
        self._creating: asyncio.Task[None] | None = None

    def exists(self) -> bool:
        return self.topics.cache.topic(self.name) is not None

    def ensure(self) -> None:
        """Create the topic on first use, as Kafka does when the first client looks for its
        coordinator. In a cluster the creation runs in the background (the store is written off
        the event loop) and the caller gets COORDINATOR_NOT_AVAILABLE meanwhile, which clients
        retry: Kafka's answer while it creates the topic."""
        if self.exists():
            return
        live = len(self.topics.live_brokers())
        factor = self.replication_factor
        if self.topics.cluster is None:
            factor = min(factor, live)  # the embedded single node: one replica, whatever the default says
        elif live < factor:
            # As Kafka: wait for enough brokers rather than create a topic that can never be replicated.
            raise KafkaError(ErrorCode.COORDINATOR_NOT_AVAILABLE,
                             f"{self.name} needs {factor} brokers and {live} are alive")
        configs = {"cleanup.policy": "compact", "segment.bytes": str(self.segment_bytes),
                   "compression.type": "producer", **self.configs}
        if "min.insync.replicas" in configs:
            configs["min.insync.replicas"] = str(min(int(configs["min.insync.replicas"]), factor))
        spec = TopicSpec(self.name, self.partitions, factor, None, configs)
        if self.topics.cluster is None:
            try:
                self.topics.create(spec)
            except KafkaError as e:
                if e.code != ErrorCode.TOPIC_ALREADY_EXISTS:
                    raise
            return
        if self._creating is None or self._creating.done():
            self._creating = asyncio.get_running_loop().create_task(self._create(spec))
        raise KafkaError(ErrorCode.COORDINATOR_NOT_AVAILABLE, f"{self.name} is being created")

    async def _create(self, spec: TopicSpec) -> None:
        try:
            await self.topics.create_paced(spec)
        except KafkaError as e:
            if e.code != ErrorCode.TOPIC_ALREADY_EXISTS:
                log.warning("creating %s failed: %s", self.name, e)
        except Exception:
            log.exception("creating %s failed", self.name)

    def partition_count(self) -> int:
        record = self.topics.cache.topic(self.name)
        return len(record.assignment) if record is not None else self.partitions

    def partition_of(self, key: str) -> int:
        return partition_for(key, self.partition_count())

    def hosted(self, key: str) -> Partition | None:
        """The key's partition if this broker leads it (coordinates the key), else None."""
        partition = self.replicas.find(self.name, self.partition_of(key))
        return partition if partition is not None and partition.is_leader else None

    def write(
        self, key: str, entries: list[tuple[bytes, bytes | None]], now_ms: int, *,
        producer_id: int = -1, producer_epoch: int = -1,
    ) -> None:
        """Append key/value records (None values are tombstones) owned by `key`, as one batch;
        inside `producer_id`'s transaction when given."""
        if not entries:
            return
        partition = self.hosted(key)
        if partition is None:
            raise KafkaError(ErrorCode.NOT_COORDINATOR)
        records = [Record(i, now_ms, k, v) for i, (k, v) in enumerate(entries)]
        transactional = producer_id >= 0
        batch = encode_batch(records, producer_id=producer_id, producer_epoch=producer_epoch,
                             base_sequence=0 if transactional else -1, transactional=transactional)
        partition.append_as_leader(batch, now_ms, origin=AppendOrigin.COORDINATOR)

    async def wait_replicated(self, key: str, timeout_s: float = REPLICATION_TIMEOUT_S) -> int:
        """What acks=all gives a producer, for the coordinator's own writes: an error code once
        everything written to `key`'s partition is on every in-sync replica (immediate on one
        node). Kafka answers a commit that could not be replicated with COORDINATOR_NOT_AVAILABLE."""
        partition = self.hosted(key)
        if partition is None:
            return ErrorCode.NOT_COORDINATOR
        code = await partition.wait_for_replication(partition.log_end_offset, timeout_s)
        if code in (ErrorCode.NOT_ENOUGH_REPLICAS, ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
                    ErrorCode.REQUEST_TIMED_OUT):
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        if code == ErrorCode.NOT_LEADER_OR_FOLLOWER:
            return ErrorCode.NOT_COORDINATOR
        return code

    def has_unreplicated(self, key: str) -> bool:
        """Whether `key`'s partition holds writes not yet on every in-sync replica (an answer
        that depends on them waits for `wait_replicated`, as Kafka's coordinator answers a
        request only once the writes it saw are committed)."""
        partition = self.hosted(key)
        return partition is not None and partition.high_watermark < partition.log_end_offset

    def batches(self, only: int | None = None) -> Iterator[tuple[Partition, RecordBatch]]:
        """Every batch of every partition this broker leads (or of partition `only`), in log order."""
        for partition in self.replicas.partitions_of(self.name):
            if not partition.is_leader or (only is not None and partition.index != only):
                continue
            offset = partition.log_start_offset
            while offset < partition.log_end_offset:
                chunk = partition.read_log(offset, READ_CHUNK_BYTES)
                if chunk is None:
                    break
                decoded = decode_batches(chunk.read_bytes())
                if not decoded:
                    break
                for batch in decoded:
                    if batch.next_offset > offset:
                        yield partition, batch
                offset = decoded[-1].next_offset


class OffsetsTopic(InternalTopic):
    def __init__(
        self, topics: TopicManager, replicas: ReplicaManager, partitions: int, replication_factor: int,
        segment_bytes: int,
    ) -> None:
        super().__init__(TOPIC, topics, replicas, partitions, replication_factor, segment_bytes)

    @staticmethod
    def offset_entry(group_id: str, topic: str, partition: int, value: OffsetValue | None) -> tuple[bytes, bytes | None]:
        key = encode_offset_key(group_id, topic, partition)
        return key, encode_offset_value(value) if value is not None else None

    @staticmethod
    def group_entry(group_id: str, value: GroupValue | None) -> tuple[bytes, bytes | None]:
        return encode_group_key(group_id), encode_group_value(value) if value is not None else None

    def replay(self, only: int | None = None) -> Iterator[Replayed | Marker]:
        """Records and transaction markers of every led partition (or of `only`), in log order."""
        for partition, batch in self.batches(only):
            if batch.is_control:
                marker = _marker(batch, partition.index)
                if marker is not None:
                    yield marker
                continue
            producer_id = batch.producer_id if batch.is_transactional else None
            for record in batch.records:
                replayed = _decode(partition.name, record, producer_id)
                if replayed is not None:
                    yield replayed


def _marker(batch: RecordBatch, partition: int) -> Marker | None:
    try:
        key = decode_control_key(batch.records[0].key) if batch.records else None
    except KafkaError:
        return None
    if key is None or key.type not in (ControlType.ABORT, ControlType.COMMIT):
        return None
    return Marker(batch.producer_id, key.type == ControlType.COMMIT, partition)


def _decode(where: str, record: Record, producer_id: int | None) -> Replayed | None:
    if record.key is None:
        return None
    try:
        if consumer_group_records.is_consumer_group_key(record.key):
            return _decode_consumer_group_record(record, producer_id)
        key = decode_key(record.key)
        if record.value is None:
            return Replayed(key, None, producer_id)
        if isinstance(key, OffsetKey):
            return Replayed(key, decode_offset_value(record.value), producer_id)
        return Replayed(key, decode_group_value(record.value), producer_id)
    except (ProtocolError, ValueError) as e:
        log.warning("skipping an unreadable record at offset %d of %s: %s", record.offset, where, e)
        return None


def _decode_consumer_group_record(record: Record, producer_id: int | None) -> Replayed:
    assert record.key is not None
    key = consumer_group_records.decode_key(record.key)
    if record.value is None:
        return Replayed(key, None, producer_id)
    return Replayed(key, consumer_group_records.decode_value(key.record_type, record.value), producer_id)
