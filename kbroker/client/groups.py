"""`GroupsClient`: consumer groups as an admin sees them, through each group's coordinator.
ListGroups, ConsumerGroupDescribe (groups of the consumer protocol, KIP-848) or DescribeGroups
(classic groups: members' assignments and subscriptions decoded), OffsetFetch, OffsetCommit,
DeleteGroups and OffsetDelete. It never joins a group."""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, TypeVar

from construct import ConstructError, Container

from kbroker.client.coordinators import Coordinator, CoordinatorClient, raise_retriable
from kbroker.client.errors import check
from protocol.errors import ErrorCode, KafkaError
from protocol.messages import consumer_protocol_assignment, consumer_protocol_subscription
from protocol.primitives import ProtocolError, parse_all

OFFSET_COMMIT = 8
OFFSET_FETCH = 9
DESCRIBE_GROUPS = 15
LIST_GROUPS = 16
DELETE_GROUPS = 42
OFFSET_DELETE = 47
CONSUMER_GROUP_DESCRIBE = 69
SHARE_GROUP_DESCRIBE = 77
CONSUMER_PROTOCOL_TYPE = "consumer"
_INT16 = struct.Struct(">h")
_T = TypeVar("_T")


@dataclass
class GroupListing:
    group_id: str
    protocol_type: str
    state: str  # "" from brokers before ListGroups v4
    group_type: str = ""  # "classic" or "consumer" (the group protocol); "" before ListGroups v5


@dataclass
class GroupMember:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    assignment: list[tuple[str, int]]  # (topic, partition), from ConsumerProtocolAssignment
    subscription: list[str]  # topics, from ConsumerProtocolSubscription


@dataclass
class GroupDescription:
    group_id: str
    state: str  # Kafka's names: Empty, Stable, PreparingRebalance, CompletingRebalance, Dead
    protocol_type: str
    protocol: str  # the assignor chosen, e.g. "range" (the server-side one for a consumer-protocol group)
    members: list[GroupMember]
    coordinator: Coordinator
    group_type: str = "classic"  # or "consumer": the group protocol its members speak


@dataclass
class ShareMember:
    member_id: str
    client_id: str
    client_host: str
    member_epoch: int
    assignment: list[tuple[str, int]]  # (topic, partition)


@dataclass
class ShareGroupDescription:
    group_id: str
    state: str  # Empty, Stable, Dead
    group_epoch: int
    assignment_epoch: int
    members: list[ShareMember]
    coordinator: Coordinator


