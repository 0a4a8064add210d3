"""A share group's offsets, as an administrator sees them (KIP-932's DescribeShareGroupOffsets,
AlterShareGroupOffsets and DeleteShareGroupOffsets, Kafka's GroupCoordinatorService): where each
share partition of the group starts, how far behind it is, and resetting or forgetting that.

A share partition's offset is its *start offset*, kept by the share coordinator with the rest
of its state (share_coordinator.py); the group coordinator reads and writes it through the
persister, wherever the share coordinator is:

- Describe reads the state's summary and the partition's end offset: the lag is end offset
  minus start offset minus the records past the start that are already done with (KIP-1226).
  Asked for all its topics, a group answers for the share partitions it has state for (those
  assigned or altered, `ShareGroup.initialized`); a share partition without state answers start
  offset -1.
- Alter initializes the state afresh at the new start offset, with a higher state epoch (so a
  leader still holding the old state is fenced when it next writes), only in an empty group;
  a group that does not exist yet is created, empty.
- Delete removes the state of every partition of the named topics, only in an empty group.

After Alter or Delete, this broker lets go of its own copy of those share partitions (when it
leads them) so the next fetch loads the new state; a leader elsewhere lets go of a share
partition when its last share session ends (an empty group has none) or when the state epoch
fences its next write.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from kbroker.cluster.metadata_cache import MetadataCache
from kbroker.cluster.replica_manager import ReplicaManager
from kbroker.coordinator.share_coordinator import (
    NO_EPOCH,
    UNINITIALIZED_START_OFFSET,
    StateRead,
    StateSummary,
)
from kbroker.coordinator.share_groups import ShareGroupCoordinator
from kbroker.coordinator.share_partitions import SharePartitionManager
from protocol.errors import ErrorCode, KafkaError

UNINITIALIZED_LAG = -1
DEFAULT_LEADER_EPOCH = 0  # what Kafka answers for a partition with no state or a failed read
LIST_OFFSETS, LIST_OFFSETS_VERSION, LATEST = 2, 7, -1


class OffsetsPersister(Protocol):
    """The share coordinator as the group coordinator reaches it (SharePersister)."""

    async def read(self, group_id: str, topic_id: uuid.UUID, partition: int, leader_epoch: int) -> StateRead: ...

    async def initialize(self, group_id: str, topic_id: uuid.UUID, partition: int, state_epoch: int,
                         start_offset: int) -> int: ...

    async def summary(self, group_id: str, topic_id: uuid.UUID, partition: int) -> StateSummary: ...

    async def delete(self, group_id: str, topic_id: uuid.UUID, partition: int) -> int: ...

    async def ask_broker(self, broker_id: int, api_key: int, version: int, body: dict[str, Any]) -> Any: ...


@dataclass(frozen=True)
class PartitionOffset:
    """One share partition's row of DescribeShareGroupOffsets."""

    partition: int
    start_offset: int = UNINITIALIZED_START_OFFSET
    leader_epoch: int = DEFAULT_LEADER_EPOCH
    lag: int = UNINITIALIZED_LAG
    error: int = ErrorCode.NO_ERROR
    error_message: str | None = None


@dataclass(frozen=True)
class TopicOffsets:
    name: str
    topic_id: uuid.UUID
    partitions: list[PartitionOffset]


# (topic, allowed) for a topic an administrator names: the ACL checks stay with the handlers.
TopicAllowed = Callable[[str], bool]


