"""Consumer-protocol groups in `__consumer_offsets`: Kafka's record types 3-8 and 16 round-trip
byte for byte, a change writes only the records that changed, and a broker restarted on its
data rebuilds every group (members, epochs, assignments, pending revocations, regexes, static
and classic members) so that its members go on heartbeating without being fenced.
(Kafka's own tools read these records in compat_tests/test_consumer_group_records.py.)"""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import pytest

from kbroker.broker import Broker
from kbroker.cluster.topics import TopicSpec
from kbroker.coordinator.consumer_group import ConsumerGroup, Heartbeat
from kbroker.coordinator.consumer_group_records import GroupReplay, snapshot
from kbroker.coordinator.offsets_topic import Replayed
from kbroker.coordinator.reconciliation import MemberState
from protocol.consumer_group_records import (
    CURRENT_MEMBER_ASSIGNMENT,
    GROUP_METADATA,
    MEMBER_METADATA,
    PARTITION_METADATA,
    REGULAR_EXPRESSION,
    TARGET_ASSIGNMENT_MEMBER,
    TARGET_ASSIGNMENT_METADATA,
    ClassicMemberMetadata,
    ConsumerGroupRecordKey,
    CurrentAssignment,
    GroupEpoch,
    MemberMetadata,
    PartitionMetadata,
    ResolvedRegex,
    SubscribedTopic,
    TargetAssignment,
    TargetAssignmentEpoch,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
    record_type_of,
)
from protocol.errors import ErrorCode, KafkaError
from protocol.primitives import ProtocolError
from tests.manual_clock import ManualClock
from tests.test_group_coordinator import make_broker
from tests.test_mixed_groups import classic_join

E = ErrorCode
TOPIC_ID = uuid.UUID("c2b8d5b9-1649-4a4f-9eb6-145625624b7e")
REBALANCE_MS = 30_000


# -- the records --------------------------------------------------------------------------------------

def test_every_record_type_round_trips() -> None:
    values = [
        GroupEpoch(5),
        PartitionMetadata((SubscribedTopic(TOPIC_ID, "events", 4),)),
        MemberMetadata("static-1", "rack-a", "client", "/127.0.0.1", ("a", "b"), "", 300_000, "uniform",
                       ClassicMemberMetadata(45_000, (("range", b"\x00\x01"), ("cooperative-sticky", b"")))),
        MemberMetadata(None, None, "client", "/127.0.0.1", (), "^events-.*", 300_000, None),
        TargetAssignmentEpoch(5),
        TargetAssignment({TOPIC_ID: frozenset({1, 2})}),
        TargetAssignment({}),
        CurrentAssignment(5, 4, 1, {TOPIC_ID: frozenset({1})}, {TOPIC_ID: frozenset({2})}),
        ResolvedRegex(frozenset({"events-1", "events-2"}), -1, 1_700_000_000_000),
    ]
    for value in values:
        assert decode_value(record_type_of(value), encode_value(value)) == value
    for record_type, subject in ((GROUP_METADATA, ""), (MEMBER_METADATA, "m-1"), (REGULAR_EXPRESSION, "^a.*")):
        key = ConsumerGroupRecordKey(record_type, "billing", subject)
        assert decode_key(encode_key(key)) == key


def test_a_cut_record_is_refused_with_a_protocol_error() -> None:
    # The loader skips (and logs) a record it cannot read: it must fail the one way it expects.
    value = CurrentAssignment(5, 4, 1, {TOPIC_ID: frozenset({1})}, {TOPIC_ID: frozenset({2})})
    data = encode_value(value)
    for end in range(len(data)):
        with pytest.raises(ProtocolError):
            decode_value(CURRENT_MEMBER_ASSIGNMENT, data[:end])
    key = encode_key(ConsumerGroupRecordKey(MEMBER_METADATA, "g", "m"))
    for end in range(len(key)):
        with pytest.raises(ProtocolError):
            decode_key(key[:end])