class GroupsClient(CoordinatorClient):
    """Listing, describing and deleting groups, and their committed offsets."""

    def list_groups(self, states: Iterable[str] = (), types: Iterable[str] = ()) -> list[GroupListing]:
        """Every group known to any broker (those in `states` and of `types` only, if given), sorted by id."""
        wanted, kinds = list(states), list(types)
        listings: dict[str, GroupListing] = {}
        for node in sorted(self.metadata(refresh=True).brokers):
            version = self.version(LIST_GROUPS, node)
            if wanted and version < 4:
                raise KafkaError(ErrorCode.UNSUPPORTED_VERSION, f"broker {node} cannot filter groups by state")
            if kinds and version < 5:
                raise KafkaError(ErrorCode.UNSUPPORTED_VERSION, f"broker {node} cannot filter groups by type")
            response = self.request(LIST_GROUPS, {"states_filter": wanted, "types_filter": kinds}, version, node)
            check(response.error_code, context=f"list groups of broker {node}")
            listings.update((g.group_id, GroupListing(g.group_id, g.protocol_type, g.group_state, g.group_type))
                            for g in response.groups)
        return [listings[g] for g in sorted(listings)]

    def describe_group(self, group_id: str) -> GroupDescription:
        """State, protocol and members of a group (assignments decoded for consumer groups)."""
        return self._retry_coordinator(lambda: self._describe_group(group_id))

    def _describe_group(self, group_id: str) -> GroupDescription:
        coordinator = self._find_coordinator(group_id)
        described = self._describe_consumer_group(group_id, coordinator)
        if described is not None:
            return described
        body = {"groups": [group_id], "include_authorized_operations": False}
        result = self.request(DESCRIBE_GROUPS, body, node=coordinator.node_id).groups[0]
        check(result.error_code, context=f"group {group_id}")
        consumer = result.protocol_type in (CONSUMER_PROTOCOL_TYPE, "")
        members = [
            GroupMember(m.member_id, m.group_instance_id, m.client_id, m.client_host,
                        _decoded(decode_assignment, m.member_assignment, []) if consumer else [],
                        _decoded(decode_subscription, m.member_metadata, []) if consumer else [])
            for m in result.members
        ]
        return GroupDescription(group_id, result.group_state, result.protocol_type, result.protocol_data,
                                members, coordinator)

    def _describe_consumer_group(self, group_id: str, coordinator: Coordinator) -> GroupDescription | None:
        """The group as ConsumerGroupDescribe shows it; None when it is no consumer-protocol group
        (or the broker predates KIP-848), for DescribeGroups to describe, as Kafka's admin does."""
        try:
            version = self.version(CONSUMER_GROUP_DESCRIBE, coordinator.node_id)
        except KafkaError:
            return None
        body = {"group_ids": [group_id], "include_authorized_operations": False}
        result = self.request(CONSUMER_GROUP_DESCRIBE, body, version, coordinator.node_id).groups[0]
        # Not a consumer-protocol group, or a broker that advertises the API but serves only the
        # classic protocol (Kafka 3.9 without group.coordinator.rebalance.protocols=consumer).
        if result.error_code in (ErrorCode.GROUP_ID_NOT_FOUND, ErrorCode.UNSUPPORTED_VERSION):
            return None
        check(result.error_code, context=f"group {group_id}")
        members = [
            GroupMember(m.member_id, m.instance_id, m.client_id, m.client_host,
                        sorted((t.topic_name, p) for t in m.assignment.topic_partitions for p in t.partitions),
                        sorted(m.subscribed_topic_names))
            for m in result.members
        ]
        return GroupDescription(group_id, result.group_state, CONSUMER_PROTOCOL_TYPE, result.assignor_name, members,
                                coordinator, group_type="consumer")

    def describe_share_group(self, group_id: str) -> ShareGroupDescription:
        """A share group as ShareGroupDescribe shows it (KafkaError GROUP_ID_NOT_FOUND when unknown)."""
        return self._retry_coordinator(lambda: self._describe_share_group(group_id))

    def _describe_share_group(self, group_id: str) -> ShareGroupDescription:
        coordinator = self._find_coordinator(group_id)
        body = {"group_ids": [group_id], "include_authorized_operations": False}
        result = self.request(SHARE_GROUP_DESCRIBE, body, 1, coordinator.node_id).groups[0]
        raise_retriable([result.error_code])
        check(result.error_code, result.error_message)
        members = [
            ShareMember(m.member_id, m.client_id, m.client_host, m.member_epoch,
                        sorted((t.topic_name, p) for t in m.assignment.topic_partitions for p in t.partitions))
            for m in result.members
        ]
        return ShareGroupDescription(group_id, result.group_state, result.group_epoch, result.assignment_epoch,
                                     members, coordinator)

    def fetch_offsets(self, group_id: str, partitions: Iterable[tuple[str, int]] | None = None
                      ) -> dict[tuple[str, int], int]:
        """Committed offsets of `partitions` (all the group has when None); uncommitted ones are left out."""
        wanted = None if partitions is None else list(partitions)
        return self._retry_coordinator(lambda: self._fetch_offsets(group_id, wanted))

    def _fetch_offsets(self, group_id: str, partitions: list[tuple[str, int]] | None) -> dict[tuple[str, int], int]:
        node = self._find_coordinator(group_id).node_id
        version = self.version(OFFSET_FETCH, node)
        topics = None if partitions is None else [
            {"name": t, "partition_indexes": parts} for t, parts in _by_topic(partitions).items()]
        if topics is None and version < 2:
            raise KafkaError(ErrorCode.UNSUPPORTED_VERSION, "the broker cannot fetch all of a group's offsets")
        if version >= 8:
            group = {"group_id": group_id, "member_id": None, "member_epoch": -1, "topics": topics}
            result = self.request(OFFSET_FETCH, {"groups": [group], "require_stable": False}, version, node).groups[0]
        else:
            body = {"group_id": group_id, "topics": topics, "require_stable": False}
            result = self.request(OFFSET_FETCH, body, version, node)
        check(result.error_code, context=f"offsets of group {group_id}")
        offsets = {}
        for topic in result.topics:
            for p in topic.partitions:
                check(p.error_code, context=f"offset of {topic.name}-{p.partition_index}")
                if p.committed_offset >= 0:  # -1: nothing committed
                    offsets[(topic.name, p.partition_index)] = p.committed_offset
        return dict(sorted(offsets.items()))

    def commit_offsets(self, group_id: str, offsets: dict[tuple[str, int], int]) -> dict[tuple[str, int], int]:
        """Commit as an admin does (generation -1, no member: the group must be empty); error per partition."""
        return self._retry_coordinator(lambda: self._commit_offsets(group_id, offsets))

    def _commit_offsets(self, group_id: str, offsets: dict[tuple[str, int], int]) -> dict[tuple[str, int], int]:
        node = self._find_coordinator(group_id).node_id
        body = {
            "group_id": group_id, "generation_id_or_member_epoch": -1, "member_id": "", "group_instance_id": None,
            "retention_time_ms": -1,
            "topics": [{"name": t, "partitions": [
                {"partition_index": p, "committed_offset": offsets[(t, p)], "committed_leader_epoch": -1,
                 "committed_metadata": "", "commit_timestamp": -1} for p in parts]}
                for t, parts in _by_topic(offsets).items()],
        }
        response = self.request(OFFSET_COMMIT, body, node=node)
        errors = {(t.name, p.partition_index): p.error_code for t in response.topics for p in t.partitions}
        raise_retriable(errors.values())
        return errors

    def delete_groups(self, group_ids: Iterable[str]) -> dict[str, int]:
        """Delete (empty) groups; the error code of each (0 when deleted)."""
        return {g: self._retry_coordinator(lambda g=g: self._delete_group(g)) for g in group_ids}

    def _delete_group(self, group_id: str) -> int:
        node = self._find_coordinator(group_id).node_id
        result = self.request(DELETE_GROUPS, {"groups_names": [group_id]}, node=node).results[0]
        raise_retriable([result.error_code])
        return result.error_code

    def delete_offsets(self, group_id: str, partitions: Iterable[tuple[str, int]]
                       ) -> tuple[int, dict[tuple[str, int], int]]:
        """Drop committed offsets (OffsetDelete): the group's error code, and each partition's."""
        wanted = list(partitions)
        return self._retry_coordinator(lambda: self._delete_offsets(group_id, wanted))

    def _delete_offsets(self, group_id: str, partitions: list[tuple[str, int]]
                        ) -> tuple[int, dict[tuple[str, int], int]]:
        node = self._find_coordinator(group_id).node_id
        body = {"group_id": group_id, "topics": [
            {"name": t, "partitions": [{"partition_index": p} for p in parts]}
            for t, parts in _by_topic(partitions).items()]}
        response = self.request(OFFSET_DELETE, body, node=node)
        raise_retriable([response.error_code])
        return response.error_code, {(t.name, p.partition_index): p.error_code
                                     for t in response.topics for p in t.partitions}


