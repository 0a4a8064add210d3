"""`LeaderQueries`: kbroker's own describe APIs (DescribeDelayed, DescribeArchive), asked of each
partition's leader.

Brokers do not advertise these APIs in ApiVersions (Kafka's tools must not see them), so each is
asked for at the version this client knows instead of a negotiated one; a broker that does not
serve it (Kafka's, an older kbroker) closes the connection. Each partition is asked of its leader
from fresh metadata; a partition whose leadership moved meanwhile is asked again after a metadata
refresh, until the client's timeout.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TypeVar

from construct import Container

from kbroker.client.cluster import ClusterClient
from kbroker.client.errors import BrokerUnreachable, check, error_for
from protocol.errors import ErrorCode, KafkaError

# A leader that moved, or a new topic's leader that has not taken its partition yet.
_RETRIABLE = frozenset({ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.LEADER_NOT_AVAILABLE})

TopicPartition = tuple[str, int]
T = TypeVar("T")
# (leader, topic, a partition's answer without error) -> what the caller keeps of it
Parse = Callable[[int, str, Container], T]


@dataclass(frozen=True)
class OwnApi:
    """One of kbroker's own APIs: its key, the version this client speaks, its name for errors."""

    key: int
    version: int
    name: str


class LeaderQueries(ClusterClient):
    def partitions_of_topics(self, topics: Iterable[str] | None) -> list[TopicPartition]:
        """Every partition of `topics` (of every topic when None), sorted; KafkaError for an unknown topic."""
        names = None if topics is None else list(dict.fromkeys(topics))
        meta = self.metadata(names, refresh=True)
        return sorted((t.name, p) for t in (meta.topics.values() if names is None else map(meta.topic, names))
                      for p in t.partitions)

    def ask_leaders(self, api: OwnApi, wanted: Iterable[TopicPartition], parse: Parse[T]) -> list[T]:
        """`api`'s answer for each of `wanted` from its leader, sorted by topic and partition.
        KafkaError for a partition that failed for longer than the timeout, or not retriably."""
        pending = sorted(set(wanted))
        found: dict[TopicPartition, T] = {}
        deadline = time.monotonic() + self.timeout
        backoff = 0.05
        while errors := self._ask_each_leader(api, pending, parse, found):
            if time.monotonic() + backoff > deadline:
                raise next(iter(errors.values()))
            time.sleep(backoff)  # retry backoff, as Kafka clients have: the broker pushes nothing
            backoff = min(backoff * 2, 0.5)
            pending = sorted(errors)
        return [found[tp] for tp in sorted(found)]

    def _ask_each_leader(self, api: OwnApi, wanted: list[TopicPartition], parse: Parse[T],
                         found: dict[TopicPartition, T]) -> dict[TopicPartition, KafkaError]:
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
            for tp, result in self._ask_leader(api, leader, partitions, parse).items():
                if not isinstance(result, KafkaError):
                    found[tp] = result
                elif result.code in _RETRIABLE:
                    errors[tp] = result
                else:
                    raise result
        return errors

    def _ask_leader(self, api: OwnApi, leader: int, partitions: list[TopicPartition], parse: Parse[T]
                    ) -> dict[TopicPartition, T | KafkaError]:
        by_topic: dict[str, list[int]] = {}
        for topic, index in partitions:
            by_topic.setdefault(topic, []).append(index)
        body = {"topics": [{"name": t, "partition_indexes": indexes} for t, indexes in by_topic.items()]}
        conn = self.connection(leader)
        try:
            response = conn.send(api.key, api.version, body)
        except BrokerUnreachable as e:
            raise BrokerUnreachable(f"{e} (a broker that does not serve {api.name}, such as Kafka's, "
                                    "closes the connection when asked)") from None
        check(response.error_code, response.error_message, f"{api.name} on broker {leader}")
        results: dict[TopicPartition, T | KafkaError] = {}
        for topic in response.topics:
            check(topic.error_code, topic.error_message, f"topic {topic.name}")
            for p in topic.partitions:
                results[(topic.name, p.partition_index)] = (
                    error_for(p.error_code, p.error_message, f"{topic.name}-{p.partition_index}")
                    if p.error_code != ErrorCode.NO_ERROR else parse(leader, topic.name, p))
        return results
