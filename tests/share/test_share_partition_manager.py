"""SharePartitionManager over a real ReplicaManager and log: what ShareFetch and ShareAcknowledge
will do, without the wire. The clock is a variable the tests move."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from kbroker.clock import wall_clock_ms
from kbroker.cluster.replica_manager import ReplicaManager
from kbroker.coordinator.share_coordinator import StateRead
from kbroker.coordinator.share_partitions import (
    MemoryPersister,
    ShareFetched,
    ShareGroupSettings,
    SharePartitionManager,
    StatePersister,
)
from kbroker.share.share_partition import AcknowledgementBatch, AcknowledgeType, Archived, ShareLimits
from kbroker.storage.log_config import LogConfig
from kbroker.storage.log_manager import LogManager
from protocol.errors import ErrorCode
from protocol.record_batch import Record, decode_batches, encode_batch

LOCK_MS = 30_000
TOPIC_ID = uuid.uuid4()


class Clock:
    def __init__(self) -> None:
        self.now = 1_000

    def __call__(self) -> int:
        return self.now


@asynccontextmanager
async def manager_over_log(tmp_path: Path, clock: Clock, earliest: bool = True,
                           archived: list[Archived] | None = None,
                           persister: StatePersister | None = None) -> AsyncIterator[SharePartitionManager]:
    replicas = ReplicaManager(0, LogManager([tmp_path / "logs"]))
    replicas.become_leader("t", 0, TOPIC_ID, LogConfig(), 1, [0], [0], wall_clock_ms())
    settings = ShareGroupSettings(ShareLimits(delivery_count_limit=2, max_in_flight=100, lock_duration_ms=LOCK_MS),
                                  start_at_earliest=earliest)
    manager = SharePartitionManager(replicas, lambda group: settings, clock,
                                    lambda g, t, i, records: (archived if archived is not None else []).extend(records),
                                    persister)
    try:
        yield manager
    finally:
        manager.stop()
        await replicas.stop()
        replicas.log_manager.shutdown()


async def produce(manager: SharePartitionManager, *batches: list[bytes]) -> None:
    for values in batches:
        batch = encode_batch([Record(i, wall_clock_ms(), None, v) for i, v in enumerate(values)])
        appended = await manager.replica_manager.append([("t", 0, batch)], required_acks=1, timeout_ms=1000,
                                                        now_ms=wall_clock_ms())
        assert appended.results[0].error == ErrorCode.NO_ERROR


def offsets(answer: ShareFetched) -> list[int]:
    return [o for r in answer.acquired for o in range(r.first_offset, r.last_offset + 1)]


def delivered(answer: ShareFetched) -> dict[int, bytes | None]:
    """The records a client keeps: those of the answer's batches inside its acquired ranges."""
    assert answer.records is not None
    wanted = set(offsets(answer))
    return {b.base_offset + r.offset_delta: r.value for b in decode_batches(answer.records.read_bytes())
            for r in b.records if b.base_offset + r.offset_delta in wanted}


async def accept(manager: SharePartitionManager, member: str, answer: ShareFetched,
           kind: AcknowledgeType = AcknowledgeType.ACCEPT) -> int:
    return await manager.acknowledge("g", member, "t", 0, [AcknowledgementBatch(r.first_offset, r.last_offset, (kind,))
                                                     for r in answer.acquired])


def test_two_members_split_one_partition_and_each_record_is_delivered_once(tmp_path: Path) -> None:
    async def scenario() -> None:
        clock = Clock()
        async with manager_over_log(tmp_path, clock) as manager:
            await produce(manager, [b"a", b"b", b"c"], [b"d", b"e"], [b"f"])
            [first] = await manager.fetch("g", "m1", [("t", 0)], max_records=4, max_bytes=1 << 20, max_wait_ms=0)
            [second] = await manager.fetch("g", "m2", [("t", 0)], max_records=10, max_bytes=1 << 20, max_wait_ms=0)
            assert offsets(first) == [0, 1, 2, 3] and offsets(second) == [4, 5]
            assert delivered(first) == {0: b"a", 1: b"b", 2: b"c", 3: b"d"}
            assert delivered(second) == {4: b"e", 5: b"f"}
            # The answer stops after the last batch holding an acquired record.
            assert [b.base_offset for b in decode_batches(first.records.read_bytes())] == [0, 3]  # type: ignore[union-attr]
            assert await accept(manager, "m1", first) == ErrorCode.NO_ERROR
            assert await accept(manager, "m1", second) == ErrorCode.INVALID_RECORD_STATE  # not m1's
            assert await accept(manager, "m2", second) == ErrorCode.NO_ERROR
            assert manager.share_partition("g", "t", 0).start_offset == 6  # type: ignore[union-attr]

    asyncio.run(asyncio.wait_for(scenario(), 30))


