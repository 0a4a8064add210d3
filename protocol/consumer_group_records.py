"""The consumer-protocol group records of `__consumer_offsets` (KIP-848), in Kafka's formats.

Each key starts with an int16 record type (Kafka's coordinator-record "api key"; in Kafka < 4.0
the same number was called the key version) followed by a non-flexible key struct; each value
starts with an int16 version (0 for every type here) followed by a flexible struct (compact
strings and arrays, tagged fields). The types, as Kafka 4.0's GroupCoordinatorRecordHelpers
writes them:

| type | key | value |
| --- | --- | --- |
| 3 ConsumerGroupMetadata | group | Epoch (the group epoch); tagged MetadataHash (4.1) |
| 4 ConsumerGroupPartitionMetadata | group | the subscribed topics: id, name, partition count |
| 5 ConsumerGroupMemberMetadata | group, member | instance/rack/client ids, subscription, regex, rebalance timeout, server assignor; tagged ClassicMemberMetadata |
| 6 ConsumerGroupTargetAssignmentMetadata | group | AssignmentEpoch |
| 7 ConsumerGroupTargetAssignmentMember | group, member | the member's target partitions |
| 8 ConsumerGroupCurrentMemberAssignment | group, member | member epoch, previous epoch, state, assigned and pending-revocation partitions |
| 16 ConsumerGroupRegularExpression | group, regex | the topics it resolved to, a metadata version, a timestamp |

A None value is a tombstone. Tagged fields newer Kafka versions add (MetadataHash and
CreationTimeMs of type 3, AssignmentTimestamp of type 6, AssignmentEpochs of type 8) are
skipped when read: kbroker keeps no use for them.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

from construct import Construct

from protocol.coordinator_records import build_prefixed, split_prefixed
from protocol.primitives import (
    Field,
    Int8,
    Int32,
    Int64,
    KArray,
    KBytes,
    KString,
    KStruct,
    ProtocolError,
    TaggedField,
    Uuid,
    encode_uvarint,
    parse_all,
    read_uvarint,
)

GROUP_METADATA, PARTITION_METADATA, MEMBER_METADATA = 3, 4, 5
TARGET_ASSIGNMENT_METADATA, TARGET_ASSIGNMENT_MEMBER, CURRENT_MEMBER_ASSIGNMENT = 6, 7, 8
REGULAR_EXPRESSION = 16
RECORD_TYPES = frozenset({GROUP_METADATA, PARTITION_METADATA, MEMBER_METADATA, TARGET_ASSIGNMENT_METADATA,
                          TARGET_ASSIGNMENT_MEMBER, CURRENT_MEMBER_ASSIGNMENT, REGULAR_EXPRESSION})
VALUE_VERSION = 0

# Kafka's MemberState values.
STATE_STABLE, STATE_UNREVOKED_PARTITIONS, STATE_UNRELEASED_PARTITIONS, STATE_UNKNOWN = 0, 1, 2, 127

Partitions = dict[uuid.UUID, frozenset[int]]


def _s(nullable: bool = False) -> KString:
    return KString(compact=True, nullable=nullable)


def _array(element: Construct) -> KArray:
    return KArray(element, compact=True)


# -- keys: int16 record type, then a non-flexible struct ---------------------------------------------

_GROUP_KEY = KStruct(Field("group_id", KString(), ""))
_MEMBER_KEY = KStruct(Field("group_id", KString(), ""), Field("member_id", KString(), ""))
_REGEX_KEY = KStruct(Field("group_id", KString(), ""), Field("regular_expression", KString(), ""))
_KEYS = {GROUP_METADATA: _GROUP_KEY, PARTITION_METADATA: _GROUP_KEY, TARGET_ASSIGNMENT_METADATA: _GROUP_KEY,
         MEMBER_METADATA: _MEMBER_KEY, TARGET_ASSIGNMENT_MEMBER: _MEMBER_KEY, CURRENT_MEMBER_ASSIGNMENT: _MEMBER_KEY,
         REGULAR_EXPRESSION: _REGEX_KEY}


@dataclass(frozen=True, slots=True)
class ConsumerGroupRecordKey:
    """The key of one consumer-group record: its type, the group, and the member id or regex
    it is about ("" for the group-wide types)."""

    record_type: int
    group_id: str
    subject: str = ""


def encode_key(key: ConsumerGroupRecordKey) -> bytes:
    con = _KEYS.get(key.record_type)
    if con is None:
        raise ValueError(f"not a consumer group record type: {key.record_type}")
    obj: dict[str, str] = {"group_id": key.group_id}
    if con is _MEMBER_KEY:
        obj["member_id"] = key.subject
    elif con is _REGEX_KEY:
        obj["regular_expression"] = key.subject
    return build_prefixed(key.record_type, con, obj)


def decode_key(data: bytes) -> ConsumerGroupRecordKey:
    record_type, body = split_prefixed(data)
    con = _KEYS.get(record_type)
    if con is None:
        raise ProtocolError(f"not a consumer group record type: {record_type}")
    parsed = parse_all(con, body)
    subject = parsed.get("member_id") or parsed.get("regular_expression") or ""
    return ConsumerGroupRecordKey(record_type, parsed.group_id, subject)


def is_consumer_group_key(data: bytes) -> bool:
    return len(data) >= 2 and split_prefixed(data[:2])[0] in RECORD_TYPES


# -- values -------------------------------------------------------------------------------------------


class _TaggedNullableStruct(Construct):
    """A nullable struct in a tagged field as Kafka's generated code writes it: an unsigned
    varint 0 for null, or 1 followed by the struct."""

    def __init__(self, struct: KStruct) -> None:
        super().__init__()
        self.struct = struct

    def _parse(self, stream, context, path):  # type: ignore[no-untyped-def]
        if read_uvarint(stream, path) == 0:
            return None
        return self.struct._parsereport(stream, context, path)

    def _build(self, obj, stream, context, path):  # type: ignore[no-untyped-def]
        if obj is None:
            stream.write(encode_uvarint(0))
            return obj
        stream.write(encode_uvarint(1))
        self.struct._build(obj, stream, context, path)
        return obj


class _AlwaysWritten(TaggedField):
    """A tagged field written even when null: Kafka writes ClassicMemberMetadata's null marker,
    and a reader that finds the tag missing takes an *empty* struct (a classic member), not null."""

    def is_default(self, value: Any) -> bool:
        return False


_TOPIC_PARTITIONS = KStruct(Field("topic_id", Uuid, uuid.UUID(int=0)),
                            Field("partitions", _array(Int32), []), flexible=True)
_CLASSIC_PROTOCOL = KStruct(Field("name", _s(), ""), Field("metadata", KBytes(compact=True), b""), flexible=True)
_CLASSIC_MEMBER = KStruct(Field("session_timeout_ms", Int32, 0),
                          Field("supported_protocols", _array(_CLASSIC_PROTOCOL), []), flexible=True)
_PARTITION_RACKS = KStruct(Field("partition", Int32, 0), Field("racks", _array(_s()), []), flexible=True)
_TOPIC_METADATA = KStruct(Field("topic_id", Uuid, uuid.UUID(int=0)), Field("topic_name", _s(), ""),
                          Field("num_partitions", Int32, 0),
                          Field("partition_metadata", _array(_PARTITION_RACKS), []), flexible=True)

_VALUES = {
    GROUP_METADATA: KStruct(Field("epoch", Int32, 0), tagged=[TaggedField(0, "metadata_hash", Int64, 0)],
                            flexible=True),
    PARTITION_METADATA: KStruct(Field("topics", _array(_TOPIC_METADATA), []), flexible=True),
    MEMBER_METADATA: KStruct(
        Field("instance_id", _s(nullable=True), None), Field("rack_id", _s(nullable=True), None),
        Field("client_id", _s(), ""), Field("client_host", _s(), ""),
        Field("subscribed_topic_names", _array(_s()), []), Field("subscribed_topic_regex", _s(nullable=True), None),
        Field("rebalance_timeout_ms", Int32, -1), Field("server_assignor", _s(nullable=True), None),
        tagged=[_AlwaysWritten(0, "classic_member_metadata", _TaggedNullableStruct(_CLASSIC_MEMBER), None)],
        flexible=True),
    TARGET_ASSIGNMENT_METADATA: KStruct(Field("assignment_epoch", Int32, 0), flexible=True),
    TARGET_ASSIGNMENT_MEMBER: KStruct(Field("topic_partitions", _array(_TOPIC_PARTITIONS), []), flexible=True),
    CURRENT_MEMBER_ASSIGNMENT: KStruct(
        Field("member_epoch", Int32, 0), Field("previous_member_epoch", Int32, 0), Field("state", Int8, 0),
        Field("assigned_partitions", _array(_TOPIC_PARTITIONS), []),
        Field("partitions_pending_revocation", _array(_TOPIC_PARTITIONS), []), flexible=True),
    REGULAR_EXPRESSION: KStruct(Field("topics", _array(_s()), []), Field("version", Int64, 0),
                                Field("timestamp", Int64, 0), flexible=True),
}


@dataclass(frozen=True, slots=True)
class GroupEpoch:
    """ConsumerGroupMetadataValue."""

    epoch: int


@dataclass(frozen=True, slots=True)
class SubscribedTopic:
    topic_id: uuid.UUID
    name: str
    partitions: int


@dataclass(frozen=True, slots=True)
class PartitionMetadata:
    """ConsumerGroupPartitionMetadataValue: the subscribed topics as the last assignment saw them."""

    topics: tuple[SubscribedTopic, ...]


@dataclass(frozen=True, slots=True)
class ClassicMemberMetadata:
    session_timeout_ms: int
    protocols: tuple[tuple[str, bytes], ...]


@dataclass(frozen=True, slots=True)
class MemberMetadata:
    """ConsumerGroupMemberMetadataValue. `subscribed_topic_regex` is "" when none, as Kafka writes it."""

    instance_id: str | None
    rack_id: str | None
    client_id: str
    client_host: str
    subscribed_topic_names: tuple[str, ...]
    subscribed_topic_regex: str
    rebalance_timeout_ms: int
    server_assignor: str | None
    classic: ClassicMemberMetadata | None = None


@dataclass(frozen=True, slots=True)
class TargetAssignmentEpoch:
    """ConsumerGroupTargetAssignmentMetadataValue."""

    assignment_epoch: int


@dataclass(frozen=True, slots=True)
class TargetAssignment:
    """ConsumerGroupTargetAssignmentMemberValue."""

    partitions: Partitions = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class CurrentAssignment:
    """ConsumerGroupCurrentMemberAssignmentValue; `state` is Kafka's MemberState byte."""

    member_epoch: int
    previous_member_epoch: int
    state: int
    assigned: Partitions = field(default_factory=dict)
    pending_revocation: Partitions = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ResolvedRegex:
    """ConsumerGroupRegularExpressionValue."""

    topics: frozenset[str]
    version: int
    timestamp: int


