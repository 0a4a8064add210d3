"""`ArchiveClient`: the local and archived sizes and offsets of partitions, through
DescribeArchive (kbroker's own API, key 10001; docs/archive.md), asked of each partition's
leader (`LeaderQueries`): the leader's disk holds the local window, and its archiver knows what
the object store holds.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from construct import Container

from kbroker.client.leaders import LeaderQueries, OwnApi, TopicPartition

DESCRIBE_ARCHIVE = OwnApi(10001, 0, "DescribeArchive")


@dataclass(frozen=True)
class ArchivePartition:
    """One partition as its leader describes it: its local window and what is archived (0 bytes,
    0 segments and highest archived offset -1 for a topic that is not tiered)."""

    topic: str
    partition: int
    leader: int
    local_log_start_offset: int
    local_size: int  # bytes of the local segments
    log_start_offset: int  # the partition's: in the archive, for a tiered topic
    archived_size: int  # bytes of the archived segments' records
    archived_segment_count: int
    highest_archived_offset: int  # -1: nothing archived


class ArchiveClient(LeaderQueries):
    def describe_archive(self, topics: Iterable[str] | None = None) -> list[ArchivePartition]:
        """Every partition of `topics` (of every topic when None), sorted by topic and partition.
        KafkaError for an unknown topic, or a partition that failed for longer than the timeout."""
        return self.describe_archive_of(self.partitions_of_topics(topics))

    def describe_archive_of(self, partitions: Iterable[TopicPartition]) -> list[ArchivePartition]:
        """`partitions`, each from its leader, sorted by topic and partition."""
        return self.ask_leaders(DESCRIBE_ARCHIVE, partitions, _archived)


def _archived(leader: int, topic: str, p: Container) -> ArchivePartition:
    return ArchivePartition(topic, p.partition_index, leader, p.local_log_start_offset, p.local_size,
                            p.log_start_offset, p.archived_size, p.archived_segment_count, p.highest_archived_offset)
