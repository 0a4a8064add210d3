"""Record keys and values of `__consumer_offsets` and `__transaction_state`, in Kafka's formats.

Each key and value starts with an int16 version. Keys of version 0 and 1 are committed
offsets, version 2 is group metadata. We write the versions a Kafka 3.9 broker writes
(OffsetCommitValue v3, GroupMetadataValue v3) and read every version up to the flexible ones,
so tools that decode this topic (and logs written by other versions) agree with us.
"""

from __future__ import annotations

import io
import struct
from dataclasses import dataclass, field
from typing import Any

from protocol.primitives import (
    Field,
    Int8,
    Int16,
    Int32,
    Int64,
    KArray,
    KBytes,
    KString,
    KStruct,
    ProtocolError,
    build_into,
    parse_all,
)

_VERSION = struct.Struct(">h")

OFFSET_COMMIT_KEY_VERSION = 1
GROUP_METADATA_KEY_VERSION = 2
OFFSET_COMMIT_VALUE_VERSION = 3
GROUP_METADATA_VALUE_VERSION = 3


def _string(flexible: bool, nullable: bool = False) -> KString:
    return KString(compact=flexible, nullable=nullable)


_OFFSET_KEY = KStruct(
    Field("group", _string(False), ""), Field("topic", _string(False), ""), Field("partition", Int32, 0)
)
_GROUP_KEY = KStruct(Field("group", _string(False), ""))


def _offset_value(version: int) -> KStruct:
    flexible = version >= 4
    fields = [Field("offset", Int64, -1)]
    absent = []
    if version >= 3:
        fields.append(Field("leader_epoch", Int32, -1))
    else:
        absent.append(Field("leader_epoch", None, -1))
    fields += [Field("metadata", _string(flexible), ""), Field("commit_timestamp", Int64, -1)]
    if version == 1:
        fields.append(Field("expire_timestamp", Int64, -1))
    else:
        absent.append(Field("expire_timestamp", None, -1))
    return KStruct(*fields, flexible=flexible, absent=absent)


def _member(version: int) -> KStruct:
    flexible = version >= 4
    fields = [Field("member_id", _string(flexible), "")]
    absent = []
    if version >= 3:
        fields.append(Field("group_instance_id", _string(flexible, nullable=True), None))
    else:
        absent.append(Field("group_instance_id", None, None))
    fields += [Field("client_id", _string(flexible), ""), Field("client_host", _string(flexible), "")]
    if version >= 1:
        fields.append(Field("rebalance_timeout", Int32, 0))
    else:
        absent.append(Field("rebalance_timeout", None, -1))
    fields += [
        Field("session_timeout", Int32, 0),
        Field("subscription", KBytes(compact=flexible), b""),
        Field("assignment", KBytes(compact=flexible), b""),
    ]
    return KStruct(*fields, flexible=flexible, absent=absent)


def _group_value(version: int) -> KStruct:
    flexible = version >= 4
    fields = [
        Field("protocol_type", _string(flexible), ""),
        Field("generation", Int32, 0),
        Field("protocol", _string(flexible, nullable=True), None),
        Field("leader", _string(flexible, nullable=True), None),
    ]
    absent = []
    if version >= 2:
        fields.append(Field("current_state_timestamp", Int64, -1))
    else:
        absent.append(Field("current_state_timestamp", None, -1))
    fields.append(Field("members", KArray(_member(version), compact=flexible), []))
    return KStruct(*fields, flexible=flexible, absent=absent)


_OFFSET_VALUES = {v: _offset_value(v) for v in range(5)}
_GROUP_VALUES = {v: _group_value(v) for v in range(5)}


@dataclass(frozen=True, slots=True)
class OffsetKey:
    group: str
    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class GroupKey:
    group: str


@dataclass(frozen=True, slots=True)
class OffsetValue:
    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp: int
    expire_timestamp: int = -1


@dataclass(slots=True)
class MemberValue:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout: int
    session_timeout: int
    subscription: bytes
    assignment: bytes


@dataclass(slots=True)
class GroupValue:
    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    current_state_timestamp: int
    members: list[MemberValue] = field(default_factory=list)


def build_prefixed(prefix: int, con: KStruct, obj: Any) -> bytes:
    """A coordinator record's key or value: its int16 version (or record type) and the struct."""
    out = io.BytesIO()
    out.write(_VERSION.pack(prefix))
    build_into(con, obj, out)
    return out.getvalue()


def split_prefixed(data: bytes) -> tuple[int, bytes]:
    """The int16 version (or record type) of a coordinator record's key or value, and the rest."""
    if len(data) < 2:
        raise ProtocolError("record too short for a version")
    return _VERSION.unpack_from(data)[0], data[2:]



def encode_offset_key(group: str, topic: str, partition: int) -> bytes:
    return build_prefixed(OFFSET_COMMIT_KEY_VERSION, _OFFSET_KEY, {"group": group, "topic": topic, "partition": partition})


def encode_group_key(group: str) -> bytes:
    return build_prefixed(GROUP_METADATA_KEY_VERSION, _GROUP_KEY, {"group": group})


