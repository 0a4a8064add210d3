"""`ShareOffsetsClient`: a share group's offsets as an admin handles them (KIP-932), through the
group's coordinator: DescribeShareGroupOffsets (start offset, leader epoch, lag), and
AlterShareGroupOffsets / DeleteShareGroupOffsets of an empty group."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from kbroker.client.coordinators import CoordinatorClient, raise_retriable
from kbroker.client.errors import check

DESCRIBE_SHARE_GROUP_OFFSETS = 90
ALTER_SHARE_GROUP_OFFSETS = 91
DELETE_SHARE_GROUP_OFFSETS = 92


@dataclass(frozen=True)
class SharePartitionOffset:
    """A share partition's offset info: None where the broker has none (no state, no lag)."""

    topic: str
    partition: int
    start_offset: int | None
    leader_epoch: int | None
    lag: int | None


class ShareOffsetsClient(CoordinatorClient):
    def share_group_offsets(self, group_id: str, partitions: Iterable[tuple[str, int]] | None = None
                            ) -> list[SharePartitionOffset]:
        """The offsets of `partitions` (every one the group has state for when None), sorted;
        KafkaError for the group's error (GROUP_ID_NOT_FOUND, ...) or a partition's."""
        wanted = None if partitions is None else list(partitions)
        return self._retry_coordinator(lambda: self._share_group_offsets(group_id, wanted))

    def _share_group_offsets(self, group_id: str, partitions: list[tuple[str, int]] | None
                             ) -> list[SharePartitionOffset]:
        node = self._find_coordinator(group_id).node_id
        topics = None if partitions is None else [{"topic_name": t, "partitions": parts}
                                                  for t, parts in _by_topic(partitions).items()]
        body = {"groups": [{"group_id": group_id, "topics": topics}]}
        result = self.request(DESCRIBE_SHARE_GROUP_OFFSETS, body, node=node).groups[0]
        raise_retriable([result.error_code])
        check(result.error_code, result.error_message, f"offsets of share group {group_id}")
        offsets = []
        for topic in result.topics:
            for p in topic.partitions:
                check(p.error_code, p.error_message, f"offset of {topic.topic_name}-{p.partition_index}")
                known = p.start_offset >= 0  # -1: the group has no state there (as Kafka's admin reads it)
                offsets.append(SharePartitionOffset(
                    topic.topic_name, p.partition_index, p.start_offset if known else None,
                    p.leader_epoch if known and p.leader_epoch >= 0 else None,
                    p.lag if known and p.lag >= 0 else None))
        return sorted(offsets, key=lambda o: (o.topic, o.partition))

    def alter_share_group_offsets(self, group_id: str, offsets: dict[tuple[str, int], int]
                                  ) -> dict[tuple[str, int], int]:
        """Set an empty share group's start offsets: each partition's error code; KafkaError for
        the group's (NON_EMPTY_GROUP, GROUP_ID_NOT_FOUND, ...)."""
        return self._retry_coordinator(lambda: self._alter_share_group_offsets(group_id, offsets))

    def _alter_share_group_offsets(self, group_id: str, offsets: dict[tuple[str, int], int]
                                   ) -> dict[tuple[str, int], int]:
        node = self._find_coordinator(group_id).node_id
        body = {"group_id": group_id, "topics": [
            {"topic_name": t, "partitions": [{"partition_index": p, "start_offset": offsets[(t, p)]} for p in parts]}
            for t, parts in _by_topic(offsets).items()]}
        response = self.request(ALTER_SHARE_GROUP_OFFSETS, body, node=node)
        raise_retriable([response.error_code])
        check(response.error_code, response.error_message, f"share group {group_id}")
        return {(t.topic_name, p.partition_index): p.error_code for t in response.responses for p in t.partitions}

    def delete_share_group_offsets(self, group_id: str, topics: Iterable[str]) -> dict[str, int]:
        """Forget an empty share group's state for whole topics: each topic's error code;
        KafkaError for the group's."""
        wanted = list(dict.fromkeys(topics))
        return self._retry_coordinator(lambda: self._delete_share_group_offsets(group_id, wanted))

    def _delete_share_group_offsets(self, group_id: str, topics: list[str]) -> dict[str, int]:
        node = self._find_coordinator(group_id).node_id
        body = {"group_id": group_id, "topics": [{"topic_name": t} for t in topics]}
        response = self.request(DELETE_SHARE_GROUP_OFFSETS, body, node=node)
        raise_retriable([response.error_code])
        check(response.error_code, response.error_message, f"share group {group_id}")
        return {r.topic_name: r.error_code for r in response.responses}


def _by_topic(partitions: Iterable[tuple[str, int]]) -> dict[str, list[int]]:
    by_topic: dict[str, list[int]] = {}
    for topic, index in partitions:
        by_topic.setdefault(topic, []).append(index)
    return by_topic
