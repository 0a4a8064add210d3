"""The consumer protocol inside a real broker's group coordinator, in-process, on a manual clock:
the session timer fences a silent member, offsets are committed by member epoch, an empty group
changes protocol in either direction keeping its offsets (mixed groups: test_mixed_groups.py)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from kbroker.broker import Broker
from kbroker.cluster.topics import TopicSpec
from kbroker.coordinator.consumer_group import Heartbeat
from kbroker.coordinator.group import GroupState
from kbroker.coordinator.group_offsets import OffsetCommit
from protocol.errors import ErrorCode, KafkaError
from tests.manual_clock import ManualClock
from tests.test_group_coordinator import consumer_join, started

E = ErrorCode


async def clocked(data: Path) -> tuple[Broker, ManualClock]:
    broker = await started(data)
    clock = ManualClock()
    broker.groups.clock = clock
    broker.topics.create(TopicSpec("events", 2))
    return broker, clock


def join(member_id: str, group: str = "g") -> Heartbeat:
    return Heartbeat(group, member_id, 0, rebalance_timeout_ms=30_000, subscribed_topic_names=["events"], owned=[])


def test_a_silent_member_is_fenced_by_the_session_timer(tmp_path: Path) -> None:
    async def scenario() -> None:
        broker, clock = await clocked(tmp_path)
        try:
            groups = broker.groups
            groups.consumer_heartbeat(join("a"))
            b = groups.consumer_heartbeat(join("b"))
            for _ in range(10):  # b heartbeats every 5 s; a says nothing
                clock.advance(5)
                b = groups.consumer_heartbeat(Heartbeat("g", "b", b.member_epoch, owned=[]))
            assert set(groups.consumer.groups["g"].members) == {"b"}  # a's 45 s session ran out
            try:
                groups.consumer_heartbeat(Heartbeat("g", "a", 1, owned=[]))
                raise AssertionError("a was not fenced")
            except KafkaError as e:
                assert e.code == E.UNKNOWN_MEMBER_ID
        finally:
            await broker.stop()

    asyncio.run(scenario())


def test_offsets_are_committed_by_member_epoch_and_survive_the_group_changing_protocol(tmp_path: Path) -> None:
    async def scenario() -> None:
        broker, _ = await clocked(tmp_path)
        try:
            groups = broker.groups
            answer = groups.consumer_heartbeat(join("a"))
            commit = [OffsetCommit("events", 0, 42, -1, None)]
            assert groups.commit("g", answer.member_epoch - 1, "a", None, commit) == [E.STALE_MEMBER_EPOCH]
            assert groups.commit("g", answer.member_epoch, "a", None, commit, api_version=8) == [E.UNSUPPORTED_VERSION]
            assert groups.commit("g", answer.member_epoch, "a", None, commit) == [E.NO_ERROR]
            assert [g.group_type for g in groups.list_groups()] == ["consumer"]

            # A classic member may join a group with consumer-protocol members (a mixed group), if
            # its subscription is the consumer protocol's (this one's is not)...
            first = await groups.join(consumer_join("g", session_ms=10_000))
            assert first.error == E.MEMBER_ID_REQUIRED
            refused = await groups.join(consumer_join("g", first.member_id, session_ms=10_000))
            assert refused.error == E.INCONSISTENT_GROUP_PROTOCOL
            # ...and once they are gone the group goes classic, its offsets with it.
            groups.consumer_heartbeat(Heartbeat("g", "a", -1))
            first = await groups.join(consumer_join("g", session_ms=10_000))
            assert first.error == E.MEMBER_ID_REQUIRED
            assert groups.fetch_offsets("g", None)[("events", 0)].offset == 42
            assert [g.group_type for g in groups.list_groups()] == ["classic"]

            # A classic group with members is no consumer group; an empty one becomes one.
            groups.groups["g"].state = GroupState.PREPARING_REBALANCE
            try:
                groups.consumer_heartbeat(join("b"))
                raise AssertionError("a non-empty classic group was taken over")
            except KafkaError as e:
                assert (e.code, e.message) == (E.GROUP_ID_NOT_FOUND, "Group g is not a consumer group.")
            groups.groups["g"].state = GroupState.EMPTY
            groups.groups["g"].pending_members.clear()
            assert groups.consumer_heartbeat(join("b")).member_epoch > 0
            assert groups.fetch_offsets("g", None)[("events", 0)].offset == 42
        finally:
            await broker.stop()

    asyncio.run(scenario())


def test_consumer_groups_are_deleted_only_when_empty(tmp_path: Path) -> None:
    async def scenario() -> None:
        broker, _ = await clocked(tmp_path)
        try:
            groups = broker.groups
            answer = groups.consumer_heartbeat(join("a"))
            groups.commit("g", answer.member_epoch, "a", None, [OffsetCommit("events", 1, 7, -1, None)])
            assert groups.delete_groups(["g"]) == {"g": E.NON_EMPTY_GROUP}
            assert groups.delete_offsets("g", [("events", 0)])[1] == {("events", 0): E.GROUP_SUBSCRIBED_TO_TOPIC}
            groups.consumer_heartbeat(Heartbeat("g", "a", -1))
            assert groups.delete_groups(["g"]) == {"g": E.NO_ERROR}
            assert groups.list_groups() == [] and groups.fetch_offsets("g", None) == {}
        finally:
            await broker.stop()

    asyncio.run(scenario())
