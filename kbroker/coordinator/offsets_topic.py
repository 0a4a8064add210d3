"""`__consumer_offsets`: where committed offsets and group metadata live as records.

A group belongs to partition `abs(hash(group id)) % offsets.topic.num.partitions` (Java's
String.hashCode, so a group maps to the partition Kafka would pick). Writes are ordinary
appends to that partition's log; on start every hosted partition is replayed to rebuild the
coordinator's state. The topic is compacted, so the latest record per key is what survives.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass

from kbroker.cluster.partition import Partition
from kbroker.cluster.replica_manager import ReplicaManager
from kbroker.cluster.topics import TopicManager, TopicSpec
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
from protocol.record_batch import Record, decode_batches, encode_batch

log = logging.getLogger("kbroker.coordinator")

TOPIC = "__consumer_offsets"
READ_CHUNK_BYTES = 1 << 20


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
    """One record read back from the topic: a key and its value, or None for a tombstone."""

    key: OffsetKey | GroupKey
    value: OffsetValue | GroupValue | None


class OffsetsTopic:
    def __init__(
        self, topics: TopicManager, replicas: ReplicaManager, partitions: int, replication_factor: int,
        segment_bytes: int,
    ) -> None:
        self.topics = topics
        self.replicas = replicas
        self.partitions = partitions
        self.replication_factor = replication_factor
        self.segment_bytes = segment_bytes

    def exists(self) -> bool:
        return self.topics.store.get_topic(TOPIC) is not None

    def ensure(self) -> None:
        """Create the topic on first use, as Kafka does when the first group looks for its coordinator."""
        if self.exists():
            return
        factor = min(self.replication_factor, len(self.topics.live_brokers()))
        configs = {"cleanup.policy": "compact", "segment.bytes": str(self.segment_bytes),
                   "compression.type": "producer"}
        try:
            self.topics.create(TopicSpec(TOPIC, self.partitions, factor, None, configs))
        except KafkaError as e:
            if e.code != ErrorCode.TOPIC_ALREADY_EXISTS:
                raise

    def partition_count(self) -> int:
        record = self.topics.store.get_topic(TOPIC)
        return len(record.assignment) if record is not None else self.partitions

    def partition_of(self, group_id: str) -> int:
        return partition_for(group_id, self.partition_count())

    def hosted(self, group_id: str) -> Partition | None:
        return self.replicas.find(TOPIC, self.partition_of(group_id))

    # -- writing ---------------------------------------------------------------------------------

    def write(self, group_id: str, entries: list[tuple[bytes, bytes | None]], now_ms: int) -> None:
        """Append key/value records (None values are tombstones) for one group, as one batch."""
        if not entries:
            return
        partition = self.hosted(group_id)
        if partition is None:
            raise KafkaError(ErrorCode.NOT_COORDINATOR)
        records = [Record(i, now_ms, key, value) for i, (key, value) in enumerate(entries)]
        partition.append_as_leader(encode_batch(records), now_ms)

    @staticmethod
    def offset_entry(group_id: str, topic: str, partition: int, value: OffsetValue | None) -> tuple[bytes, bytes | None]:
        key = encode_offset_key(group_id, topic, partition)
        return key, encode_offset_value(value) if value is not None else None

    @staticmethod
    def group_entry(group_id: str, value: GroupValue | None) -> tuple[bytes, bytes | None]:
        return encode_group_key(group_id), encode_group_value(value) if value is not None else None

    # -- reading back ----------------------------------------------------------------------------

    def replay(self) -> Iterator[Replayed]:
        """Every record of every hosted partition, in log order."""
        for partition in self.replicas.partitions_of(TOPIC):
            yield from self._replay_partition(partition)

    def _replay_partition(self, partition: Partition) -> Iterator[Replayed]:
        log_ = partition.log
        offset = log_.log_start_offset
        while offset < log_.log_end_offset:
            chunk = log_.read(offset, READ_CHUNK_BYTES)
            if chunk is None:
                break
            batches = decode_batches(chunk.read_bytes())
            if not batches:
                break
            for batch in batches:
                if batch.is_control:
                    continue
                for record in batch.records:
                    if record.offset >= offset:
                        replayed = _decode(partition.name, record)
                        if replayed is not None:
                            yield replayed
            offset = batches[-1].next_offset


def _decode(where: str, record: Record) -> Replayed | None:
    if record.key is None:
        return None
    try:
        key = decode_key(record.key)
        if record.value is None:
            return Replayed(key, None)
        if isinstance(key, OffsetKey):
            return Replayed(key, decode_offset_value(record.value))
        return Replayed(key, decode_group_value(record.value))
    except (ProtocolError, ValueError) as e:
        log.warning("skipping an unreadable record at offset %d of %s: %s", record.offset, where, e)
        return None
