"""ReplicaManager's data path on real logs: `append` (per-entry results, transaction verification,
the acks=all wait) and `fetch` (the read bounds of consumers, read_committed consumers and
followers, the long poll). A follower is a real fetch with its replica id, as the leader sees it."""

from __future__ import annotations

import asyncio
import errno
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from kbroker.clock import wall_clock_ms
from kbroker.cluster.partition import QUIET, Partition
from kbroker.cluster.replica_manager import FetchParams, PartitionFetch, ReplicaManager
from kbroker.storage import write_behind
from kbroker.storage.log_config import LogConfig
from kbroker.storage.log_manager import LogManager
from protocol.errors import ErrorCode, KafkaError
from protocol.record_batch import Record, decode_batches, encode_batch

LEADER, FOLLOWER = 0, 1
MAX_BYTES = 1 << 20
CONSUMER = FetchParams(replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=MAX_BYTES)
FOLLOWER_FETCH = FetchParams(replica_id=FOLLOWER, max_wait_ms=0, min_bytes=0, max_bytes=MAX_BYTES)


def batch(*values: bytes, producer_id: int = -1, base_sequence: int = -1, transactional: bool = False) -> bytes:
    now = wall_clock_ms()
    return encode_batch([Record(i, now, None, v) for i, v in enumerate(values)], producer_id=producer_id,
                        producer_epoch=0 if producer_id >= 0 else -1, base_sequence=base_sequence,
                        transactional=transactional)


@asynccontextmanager
async def replica_manager(tmp_path: Path, replicas: list[int] | None = None) -> AsyncIterator[ReplicaManager]:
    """Partition t-0 led here, alone or with FOLLOWER in its ISR."""
    manager = ReplicaManager(LEADER, LogManager([tmp_path / "logs"]))
    replicas = replicas or [LEADER]
    manager.become_leader("t", 0, uuid.uuid4(), LogConfig(), 1, replicas, replicas, wall_clock_ms())
    try:
        yield manager
    finally:
        await manager.stop()
        manager.log_manager.shutdown()


def fetch_of(offset: int, topic: str | None = "t", index: int = 0) -> PartitionFetch:
    return PartitionFetch(topic, index, offset, MAX_BYTES)


async def caught_up_at_2(manager: ReplicaManager) -> Partition:
    """t-0 with two records, which FOLLOWER has fetched at 1_000 ms: the HW is 2."""
    partition = manager.get("t", 0)
    await manager.append([("t", 0, batch(b"a", b"b"))], required_acks=1, timeout_ms=1000, now_ms=wall_clock_ms())
    await manager.fetch(FOLLOWER_FETCH, [fetch_of(2)], 1_000)
    assert partition.high_watermark == 2
    return partition


def values(result_records: object) -> list[bytes | None]:
    assert result_records is not None
    data = result_records.read_bytes()  # type: ignore[attr-defined]
    return [record.value for b in decode_batches(data) for record in b.records]


