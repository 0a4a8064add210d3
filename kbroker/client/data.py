"""`DataClient`: records in and out of partitions, sent to each partition's leader. Produce,
ListOffsets and Fetch."""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from typing import Any

from construct import Container

from kbroker.client.cluster import ClusterClient
from kbroker.client.errors import check
from protocol.primitives import ZERO_UUID

PRODUCE = 0
FETCH = 1
LIST_OFFSETS = 2
EARLIEST = -2  # ListOffsets timestamps: the log start ...
LATEST = -1  # ... and the log end


class DataClient(ClusterClient):
    """Produce to, list offsets of and fetch from partitions, at their leaders."""

    def produce(self, topic: str, partition: int, batch: bytes, acks: int = -1, timeout_ms: int = 30000) -> int:
        """Append one encoded record batch; returns its base offset (-1 with acks=0)."""
        return self.produce_batches(topic, {partition: batch}, acks, timeout_ms).get(partition, -1)

    def produce_batches(self, topic: str, batches: dict[int, bytes], acks: int = -1,
                        timeout_ms: int = 30000) -> dict[int, int]:
        """Append one encoded batch to each partition, one request per leader; base offsets."""
        by_leader: dict[int, list[int]] = {}
        for partition in batches:
            by_leader.setdefault(self.leader(topic, partition), []).append(partition)
        offsets = {}
        for node, partitions in by_leader.items():
            body = {
                "transactional_id": None,
                "acks": acks,
                "timeout_ms": timeout_ms,
                "topic_data": [{"name": topic, "partition_data": [
                    {"index": p, "records": batches[p]} for p in partitions]}],
            }
            conn, version = self._route(PRODUCE, None, node)
            if acks == 0:
                conn.send_only(PRODUCE, version, body)  # the broker sends no response
                continue
            response = conn.send(PRODUCE, version, body)
            for result in response.responses[0].partition_responses:
                check(result.error_code, result.error_message, f"produce to {topic}-{result.index}")
                offsets[result.index] = result.base_offset
        return offsets

    def list_offsets(self, topic: str, partitions: Iterable[int], timestamp: int,
                     isolation_level: int = 0) -> dict[int, int]:
        """Offset for `timestamp` (EARLIEST, LATEST or a time in ms) of each partition."""
        by_leader: dict[int, list[int]] = {}
        for p in partitions:
            by_leader.setdefault(self.leader(topic, p), []).append(p)
        offsets = {}
        for node, parts in by_leader.items():
            body = {
                "replica_id": -1,
                "isolation_level": isolation_level,
                "topics": [{"name": topic, "partitions": [
                    {"partition_index": p, "current_leader_epoch": -1, "timestamp": timestamp}
                    for p in parts]}],
            }
            response = self.request(LIST_OFFSETS, body, node=node)
            for result in response.topics[0].partitions:
                check(result.error_code, context=f"list offsets of {topic}-{result.partition_index}")
                offsets[result.partition_index] = result.offset
        return offsets

    def log_offsets(self, partitions: Iterable[tuple[str, int]], timestamp: int) -> dict[tuple[str, int], int]:
        """Offset for `timestamp` of many partitions of many topics, one ListOffsets per leader;
        partitions without a leader or answering an error are left out (a view, not a check)."""
        by_leader: dict[int, dict[str, list[int]]] = {}
        meta = self.metadata()
        for topic, partition in partitions:
            info = meta.topics.get(topic)
            leader = info.partitions[partition].leader if info and partition in info.partitions else -1
            if leader >= 0:
                by_leader.setdefault(leader, {}).setdefault(topic, []).append(partition)
        offsets: dict[tuple[str, int], int] = {}
        for node, topics in by_leader.items():
            body = {"replica_id": -1, "isolation_level": 0, "topics": [
                {"name": topic, "partitions": [{"partition_index": p, "current_leader_epoch": -1,
                                                "timestamp": timestamp} for p in parts]}
                for topic, parts in topics.items()]}
            for topic in self.request(LIST_OFFSETS, body, node=node).topics:
                offsets.update(((topic.name, p.partition_index), p.offset)
                               for p in topic.partitions if p.error_code == 0)
        return offsets

    def fetch(self, node: int, positions: dict[tuple[str, int], int], *, topic_ids: dict[str, uuid.UUID],
              max_wait_ms: int = 500, max_bytes: int = 52428800, partition_max_bytes: int = 1048576,
              isolation_level: int = 0) -> Container:
        """One Fetch to `node` for the given (topic, partition) → offset; the raw response."""
        topics: dict[str, list[dict[str, Any]]] = {}
        for (topic, partition), offset in positions.items():
            topics.setdefault(topic, []).append({
                "partition": partition,
                "current_leader_epoch": -1,
                "fetch_offset": offset,
                "last_fetched_epoch": -1,
                "log_start_offset": -1,
                "partition_max_bytes": partition_max_bytes,
            })
        body = {
            "replica_id": -1,
            "max_wait_ms": max_wait_ms,
            "min_bytes": 1,
            "max_bytes": max_bytes,
            "isolation_level": isolation_level,
            "session_id": 0,
            "session_epoch": -1,
            # Versions before 13 name the topic, later ones give its id; the schema picks.
            "topics": [{"topic": t, "topic_id": topic_ids.get(t, ZERO_UUID), "partitions": parts}
                       for t, parts in topics.items()],
            "forgotten_topics_data": [],
            "rack_id": "",
        }
        return self.request(FETCH, body, node=node)