def decode_assignment(data: bytes | None) -> list[tuple[str, int]]:
    """The (topic, partition) pairs of a consumer member's assignment bytes; [] for none."""
    body = _consumer_protocol(consumer_protocol_assignment.SCHEMA, data)
    return [] if body is None else [(t.topic, p) for t in body.assigned_partitions for p in t.partitions]


def decode_subscription(data: bytes | None) -> list[str]:
    """The topics of a consumer member's subscription (its metadata for the chosen protocol)."""
    body = _consumer_protocol(consumer_protocol_subscription.SCHEMA, data)
    return [] if body is None else list(body.topics)


def _consumer_protocol(schemas: dict[int, Any], data: bytes | None) -> Container | None:
    """An int16 version, then that version's struct; newer versions read as the newest known, as Kafka does."""
    if not data:
        return None
    if len(data) < 2:
        raise ProtocolError("consumer protocol bytes without a version")
    version = _INT16.unpack_from(data)[0]
    if version < 0:
        raise ProtocolError(f"invalid consumer protocol version {version}")
    return parse_all(schemas[min(version, max(schemas))], memoryview(data)[2:])


def _decoded(decode: Callable[[bytes | None], _T], data: bytes | None, default: _T) -> _T:
    # A member's bytes are whatever its client wrote: unreadable ones should not fail a describe.
    try:
        return decode(data)
    except ConstructError:
        return default


def _by_topic(partitions: Iterable[tuple[str, int]]) -> dict[str, list[int]]:
    topics: dict[str, list[int]] = {}
    for topic, partition in sorted(partitions):
        topics.setdefault(topic, []).append(partition)
    return topics
