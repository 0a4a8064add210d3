"""The group coordinator over a real broker's storage, in-process: offset expiry and replay of
`__consumer_offsets` (tombstones included), and timeouts of minutes on a manual clock — what
the wire tests cannot reach in reasonable time."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path

from kbroker.broker import Broker
from kbroker.clock import wall_clock_ms
from kbroker.cluster.topics import TopicSpec
from kbroker.config import BrokerConfig
from kbroker.coordinator.group import GroupState
from kbroker.coordinator.group_membership import NEW_MEMBER_JOIN_TIMEOUT_MS, JoinRequest
from kbroker.coordinator.group_offsets import OffsetCommit
from kbroker.coordinator.offsets_topic import partition_for
from protocol.errors import ErrorCode
from tests.manual_clock import ManualClock

RETENTION_MS = 10080 * 60_000


def make_broker(data: Path) -> Broker:
    config = BrokerConfig.load(None, [f"log.dirs={data}", "listeners=PLAINTEXT://127.0.0.1:0"])
    return Broker(config)


async def started(data: Path) -> Broker:
    broker = make_broker(data)
    await broker.start()
    return broker


def test_offsets_of_empty_groups_expire_and_stay_expired_after_restart(tmp_path: Path) -> None:
    async def scenario() -> None:
        broker = await started(tmp_path)
        broker.topics.create(TopicSpec("events", 2))
        commits = [OffsetCommit("events", 0, 10, -1, "a"), OffsetCommit("events", 1, 20, -1, None)]
        assert broker.groups.commit("old-readers", -1, "", None, commits) == [ErrorCode.NO_ERROR] * 2
        assert broker.groups.commit("new-readers", -1, "", None, commits[:1]) == [ErrorCode.NO_ERROR]
        group = broker.groups.groups["old-readers"]
        group.state_timestamp_ms -= RETENTION_MS  # it has been empty for a week

        assert broker.groups.expire_offsets(wall_clock_ms()) == 2
        assert "old-readers" not in broker.groups.groups
        assert broker.groups.fetch_offsets("new-readers", None)[("events", 0)].offset == 10
        await broker.stop()

        again = await started(tmp_path)
        try:
            assert "old-readers" not in again.groups.groups  # the tombstones were replayed too
            offsets = again.groups.fetch_offsets("new-readers", None)
            assert {tp: v.offset for tp, v in offsets.items() if v} == {("events", 0): 10}
        finally:
            await again.stop()

    asyncio.run(scenario())


def test_group_metadata_is_replayed_with_its_members(tmp_path: Path) -> None:
    async def scenario() -> None:
        broker = await started(tmp_path)
        broker.groups.config = dataclasses.replace(broker.groups.config, initial_rebalance_delay_ms=0)
        request = JoinRequest("g", "", None, "client", "/127.0.0.1", 10000, 10000, "consumer",
                              [("range", b"subscription")], require_known_member_id=False)
        joined = await broker.groups.join(request)
        assert joined.error == ErrorCode.NO_ERROR
        synced = await broker.groups.sync("g", joined.generation_id, joined.member_id, None, None, None,
                                          {joined.member_id: b"assignment"})
        assert synced.assignment == b"assignment"
        await broker.stop()

        again = await started(tmp_path)
        try:
            group = again.groups.groups["g"]
            assert (group.state.value, group.generation_id, group.protocol_name) == ("Stable", 1, "range")
            member = group.members[joined.member_id]
            assert (member.assignment, member.metadata("range")) == (b"assignment", b"subscription")
            # The member may carry on where it was: same generation, no rebalance.
            assert again.groups.heartbeat("g", 1, joined.member_id, None) == ErrorCode.NO_ERROR
        finally:
            await again.stop()

    asyncio.run(scenario())


def test_partition_for_matches_kafka() -> None:
    from kbroker.coordinator.offsets_topic import java_string_hash

    assert java_string_hash("hello") == 99162322  # Java: "hello".hashCode()
    assert java_string_hash("polygenelubricants") == -(2**31)  # the famous Integer.MIN_VALUE hash
    assert partition_for("hello", 50) == 99162322 % 50
    assert partition_for("polygenelubricants", 50) == 0  # Kafka's Utils.abs maps MIN_VALUE to 0
    assert partition_for("", 50) == 0


# -- timeouts, on a manual clock -----------------------------------------------------------------


async def clocked(data: Path, **config: int) -> tuple[Broker, ManualClock]:
    """A broker whose group coordinator runs on a manual clock, taking 1 s sessions and up."""
    broker = await started(data)
    clock = ManualClock()
    broker.groups.clock = clock
    broker.groups.config = dataclasses.replace(broker.groups.config, min_session_timeout_ms=1000, **config)
    return broker, clock


def consumer_join(group: str, member_id: str = "", session_ms: int = 3000, rebalance_ms: int = 300_000) -> JoinRequest:
    return JoinRequest(group, member_id, None, "client", "/127.0.0.1", session_ms, rebalance_ms, "consumer",
                       [("range", b"subscription")], require_known_member_id=True)


async def join_and_wait(broker: Broker, group: str, **kwargs: int) -> tuple[str, asyncio.Task]:
    """A new member's two-step join (JoinGroup v4+): its id at once, then its join, which waits
    for the join phase to end."""
    first = await broker.groups.join(consumer_join(group, **kwargs))
    assert first.error == ErrorCode.MEMBER_ID_REQUIRED
    task = asyncio.create_task(broker.groups.join(consumer_join(group, first.member_id, **kwargs)))
    await asyncio.sleep(0)  # one turn: the join runs up to its wait
    assert not task.done()
    return first.member_id, task


async def answered(*joins: asyncio.Task) -> list:
    """The answers of joins that the clock's last move completed (a hang guard, not a wait)."""
    return await asyncio.wait_for(asyncio.gather(*joins), 10)


