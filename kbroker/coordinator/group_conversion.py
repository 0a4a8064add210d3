"""Turning a group from one protocol into the other while it has members (Kafka 4.0's online
upgrade and downgrade, `group.consumer.migration.policy`), and the consumer protocol's embedded
bytes (ConsumerProtocolSubscription, ConsumerProtocolAssignment) that classic members speak.

Upgrade: a classic group whose members use the `consumer` protocol type becomes a consumer group
when a consumer-protocol member joins. Each classic member becomes a member of the consumer group
at the classic generation, owning the partitions of its last assignment, which is also its target:
nothing moves until the newcomer bumps the group epoch, and then only incrementally.

Downgrade: when the last consumer-protocol member leaves and only classic members remain, the
group becomes a classic group at the group epoch, each member holding its target assignment, and
a classic rebalance starts.

Pure functions over plain data, as Kafka's ConsumerGroup.fromClassicGroup and
ClassicGroup.fromConsumerGroup.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Iterable, Mapping, Sequence, Set
from dataclasses import dataclass
from typing import Any, Protocol

from construct import ConstructError

from kbroker.coordinator.consumer_group import ClassicMetadata, ConsumerGroup, ConsumerMember
from kbroker.coordinator.group import Group, GroupState, Member
from protocol.errors import ErrorCode, KafkaError
from protocol.messages import consumer_protocol_assignment, consumer_protocol_subscription
from protocol.primitives import parse_all

E = ErrorCode
CONSUMER_PROTOCOL_TYPE = "consumer"
TopicId = uuid.UUID
_INT16 = struct.Struct(">h")


class TopicNames(Protocol):
    def topic_id(self, name: str) -> TopicId | None: ...

    def topic_name(self, topic_id: TopicId) -> str | None: ...


@dataclass(frozen=True, slots=True)
class Subscription:
    """A classic member's ConsumerProtocolSubscription: what it subscribes to and owns."""

    topics: tuple[str, ...]
    owned: tuple[tuple[str, tuple[int, ...]], ...]
    rack_id: str | None


class MalformedConsumerProtocol(ValueError):
    pass


def parse_subscription(metadata: bytes) -> Subscription:
    body = _parse(consumer_protocol_subscription.SCHEMA, metadata)
    owned = tuple((tp.topic, tuple(tp.partitions)) for tp in body.owned_partitions)
    return Subscription(tuple(body.topics), owned, body.rack_id)


def first_subscription(protocols: Sequence[tuple[str, bytes]]) -> Subscription | None:
    """The subscription of the first protocol whose metadata parses (Kafka's deserializeSubscription)."""
    for _, metadata in protocols:
        try:
            return parse_subscription(metadata)
        except MalformedConsumerProtocol:
            continue
    return None


def parse_assignment(data: bytes) -> tuple[dict[str, list[int]], bytes | None]:
    """A ConsumerProtocolAssignment: partitions by topic name, and the assignor's user data."""
    if not data:
        return {}, None
    body = _parse(consumer_protocol_assignment.SCHEMA, data)
    partitions: dict[str, list[int]] = {}
    for tp in body.assigned_partitions:
        partitions.setdefault(tp.topic, []).extend(tp.partitions)
    return partitions, (bytes(body.user_data) if body.user_data is not None else None)


def encode_assignment(assigned: Mapping[TopicId, Set[int]], names: TopicNames, version: int) -> bytes:
    """The ConsumerProtocolAssignment a classic member gets in its SyncGroup answer, in the
    version of its subscription (Kafka's prepareAssignment)."""
    version = min(max(version, 0), max(consumer_protocol_assignment.SCHEMA))
    topics = []
    for topic_id, partitions in sorted(assigned.items(), key=lambda item: str(item[0])):
        name = names.topic_name(topic_id)
        if name is not None and partitions:
            topics.append({"topic": name, "partitions": sorted(partitions)})
    body = {"assigned_partitions": topics, "user_data": None}
    return _INT16.pack(version) + consumer_protocol_assignment.SCHEMA[version].build(body)


def metadata_version(metadata: bytes) -> int:
    """The version a member's subscription bytes were written in (0 when unreadable)."""
    return _INT16.unpack_from(metadata)[0] if len(metadata) >= 2 else 0


def to_topic_ids(partitions: Iterable[tuple[str, Iterable[int]]], names: TopicNames) -> dict[TopicId, frozenset[int]]:
    """Partitions by topic id; topics unknown to the coordinator are left out, as Kafka does."""
    by_id: dict[TopicId, set[int]] = {}
    for name, ps in partitions:
        topic_id = names.topic_id(name)
        if topic_id is not None:
            by_id.setdefault(topic_id, set()).update(ps)
    return {t: frozenset(ps) for t, ps in by_id.items() if ps}


