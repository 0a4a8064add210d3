"""`DelayedClient`: what partition leaders hold for delayed delivery, through DescribeDelayed
(kbroker's own API, key 10000; docs/delayed-and-retry.md), asked of each partition's leader
(`LeaderQueries`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from construct import Container

from kbroker.client.leaders import LeaderQueries, OwnApi

DESCRIBE_DELAYED = OwnApi(10000, 0, "DescribeDelayed")
NO_DUE_TIME = -1


@dataclass(frozen=True)
class DelayedPartition:
    """One partition's delayed records not delivered yet, as its leader counts them."""

    topic: str
    partition: int
    leader: int
    pending_count: int
    pending_bytes: int
    held_count: int  # of transactions not decided yet
    next_due_ms: int | None  # the earliest due time of the scheduled records


class DelayedClient(LeaderQueries):
    def describe_delayed(self, topics: Iterable[str] | None = None) -> list[DelayedPartition]:
        """Every partition of `topics` (of every topic when None), sorted by topic and partition.
        KafkaError for an unknown topic, or a partition that failed for longer than the timeout."""
        return self.ask_leaders(DESCRIBE_DELAYED, self.partitions_of_topics(topics), _delayed)


def _delayed(leader: int, topic: str, p: Container) -> DelayedPartition:
    due = None if p.next_due_ms == NO_DUE_TIME else p.next_due_ms
    return DelayedPartition(topic, p.partition_index, leader, p.pending_count, p.pending_bytes, p.held_count, due)