ConsumerGroupRecordValue = (GroupEpoch | PartitionMetadata | MemberMetadata | TargetAssignmentEpoch
                            | TargetAssignment | CurrentAssignment | ResolvedRegex)
_TYPE_OF = {GroupEpoch: GROUP_METADATA, PartitionMetadata: PARTITION_METADATA, MemberMetadata: MEMBER_METADATA,
            TargetAssignmentEpoch: TARGET_ASSIGNMENT_METADATA, TargetAssignment: TARGET_ASSIGNMENT_MEMBER,
            CurrentAssignment: CURRENT_MEMBER_ASSIGNMENT, ResolvedRegex: REGULAR_EXPRESSION}


def record_type_of(value: ConsumerGroupRecordValue) -> int:
    return _TYPE_OF[type(value)]


def _partitions(partitions: Partitions) -> list[dict[str, Any]]:
    # Sorted, so one state always makes the same bytes.
    return [{"topic_id": t, "partitions": sorted(ps)} for t, ps in sorted(partitions.items(), key=lambda i: i[0].bytes)
            if ps]


def _parsed_partitions(parsed: Any) -> Partitions:
    out: dict[uuid.UUID, frozenset[int]] = {}
    for tp in parsed:
        out[tp.topic_id] = out.get(tp.topic_id, frozenset()) | frozenset(tp.partitions)
    return out


