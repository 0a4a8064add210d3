"""Mixed groups (Kafka 4.0's online upgrade and downgrade) on the state machine, driven by hand
with hand-driven time: a classic group with members becomes a consumer group when a
consumer-protocol member joins, its classic members keep working through JoinGroup, SyncGroup,
Heartbeat and LeaveGroup (told to rejoin when their assignment must change, revoking before
others get partitions), and the group goes back to classic when the last consumer-protocol
member leaves. The rules are those of Kafka's GroupMetadataManager (classicGroupJoinToConsumerGroup,
classicGroupSyncToConsumerGroup, classicGroupHeartbeatToConsumerGroup, convertToConsumerGroup,
convertToClassicGroup)."""

from __future__ import annotations

import asyncio
import struct
import uuid
from collections.abc import Iterable
from pathlib import Path

import pytest

from kbroker.coordinator.classic_members import ClassicMembers
from kbroker.coordinator.consumer_group import ConsumerGroup, ConsumerGroups, Heartbeat, MigrationPolicy
from kbroker.coordinator.group import Group, GroupState, Member
from kbroker.coordinator.group_conversion import (
    classic_group_from_consumer_group,
    consumer_group_from_classic_group,
    parse_assignment,
    upgrade_refusal,
)
from kbroker.coordinator.group_membership import JoinRequest
from kbroker.coordinator.group_offsets import OffsetCommit
from kbroker.coordinator.reconciliation import MemberState
from protocol.errors import ErrorCode, KafkaError
from protocol.messages import consumer_protocol_assignment, consumer_protocol_subscription
from tests.test_consumer_group_coordinator import clocked
from tests.test_consumer_group_protocol import Client, Topics, engine, error_of, no_partition_owned_twice

E = ErrorCode
CLASSIC_SESSION_MS = 10_000
REBALANCE_MS = 30_000


def subscription(topics: Iterable[str], owned: dict[str, list[int]] | None = None, version: int = 1) -> bytes:
    body = {"topics": list(topics), "user_data": None,
            "owned_partitions": [{"topic": t, "partitions": ps} for t, ps in (owned or {}).items()]}
    return struct.pack(">h", version) + consumer_protocol_subscription.SCHEMA[version].build(body)


def assignment_bytes(partitions: dict[str, list[int]]) -> bytes:
    body = {"assigned_partitions": [{"topic": t, "partitions": ps} for t, ps in partitions.items()], "user_data": None}
    return struct.pack(">h", 1) + consumer_protocol_assignment.SCHEMA[1].build(body)


class ClassicClient:
    """One eager classic consumer as a client drives it: on REBALANCE_IN_PROGRESS it gives up
    everything and rejoins (owning nothing), then syncs to learn its assignment."""

    def __init__(self, members: ClassicMembers, group: ConsumerGroup, member_id: str, topics: Topics,
                 protocol: str = "range", generation: int = -1) -> None:
        self.members, self.group, self.member_id, self.topics = members, group, member_id, topics
        self.protocol, self.generation = protocol, generation
        self.owned: dict[str, list[int]] = {}

    def join(self, now: int, topics: Iterable[str] = ("t",), owned: dict[str, list[int]] | None = None) -> int:
        request = JoinRequest(self.group.group_id, self.member_id, None, "classic-client", "/127.0.0.1",
                              CLASSIC_SESSION_MS, REBALANCE_MS, "consumer",
                              [(self.protocol, subscription(topics, owned))], require_known_member_id=True)
        result = self.members.join(self.group, request, now)
        if result.error == E.NO_ERROR:
            assert (result.protocol_type, result.protocol_name, result.leader, result.members) == (
                "consumer", self.protocol, "", [])
            self.generation = result.generation_id
        return result.error

    def sync(self, now: int) -> int:
        result = self.members.sync(self.group, self.member_id, None, self.generation, "consumer", self.protocol, now)
        if result.error == E.NO_ERROR:
            self.owned = parse_assignment(result.assignment)[0]
        return result.error

    def beat(self, now: int) -> int:
        return self.members.heartbeat(self.group, self.member_id, None, self.generation, now)

    def rebalance(self, now: int) -> None:
        """What an eager client does when told to rejoin: revoke everything, join, sync."""
        self.owned = {}
        assert self.join(now) == E.NO_ERROR
        assert self.sync(now) == E.NO_ERROR

    def partitions(self) -> set[tuple[str, int]]:
        return {(t, p) for t, ps in self.owned.items() for p in ps}