def test_the_bytes_are_kafkas() -> None:
    # Keys: the record type as the int16 prefix, then int16-length strings (not flexible).
    assert encode_key(ConsumerGroupRecordKey(GROUP_METADATA, "g")) == bytes.fromhex("0003 0001 67")
    assert encode_key(ConsumerGroupRecordKey(CURRENT_MEMBER_ASSIGNMENT, "g", "m")) == bytes.fromhex(
        "0008 0001 67 0001 6d")
    # Values: version 0, flexible (compact arrays and strings, a tagged-field count per struct).
    assert encode_value(GroupEpoch(5)) == bytes.fromhex("0000 00000005 00")
    assert encode_value(TargetAssignment({TOPIC_ID: frozenset({2, 1})})) == bytes.fromhex(
        "0000 02" + TOPIC_ID.hex + "03 00000001 00000002 00 00")
    # A member of the consumer protocol has a null ClassicMemberMetadata, which Kafka's generated
    # code writes anyway (tag 0, one byte, 0) and a reader missing it takes for a classic member.
    plain = encode_value(MemberMetadata(None, None, "", "", (), "", -1, None))
    assert plain == bytes.fromhex("0000 00 00 01 01 01 01 ffffffff 00 01 00 01 00")
    # Newer tagged fields (Kafka 4.1's MetadataHash, a later AssignmentEpochs) are skipped.
    assert decode_value(GROUP_METADATA, bytes.fromhex("0000 00000007 01 00 08 0000000000000001")) == GroupEpoch(7)


def test_replay_follows_kafkas_rules() -> None:
    def put(record_type: int, value: object, subject: str = "", group: str = "g") -> None:
        replay.apply(ConsumerGroupRecordKey(record_type, group, subject), value)  # type: ignore[arg-type]

    replay = GroupReplay()
    put(MEMBER_METADATA, MemberMetadata(None, None, "c", "/h", ("events",), "", 1000, None), "a")
    put(MEMBER_METADATA, MemberMetadata("i-b", None, "c", "/h", ("events",), "", 1000, None), "b")
    put(PARTITION_METADATA, PartitionMetadata((SubscribedTopic(TOPIC_ID, "events", 2),)))
    put(GROUP_METADATA, GroupEpoch(2))
    put(TARGET_ASSIGNMENT_MEMBER, TargetAssignment({TOPIC_ID: frozenset({0})}), "a")
    put(TARGET_ASSIGNMENT_MEMBER, TargetAssignment({TOPIC_ID: frozenset({1})}), "b")
    put(TARGET_ASSIGNMENT_METADATA, TargetAssignmentEpoch(2))
    put(CURRENT_MEMBER_ASSIGNMENT, CurrentAssignment(2, 1, 0, {TOPIC_ID: frozenset({0})}, {}), "a")
    put(CURRENT_MEMBER_ASSIGNMENT, CurrentAssignment(1, 0, 1, {}, {TOPIC_ID: frozenset({1})}), "b")
    # A group that was deleted: its tombstones end with the group's.
    put(GROUP_METADATA, GroupEpoch(1), group="gone")
    put(GROUP_METADATA, None, group="gone")
    [group] = replay.build()
    assert (group.group_id, group.group_epoch, group.assignment_epoch) == ("g", 2, 2)
    assert group.subscription_metadata == {"events": (TOPIC_ID, 2)}
    a, b = group.members["a"], group.members["b"]
    assert (a.member_epoch, a.previous_member_epoch, a.state, a.assigned) == (
        2, 1, MemberState.STABLE, {TOPIC_ID: frozenset({0})})
    assert (b.state, b.pending_revocation, group.static_members) == (
        MemberState.UNREVOKED_PARTITIONS, {TOPIC_ID: frozenset({1})}, {"i-b": "b"})
    assert group.owner_epoch(TOPIC_ID, 1) == 1  # b still owns what it must give up
    # b leaves: Kafka's three tombstones.
    for record_type in (CURRENT_MEMBER_ASSIGNMENT, TARGET_ASSIGNMENT_MEMBER, MEMBER_METADATA):
        put(record_type, None, "b")
    [group] = replay.build()
    assert set(group.members) == {"a"} and set(group.target) == {"a"} and group.static_members == {}


# -- inside a real broker ---------------------------------------------------------------------------


async def started(data: Path, clock: ManualClock) -> Broker:
    broker = make_broker(data)
    broker.groups.clock = clock  # set before start: the restored sessions are timed on it
    await broker.start()
    return broker