def _value_dict(value: ConsumerGroupRecordValue) -> dict[str, Any]:
    if isinstance(value, GroupEpoch):
        return {"epoch": value.epoch}
    if isinstance(value, PartitionMetadata):
        return {"topics": [{"topic_id": t.topic_id, "topic_name": t.name, "num_partitions": t.partitions,
                            "partition_metadata": []} for t in value.topics]}
    if isinstance(value, MemberMetadata):
        classic = None
        if value.classic is not None:
            classic = {"session_timeout_ms": value.classic.session_timeout_ms,
                       "supported_protocols": [{"name": n, "metadata": m} for n, m in value.classic.protocols]}
        return {"instance_id": value.instance_id, "rack_id": value.rack_id, "client_id": value.client_id,
                "client_host": value.client_host, "subscribed_topic_names": sorted(value.subscribed_topic_names),
                "subscribed_topic_regex": value.subscribed_topic_regex,
                "rebalance_timeout_ms": value.rebalance_timeout_ms, "server_assignor": value.server_assignor,
                "classic_member_metadata": classic}
    if isinstance(value, TargetAssignmentEpoch):
        return {"assignment_epoch": value.assignment_epoch}
    if isinstance(value, TargetAssignment):
        return {"topic_partitions": _partitions(value.partitions)}
    if isinstance(value, CurrentAssignment):
        return {"member_epoch": value.member_epoch, "previous_member_epoch": value.previous_member_epoch,
                "state": value.state, "assigned_partitions": _partitions(value.assigned),
                "partitions_pending_revocation": _partitions(value.pending_revocation)}
    return {"topics": sorted(value.topics), "version": value.version, "timestamp": value.timestamp}