def classic_group(generation: int = 5, **assigned: list[int]) -> Group:
    """A Stable classic group of eager consumers on topic t, member name -> its partitions of t."""
    group = Group("g", state=GroupState.STABLE, protocol_type="consumer", protocol_name="range",
                  generation_id=generation)
    for name, partitions in assigned.items():
        group.add(Member(name, None, "classic-client", "/127.0.0.1", REBALANCE_MS, CLASSIC_SESSION_MS, "consumer",
                         [("range", subscription(["t"]))], assignment_bytes({"t": partitions})))
    return group


def upgraded(topics: Topics, groups: ConsumerGroups, now: int = 0) -> tuple[ConsumerGroup, Client]:
    """The classic group {c1: 0-2, c2: 3-5} of topic t, upgraded by consumer-protocol member n."""
    converted = consumer_group_from_classic_group(classic_group(c1=[0, 1, 2], c2=[3, 4, 5]), topics, now)
    newcomer = Client(groups, "n")
    joined = groups.heartbeat(Heartbeat("g", "n", 0, rebalance_timeout_ms=REBALANCE_MS, subscribed_topic_names=["t"],
                                        owned=[]), now, converted)
    newcomer.epoch = joined.member_epoch
    return groups.groups["g"], newcomer


# -- upgrade ----------------------------------------------------------------------------------------

def test_a_classic_group_becomes_a_consumer_group_keeping_each_members_partitions() -> None:
    topics = Topics(t=6)
    converted = consumer_group_from_classic_group(classic_group(c1=[0, 1, 2], c2=[3, 4, 5]), topics, 1_000)
    t = topics.ids["t"]
    assert (converted.group_epoch, converted.assignment_epoch) == (5, 5)
    c1 = converted.members["c1"]
    assert (c1.member_epoch, c1.state, c1.assigned, c1.subscribed_topic_names) == (
        5, MemberState.STABLE, {t: frozenset({0, 1, 2})}, frozenset({"t"}))
    assert c1.uses_classic_protocol and c1.classic is not None and c1.classic.session_timeout_ms == CLASSIC_SESSION_MS
    assert c1.session_deadline_ms == 1_000 + CLASSIC_SESSION_MS  # its own session, not the group's
    assert converted.target == {"c1": {t: frozenset({0, 1, 2})}, "c2": {t: frozenset({3, 4, 5})}}


def test_the_newcomer_gets_partitions_only_as_classic_members_rejoin_and_release_them() -> None:
    topics = Topics(t=6)
    groups = engine(topics)
    members = ClassicMembers(groups)
    group, n = upgraded(topics, groups)
    assert group.group_epoch == 6 and n.epoch == 6
    assert group.members["n"].state is MemberState.UNRELEASED_PARTITIONS  # all six are still owned
    c1 = ClassicClient(members, group, "c1", topics, generation=5)
    c2 = ClassicClient(members, group, "c2", topics, generation=5)
    c1.owned, c2.owned = {"t": [0, 1, 2]}, {"t": [3, 4, 5]}

    assert c1.beat(1) == E.REBALANCE_IN_PROGRESS  # the group epoch moved past it
    assert group.members["c1"].join_deadline_ms == 1 + REBALANCE_MS
    c1.rebalance(2)
    assert c1.generation == 6 and len(c1.partitions()) == 2 and c1.partitions() < {("t", 0), ("t", 1), ("t", 2)}
    assert group.members["c1"].join_deadline_ms is None and group.members["c1"].sync_deadline_ms is None
    no_partition_owned_twice(groups)
    assert c1.beat(3) == E.NO_ERROR

    n.beat(4)
    assert len(n.partitions(topics)) == 1  # what c1 released; c2 still has the rest
    c2.rebalance(5)
    n.beat(6)
    assert len(n.partitions(topics)) == 2 and len(c2.partitions()) == 2
    assert n.partitions(topics) | c1.partitions() | c2.partitions() == {("t", p) for p in range(6)}
    no_partition_owned_twice(groups)
    assert group.state.value == "Stable"


