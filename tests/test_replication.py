"""Replication between two real brokers in one process, their roles set by hand as the
controller will set them: followers fetch over real sockets, the leader's ISR and high
watermark follow them, acks=all waits for the ISR, and a returning replica truncates the tail
it wrote alone."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from kbroker.broker import Broker
from kbroker.clock import wall_clock_ms
from kbroker.cluster.partition import Partition
from kbroker.config import BrokerConfig
from kbroker.storage.log_config import LogConfig
from protocol.connection import ClientProtocol
from protocol.errors import ErrorCode, KafkaError
from protocol.primitives import ZERO_UUID
from protocol.record_batch import Record, encode_batch

TOPIC_ID = uuid.uuid4()
CONFIG = LogConfig(min_insync_replicas=2)
LAG_MS = 30_000


def batch(*values: bytes) -> bytes:
    now = wall_clock_ms()
    return encode_batch([Record(i, now, None, v) for i, v in enumerate(values)])


@asynccontextmanager
async def two_brokers(tmp_path: Path, settings: Callable[[int], list[str]] = lambda _: []
                      ) -> AsyncIterator[tuple[Broker, Broker]]:
    """Brokers 0 and 1 in this process, each told where the other listens; `settings(broker_id)`
    adds `key=value` settings of its own."""
    brokers = []
    for broker_id in (0, 1):
        config = BrokerConfig.load(None, [f"broker.id={broker_id}", f"log.dirs={tmp_path / str(broker_id)}",
                                          "listeners=PLAINTEXT://127.0.0.1:0", *settings(broker_id)])
        broker = Broker(config)
        await broker.start()
        brokers.append(broker)
    endpoints = {b.config.broker_id: ("127.0.0.1", b.bound[0][2]) for b in brokers}
    for broker in brokers:
        broker.replicas.endpoint_of = endpoints.get
        broker.replicas.fetcher_config = broker.replicas.fetcher_config.__class__(max_wait_ms=100, backoff_ms=50)
    try:
        yield brokers[0], brokers[1]
    finally:
        for broker in brokers:
            await broker.stop()


async def until(condition: Callable[[], bool], timeout_s: float = 10.0) -> None:
    """Wait for replication to make `condition` true (the fetch loop announces nothing)."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition not reached"
        await asyncio.sleep(0.01)


def lead(broker: Broker, epoch: int, isr: list[int]) -> Partition:
    return broker.replicas.become_leader("r", 0, TOPIC_ID, CONFIG, epoch, [0, 1], isr, wall_clock_ms())


def follow(broker: Broker, leader: int, epoch: int) -> Partition:
    return broker.replicas.become_follower("r", 0, TOPIC_ID, CONFIG, leader, epoch, [0, 1], [0, 1])


def log_bytes(partition: Partition) -> bytes:
    return b"".join(segment.read_at(0, segment.size) for segment in partition.log.segments)