def join(member_id: str, group: str = "g", **fields: object) -> Heartbeat:
    subscription = {"subscribed_topic_names": ["events"]} if "subscribed_topic_regex" not in fields else {}
    return Heartbeat(group, member_id, 0, rebalance_timeout_ms=REBALANCE_MS, owned=[],
                     **{**subscription, **fields})  # type: ignore[arg-type]


def offsets_records(broker: Broker) -> list[Replayed]:
    return [r for r in broker.groups.topic.replay() if isinstance(r, Replayed)]


def consumer_group_records(broker: Broker) -> list[tuple[int, str, bool]]:
    """(record type, member id or regex, tombstone) of every consumer-group record, in log order."""
    return [(r.key.record_type, r.key.subject, r.value is None) for r in offsets_records(broker)
            if isinstance(r.key, ConsumerGroupRecordKey)]


def test_a_heartbeat_writes_only_what_changed(tmp_path: Path) -> None:
    async def scenario() -> None:
        broker = await started(tmp_path, ManualClock())
        try:
            broker.topics.create(TopicSpec("events", 2))
            groups = broker.groups
            a = groups.consumer_heartbeat(join("a"))
            assert consumer_group_records(broker) == [
                (MEMBER_METADATA, "a", False), (PARTITION_METADATA, "", False), (GROUP_METADATA, "", False),
                (TARGET_ASSIGNMENT_MEMBER, "a", False), (TARGET_ASSIGNMENT_METADATA, "", False),
                (CURRENT_MEMBER_ASSIGNMENT, "a", False)]
            written = len(consumer_group_records(broker))
            for _ in range(3):  # a steady member's heartbeats change nothing
                a = groups.consumer_heartbeat(Heartbeat("g", "a", a.member_epoch, owned=_owned(a.assignment)))
            assert len(consumer_group_records(broker)) == written

            # b joins: its metadata, the epoch, both targets, and b's own current assignment (a is
            # told to revoke by its next heartbeat, which writes a's).
            b = groups.consumer_heartbeat(join("b"))
            assert consumer_group_records(broker)[written:] == [
                (MEMBER_METADATA, "b", False), (GROUP_METADATA, "", False), (TARGET_ASSIGNMENT_MEMBER, "a", False),
                (TARGET_ASSIGNMENT_MEMBER, "b", False), (TARGET_ASSIGNMENT_METADATA, "", False),
                (CURRENT_MEMBER_ASSIGNMENT, "b", False)]
            written = len(consumer_group_records(broker))
            a = groups.consumer_heartbeat(Heartbeat("g", "a", a.member_epoch, owned=_owned(a.assignment)))
            assert consumer_group_records(broker)[written:] == [(CURRENT_MEMBER_ASSIGNMENT, "a", False)]

            # b leaves: its three tombstones and the group's new epoch (the new target comes with
            # the next heartbeat, as in Kafka).
            written = len(consumer_group_records(broker))
            groups.consumer_heartbeat(Heartbeat("g", "b", -1))
            assert consumer_group_records(broker)[written:] == [
                (CURRENT_MEMBER_ASSIGNMENT, "b", True), (TARGET_ASSIGNMENT_MEMBER, "b", True),
                (MEMBER_METADATA, "b", True), (GROUP_METADATA, "", False)]
            del b
        finally:
            await broker.stop()

    asyncio.run(scenario())


def _owned(assignment: dict[uuid.UUID, list[int]] | None) -> list[tuple[uuid.UUID, list[int]]]:
    return [(t, ps) for t, ps in (assignment or {}).items()]


def _persisted_view(group: ConsumerGroup) -> tuple[object, ...]:
    view = snapshot(group)
    return (view.epoch, view.topics, view.assignment_epoch, {m: (s.metadata, s.current) for m, s in view.members.items()},
            view.targets, view.regexes, dict(group.static_members))