def test_a_cooperative_classic_member_revokes_first_and_rejoins_to_finish() -> None:
    topics = Topics(t=6)
    groups = engine(topics)
    members = ClassicMembers(groups)
    group, n = upgraded(topics, groups)
    c1 = ClassicClient(members, group, "c1", topics, generation=5)
    # A cooperative client rejoins still owning its partitions: it must give one up first.
    assert c1.join(1, owned={"t": [0, 1, 2]}) == E.NO_ERROR
    assert c1.generation == 5 and group.members["c1"].state is MemberState.UNREVOKED_PARTITIONS
    assert c1.sync(2) == E.NO_ERROR
    assert len(c1.partitions()) == 2  # the one to revoke is left out of its assignment
    assert c1.beat(3) == E.REBALANCE_IN_PROGRESS  # revoke, then rejoin
    n.beat(4)
    assert n.partitions(topics) == set()  # not before c1 has said it let go
    assert c1.join(5, owned=c1.owned) == E.NO_ERROR
    assert c1.generation == 6 and group.members["c1"].state is MemberState.STABLE
    n.beat(6)
    assert len(n.partitions(topics)) == 1
    no_partition_owned_twice(groups)


def test_classic_requests_get_kafkas_answers() -> None:
    topics = Topics(t=6)
    groups = engine(topics)
    members = ClassicMembers(groups)
    group, _ = upgraded(topics, groups)
    c1 = ClassicClient(members, group, "c1", topics, generation=5)
    assert members.heartbeat(group, "c1", None, 4, 1) == E.ILLEGAL_GENERATION
    assert members.heartbeat(group, "nobody", None, 5, 1) == E.UNKNOWN_MEMBER_ID
    assert members.heartbeat(group, "n", None, 6, 1) == E.UNKNOWN_MEMBER_ID  # n speaks the consumer protocol
    assert members.sync(group, "c1", None, 5, "consumer", "range", 1).error == E.REBALANCE_IN_PROGRESS
    c1.rebalance(2)
    assert members.sync(group, "c1", None, 6, "consumer", "roundrobin", 3).error == E.INCONSISTENT_GROUP_PROTOCOL
    assert members.sync(group, "c1", None, 6, "other", "range", 3).error == E.INCONSISTENT_GROUP_PROTOCOL

    def join(member_id: str, protocols: list[tuple[str, bytes]], protocol_type: str = "consumer") -> int:
        request = JoinRequest("g", member_id, None, "c", "/h", CLASSIC_SESSION_MS, REBALANCE_MS, protocol_type,
                              protocols, require_known_member_id=True)
        return members.join(group, request, 4).error

    assert join("", [("range", subscription(["t"]))]) == E.MEMBER_ID_REQUIRED
    # A protocol no classic member of the group supports, or another protocol type, is refused.
    assert join("x", [("roundrobin", subscription(["t"]))]) == E.INCONSISTENT_GROUP_PROTOCOL
    assert join("x", [("range", subscription(["t"]))], "connect") == E.INCONSISTENT_GROUP_PROTOCOL
    assert join("x", [("range", b"\x00")]) == E.INCONSISTENT_GROUP_PROTOCOL  # no consumer protocol subscription
    assert join("x", [("range", subscription(["t"]))]) == E.NO_ERROR  # a known id joins at once
    assert group.members["x"].uses_classic_protocol


def test_offsets_of_classic_members_are_checked_by_generation() -> None:
    topics = Topics(t=6)
    groups = engine(topics)
    group, n = upgraded(topics, groups)
    # Below OffsetCommit v9 (all a classic client speaks), with its generation as the epoch.
    groups.validate_offset_commit(group, "c1", 5, False, 8)
    assert error_of(lambda: groups.validate_offset_commit(group, "c1", 4, False, 8))[0] == E.ILLEGAL_GENERATION
    assert error_of(lambda: groups.validate_offset_commit(group, "n", n.epoch, False, 8))[0] == E.UNSUPPORTED_VERSION