def test_new_members_outlast_their_session_timeout_in_the_initial_rebalance_delay(tmp_path: Path) -> None:
    """Four consumers with 3 s sessions, the default 3 s initial delay: the delay grows with each
    arrival, past every member's session timeout, and the group still forms with all four."""

    async def scenario() -> None:
        broker, clock = await clocked(tmp_path)
        assert broker.groups.config.initial_rebalance_delay_ms == 3000
        try:
            joins = []
            for _ in range(4):  # one every 2.5 s: each arrival extends the delay by another 3 s
                joins.append((await join_and_wait(broker, "slow-start"))[1])
                clock.advance(2.5)
            clock.advance(3.0)  # nobody new during the last delay: the join phase ends
            joined = await answered(*joins)
            assert [(j.error, j.generation_id) for j in joined] == [(ErrorCode.NO_ERROR, 1)] * 4
            group = broker.groups.groups["slow-start"]
            assert len(group.members) == 4

            leader = next(j for j in joined if j.leader == j.member_id)
            assert len(leader.members) == 4
            assignment = {j.member_id: j.member_id.encode() for j in joined}
            synced = await asyncio.gather(*[
                broker.groups.sync("slow-start", 1, j.member_id, None, None, None, assignment if j is leader else {})
                for j in joined])
            assert [s.assignment for s in synced] == [j.member_id.encode() for j in joined]
            assert group.state is GroupState.STABLE

            # Joined, they are held to their session timeout again: silence for 3 s ends them.
            clock.advance(3.1)
            assert group.state is GroupState.EMPTY and not group.members
        finally:
            await broker.stop()

    asyncio.run(scenario())


def test_a_new_member_waits_at_most_the_new_member_join_timeout(tmp_path: Path) -> None:
    """A join phase held open by a member with a 10-minute rebalance timeout that heartbeats but
    never rejoins: the new member's join is given up after Kafka's 5 minutes, not its session's
    3 s, and the member is removed (its client will join again)."""

    async def scenario() -> None:
        broker, clock = await clocked(tmp_path, initial_rebalance_delay_ms=0)
        try:
            old_id, old_join = await join_and_wait(broker, "held-open", session_ms=10_000, rebalance_ms=600_000)
            clock.advance(0)  # the initial delay of 0 ms
            assert (await answered(old_join))[0].error == ErrorCode.NO_ERROR
            assert (await broker.groups.sync("held-open", 1, old_id, None, None, None, {old_id: b""})).error == 0

            new_id, new_join = await join_and_wait(broker, "held-open")
            group = broker.groups.groups["held-open"]
            allowance_s = NEW_MEMBER_JOIN_TIMEOUT_MS // 1000
            for _ in range(allowance_s - 1):
                clock.advance(1)
                assert broker.groups.heartbeat("held-open", 1, old_id, None) == ErrorCode.REBALANCE_IN_PROGRESS
                assert new_id in group.members
            clock.advance(1.1)
            assert (await answered(new_join))[0].error == ErrorCode.UNKNOWN_MEMBER_ID
            assert new_id not in group.members and old_id in group.members
            assert group.state is GroupState.PREPARING_REBALANCE
        finally:
            await broker.stop()

    asyncio.run(scenario())