def test_a_lock_that_expires_redelivers_and_the_limit_archives(tmp_path: Path) -> None:
    async def scenario() -> None:
        clock, archived = Clock(), []
        async with manager_over_log(tmp_path, clock, archived=archived) as manager:
            await produce(manager, [b"a", b"b"])
            [held] = await manager.fetch("g", "crashed", [("t", 0)], 10, 1 << 20, 0)
            assert offsets(held) == [0, 1]
            assert manager.next_lock_deadline_ms() == clock.now + LOCK_MS
            clock.now += LOCK_MS
            manager.expire_locks(clock.now)
            [again] = await manager.fetch("g", "m2", [("t", 0)], 10, 1 << 20, 0)
            assert offsets(again) == [0, 1] and [r.delivery_count for r in again.acquired] == [2]
            assert await accept(manager, "m2", again, AcknowledgeType.RELEASE) == ErrorCode.NO_ERROR
            # Delivered twice, the limit: released, they are archived instead of redelivered.
            assert [(a.offset, a.delivery_count) for a in archived] == [(0, 2), (1, 2)]

    asyncio.run(asyncio.wait_for(scenario(), 30))


def test_a_waiting_fetch_wakes_for_new_data_and_for_released_records(tmp_path: Path) -> None:
    async def scenario() -> None:
        clock = Clock()
        async with manager_over_log(tmp_path, clock, earliest=False) as manager:
            await produce(manager, [b"old"])  # before the group: latest starts after it
            waiting = asyncio.ensure_future(manager.fetch("g", "m1", [("t", 0)], 10, 1 << 20, max_wait_ms=20_000))
            await asyncio.sleep(0)
            assert not waiting.done()
            await produce(manager, [b"new"])
            [answer] = await asyncio.wait_for(waiting, 10)
            assert delivered(answer) == {1: b"new"}
            # m2 waits: everything is held by m1 until m1 releases it.
            waiting = asyncio.ensure_future(manager.fetch("g", "m2", [("t", 0)], 10, 1 << 20, max_wait_ms=20_000))
            await asyncio.sleep(0)
            assert not waiting.done()
            assert await accept(manager, "m1", answer, AcknowledgeType.RELEASE) == ErrorCode.NO_ERROR
            [answer] = await asyncio.wait_for(waiting, 10)
            assert offsets(answer) == [1]

    asyncio.run(asyncio.wait_for(scenario(), 30))


def test_unknown_partitions_and_a_member_leaving(tmp_path: Path) -> None:
    async def scenario() -> None:
        clock = Clock()
        async with manager_over_log(tmp_path, clock) as manager:
            await produce(manager, [b"a", b"b"])
            answers = await manager.fetch("g", "m1", [("t", 0), ("missing", 0)], 10, 1 << 20, 0)
            assert [a.error for a in answers] == [ErrorCode.NO_ERROR, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]
            manager.release_member("g", "m1", [("t", 0)])
            [answer] = await manager.fetch("g", "m2", [("t", 0)], 10, 1 << 20, 0)
            assert offsets(answer) == [0, 1]
            assert await manager.acknowledge("other-group", "m2", "t", 0, [AcknowledgementBatch(0, 1, (1,))]) == \
                ErrorCode.INVALID_RECORD_STATE

    asyncio.run(asyncio.wait_for(scenario(), 30))