def test_groups_come_back_after_a_restart_and_their_members_are_not_fenced(tmp_path: Path) -> None:
    async def scenario() -> None:
        clock = ManualClock()
        broker = await started(tmp_path, clock)
        broker.topics.create(TopicSpec("events", 4))
        broker.topics.create(TopicSpec("events-extra", 2))
        groups = broker.groups
        try:
            # g: a dynamic member, a static one, one subscribed by regex; b is left revoking.
            a = groups.consumer_heartbeat(join("a", server_assignor="range"))
            owned_by_a = _owned(a.assignment)
            s = groups.consumer_heartbeat(join("s", instance_id="static-1", rack_id="rack-a"))
            r = groups.consumer_heartbeat(join("r", subscribed_topic_regex="^events-.*"))
            a = groups.consumer_heartbeat(Heartbeat("g", "a", a.member_epoch, owned=owned_by_a))
            # mixed: a consumer group with a classic member.
            n = groups.consumer_heartbeat(Heartbeat("mixed", "n", 0, rebalance_timeout_ms=REBALANCE_MS,
                                                    subscribed_topic_names=["events"], owned=[]))
            c = (await groups.join(classic_join("mixed"))).member_id
            joined = await groups.join(classic_join("mixed", c))
            assert joined.error == E.NO_ERROR
            classic_answer = groups.heartbeat("mixed", joined.generation_id, c, None)
            # gone: a group deleted after its member left.
            groups.consumer_heartbeat(join("x", group="gone"))
            groups.consumer_heartbeat(Heartbeat("gone", "x", -1))
            assert groups.delete_groups(["gone"]) == {"gone": E.NO_ERROR}
            before = {g: _persisted_view(groups.consumer.groups[g]) for g in ("g", "mixed")}
            assert groups.consumer.groups["g"].members["a"].state is MemberState.UNREVOKED_PARTITIONS
        finally:
            await broker.stop()

        broker = await started(tmp_path, clock)
        groups = broker.groups
        try:
            assert set(groups.consumer.groups) == {"g", "mixed"}
            assert {g: _persisted_view(groups.consumer.groups[g]) for g in ("g", "mixed")} == before
            assert groups.describe_consumer_group("g").assignor_name == "range"
            assert groups.consumer.groups["mixed"].members[c].classic is not None
            # Every member heartbeats at the epoch it was told: none is fenced.
            a = groups.consumer_heartbeat(Heartbeat("g", "a", a.member_epoch, owned=[]))
            for member, answer in (("s", s), ("r", r)):
                groups.consumer_heartbeat(Heartbeat("g", member, answer.member_epoch,
                                                    instance_id="static-1" if member == "s" else None,
                                                    owned=_owned(answer.assignment)))
            groups.consumer_heartbeat(Heartbeat("mixed", "n", n.member_epoch, owned=_owned(n.assignment)))
            assert groups.heartbeat("mixed", joined.generation_id, c, None) == classic_answer
            # The sessions run again from the load: a silent member is fenced after its timeout.
            clock.advance(46)
            assert set(groups.consumer.groups["g"].members) == set()
            try:
                groups.consumer_heartbeat(Heartbeat("g", "a", a.member_epoch, owned=[]))
                raise AssertionError("a was not fenced")
            except KafkaError as e:
                assert e.code == E.UNKNOWN_MEMBER_ID
        finally:
            await broker.stop()

    asyncio.run(scenario())


def test_a_group_gone_from_the_log_stays_gone(tmp_path: Path) -> None:
    async def scenario() -> None:
        clock = ManualClock()
        broker = await started(tmp_path, clock)
        try:
            broker.topics.create(TopicSpec("events", 2))
            broker.groups.consumer_heartbeat(join("a"))
            broker.groups.consumer_heartbeat(Heartbeat("g", "a", -1))
            assert broker.groups.delete_groups(["g"]) == {"g": E.NO_ERROR}
            # An empty consumer group becomes classic on a JoinGroup: its records are deleted too.
            broker.groups.consumer_heartbeat(join("b", group="h"))
            broker.groups.consumer_heartbeat(Heartbeat("h", "b", -1))
            await broker.groups.join(classic_join("h"))
        finally:
            await broker.stop()
        broker = await started(tmp_path, clock)
        try:
            assert broker.groups.consumer.groups == {}
            assert consumer_group_records(broker)[-3:] == [  # h's tombstones, the group's last
                (TARGET_ASSIGNMENT_METADATA, "", True), (PARTITION_METADATA, "", True), (GROUP_METADATA, "", True)]
        finally:
            await broker.stop()

    asyncio.run(scenario())