def test_classic_members_leave_with_one_new_epoch() -> None:
    topics = Topics(t=6)
    groups = engine(topics)
    members = ClassicMembers(groups)
    group, _ = upgraded(topics, groups)
    epoch = group.group_epoch
    assert members.leave(group, [("c1", None), ("c2", None), ("nobody", None), ("n", None)]) == [
        E.NO_ERROR, E.NO_ERROR, E.UNKNOWN_MEMBER_ID, E.UNKNOWN_MEMBER_ID]
    assert set(group.members) == {"n"} and group.group_epoch == epoch + 1


# -- timeouts ---------------------------------------------------------------------------------------

def test_a_silent_classic_member_is_fenced_after_its_own_session_timeout() -> None:
    topics = Topics(t=6)
    groups = engine(topics)
    members = ClassicMembers(groups)
    group, _ = upgraded(topics, groups)
    c2 = ClassicClient(members, group, "c2", topics, generation=5)
    c2.rebalance(0)
    assert groups.expire("g", "c1", CLASSIC_SESSION_MS - 1) is not None
    assert c2.beat(CLASSIC_SESSION_MS - 1) == E.NO_ERROR
    assert groups.expire("g", "c1", CLASSIC_SESSION_MS) is None  # well before the group's 45 s
    assert "c1" not in group.members and "c2" in group.members


def test_a_classic_member_that_does_not_rejoin_or_sync_in_time_is_fenced() -> None:
    topics = Topics(t=6)
    groups = engine(topics)
    members = ClassicMembers(groups)
    group, _ = upgraded(topics, groups)
    c1 = ClassicClient(members, group, "c1", topics, generation=5)
    c2 = ClassicClient(members, group, "c2", topics, generation=5)
    assert c1.beat(0) == E.REBALANCE_IN_PROGRESS
    for now in range(5_000, REBALANCE_MS, 5_000):  # it keeps its session but never rejoins
        assert c1.beat(now) == E.REBALANCE_IN_PROGRESS
    assert groups.expire("g", "c1", REBALANCE_MS) is None
    assert "c1" not in group.members

    assert c2.join(REBALANCE_MS) == E.NO_ERROR  # joined, but its SyncGroup never comes
    for now in range(REBALANCE_MS + 5_000, 2 * REBALANCE_MS, 5_000):
        c2.beat(now)  # heartbeats keep its session, not its time to sync
    assert groups.expire("g", "c2", 2 * REBALANCE_MS - 1) is not None
    assert groups.expire("g", "c2", 2 * REBALANCE_MS) is None
    assert set(group.members) == {"n"}


# -- downgrade and the migration policy --------------------------------------------------------------

def test_the_last_consumer_protocol_member_leaving_turns_the_group_classic() -> None:
    topics = Topics(t=6)
    groups = engine(topics)
    members = ClassicMembers(groups)
    group, n = upgraded(topics, groups)
    for client in (ClassicClient(members, group, "c1", topics, generation=5),
                   ClassicClient(members, group, "c2", topics, generation=5)):
        client.rebalance(1)
    n.beat(2)
    epoch = group.group_epoch
    n.leave(3)
    assert "g" not in groups.groups
    [(left, leaving)] = groups.take_downgraded()
    assert leaving == "n"
    classic = classic_group_from_consumer_group(left, leaving, topics)
    assert (classic.state, classic.generation_id, classic.protocol_type, classic.protocol_name) == (
        GroupState.STABLE, epoch, "consumer", "range")
    assert set(classic.members) == {"c1", "c2"}
    # Each holds its target (n's partitions wait for the classic rebalance that follows).
    t = topics.ids["t"]
    for member_id, member in classic.members.items():
        assert parse_assignment(member.assignment)[0]["t"] == sorted(left.target[member_id][t])


def test_a_crashed_consumer_protocol_member_turns_the_group_classic_too() -> None:
    topics = Topics(t=6)
    groups = engine(topics)
    group, n = upgraded(topics, groups)
    assert groups.expire("g", "n", 45_000) is None  # its session ran out
    assert [g.group_id for g, _ in groups.take_downgraded()] == ["g"]