def _parse(schemas: dict[int, Any], data: bytes) -> Any:
    if len(data) < 2:
        raise MalformedConsumerProtocol("consumer protocol bytes without a version")
    version = _INT16.unpack_from(data)[0]
    if version < 0:
        raise MalformedConsumerProtocol(f"invalid consumer protocol version {version}")
    try:
        # A newer version reads as the newest known one, as Kafka does.
        return parse_all(schemas[min(version, max(schemas))], memoryview(data)[2:])
    except (ConstructError, UnicodeDecodeError) as e:
        raise MalformedConsumerProtocol(str(e)) from None


# -- upgrade ---------------------------------------------------------------------------------------


def consumer_group_from_classic_group(classic: Group, names: TopicNames, now_ms: int) -> ConsumerGroup:
    """The consumer group a classic group with members becomes (Kafka's fromClassicGroup).
    Raises GROUP_ID_NOT_FOUND when a member's embedded protocol is malformed, and
    UNSUPPORTED_VERSION when an assignor's user data would be lost."""
    group = ConsumerGroup(classic.group_id, group_epoch=classic.generation_id,
                          assignment_epoch=classic.generation_id)
    for member in classic.members.values():
        try:
            subscription = parse_subscription(member.metadata(classic.protocol_name or ""))
            partitions, user_data = parse_assignment(member.assignment)
        except MalformedConsumerProtocol:
            raise KafkaError(E.GROUP_ID_NOT_FOUND, f"Cannot upgrade the classic group {classic.group_id} to "
                             "consumer group because the embedded consumer protocol is malformed.") from None
        if user_data:
            raise KafkaError(E.UNSUPPORTED_VERSION, "userData from a custom assignor would be lost")
        assigned = to_topic_ids(partitions.items(), names)
        # Every member starts Stable at the classic generation with its last assignment as both
        # its current and its target assignment: a member in the middle of a classic rebalance
        # is told to rejoin on its next request.
        converted = ConsumerMember(
            member.member_id, instance_id=member.group_instance_id, rack_id=subscription.rack_id,
            client_id=member.client_id, client_host=member.client_host,
            rebalance_timeout_ms=member.rebalance_timeout_ms,
            subscribed_topic_names=frozenset(subscription.topics),
            member_epoch=classic.generation_id, previous_member_epoch=classic.generation_id,
            assigned=assigned, session_deadline_ms=now_ms + member.session_timeout_ms,
            classic=ClassicMetadata(member.session_timeout_ms, tuple(member.protocols)),
        )
        group.put_member(converted)
        group.target[member.member_id] = dict(assigned)
    return group


def upgrade_refusal(classic: Group, upgrade_enabled: bool, consumer_max_size: int) -> str | None:
    """Why a classic group with members cannot become a consumer group (Kafka's
    validateOnlineUpgrade), or None when it can."""
    if not upgrade_enabled:
        return "the online upgrade is disabled (group.consumer.migration.policy)"
    if classic.protocol_type != CONSUMER_PROTOCOL_TYPE:
        return "the group does not use the consumer embedded protocol"
    if len(classic.members) > consumer_max_size:
        return "the group size exceeds the consumer group maximum size"
    return None


# -- downgrade -------------------------------------------------------------------------------------


def classic_group_from_consumer_group(group: ConsumerGroup, leaving_member_id: str, names: TopicNames) -> Group:
    """The classic group a consumer group becomes when its last consumer-protocol member
    (`leaving_member_id`) leaves (Kafka's ClassicGroup.fromConsumerGroup): Stable at the group
    epoch, each remaining member holding its target assignment, until the rebalance the caller
    starts."""
    classic = Group(group.group_id, state=GroupState.STABLE, protocol_type=CONSUMER_PROTOCOL_TYPE,
                    generation_id=group.group_epoch)
    for member_id, member in group.members.items():
        if member_id == leaving_member_id or member.classic is None:
            continue
        classic.add(Member(
            member_id, member.instance_id, member.client_id, member.client_host, member.rebalance_timeout_ms,
            member.classic.session_timeout_ms, CONSUMER_PROTOCOL_TYPE, list(member.classic.protocols),
        ))
    classic.protocol_name = classic.select_protocol()
    for member in classic.members.values():
        version = metadata_version(member.metadata(classic.protocol_name))
        member.assignment = encode_assignment(group.target.get(member.member_id, {}), names, version)
    return classic