def test_acks_all_waits_for_the_follower_and_the_isr_follows_it(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with two_brokers(tmp_path) as (a, b):
            leader, follower = lead(a, 1, [0, 1]), follow(b, 0, 1)
            info = leader.append_as_leader(batch(b"x", b"y"), wall_clock_ms(), required_acks=-1)
            assert await leader.wait_for_replication(info.last_offset + 1, 10) == ErrorCode.NO_ERROR
            assert leader.high_watermark == 2 and follower.log_end_offset == 2
            await until(lambda: follower.high_watermark == 2)  # learnt from the next fetch
            assert log_bytes(follower) == log_bytes(leader)  # offsets and epochs as the leader gave them

            await b.replicas.stop()  # the follower stops fetching
            info = leader.append_as_leader(batch(b"z"), wall_clock_ms(), required_acks=-1)
            assert await leader.wait_for_replication(info.last_offset + 1, 0.2) == ErrorCode.REQUEST_TIMED_OUT
            assert not leader._acks_waiters  # a wait that timed out leaves no waiter behind
            waiting = asyncio.ensure_future(leader.wait_for_replication(info.last_offset + 1, 10))
            await until(lambda: leader._acks_waiters)
            waiting.cancel()  # its producer's connection went away
            with pytest.raises(asyncio.CancelledError):
                await waiting
            assert not leader._acks_waiters
            a.replicas.shrink_isrs(wall_clock_ms() + LAG_MS + 1, LAG_MS)
            assert leader.isr == [0] and leader.high_watermark == 3  # the HW no longer waits for it
            with pytest.raises(KafkaError) as refused:
                leader.append_as_leader(batch(b"w"), wall_clock_ms(), required_acks=-1)
            assert refused.value.code == ErrorCode.NOT_ENOUGH_REPLICAS
            leader.append_as_leader(batch(b"w"), wall_clock_ms(), required_acks=1)

            follow(b, 0, 1).make_follower(-1, 1, [0, 1], [0])  # reset, as after a restart
            follower = follow(b, 0, 1)
            await until(lambda: leader.isr == [0, 1])  # caught up: back in the ISR
            assert follower.log_end_offset == 4 and log_bytes(follower) == log_bytes(leader)

    asyncio.run(asyncio.wait_for(scenario(), 60))


class HeldIsrWrites:
    """The ISR writer a cluster's leader has (the metadata store), with its answer held back
    until the test releases it: the store is slow or stopped meanwhile."""

    def __init__(self) -> None:
        self.asked: list[list[int]] = []
        self.release = asyncio.Event()

    async def __call__(self, partition: Partition, isr: list[int]) -> list[int] | None:
        self.asked.append(list(isr))
        await self.release.wait()
        return list(isr)


def test_isr_changes_wait_for_the_store_without_holding_up_replication(tmp_path: Path) -> None:
    """As Kafka's PendingShrinkIsr / PendingExpandIsr: while the store has not taken an ISR
    change, a leaving follower still counts for the high watermark (nothing is acknowledged on
    an ISR the store does not hold), a joining one counts already (maximal ISR), the committed
    ISR decides whether acks=all is taken, and the follower's fetches go on meanwhile."""
    async def scenario() -> None:
        async with two_brokers(tmp_path) as (a, b):
            shrink = HeldIsrWrites()
            a.replicas.isr_writer = shrink
            leader, follower = lead(a, 1, [0, 1]), follow(b, 0, 1)
            info = leader.append_as_leader(batch(b"x"), wall_clock_ms(), required_acks=-1)
            assert await leader.wait_for_replication(info.last_offset + 1, 10) == ErrorCode.NO_ERROR

            await b.replicas.stop()  # the follower stops fetching
            info = leader.append_as_leader(batch(b"y"), wall_clock_ms(), required_acks=-1)
            acked = asyncio.ensure_future(leader.wait_for_replication(info.last_offset + 1, 10))
            a.replicas.shrink_isrs(wall_clock_ms() + LAG_MS + 1, LAG_MS)
            await until(lambda: shrink.asked == [[0]])
            await asyncio.sleep(0)
            assert leader.isr == [0, 1] and leader.high_watermark == 1 and not acked.done()
            shrink.release.set()
            assert await acked == ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND
            assert not leader._acks_waiters
            assert leader.isr == [0] and leader.high_watermark == 2 and leader.pending_isr is None

            expand = HeldIsrWrites()
            leader.isr_writer = expand
            follow(b, 0, 1).make_follower(-1, 1, [0, 1], [0])  # reset, as after a restart
            follower = follow(b, 0, 1)
            await until(lambda: expand.asked == [[0, 1]])
            assert leader.isr == [0] and leader.maximal_isr == [0, 1]
            with pytest.raises(KafkaError) as refused:
                leader.append_as_leader(batch(b"z"), wall_clock_ms(), required_acks=-1)
            assert refused.value.code == ErrorCode.NOT_ENOUGH_REPLICAS
            info = leader.append_as_leader(batch(b"z"), wall_clock_ms(), required_acks=1)
            assert leader.high_watermark < info.last_offset + 1  # the joining follower counts already
            await until(lambda: follower.log_end_offset == info.last_offset + 1)  # its fetches go on
            await until(lambda: leader.high_watermark == info.last_offset + 1)
            expand.release.set()
            await until(lambda: leader.isr == [0, 1] and leader.pending_isr is None)

    asyncio.run(asyncio.wait_for(scenario(), 60))


def test_a_returning_leader_truncates_what_it_wrote_alone(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with two_brokers(tmp_path) as (a, b):
            old_leader = lead(a, 1, [0, 1])
            follow(b, 0, 1)
            info = old_leader.append_as_leader(batch(b"1", b"2", b"3"), wall_clock_ms(), required_acks=-1)
            assert await old_leader.wait_for_replication(info.last_offset + 1, 10) == ErrorCode.NO_ERROR
            await b.replicas.stop()
            old_leader.append_as_leader(batch(b"lost", b"lost"), wall_clock_ms(), required_acks=1)  # never replicated
            assert old_leader.log_end_offset == 5

            new_leader = lead(b, 2, [1])  # the controller elects b; a is cut off
            new_leader.append_as_leader(batch(b"4"), wall_clock_ms(), required_acks=1)
            returning = follow(a, 1, 2)
            await until(lambda: returning.log_end_offset == 4 and returning.log.latest_epoch == 2)
            assert log_bytes(returning) == log_bytes(new_leader)  # the divergent tail is gone, byte for byte
            assert returning.log.epochs.entries[-1].start_offset == 3

    asyncio.run(asyncio.wait_for(scenario(), 60))


def test_followers_refuse_client_reads_and_writes(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with two_brokers(tmp_path) as (a, b):
            lead(a, 1, [0, 1])
            follower = follow(b, 0, 1)
            with pytest.raises(KafkaError) as refused:
                follower.append_as_leader(batch(b"x"), wall_clock_ms())
            assert refused.value.code == ErrorCode.NOT_LEADER_OR_FOLLOWER
            with pytest.raises(KafkaError):
                follower.delete_records(0)

    asyncio.run(asyncio.wait_for(scenario(), 60))


def test_a_deleted_topic_leaves_the_fetcher_of_a_follower(tmp_path: Path) -> None:
    """The broker that handles DeleteTopics removes the topic itself (its ZooKeeper watch then finds
    nothing left to stop): as a follower it must stop fetching it too. A fetcher that kept asking
    would get UNKNOWN_TOPIC_OR_PARTITION on every round and back off, delaying every other
    partition it fetches from that leader (acks=all waited replica.fetch.backoff.ms per request)."""
    async def scenario() -> None:
        async with two_brokers(tmp_path) as (a, b):
            b.replicas.fetcher_config = b.replicas.fetcher_config.__class__(max_wait_ms=100, backoff_ms=5000)
            leader, follower = lead(a, 1, [0, 1]), follow(b, 0, 1)
            a.replicas.become_leader("gone", 0, uuid.uuid4(), CONFIG, 1, [0, 1], [0, 1], wall_clock_ms())
            b.replicas.become_follower("gone", 0, uuid.uuid4(), CONFIG, 0, 1, [0, 1], [0, 1])
            info = leader.append_as_leader(batch(b"x"), wall_clock_ms(), required_acks=-1)
            assert await leader.wait_for_replication(info.last_offset + 1, 10) == ErrorCode.NO_ERROR

            b.replicas.remove_topic("gone")  # DeleteTopics on the follower
            a.replicas.stop_replica("gone", 0, delete=True)  # the leader's watch
            assert all(("gone", 0) not in fetcher.partitions for fetcher in b.replicas._fetchers.values())
            for value in (b"y", b"z"):  # well within the 5 s backoff an error would cost
                info = leader.append_as_leader(batch(value), wall_clock_ms(), required_acks=-1)
                assert await leader.wait_for_replication(info.last_offset + 1, 2) == ErrorCode.NO_ERROR
            assert follower.log_end_offset == 3

    asyncio.run(asyncio.wait_for(scenario(), 60))


def test_followers_fetch_in_a_session_and_start_over_when_the_leader_forgets_it(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with two_brokers(tmp_path) as (a, b):
            leader, follower = lead(a, 1, [0, 1]), follow(b, 0, 1)
            info = leader.append_as_leader(batch(b"1"), wall_clock_ms(), required_acks=-1)
            assert await leader.wait_for_replication(info.last_offset + 1, 10) == ErrorCode.NO_ERROR
            await until(lambda: len(a.fetch_sessions) == 1)
            [session] = a.fetch_sessions.sessions.values()
            assert session.privileged and list(session.partitions) == [(ZERO_UUID, "r", 0)]
            epoch = session.epoch
            info = leader.append_as_leader(batch(b"2"), wall_clock_ms(), required_acks=-1)
            assert await leader.wait_for_replication(info.last_offset + 1, 10) == ErrorCode.NO_ERROR
            assert session.epoch > epoch  # incremental fetches moved it on

            a.fetch_sessions.sessions.clear()  # as after the leader's restart: FETCH_SESSION_ID_NOT_FOUND
            info = leader.append_as_leader(batch(b"3"), wall_clock_ms(), required_acks=-1)
            assert await leader.wait_for_replication(info.last_offset + 1, 10) == ErrorCode.NO_ERROR
            await until(lambda: follower.high_watermark == 3)
            assert len(a.fetch_sessions) == 1 and log_bytes(follower) == log_bytes(leader)

    asyncio.run(asyncio.wait_for(scenario(), 60))


def test_a_partition_the_leader_refuses_does_not_hold_back_the_others(tmp_path: Path) -> None:
    """The follower waits out replica.fetch.backoff.ms for the refused partition only."""
    async def scenario() -> None:
        async with two_brokers(tmp_path) as (a, b):
            b.replicas.fetcher_config = b.replicas.fetcher_config.__class__(max_wait_ms=100, backoff_ms=60_000)
            leader, follower = lead(a, 1, [0, 1]), follow(b, 0, 1)
            # The follower also follows a partition its leader does not host (yet): it is refused.
            b.replicas.become_follower("absent", 0, uuid.uuid4(), CONFIG, 0, 1, [0, 1], [0, 1])
            for value in (b"1", b"2", b"3"):
                info = leader.append_as_leader(batch(value), wall_clock_ms(), required_acks=-1)
                # Far below the backoff: only the refused partition waits it out.
                assert await leader.wait_for_replication(info.last_offset + 1, 10) == ErrorCode.NO_ERROR
            assert log_bytes(follower) == log_bytes(leader)

    asyncio.run(asyncio.wait_for(scenario(), 60))


def test_acks_all_produces_of_one_connection_are_appended_while_earlier_ones_wait(tmp_path: Path) -> None:
    """A producer with requests in flight: the second is appended while the first waits for the
    ISR (one replication round serves both), and the answers still come back in order."""
    async def scenario() -> None:
        async with two_brokers(tmp_path) as (a, b):
            leader = lead(a, 1, [0, 1])  # b does not follow yet: acks=all must wait
            reader, writer = await asyncio.open_connection("127.0.0.1", a.bound[0][2])
            client = ClientProtocol("pipelining")
            correlations = []
            for value in (b"first", b"second"):
                body = {"transactional_id": None, "acks": -1, "timeout_ms": 30_000, "topic_data": [
                    {"name": "r", "partition_data": [{"index": 0, "records": batch(value)}]}]}
                correlation, data = client.encode_request(0, 9, body)
                correlations.append(correlation)
                writer.write(data)
            correlation, data = client.encode_request(18, 3, {"client_software_name": "t",
                                                              "client_software_version": "1"})
            correlations.append(correlation)
            writer.write(data)
            await until(lambda: leader.log_end_offset == 2)  # both appended, neither answered
            assert leader.high_watermark == 0

            follow(b, 0, 1)
            answers = []
            while len(answers) < 3:
                client.receive_data(await reader.read(65536))
                while (answer := client.next_response()) is not None:
                    answers.append(answer)
            assert [c for c, _ in answers] == correlations  # in request order
            offsets = [r.responses[0].partition_responses[0] for _, r in answers[:2]]
            assert [(p.error_code, p.base_offset) for p in offsets] == [(0, 0), (0, 1)]
            writer.close()

    asyncio.run(asyncio.wait_for(scenario(), 60))


def test_a_producer_that_hangs_up_while_its_answers_wait_leaves_the_broker_well(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with two_brokers(tmp_path) as (a, b):
            leader = lead(a, 1, [0, 1])
            reader, writer = await asyncio.open_connection("127.0.0.1", a.bound[0][2])
            client = ClientProtocol("gone")
            for value in (b"1", b"2"):
                body = {"transactional_id": None, "acks": -1, "timeout_ms": 30_000, "topic_data": [
                    {"name": "r", "partition_data": [{"index": 0, "records": batch(value)}]}]}
                writer.write(client.encode_request(0, 9, body)[1])
            await until(lambda: leader.log_end_offset == 2)
            writer.close()  # gone before any answer
            follow(b, 0, 1)
            await until(lambda: leader.high_watermark == 2)
            info = leader.append_as_leader(batch(b"3"), wall_clock_ms(), required_acks=-1)
            assert await leader.wait_for_replication(info.last_offset + 1, 10) == ErrorCode.NO_ERROR
            # Its connection's tasks have ended: nothing is left waiting on the closed socket.
            await until(lambda: not [t for t in asyncio.all_tasks() if "_send_in_order" in repr(t.get_coro())])

    asyncio.run(asyncio.wait_for(scenario(), 60))
