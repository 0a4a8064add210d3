"""Record keys and values of `__share_group_state`, in Kafka's formats (KIP-932's share coordinator).

Every key and value starts with an int16: for a key, the record type (0 ShareSnapshot, 1
ShareUpdate, Kafka's coordinator-key api keys); for a value, its version (0). The key names one
share partition: group id (int16-length string), topic id (16 bytes), partition (int32). Values
are flexible (compact arrays, tagged fields):

- ShareSnapshotValue: SnapshotEpoch int32, StateEpoch int32, LeaderEpoch int32, StartOffset
  int64, CreateTimestamp int64, WriteTimestamp int64, StateBatches — the whole state of a share
  partition;
- ShareUpdateValue: SnapshotEpoch int32, LeaderEpoch int32, StartOffset int64 (-1: unchanged),
  StateBatches — batches to lay over the last snapshot.

A state batch is FirstOffset int64, LastOffset int64, DeliveryState int8 (0 available, 2
acknowledged, 4 archived), DeliveryCount int16. Kafka 4.2's tagged DeliveryCompleteCount (tag 0)
is read and written back when present.
"""

from __future__ import annotations

import base64
import binascii
import struct
import uuid
from dataclasses import dataclass, field

from protocol.coordinator_records import build_prefixed, split_prefixed
from protocol.primitives import (
    Field,
    Int8,
    Int16,
    Int32,
    Int64,
    KArray,
    KString,
    KStruct,
    ProtocolError,
    TaggedField,
    Uuid,
    parse_all,
)

SNAPSHOT, UPDATE = 0, 1  # key types
VALUE_VERSION = 0
_SHORT = struct.Struct(">h")

_KEY = KStruct(Field("group_id", KString(), ""), Field("topic_id", Uuid, uuid.UUID(int=0)),
               Field("partition", Int32, 0))
_BATCH = KStruct(Field("first_offset", Int64, 0), Field("last_offset", Int64, 0),
                 Field("delivery_state", Int8, 0), Field("delivery_count", Int16, 0), flexible=True)
_COMPLETE = TaggedField(0, "delivery_complete_count", Int32, -1)
_SNAPSHOT_VALUE = KStruct(
    Field("snapshot_epoch", Int32, 0), Field("state_epoch", Int32, 0), Field("leader_epoch", Int32, -1),
    Field("start_offset", Int64, -1), Field("create_timestamp", Int64, -1), Field("write_timestamp", Int64, -1),
    Field("state_batches", KArray(_BATCH, compact=True), []), tagged=[_COMPLETE], flexible=True)
_UPDATE_VALUE = KStruct(
    Field("snapshot_epoch", Int32, 0), Field("leader_epoch", Int32, -1), Field("start_offset", Int64, -1),
    Field("state_batches", KArray(_BATCH, compact=True), []), tagged=[_COMPLETE], flexible=True)


@dataclass(frozen=True, slots=True)
class PersistedBatch:
    """Offsets first..last in one delivery state with one delivery count."""

    first_offset: int
    last_offset: int
    delivery_state: int
    delivery_count: int


@dataclass(frozen=True, slots=True)
class ShareStateKey:
    group_id: str
    topic_id: uuid.UUID
    partition: int


@dataclass(frozen=True, slots=True)
class ShareSnapshot:
    snapshot_epoch: int
    state_epoch: int
    leader_epoch: int
    start_offset: int
    create_timestamp: int
    write_timestamp: int
    batches: tuple[PersistedBatch, ...] = ()
    delivery_complete_count: int = -1


@dataclass(frozen=True, slots=True)
class ShareUpdate:
    snapshot_epoch: int
    leader_epoch: int
    start_offset: int
    batches: tuple[PersistedBatch, ...] = field(default=())
    delivery_complete_count: int = -1


def _batches(batches: tuple[PersistedBatch, ...]) -> list[dict[str, int]]:
    return [{"first_offset": b.first_offset, "last_offset": b.last_offset, "delivery_state": b.delivery_state,
             "delivery_count": b.delivery_count} for b in batches]