@pytest.mark.parametrize(("policy", "upgrade", "downgrade"), [
    (MigrationPolicy.BIDIRECTIONAL, True, True),
    (MigrationPolicy.UPGRADE, True, False),
    (MigrationPolicy.DOWNGRADE, False, True),
    (MigrationPolicy.DISABLED, False, False),
])
def test_the_migration_policy_decides_which_conversions_happen(
    policy: MigrationPolicy, upgrade: bool, downgrade: bool
) -> None:
    assert (upgrade_refusal(classic_group(c1=[0]), policy.upgrade_enabled, 100) is None) == upgrade
    topics = Topics(t=6)
    groups = engine(topics, migration_policy=policy)
    group, n = upgraded(topics, groups)
    n.leave(1)
    assert bool(groups.take_downgraded()) == downgrade
    # Without a downgrade the group stays a consumer group of classic members.
    assert ("g" in groups.groups) == (not downgrade)


def test_no_downgrade_past_the_classic_group_size_limit_or_with_other_consumer_members() -> None:
    topics = Topics(t=6)
    groups = engine(topics, classic_max_size=1)
    group, n = upgraded(topics, groups)
    n.leave(1)
    assert groups.take_downgraded() == [] and set(groups.groups["g"].members) == {"c1", "c2"}

    groups = engine(topics)
    group, n = upgraded(topics, groups)
    other = Client(groups, "o")
    other.join(1, ["t"])
    n.leave(2)
    assert groups.take_downgraded() == []  # o still speaks the consumer protocol


def test_the_upgrade_is_refused_for_other_protocol_types_and_oversized_groups() -> None:
    group = classic_group(c1=[0], c2=[1])
    assert upgrade_refusal(group, True, 2) is None
    assert upgrade_refusal(group, True, 1) == "the group size exceeds the consumer group maximum size"
    group.protocol_type = "connect"
    assert upgrade_refusal(group, True, 2) == "the group does not use the consumer embedded protocol"
    malformed = classic_group(c1=[0])
    malformed.members["c1"].protocols = [("range", b"\x00\x01garbage")]
    assert error_of(lambda: consumer_group_from_classic_group(malformed, Topics(t=1), 0)) == (
        E.GROUP_ID_NOT_FOUND, "Cannot upgrade the classic group g to consumer group because the embedded "
        "consumer protocol is malformed.")


def test_nothing_changes_when_the_upgrading_heartbeat_is_refused() -> None:
    topics = Topics(t=6)
    groups = engine(topics)
    converted = consumer_group_from_classic_group(classic_group(c1=[0, 1, 2]), topics, 0)
    with pytest.raises(KafkaError):
        groups.heartbeat(Heartbeat("g", "n", 0, rebalance_timeout_ms=1, subscribed_topic_regex="(?=x)",
                                   owned=[]), 0, converted)
    assert "g" not in groups.groups


def test_a_topic_id_unknown_to_the_coordinator_is_dropped_from_a_converted_assignment() -> None:
    topics = Topics(t=6)
    group = classic_group(c1=[0])
    group.members["c1"].assignment = assignment_bytes({"t": [0], "gone": [0]})
    converted = consumer_group_from_classic_group(group, topics, 0)
    assert converted.members["c1"].assigned == {topics.ids["t"]: frozenset({0})}
    assert uuid.UUID(int=0) not in converted.members["c1"].assigned


# -- inside a real broker's group coordinator, on a manual clock -------------------------------------

def classic_join(group: str, member_id: str = "", owned: dict[str, list[int]] | None = None) -> JoinRequest:
    return JoinRequest(group, member_id, None, "classic-client", "/127.0.0.1", CLASSIC_SESSION_MS, REBALANCE_MS,
                       "consumer", [("range", subscription(["events"], owned))], require_known_member_id=True)


