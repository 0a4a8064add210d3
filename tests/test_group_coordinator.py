"""The group coordinator over a real broker's storage, in-process: offset expiry and replay of
`__consumer_offsets` (tombstones included), which the wire tests cannot reach in reasonable time."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path

from kbroker.broker import Broker
from kbroker.cluster.topics import TopicSpec
from kbroker.config import BrokerConfig
from kbroker.coordinator.group_coordinator import OffsetCommit, now_ms
from kbroker.coordinator.offsets_topic import partition_for
from protocol.errors import ErrorCode

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

        assert broker.groups.expire_offsets(now_ms()) == 2
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
    from kbroker.coordinator.group_coordinator import JoinRequest

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