def encode_value(value: ConsumerGroupRecordValue) -> bytes:
    return build_prefixed(VALUE_VERSION, _VALUES[record_type_of(value)], _value_dict(value))


def decode_value(record_type: int, data: bytes) -> ConsumerGroupRecordValue:
    version, body = split_prefixed(data)
    if version != VALUE_VERSION:
        raise ProtocolError(f"unknown version {version} of consumer group record type {record_type}")
    con = _VALUES.get(record_type)
    if con is None:
        raise ProtocolError(f"not a consumer group record type: {record_type}")
    p = parse_all(con, body)
    if record_type == GROUP_METADATA:
        return GroupEpoch(p.epoch)
    if record_type == PARTITION_METADATA:
        return PartitionMetadata(tuple(SubscribedTopic(t.topic_id, t.topic_name, t.num_partitions) for t in p.topics))
    if record_type == MEMBER_METADATA:
        return _member_metadata(p)
    if record_type == TARGET_ASSIGNMENT_METADATA:
        return TargetAssignmentEpoch(p.assignment_epoch)
    if record_type == TARGET_ASSIGNMENT_MEMBER:
        return TargetAssignment(_parsed_partitions(p.topic_partitions))
    if record_type == CURRENT_MEMBER_ASSIGNMENT:
        return CurrentAssignment(p.member_epoch, p.previous_member_epoch, p.state,
                                 _parsed_partitions(p.assigned_partitions),
                                 _parsed_partitions(p.partitions_pending_revocation))
    return ResolvedRegex(frozenset(p.topics), p.version, p.timestamp)


def _member_metadata(p: Any) -> MemberMetadata:
    classic = None
    if p.classic_member_metadata is not None:
        c = p.classic_member_metadata
        classic = ClassicMemberMetadata(c.session_timeout_ms,
                                        tuple((proto.name, bytes(proto.metadata)) for proto in c.supported_protocols))
    return MemberMetadata(p.instance_id, p.rack_id, p.client_id, p.client_host, tuple(p.subscribed_topic_names),
                          p.subscribed_topic_regex or "", p.rebalance_timeout_ms, p.server_assignor, classic)


def entry(key: ConsumerGroupRecordKey, value: ConsumerGroupRecordValue | None) -> tuple[bytes, bytes | None]:
    """A record's key and value bytes (None: a tombstone)."""
    return encode_key(key), encode_value(value) if value is not None else None