def test_a_group_upgrades_and_downgrades_online_keeping_its_offsets(tmp_path: Path) -> None:
    async def scenario() -> None:
        broker, clock = await clocked(tmp_path)
        try:
            groups = broker.groups
            # A classic group of one member, which owns both partitions and commits.
            member_id = (await groups.join(classic_join("g"))).member_id
            joining = asyncio.create_task(groups.join(classic_join("g", member_id)))
            await asyncio.sleep(0)
            clock.advance(3.1)  # the initial rebalance delay
            joined = await asyncio.wait_for(joining, 10)
            assert (joined.error, joined.leader, joined.generation_id) == (E.NO_ERROR, member_id, 1)
            everything = assignment_bytes({"events": [0, 1]})
            synced = await groups.sync("g", 1, member_id, None, "consumer", "range", {member_id: everything})
            assert synced.error == E.NO_ERROR
            assert groups.commit("g", 1, member_id, None, [OffsetCommit("events", 0, 10, -1, None)]) == [E.NO_ERROR]

            # A consumer-protocol member joins: the group becomes a consumer group (upgrade).
            n = groups.consumer_heartbeat(Heartbeat("g", "n", 0, rebalance_timeout_ms=REBALANCE_MS,
                                                    subscribed_topic_names=["events"], owned=[]))
            assert n.member_epoch == 2 and n.assignment == {}  # both partitions are still the classic member's
            assert [(g.group_id, g.group_type) for g in groups.list_groups()] == [("g", "consumer")]
            assert groups.heartbeat("g", 1, member_id, None) == E.REBALANCE_IN_PROGRESS
            rejoined = await groups.join(classic_join("g", member_id))
            assert (rejoined.error, rejoined.generation_id, rejoined.leader) == (E.NO_ERROR, 2, "")
            synced = await groups.sync("g", 2, member_id, None, "consumer", "range", {})
            [(kept_topic, kept)] = parse_assignment(synced.assignment)[0].items()
            assert kept_topic == "events" and len(kept) == 1
            n = groups.consumer_heartbeat(Heartbeat("g", "n", 2, owned=[]))
            assert [len(ps) for ps in (n.assignment or {}).values()] == [1]
            assert groups.commit("g", 1, member_id, None, [OffsetCommit("events", 0, 11, -1, None)]) == [
                E.ILLEGAL_GENERATION]
            assert groups.commit("g", 2, member_id, None, [OffsetCommit("events", 0, 12, -1, None)]) == [E.NO_ERROR]

            # The consumer-protocol member leaves: the group is classic again and rebalances.
            groups.consumer_heartbeat(Heartbeat("g", "n", 2, owned=[]))
            groups.consumer_heartbeat(Heartbeat("g", "n", -1))
            assert [(g.group_id, g.group_type, g.state) for g in groups.list_groups()] == [
                ("g", "classic", "PreparingRebalance")]
            assert groups.heartbeat("g", 2, member_id, None) == E.REBALANCE_IN_PROGRESS
            again = await asyncio.wait_for(groups.join(classic_join("g", member_id)), 10)
            assert (again.error, again.generation_id, again.leader) == (E.NO_ERROR, 3, member_id)
            synced = await groups.sync("g", 3, member_id, None, "consumer", "range", {member_id: everything})
            assert synced.error == E.NO_ERROR and groups.groups["g"].state is GroupState.STABLE
            assert groups.fetch_offsets("g", None)[("events", 0)].offset == 12
        finally:
            await broker.stop()

    asyncio.run(scenario())


def test_a_silent_classic_member_of_a_consumer_group_is_fenced_by_its_timer(tmp_path: Path) -> None:
    async def scenario() -> None:
        broker, clock = await clocked(tmp_path)
        try:
            groups = broker.groups
            n = groups.consumer_heartbeat(Heartbeat("g", "n", 0, rebalance_timeout_ms=REBALANCE_MS,
                                                    subscribed_topic_names=["events"], owned=[]))
            member_id = (await groups.join(classic_join("g"))).member_id
            assert (await groups.join(classic_join("g", member_id))).error == E.NO_ERROR
            assert (await groups.sync("g", 2, member_id, None, None, None, {})).error == E.NO_ERROR
            for _ in range(4):  # n heartbeats every 5 s; the classic member says nothing
                clock.advance(5)
                n = groups.consumer_heartbeat(Heartbeat("g", "n", n.member_epoch, owned=[]))
            assert set(groups.consumer.groups["g"].members) == {"n"}  # its 10 s session ran out
            assert groups.heartbeat("g", 2, member_id, None) == E.UNKNOWN_MEMBER_ID
        finally:
            await broker.stop()

    asyncio.run(scenario())


def test_the_config_accepts_exactly_the_coordinators_migration_policies() -> None:
    from kbroker.config import MIGRATION_POLICIES
    from kbroker.coordinator.consumer_group import MigrationPolicy

    assert set(MIGRATION_POLICIES) == {policy.value for policy in MigrationPolicy}