def _parsed_batches(parsed: list[object]) -> tuple[PersistedBatch, ...]:
    return tuple(PersistedBatch(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count)  # type: ignore[attr-defined]
                 for b in parsed)


def encode_key(record_type: int, key: ShareStateKey) -> bytes:
    return build_prefixed(record_type, _KEY, {"group_id": key.group_id, "topic_id": key.topic_id, "partition": key.partition})


def decode_key(data: bytes) -> tuple[int, ShareStateKey]:
    """(record type, key); ProtocolError for a type this topic does not hold."""
    record_type, body = split_prefixed(data)
    if record_type not in (SNAPSHOT, UPDATE):
        raise ProtocolError(f"unknown __share_group_state record type {record_type}")
    parsed = parse_all(_KEY, body)
    return record_type, ShareStateKey(parsed.group_id, parsed.topic_id, parsed.partition)


def encode_snapshot(value: ShareSnapshot) -> bytes:
    return build_prefixed(VALUE_VERSION, _SNAPSHOT_VALUE, {
        "snapshot_epoch": value.snapshot_epoch, "state_epoch": value.state_epoch,
        "leader_epoch": value.leader_epoch, "start_offset": value.start_offset,
        "create_timestamp": value.create_timestamp, "write_timestamp": value.write_timestamp,
        "state_batches": _batches(value.batches), "delivery_complete_count": value.delivery_complete_count})


def encode_update(value: ShareUpdate) -> bytes:
    return build_prefixed(VALUE_VERSION, _UPDATE_VALUE, {
        "snapshot_epoch": value.snapshot_epoch, "leader_epoch": value.leader_epoch,
        "start_offset": value.start_offset, "state_batches": _batches(value.batches),
        "delivery_complete_count": value.delivery_complete_count})


def _body(data: bytes) -> bytes:
    version, body = split_prefixed(data)
    if version != VALUE_VERSION:
        raise ProtocolError(f"unknown __share_group_state value version {version}")
    return body


def decode_snapshot(data: bytes) -> ShareSnapshot:
    p = parse_all(_SNAPSHOT_VALUE, _body(data))
    return ShareSnapshot(p.snapshot_epoch, p.state_epoch, p.leader_epoch, p.start_offset, p.create_timestamp,
                         p.write_timestamp, _parsed_batches(p.state_batches), p.delivery_complete_count)


def decode_update(data: bytes) -> ShareUpdate:
    p = parse_all(_UPDATE_VALUE, _body(data))
    return ShareUpdate(p.snapshot_epoch, p.leader_epoch, p.start_offset, _parsed_batches(p.state_batches),
                       p.delivery_complete_count)


def coordinator_key(group_id: str, topic_id: uuid.UUID, partition: int) -> str:
    """Kafka's SharePartitionKey.asCoordinatorKey: "group:topicId:partition", the topic id in
    Kafka's text form (URL-safe base64 without padding). Hashed like a group id to find the
    share coordinator's partition, and FindCoordinator's key for a share coordinator."""
    return f"{group_id}:{kafka_uuid(topic_id)}:{partition}"


def kafka_uuid(topic_id: uuid.UUID) -> str:
    return base64.urlsafe_b64encode(topic_id.bytes).decode().rstrip("=")


def parse_coordinator_key(key: str) -> tuple[str, uuid.UUID, int]:
    """(group, topic id, partition) of "group:topicId:partition" (the group may hold colons);
    ValueError when it is not one."""
    group_id, _, rest = key.rpartition(":")
    group_id, _, topic_text = group_id.rpartition(":")
    if not group_id.strip() or not topic_text:
        raise ValueError(f"not a share partition key: {key!r}")
    try:
        raw = base64.urlsafe_b64decode(topic_text + "=" * (-len(topic_text) % 4))
    except (binascii.Error, ValueError):
        raise ValueError(f"not a topic id: {topic_text!r}") from None
    if len(raw) != 16:
        raise ValueError(f"not a topic id: {topic_text!r}")
    return group_id, uuid.UUID(bytes=raw), int(rest)