class ShareGroupOffsets:
    def __init__(self, groups: ShareGroupCoordinator, persister: OffsetsPersister,
                 share_partitions: SharePartitionManager, metadata: MetadataCache,
                 replicas: ReplicaManager, local_id: int, clustered: bool) -> None:
        self.groups = groups
        self.persister = persister
        self.share_partitions = share_partitions
        self.metadata = metadata
        self.replicas = replicas
        self.local_id = local_id
        self.clustered = clustered  # leaders may be other brokers (else every partition is here)

    # -- describe ----------------------------------------------------------------------------------

    def initialized_topics(self, group_id: str) -> list[tuple[str, list[int]]]:
        """(topic, partitions) the group has state for, by name: GROUP_ID_NOT_FOUND when there is
        no such share group (Kafka asks the group for its initialized share partitions)."""
        group = self.groups.existing_group(group_id)
        if group is None:
            raise KafkaError(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} not found.")
        by_topic: dict[str, list[int]] = {}
        for topic_id, index in sorted(group.initialized):
            record = self.metadata.topic_by_id(topic_id)
            if record is not None:  # a deleted topic's state is gone with it
                by_topic.setdefault(record.name, []).append(index)
        return sorted(by_topic.items())

    async def describe(self, group_id: str, topics: Sequence[tuple[str, Sequence[int]]]) -> list[TopicOffsets]:
        """The rows of the named topics' partitions; an unknown topic answers start offset -1,
        as Kafka does (absence of data, not an error)."""
        known = [(name, record, list(parts)) for name, parts in topics
                 if (record := self.metadata.topic(name)) is not None]
        summaries = await asyncio.gather(*(self.persister.summary(group_id, record.topic_id, index)
                                           for _, record, parts in known for index in parts))
        ends = await self._end_offsets([(name, index) for name, _, parts in known for index in parts])
        answers: list[TopicOffsets] = []
        it = iter(summaries)
        for name, record, parts in known:
            rows = [self._row(name, index, next(it), ends.get((name, index))) for index in parts]
            answers.append(TopicOffsets(name, record.topic_id, rows))
        answers += [TopicOffsets(name, uuid.UUID(int=0), [PartitionOffset(index) for index in parts])
                    for name, parts in topics if self.metadata.topic(name) is None]
        return answers

    def _row(self, topic: str, index: int, summary: StateSummary, end: int | None) -> PartitionOffset:
        if summary.error != ErrorCode.NO_ERROR or summary.start_offset == UNINITIALIZED_START_OFFSET:
            return PartitionOffset(index)  # Kafka: no data rather than an error
        leader_epoch = summary.leader_epoch
        if leader_epoch == NO_EPOCH:  # read from a remote share coordinator: the partition's own
            state = self.metadata.state_of(topic, index)
            leader_epoch = state.leader_epoch if state is not None else DEFAULT_LEADER_EPOCH
        lag = UNINITIALIZED_LAG if end is None else max(0, end - summary.start_offset - summary.delivered)
        return PartitionOffset(index, summary.start_offset, leader_epoch, lag)

    async def _end_offsets(self, partitions: Sequence[tuple[str, int]]) -> dict[tuple[str, int], int]:
        """The high watermark of each partition (ListOffsets LATEST, read_uncommitted, as Kafka's
        lag uses), asked of its leader; a partition whose leader cannot say is left out."""
        ends: dict[tuple[str, int], int] = {}
        remote: dict[int, list[tuple[str, int]]] = {}
        for topic, index in partitions:
            local = self.replicas.find(topic, index)
            if local is not None and local.is_leader:
                ends[(topic, index)] = local.high_watermark
                continue
            state = self.metadata.state_of(topic, index)
            if self.clustered and state is not None and state.leader >= 0 and state.leader != self.local_id:
                remote.setdefault(state.leader, []).append((topic, index))
        answers = await asyncio.gather(*(self._ask_end_offsets(leader, parts) for leader, parts in remote.items()))
        for answer in answers:
            ends.update(answer)
        return ends

    async def _ask_end_offsets(self, leader: int, partitions: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
        by_topic: dict[str, list[int]] = {}
        for topic, index in partitions:
            by_topic.setdefault(topic, []).append(index)
        body = {"replica_id": -1, "isolation_level": 0, "topics": [
            {"name": topic, "partitions": [{"partition_index": i, "timestamp": LATEST, "current_leader_epoch": -1}
                                           for i in parts]} for topic, parts in by_topic.items()]}
        response = await self.persister.ask_broker(leader, LIST_OFFSETS, LIST_OFFSETS_VERSION, body)
        if response is None:
            return {}
        return {(t.name, p.partition_index): p.offset for t in response.topics for p in t.partitions
                if p.error_code == ErrorCode.NO_ERROR}

    # -- alter -------------------------------------------------------------------------------------

    async def alter(self, group_id: str, offsets: Sequence[tuple[str, int, int]]) -> dict[tuple[str, int], int]:
        """Set the start offsets (topic, partition, offset) of an empty share group: the error
        of each. Raises the group's error (NON_EMPTY_GROUP, GROUP_ID_NOT_FOUND)."""
        group = self.groups.empty_group(group_id)
        results: dict[tuple[str, int], int] = {}
        work = []
        for topic, index, offset in offsets:
            record = self.metadata.topic(topic)
            if record is None or index not in record.assignment:
                results[(topic, index)] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            elif offset < 0:
                results[(topic, index)] = ErrorCode.INVALID_REQUEST
            else:
                work.append((topic, index, record.topic_id, offset))
        codes = await asyncio.gather(*(self._reset(group_id, topic_id, index, offset)
                                       for _, index, topic_id, offset in work))
        for (topic, index, topic_id, _), code in zip(work, codes, strict=True):
            results[(topic, index)] = code
            if code == ErrorCode.NO_ERROR:
                group.initialized.add((topic_id, index))
                self.share_partitions.forget(group_id, topic, index)
        return results

    async def _reset(self, group_id: str, topic_id: uuid.UUID, index: int, offset: int) -> int:
        """A fresh state at `offset` whose state epoch is one above the current one."""
        current = await self.persister.read(group_id, topic_id, index, NO_EPOCH)
        if current.error != ErrorCode.NO_ERROR:
            return current.error
        return await self.persister.initialize(group_id, topic_id, index, current.state_epoch + 1, offset)

    # -- delete ------------------------------------------------------------------------------------

    async def delete(self, group_id: str, topics: Sequence[str]) -> dict[str, int]:
        """Forget the state of every partition of `topics` in an empty share group: the error of
        each topic. Raises the group's error (GROUP_ID_NOT_FOUND, NON_EMPTY_GROUP)."""
        group = self.groups.existing_group(group_id)
        if group is None:
            raise KafkaError(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} not found.")
        if group.members:
            raise KafkaError(ErrorCode.NON_EMPTY_GROUP, f"Share group {group_id} is not empty.")
        results: dict[str, int] = {}
        for topic in topics:
            record = self.metadata.topic(topic)
            if record is None:
                results[topic] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                continue
            indexes = sorted(record.assignment)
            codes = await asyncio.gather(*(self.persister.delete(group_id, record.topic_id, i) for i in indexes))
            failed = [c for c in codes if c != ErrorCode.NO_ERROR]
            results[topic] = failed[0] if failed else ErrorCode.NO_ERROR
            for index, code in zip(indexes, codes, strict=True):
                if code == ErrorCode.NO_ERROR:
                    group.initialized.discard((record.topic_id, index))
                    self.share_partitions.forget(group_id, topic, index)
        return results
