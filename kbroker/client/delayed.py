"""`DelayedClient`: what partition leaders hold for delayed delivery, through DescribeDelayed
(kbroker's own API, key 10000; docs/delayed-and-retry.md).

Brokers do not advertise DescribeDelayed in ApiVersions (Kafka's tools must not see it), so it
is asked for at the version this client knows instead of a negotiated one. Each partition is
asked of its leader from fresh metadata; a partition whose leadership moved meanwhile is asked
again after a metadata refresh, until the client's timeout.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass

from construct import Container

from kbroker.client.cluster import ClusterClient
from kbroker.client.errors import BrokerUnreachable, check, error_for
from protocol.errors import ErrorCode, KafkaError

DESCRIBE_DELAYED = 10000
DESCRIBE_DELAYED_VERSION = 0
NO_DUE_TIME = -1
# A leader that moved, or a new topic's leader that has not taken its partition yet.
_RETRIABLE = frozenset({ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.LEADER_NOT_AVAILABLE})

TopicPartition = tuple[str, int]


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


class DelayedClient(ClusterClient):
    def describe_delayed(self, topics: Iterable[str] | None = None) -> list[DelayedPartition]:
        """Every partition of `topics` (of every topic when None), sorted by topic and partition.
        KafkaError for an unknown topic, or a partition that failed for longer than the timeout."""
        names = None if topics is None else list(dict.fromkeys(topics))
        meta = self.metadata(names, refresh=True)
        wanted = sorted((t.name, p) for t in (meta.topics.values() if names is None else map(meta.topic, names))
                        for p in t.partitions)
        found: dict[TopicPartition, DelayedPartition] = {}
        deadline = time.monotonic() + self.timeout
        backoff = 0.05
        while errors := self._ask_leaders(wanted, found):
            if time.monotonic() + backoff > deadline:
                raise next(iter(errors.values()))
            time.sleep(backoff)  # retry backoff, as Kafka clients have: the broker pushes nothing
            backoff = min(backoff * 2, 0.5)
            wanted = sorted(errors)
        return [found[tp] for tp in sorted(found)]

    def _ask_leaders(self, wanted: list[TopicPartition], found: dict[TopicPartition, DelayedPartition]
                     ) -> dict[TopicPartition, KafkaError]:
        """Ask the leader of each of `wanted` (from fresh metadata) and add the answers to `found`.
        Returns the partitions that failed retriably; any other failure is raised."""
        meta = self.metadata(sorted({t for t, _ in wanted}), refresh=True)
        errors: dict[TopicPartition, KafkaError] = {}
        by_leader: dict[int, list[TopicPartition]] = {}
        for topic, index in wanted:
            info = meta.topic(topic).partitions.get(index)
            if info is None or info.leader < 0:
                errors[(topic, index)] = KafkaError(ErrorCode.LEADER_NOT_AVAILABLE, f"{topic}-{index} has no leader")
            else:
                by_leader.setdefault(info.leader, []).append((topic, index))
        for leader, partitions in sorted(by_leader.items()):
            for tp, result in self._ask(leader, partitions).items():
                if isinstance(result, DelayedPartition):
                    found[tp] = result
                elif result.code in _RETRIABLE:
                    errors[tp] = result
                else:
                    raise result
        return errors

    def _ask(self, leader: int, partitions: list[TopicPartition]
             ) -> dict[TopicPartition, DelayedPartition | KafkaError]:
        by_topic: dict[str, list[int]] = {}
        for topic, index in partitions:
            by_topic.setdefault(topic, []).append(index)
        body = {"topics": [{"name": t, "partition_indexes": indexes} for t, indexes in by_topic.items()]}
        conn = self.connection(leader)
        try:
            response = conn.send(DESCRIBE_DELAYED, DESCRIBE_DELAYED_VERSION, body)
        except BrokerUnreachable as e:
            raise BrokerUnreachable(f"{e} (a broker that does not serve DescribeDelayed, such as Kafka's, "
                                    "closes the connection when asked)") from None
        check(response.error_code, response.error_message, f"DescribeDelayed on broker {leader}")
        results: dict[TopicPartition, DelayedPartition | KafkaError] = {}
        for topic in response.topics:
            check(topic.error_code, topic.error_message, f"topic {topic.name}")
            results.update(((topic.name, p.partition_index), _result(leader, topic.name, p)) for p in topic.partitions)
        return results


def _result(leader: int, topic: str, p: Container) -> DelayedPartition | KafkaError:
    if p.error_code != ErrorCode.NO_ERROR:
        return error_for(p.error_code, p.error_message, f"{topic}-{p.partition_index}")
    due = None if p.next_due_ms == NO_DUE_TIME else p.next_due_ms
    return DelayedPartition(topic, p.partition_index, leader, p.pending_count, p.pending_bytes, p.held_count, due)