def test_append_answers_every_entry_in_order(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with replica_manager(tmp_path) as manager:
            appended = await manager.append(
                [("t", 0, batch(b"a", b"b")), ("t", 5, batch(b"x")), ("__consumer_offsets", 0, batch(b"x")),
                 ("t", 0, batch(b"c"))], required_acks=1, timeout_ms=1000, now_ms=wall_clock_ms())
            assert [r.error for r in appended.results] == [ErrorCode.NO_ERROR, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                                           ErrorCode.INVALID_TOPIC, ErrorCode.NO_ERROR]
            assert [r.base_offset for r in appended.results] == [0, -1, -1, 2]
            assert appended.replicated is None  # acks=1: nothing waits

            refused = await manager.append([("t", 0, batch(b"d"))], required_acks=2, timeout_ms=1000,
                                           now_ms=wall_clock_ms())
            assert [r.error for r in refused.results] == [ErrorCode.INVALID_REQUIRED_ACKS]
            assert manager.get("t", 0).log_end_offset == 3  # nothing of the refused request written

    asyncio.run(asyncio.wait_for(scenario(), 30))


def test_the_verifier_is_asked_for_a_producers_first_transactional_batch_only(tmp_path: Path) -> None:
    asked: list[tuple[str | None, int, int, str, int]] = []

    def verify(transactional_id: str | None, producer_id: int, epoch: int, topic: str, index: int) -> None:
        asked.append((transactional_id, producer_id, epoch, topic, index))
        if producer_id == 9:
            raise KafkaError(ErrorCode.INVALID_TXN_STATE, "not in the transaction")

    async def scenario() -> None:
        async with replica_manager(tmp_path) as manager:
            async def append(records: bytes) -> int:
                appended = await manager.append([("t", 0, records)], required_acks=1, timeout_ms=1000,
                                                now_ms=wall_clock_ms(), transactional_id="tx", verify_transaction=verify)
                return appended.results[0].error

            assert await append(batch(b"plain")) == ErrorCode.NO_ERROR
            assert await append(batch(b"t1", producer_id=7, base_sequence=0, transactional=True)) == ErrorCode.NO_ERROR
            assert await append(batch(b"t2", producer_id=7, base_sequence=1, transactional=True)) == ErrorCode.NO_ERROR
            assert asked == [("tx", 7, 0, "t", 0)]  # the open transaction vouches for the second batch
            assert await append(batch(b"x", producer_id=9, base_sequence=0,
                                      transactional=True)) == ErrorCode.INVALID_TXN_STATE
            assert manager.get("t", 0).log_end_offset == 3

    asyncio.run(asyncio.wait_for(scenario(), 30))


def test_acks_all_completes_once_the_follower_fetched_past_the_write(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with replica_manager(tmp_path, [LEADER, FOLLOWER]) as manager:
            appended = await manager.append([("t", 0, batch(b"a", b"b"))], required_acks=-1, timeout_ms=30_000,
                                            now_ms=wall_clock_ms())
            assert appended.replicated is not None
            waiting = asyncio.ensure_future(appended.replicated)
            await asyncio.sleep(0)
            assert not waiting.done()
            copied = await manager.fetch(FOLLOWER_FETCH, [fetch_of(0)], wall_clock_ms())
            assert values(copied[0].records) == [b"a", b"b"]  # followers read past the HW
            assert not waiting.done()
            await manager.fetch(FOLLOWER_FETCH, [fetch_of(2)], wall_clock_ms())  # it holds both records now
            await asyncio.wait_for(waiting, 5)
            assert (appended.results[0].error, appended.results[0].base_offset) == (ErrorCode.NO_ERROR, 0)

            unreplicated = await manager.append([("t", 0, batch(b"c"))], required_acks=-1, timeout_ms=50,
                                                now_ms=wall_clock_ms())
            assert unreplicated.replicated is not None
            await unreplicated.replicated
            assert (unreplicated.results[0].error, unreplicated.results[0].base_offset) == (
                ErrorCode.REQUEST_TIMED_OUT, -1)

    asyncio.run(asyncio.wait_for(scenario(), 30))


def test_consumers_read_below_the_high_watermark_and_read_committed_below_the_lso(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with replica_manager(tmp_path, [LEADER, FOLLOWER]) as manager:
            entries = [("t", 0, batch(b"plain")), ("t", 0, batch(b"open", producer_id=7, base_sequence=0,
                                                                   transactional=True)), ("t", 0, batch(b"later"))]
            await manager.append(entries, required_acks=1, timeout_ms=1000, now_ms=wall_clock_ms())
            [unreplicated] = await manager.fetch(CONSUMER, [fetch_of(0)], wall_clock_ms())
            assert (unreplicated.error, unreplicated.high_watermark, unreplicated.records) == (ErrorCode.NO_ERROR, 0, None)

            await manager.fetch(FOLLOWER_FETCH, [fetch_of(3)], wall_clock_ms())  # the HW moves to 3
            [uncommitted] = await manager.fetch(CONSUMER, [fetch_of(0)], wall_clock_ms())
            assert values(uncommitted.records) == [b"plain", b"open", b"later"]
            assert (uncommitted.high_watermark, uncommitted.last_stable_offset) == (3, 1)
            assert uncommitted.aborted_transactions is None

            committed = FetchParams(replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=MAX_BYTES,
                                    read_committed=True)
            [decided] = await manager.fetch(committed, [fetch_of(0)], wall_clock_ms())
            assert values(decided.records) == [b"plain"]  # the open transaction holds back the rest
            assert decided.aborted_transactions == []

    asyncio.run(asyncio.wait_for(scenario(), 30))


def test_fetch_waits_for_min_bytes_and_answers_unknown_partitions_at_once(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with replica_manager(tmp_path) as manager:
            long_poll = FetchParams(replica_id=-1, max_wait_ms=20_000, min_bytes=1, max_bytes=MAX_BYTES)
            unknown = await asyncio.wait_for(
                manager.fetch(long_poll, [fetch_of(0), fetch_of(0, topic=None), fetch_of(0, index=3)],
                              wall_clock_ms()), 5)
            assert [(r.error, r.hosted) for r in unknown] == [
                (ErrorCode.NO_ERROR, True), (ErrorCode.UNKNOWN_TOPIC_ID, False),
                (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, False)]
            assert unknown[1].high_watermark == -1

            polling = asyncio.ensure_future(manager.fetch(long_poll, [fetch_of(0)], wall_clock_ms()))
            await asyncio.sleep(0)
            assert not polling.done()
            await manager.append([("t", 0, batch(b"news"))], required_acks=1, timeout_ms=1000,
                                 now_ms=wall_clock_ms())
            [result] = await asyncio.wait_for(polling, 5)  # the append ends the wait, not max_wait_ms
            assert values(result.records) == [b"news"]

    asyncio.run(asyncio.wait_for(scenario(), 30))


@pytest.mark.parametrize("current_epoch, code", [(0, ErrorCode.FENCED_LEADER_EPOCH),
                                                 (2, ErrorCode.UNKNOWN_LEADER_EPOCH)])
def test_fetch_checks_the_fetchers_leader_epoch(tmp_path: Path, current_epoch: int, code: ErrorCode) -> None:
    async def scenario() -> None:
        async with replica_manager(tmp_path) as manager:
            [result] = await manager.fetch(CONSUMER, [PartitionFetch("t", 0, 0, MAX_BYTES, current_epoch)],
                                           wall_clock_ms())
            assert result.error == code
            assert result.hosted and result.high_watermark == 0  # a known partition tells its offsets

    asyncio.run(asyncio.wait_for(scenario(), 30))


def test_appends_written_behind_are_answered_once_published(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With the writer thread on (KBROKER_WRITE_BEHIND_MIN_BYTES), two large appends to one
    partition in one request and two more in flight at once (acks=all) land in order, each answered
    once published."""
    monkeypatch.setattr(write_behind, "WRITE_BEHIND_MIN_BYTES", 1024)
    big = [bytes([65 + i]) * 4096 for i in range(4)]

    async def scenario() -> None:
        async with replica_manager(tmp_path) as manager:
            first = await manager.append([("t", 0, batch(big[0])), ("t", 0, batch(big[1]))], required_acks=1,
                                         timeout_ms=1000, now_ms=wall_clock_ms())
            assert first.replicated is not None and [r.base_offset for r in first.results] == [0, 1]
            others = [asyncio.ensure_future(manager.append([("t", 0, batch(value))], required_acks=-1,
                                                           timeout_ms=1000, now_ms=wall_clock_ms()))
                      for value in big[2:]]
            await first.replicated
            for appended in await asyncio.gather(*others):
                assert appended.replicated is not None
                await appended.replicated
            offsets = [appended.results[0].base_offset for appended in [first, *(o.result() for o in others)]]
            assert offsets == [0, 2, 3] and all(r.error == ErrorCode.NO_ERROR for r in first.results)
            (result,) = await manager.fetch(CONSUMER, [fetch_of(0)], wall_clock_ms())
            assert values(result.records) == big

    asyncio.run(asyncio.wait_for(scenario(), 30))


def test_a_fetch_at_the_log_end_of_an_offline_dir_answers_a_storage_error(tmp_path: Path) -> None:
    """A fetcher at the log end has nothing to read, but a dir gone offline still says so:
    reading nothing is no reason to answer as if the disk were there."""
    async def scenario() -> None:
        async with replica_manager(tmp_path, [LEADER, FOLLOWER]) as manager:
            await manager.append([("t", 0, batch(b"a"))], required_acks=1, timeout_ms=1000, now_ms=wall_clock_ms())
            [at_end] = await manager.fetch(FOLLOWER_FETCH, [fetch_of(1)], wall_clock_ms())
            assert (at_end.error, at_end.records, at_end.high_watermark) == (ErrorCode.NO_ERROR, None, 1)

            manager.get("t", 0).log.health.failed(OSError(errno.EIO, "disk gone"), "a test")
            for params, offset in ((FOLLOWER_FETCH, 1), (CONSUMER, 1), (CONSUMER, 0)):
                [result] = await manager.fetch(params, [fetch_of(offset)], wall_clock_ms())
                assert result.error == ErrorCode.KAFKA_STORAGE_ERROR, (params.replica_id, offset)

    asyncio.run(asyncio.wait_for(scenario(), 30))


def test_a_followers_repeated_fetch_keeps_it_caught_up_and_its_move_lifts_the_high_watermark(
        tmp_path: Path) -> None:
    """A session fetch names every partition a follower copies, moved or not: one that has not
    moved keeps the follower caught up (it stays in the ISR), and the next move lifts the HW."""
    async def scenario() -> None:
        async with replica_manager(tmp_path, [LEADER, FOLLOWER]) as manager:
            partition = await caught_up_at_2(manager)
            await manager.fetch(FOLLOWER_FETCH, [fetch_of(2)], 5_000)  # unmoved, still at the end
            assert partition.followers[FOLLOWER].last_caught_up_ms == 5_000
            assert partition.shrink_isr(now_ms=6_000, max_lag_ms=10_000) == []

            await manager.append([("t", 0, batch(b"c"))], required_acks=1, timeout_ms=1000, now_ms=wall_clock_ms())
            assert partition.high_watermark == 2
            await manager.fetch(FOLLOWER_FETCH, [fetch_of(3)], 7_000)
            assert partition.high_watermark == 3

    asyncio.run(asyncio.wait_for(scenario(), 30))


def told(offset: int, high_watermark: int, log_start_offset: int = 0) -> PartitionFetch:
    """A session fetch of t-0, with what the session last told the fetcher of it."""
    return PartitionFetch("t", 0, offset, MAX_BYTES, 1, None, high_watermark, log_start_offset)


def test_a_quiet_partition_of_a_followers_session_is_passed_over_until_it_moves(tmp_path: Path) -> None:
    """An in-sync follower at the end, told the current high watermark and log start: nothing to
    read or tell. The read gives the shared QUIET result, the follower's caught-up time is still
    refreshed (an append just before an ISR check must not drop it), and a long poll still wakes
    for the partition's next append."""
    async def scenario() -> None:
        async with replica_manager(tmp_path, [LEADER, FOLLOWER]) as manager:
            partition = await caught_up_at_2(manager)

            [result] = await manager.fetch(FOLLOWER_FETCH, [told(2, 2)], 5_000)
            assert result is QUIET
            assert partition.followers[FOLLOWER].last_caught_up_ms == 5_000
            [result] = await manager.fetch(FOLLOWER_FETCH, [told(2, 1)], 6_000)  # told an older HW: news
            assert result is not QUIET and result.high_watermark == 2
            assert partition.followers[FOLLOWER].last_caught_up_ms == 6_000  # recorded in full

            parked = FetchParams(replica_id=FOLLOWER, max_wait_ms=10_000, min_bytes=1, max_bytes=MAX_BYTES)
            waiting = asyncio.ensure_future(manager.fetch(parked, [told(2, 2)], 7_000))
            await asyncio.sleep(0.05)
            assert not waiting.done()
            await manager.append([("t", 0, batch(b"c"))], required_acks=1, timeout_ms=1000, now_ms=wall_clock_ms())
            [result] = await asyncio.wait_for(waiting, 5)
            assert values(result.records) == [b"c"]

            await manager.fetch(FOLLOWER_FETCH, [told(3, 2)], 8_000)  # has c: the HW moves to 3
            [result] = await manager.fetch(FOLLOWER_FETCH, [told(3, 3)], 20_000)
            assert result is QUIET
            await manager.append([("t", 0, batch(b"d"))], required_acks=1, timeout_ms=1000, now_ms=wall_clock_ms())
            assert partition.shrink_isr(now_ms=29_999, max_lag_ms=10_000) == []  # behind, but caught up at 20 s

    asyncio.run(asyncio.wait_for(scenario(), 30))


def test_a_follower_is_not_passed_over_where_its_state_is_not_recorded(tmp_path: Path) -> None:
    """Out of the ISR (it may join), or at an offset its state does not hold yet (a new
    leadership reset it): the fetch is recorded as usual."""
    async def scenario() -> None:
        async with replica_manager(tmp_path, [LEADER, FOLLOWER]) as manager:
            partition = manager.get("t", 0)
            await manager.fetch(FOLLOWER_FETCH, [told(0, 0)], 1_000)  # never recorded before
            assert partition.followers[FOLLOWER].log_end_offset == 0
            assert partition.followers[FOLLOWER].last_caught_up_ms == 1_000
            partition.isr = [LEADER]
            await manager.fetch(FOLLOWER_FETCH, [told(0, 0)], 2_000)
            assert partition.isr == [LEADER, FOLLOWER]  # recorded: caught up, it joins again

    asyncio.run(asyncio.wait_for(scenario(), 30))


def test_a_follower_at_the_leaders_end_stays_in_sync_however_long_ago_it_fetched(tmp_path: Path) -> None:
    """Kafka's isCaughtUp: at the leader's end, or caught up within the lag time. A follower
    behind the end that has not caught up for longer leaves the ISR."""
    async def scenario() -> None:
        async with replica_manager(tmp_path, [LEADER, FOLLOWER]) as manager:
            partition = manager.get("t", 0)
            await manager.append([("t", 0, batch(b"a"))], required_acks=1, timeout_ms=1000, now_ms=wall_clock_ms())
            await manager.fetch(FOLLOWER_FETCH, [fetch_of(1)], 1_000)
            assert partition.shrink_isr(now_ms=100_000, max_lag_ms=10_000) == []
            await manager.append([("t", 0, batch(b"b"))], required_acks=1, timeout_ms=1000, now_ms=wall_clock_ms())
            assert partition.shrink_isr(now_ms=100_000, max_lag_ms=10_000) == [FOLLOWER]

    asyncio.run(asyncio.wait_for(scenario(), 30))
