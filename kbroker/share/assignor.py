"""The share group's assignor (Kafka's "simple"): which members read which partitions.

Unlike a consumer group's, one partition may go to several members: with more members than
partitions a partition is *shared*, and its records are handed out record by record by the
share partition (kbroker/share/share_partition.py), not by the assignment. The aims, in
Kafka's order:

1. balance: each partition of a topic goes to about the same number of members,
   ceil(subscribers / partitions), and each member gets about as many partitions as any other;
2. stickiness: a member keeps what it had as far as balance allows (nothing is lost by moving a
   share partition, but a member keeps its fetch session and warm reads).

Members may subscribe to different topics; each topic is shared among its own subscribers.
"""

from __future__ import annotations

from collections.abc import Mapping, Set
from typing import TypeVar

Topic = TypeVar("Topic")  # a topic's id (or name): anything hashable and ordered


def assign_share_partitions(
    subscriptions: Mapping[str, Set[Topic]],
    partition_counts: Mapping[Topic, int],
    current: Mapping[str, Set[tuple[Topic, int]]] | None = None,
) -> dict[str, set[tuple[Topic, int]]]:
    """The target assignment: member id -> its (topic, partition)s.

    `subscriptions`: each member's subscribed topics; `partition_counts`: the partitions of every
    topic that exists (topics subscribed to but missing are skipped); `current`: the assignment
    to keep as far as balance allows."""
    current = current or {}
    members = sorted(subscriptions)
    assignment: dict[str, set[tuple[Topic, int]]] = {m: set() for m in members}
    topics = sorted({t for subscribed in subscriptions.values() for t in subscribed if partition_counts.get(t, 0) > 0})
    for topic in topics:
        subscribers = [m for m in members if topic in subscriptions[m]]
        partitions = partition_counts[topic]
        _assign_topic(topic, partitions, subscribers, current, assignment)
    return assignment


def _assign_topic(topic: Topic, partitions: int, subscribers: list[str],
                  current: Mapping[str, Set[tuple[Topic, int]]],
                  assignment: dict[str, set[tuple[Topic, int]]]) -> None:
    sharing = -(-len(subscribers) // partitions)  # members per partition, rounded up
    # Each subscriber's fair number of this topic's partitions: the slots spread evenly.
    slots = sharing * partitions
    quota = {m: slots // len(subscribers) + (1 if i < slots % len(subscribers) else 0)
             for i, m in enumerate(subscribers)}
    holders: dict[int, list[str]] = {p: [] for p in range(partitions)}
    # Keep what members had, while the partition is not over-shared and the member not over quota.
    for member in subscribers:
        for kept_topic, partition in sorted(current.get(member, ())):
            if (kept_topic == topic and partition < partitions and len(holders[partition]) < sharing
                    and _count(assignment[member], topic) < quota[member]):
                holders[partition].append(member)
                assignment[member].add((topic, partition))
    # Fill each partition up to its sharing with the least loaded members still under quota.
    for partition in range(partitions):
        while len(holders[partition]) < sharing:
            candidates = [m for m in subscribers
                          if m not in holders[partition] and _count(assignment[m], topic) < quota[m]]
            if not candidates:
                break
            chosen = min(candidates, key=lambda m: (len(assignment[m]), subscribers.index(m)))
            holders[partition].append(chosen)
            assignment[chosen].add((topic, partition))


def _count(assigned: set[tuple[Topic, int]], topic: Topic) -> int:
    return sum(1 for t, _ in assigned if t == topic)