def test_a_new_leader_redelivers_only_what_was_not_acknowledged(tmp_path: Path) -> None:
    """The state written through the persister is what the next manager (a restarted broker, a
    new leader) starts from: accepted and rejected records stay settled, acquired ones come
    back available, with the delivery count last written."""
    async def scenario() -> None:
        persister, clock = MemoryPersister(), Clock()
        async with manager_over_log(tmp_path, clock, persister=persister) as manager:
            await produce(manager, [b"a", b"b", b"c", b"d", b"e", b"f"])
            [first] = await manager.fetch("g", "m1", [("t", 0)], 6, 1 << 20, 0)
            assert offsets(first) == [0, 1, 2, 3, 4, 5]
            settle = [AcknowledgementBatch(0, 1, (AcknowledgeType.ACCEPT,)),
                      AcknowledgementBatch(3, 3, (AcknowledgeType.REJECT,)),
                      AcknowledgementBatch(4, 4, (AcknowledgeType.RELEASE,))]
            assert await manager.acknowledge("g", "m1", "t", 0, settle) == ErrorCode.NO_ERROR
        # Offsets 2 and 5 were held (their locks do not survive), 4 released: all three come back,
        # counted as delivered once already (the write with the acknowledgement said so).
        async with manager_over_log(tmp_path, clock, persister=persister) as restarted:
            [again] = await restarted.fetch("g", "m2", [("t", 0)], 10, 1 << 20, 0)
            assert {o: r.delivery_count for r in again.acquired for o in range(r.first_offset, r.last_offset + 1)} \
                == {2: 2, 4: 2, 5: 2}

    asyncio.run(asyncio.wait_for(scenario(), 30))


class GatedPersister(MemoryPersister):
    """Writes wait for the test to open the gate, and answer `answer`."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = asyncio.Event()
        self.answer = ErrorCode.NO_ERROR
        self.writes = 0

    async def write(self, *args: object) -> int:  # type: ignore[override]
        self.writes += 1
        await self.gate.wait()
        if self.answer != ErrorCode.NO_ERROR:
            return self.answer
        return await super().write(*args)  # type: ignore[arg-type]


def test_an_acknowledgement_is_answered_once_written_and_a_failed_write_is_its_error(tmp_path: Path) -> None:
    async def scenario() -> None:
        persister, clock = GatedPersister(), Clock()
        async with manager_over_log(tmp_path, clock, persister=persister) as manager:
            await produce(manager, [b"a", b"b", b"c"])
            [answer] = await manager.fetch("g", "m1", [("t", 0)], 3, 1 << 20, 0)
            acking = []
            for offset in (0, 1):
                acking.append(asyncio.ensure_future(
                    manager.acknowledge("g", "m1", "t", 0, [AcknowledgementBatch(offset, offset, (1,))])))
                await asyncio.sleep(0.05)
            assert not any(a.done() for a in acking), "answered before the state was written"
            assert persister.writes == 1  # one write in flight; the second waits for its turn
            persister.gate.set()
            assert await asyncio.gather(*acking) == [ErrorCode.NO_ERROR, ErrorCode.NO_ERROR]
            assert persister.writes == 2
            stored = persister.states[("g", TOPIC_ID, 0)]
            assert stored.start_offset == 2
            persister.answer = ErrorCode.COORDINATOR_NOT_AVAILABLE
            assert await manager.acknowledge("g", "m1", "t", 0, [AcknowledgementBatch(2, 2, (1,))]) == \
                ErrorCode.COORDINATOR_NOT_AVAILABLE
            assert offsets(answer) == [0, 1, 2]

    asyncio.run(asyncio.wait_for(scenario(), 30))


def test_a_fenced_write_drops_the_share_partition_and_leadership_loss_too(tmp_path: Path) -> None:
    async def scenario() -> None:
        persister, clock = GatedPersister(), Clock()
        persister.gate.set()
        async with manager_over_log(tmp_path, clock, persister=persister) as manager:
            await produce(manager, [b"a", b"b"])
            [answer] = await manager.fetch("g", "m1", [("t", 0)], 1, 1 << 20, 0)
            persister.answer = ErrorCode.FENCED_LEADER_EPOCH
            assert await manager.acknowledge("g", "m1", "t", 0, [AcknowledgementBatch(0, 0, (1,))]) == \
                ErrorCode.NOT_LEADER_OR_FOLLOWER
            assert manager.share_partition("g", "t", 0) is None  # loaded again at the next fetch
            persister.answer = ErrorCode.NO_ERROR
            [again] = await manager.fetch("g", "m1", [("t", 0)], 10, 1 << 20, 0)
            assert offsets(again) == [0, 1]
            manager.on_leadership_change("t", 0, leads=False)
            assert manager.share_partition("g", "t", 0) is None

    asyncio.run(asyncio.wait_for(scenario(), 30))


class SlowReads(MemoryPersister):
    """Reads wait for the test to open the gate (a share coordinator failing over)."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = asyncio.Event()

    async def read(self, *args: object) -> StateRead:  # type: ignore[override]
        await self.gate.wait()
        return await super().read(*args)  # type: ignore[arg-type]