def decode_key(data: bytes) -> OffsetKey | GroupKey:
    version, body = split_prefixed(data)
    if version in (0, 1):
        parsed = parse_all(_OFFSET_KEY, body)
        return OffsetKey(parsed.group, parsed.topic, parsed.partition)
    if version == 2:
        return GroupKey(parse_all(_GROUP_KEY, body).group)
    raise ProtocolError(f"unknown __consumer_offsets key version {version}")


def encode_offset_value(value: OffsetValue) -> bytes:
    obj = {"offset": value.offset, "leader_epoch": value.leader_epoch, "metadata": value.metadata,
           "commit_timestamp": value.commit_timestamp}
    return build_prefixed(OFFSET_COMMIT_VALUE_VERSION, _OFFSET_VALUES[OFFSET_COMMIT_VALUE_VERSION], obj)


def decode_offset_value(data: bytes) -> OffsetValue:
    version, body = split_prefixed(data)
    con = _OFFSET_VALUES.get(version)
    if con is None:
        raise ProtocolError(f"unknown offset commit value version {version}")
    p = parse_all(con, body)
    return OffsetValue(p.offset, p.leader_epoch, p.metadata, p.commit_timestamp, p.expire_timestamp)


def encode_group_value(value: GroupValue) -> bytes:
    obj = {
        "protocol_type": value.protocol_type,
        "generation": value.generation,
        "protocol": value.protocol,
        "leader": value.leader,
        "current_state_timestamp": value.current_state_timestamp,
        "members": [_member_dict(m) for m in value.members],
    }
    return build_prefixed(GROUP_METADATA_VALUE_VERSION, _GROUP_VALUES[GROUP_METADATA_VALUE_VERSION], obj)


def _member_dict(member: MemberValue) -> dict[str, Any]:
    return {name: getattr(member, name) for name in MemberValue.__slots__}


def decode_group_value(data: bytes) -> GroupValue:
    version, body = split_prefixed(data)
    con = _GROUP_VALUES.get(version)
    if con is None:
        raise ProtocolError(f"unknown group metadata value version {version}")
    p = parse_all(con, body)
    members = [
        MemberValue(m.member_id, m.group_instance_id, m.client_id, m.client_host, m.rebalance_timeout,
                    m.session_timeout, bytes(m.subscription), bytes(m.assignment))
        for m in p.members
    ]
    return GroupValue(p.protocol_type, p.generation, p.protocol, p.leader, p.current_state_timestamp, members)


# -- __transaction_state ------------------------------------------------------------------------

TRANSACTION_KEY_VERSION = 0
TRANSACTION_VALUE_VERSION = 0

_TXN_KEY = KStruct(Field("transactional_id", _string(False), ""))


def _txn_partitions(flexible: bool) -> KArray:
    topic = KStruct(
        Field("topic", _string(flexible), ""),
        Field("partition_ids", KArray(Int32, compact=flexible), []),
        flexible=flexible,
    )
    return KArray(topic, compact=flexible, nullable=True)


def _txn_value(version: int) -> KStruct:
    flexible = version >= 1
    return KStruct(
        Field("producer_id", Int64, -1),
        Field("producer_epoch", Int16, -1),
        Field("transaction_timeout_ms", Int32, 0),
        Field("transaction_status", Int8, 0),
        Field("transaction_partitions", _txn_partitions(flexible), None),
        Field("transaction_last_update_timestamp_ms", Int64, -1),
        Field("transaction_start_timestamp_ms", Int64, -1),
        flexible=flexible,
    )


_TXN_VALUES = {v: _txn_value(v) for v in range(2)}


@dataclass(slots=True)
class TransactionValue:
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    status: int
    partitions: dict[str, list[int]]
    last_update_ms: int
    start_ms: int


def encode_transaction_key(transactional_id: str) -> bytes:
    return build_prefixed(TRANSACTION_KEY_VERSION, _TXN_KEY, {"transactional_id": transactional_id})


def decode_transaction_key(data: bytes) -> str:
    version, body = split_prefixed(data)
    if version != 0:
        raise ProtocolError(f"unknown transaction log key version {version}")
    return parse_all(_TXN_KEY, body).transactional_id


def encode_transaction_value(value: TransactionValue) -> bytes:
    partitions = [{"topic": t, "partition_ids": sorted(ps)} for t, ps in sorted(value.partitions.items())]
    obj = {
        "producer_id": value.producer_id,
        "producer_epoch": value.producer_epoch,
        "transaction_timeout_ms": value.timeout_ms,
        "transaction_status": value.status,
        "transaction_partitions": partitions,
        "transaction_last_update_timestamp_ms": value.last_update_ms,
        "transaction_start_timestamp_ms": value.start_ms,
    }
    return build_prefixed(TRANSACTION_VALUE_VERSION, _TXN_VALUES[TRANSACTION_VALUE_VERSION], obj)


def decode_transaction_value(data: bytes) -> TransactionValue:
    version, body = split_prefixed(data)
    con = _TXN_VALUES.get(version)
    if con is None:
        raise ProtocolError(f"unknown transaction log value version {version}")
    p = parse_all(con, body)
    partitions = {t.topic: list(t.partition_ids) for t in (p.transaction_partitions or [])}
    return TransactionValue(p.producer_id, p.producer_epoch, p.transaction_timeout_ms, p.transaction_status,
                            partitions, p.transaction_last_update_timestamp_ms, p.transaction_start_timestamp_ms)