def test_a_fetch_waits_for_a_slow_load_no_longer_than_its_max_wait(tmp_path: Path) -> None:
    async def scenario() -> None:
        persister, clock = SlowReads(), Clock()
        async with manager_over_log(tmp_path, clock, persister=persister) as manager:
            await produce(manager, [b"a"])
            [empty] = await asyncio.wait_for(manager.fetch("g", "m1", [("t", 0)], 10, 1 << 20, 50), 5)
            assert (empty.error, empty.acquired) == (ErrorCode.NO_ERROR, ())
            persister.gate.set()
            [answer] = await manager.fetch("g", "m1", [("t", 0)], 10, 1 << 20, 1000)
            assert offsets(answer) == [0]

    asyncio.run(asyncio.wait_for(scenario(), 30))


def test_a_deleted_topics_share_partitions_are_forgotten_and_a_new_one_starts_afresh(tmp_path: Path) -> None:
    async def scenario() -> None:
        clock = Clock()
        async with manager_over_log(tmp_path, clock) as manager:
            await produce(manager, [b"a", b"b"])
            [held] = await manager.fetch("g", "m1", [("t", 0)], 10, 1 << 20, 0)
            assert offsets(held) == [0, 1]
            # The same name again, another topic: nothing of the old one's state (0 and 1 held),
            # even before anything swept the old one away.
            manager.replica_manager.remove_topic("t")
            manager.replica_manager.become_leader("t", 0, uuid.uuid4(), LogConfig(), 1, [0], [0], wall_clock_ms())
            await produce(manager, [b"c"])
            [fresh] = await manager.fetch("g", "m2", [("t", 0)], 10, 1 << 20, 0)
            assert [(r.first_offset, r.last_offset, r.delivery_count) for r in fresh.acquired] == [(0, 0, 1)]
            manager.forget_gone()
            assert manager.share_partition("g", "t", 0) is not None  # still led here: kept
            manager.replica_manager.remove_topic("t")
            manager.forget_gone()  # deleted and never fetched again: swept
            assert manager.share_partition("g", "t", 0) is None

    asyncio.run(asyncio.wait_for(scenario(), 30))


def test_a_forgotten_share_partition_finishes_its_write_and_reloads_a_reset_state(tmp_path: Path) -> None:
    """What a leader does when the last share session of a partition ends, or an offset reset
    or deletion happened: the release under way is written first, then the next fetch loads
    the state the share coordinator holds now."""
    async def scenario() -> None:
        persister, clock = GatedPersister(), Clock()
        async with manager_over_log(tmp_path, clock, persister=persister) as manager:
            await produce(manager, [b"a", b"b", b"c"])
            [answer] = await manager.fetch("g", "m1", [("t", 0)], 3, 1 << 20, 0)
            assert offsets(answer) == [0, 1, 2]
            manager.release_member("g", "m1", [("t", 0)])  # its write waits at the gate
            await asyncio.sleep(0)
            manager.forget("g", "t", 0)
            assert manager.share_partition("g", "t", 0) is not None, "dropped before its write"
            persister.gate.set()
            deadline = asyncio.get_running_loop().time() + 5
            while manager.share_partition("g", "t", 0) is not None:
                assert asyncio.get_running_loop().time() < deadline, "never let go"
                await asyncio.sleep(0.01)
            assert persister.states[("g", TOPIC_ID, 0)].start_offset == 0  # the release was written
            # An administrator moves the start offset (a higher state epoch): the next fetch starts there.
            await persister.initialize("g", TOPIC_ID, 0, 1, 2)
            [again] = await manager.fetch("g", "m2", [("t", 0)], 10, 1 << 20, 0)
            assert offsets(again) == [2]

    asyncio.run(asyncio.wait_for(scenario(), 30))
