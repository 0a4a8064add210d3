"""The retry forwarder on real logs, in one process: a pass forwards due records once; a new
pass after a leader lost track of its last forward batch appends that batch's target batch again,
and the target's producer state answers the copy as a duplicate, so each record lands once."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

from kbroker.clock import wall_clock_ms
from kbroker.cluster.broker_client import BrokerUnavailable
from kbroker.cluster.metadata_cache import MetadataCache
from kbroker.cluster.partition import Partition
from kbroker.cluster.partition_writer import PartitionWriter
from kbroker.cluster.replica_manager import ReplicaManager
from kbroker.cluster.retry_forwarding import RetryForwarder
from kbroker.metadata.store import TopicRecord
from kbroker.storage.log_config import LogConfig
from kbroker.storage.log_manager import LogManager
from protocol.record_batch import Record, decode_batches, encode_batch

BROKER = 0
RETRY_CONFIGS = {"retry.target.topic": "target", "retry.backoff.ms": "0"}


@dataclass
class Setup:
    replicas: ReplicaManager
    cache: MetadataCache
    retry: Partition
    target: Partition


@asynccontextmanager
async def two_topics(tmp_path: Path) -> AsyncIterator[Setup]:
    """A retry topic `retry` (one partition) forwarding to `target` (one partition), both led here."""
    replicas = ReplicaManager(BROKER, LogManager([tmp_path / "logs"]))
    cache = MetadataCache()
    now = wall_clock_ms()
    for name, configs in (("retry", RETRY_CONFIGS), ("target", {})):
        cache.put_topic(TopicRecord(name, uuid.uuid4(), {0: [BROKER]}, dict(configs)))
        replicas.become_leader(name, 0, uuid.uuid4(), LogConfig.from_properties(configs), 1, [BROKER], [BROKER], now)
    try:
        yield Setup(replicas, cache, replicas.get("retry", 0), replicas.get("target", 0))
    finally:
        await replicas.stop()
        replicas.log_manager.shutdown()


class LosesAcks(PartitionWriter):
    """A writer whose appends land but whose answers never arrive (the connection drops)."""

    def __init__(self, replicas: ReplicaManager) -> None:
        super().__init__(replicas)
        self.landed = asyncio.Event()

    async def append(self, topic: str, partition: int, batch: bytes) -> int:
        await super().append(topic, partition, batch)
        self.landed.set()
        raise BrokerUnavailable("the answer was lost")


def forwarder(setup: Setup, writer: PartitionWriter, ids: list[int]) -> RetryForwarder:
    def next_id() -> int:
        ids.append(len(ids) + 100)
        return ids[-1]
    return RetryForwarder(setup.replicas, setup.cache, writer, next_id, lambda _: LogConfig())


async def produce_to_retry(setup: Setup, *values: bytes) -> None:
    now = wall_clock_ms()
    batch = encode_batch([Record(i, now, b"key-" + v, v) for i, v in enumerate(values)])
    appended = await setup.replicas.append([("retry", 0, batch)], 1, 1000, now)
    assert appended.results[0].error == 0


def target_values(setup: Setup) -> list[tuple[bytes | None, dict[str, bytes | None]]]:
    read = setup.target.read_log(0, 1 << 20)
    if read is None:
        return []
    return [(r.value, dict(r.headers)) for b in decode_batches(read.read_bytes()) for r in b.records]


async def run_pass(forwarder: RetryForwarder, partition: Partition) -> None:
    done = asyncio.Event()
    forwarder.on_pass_done = done.set
    forwarder.start(partition)
    await asyncio.wait_for(done.wait(), 10)


def test_a_pass_forwards_due_records_once_and_confirms_its_batch(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with two_topics(tmp_path) as setup:
            await produce_to_retry(setup, b"a", b"b")
            index = setup.retry.log.delay_index
            assert index.pending_count == 2
            ids: list[int] = []
            mover = forwarder(setup, PartitionWriter(setup.replicas), ids)
            await run_pass(mover, setup.retry)
            assert [(v, h["kbroker.attempt"]) for v, h in target_values(setup)] == [(b"a", b"1"), (b"b", b"1")]
            assert index.pending_count == 0 and index.unconfirmed_forward_batch() is None
            assert mover.forwarded == 2 and ids == [100]
            # Nothing due: another pass writes nothing.
            end = setup.retry.log_end_offset
            await run_pass(mover, setup.retry)
            assert setup.retry.log_end_offset == end and len(target_values(setup)) == 2
    asyncio.run(scenario())


def test_a_new_pass_appends_the_unconfirmed_batch_again_and_the_target_drops_the_copy(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with two_topics(tmp_path) as setup:
            await produce_to_retry(setup, b"a", b"b")
            index = setup.retry.log.delay_index
            lossy = LosesAcks(setup.replicas)
            ids: list[int] = []  # one allocator: producer ids are unique across leaders
            first = forwarder(setup, lossy, ids)
            first.start(setup.retry)
            await asyncio.wait_for(lossy.landed.wait(), 10)
            await first.stop()  # the leader dies: its forward batch is in the log, unconfirmed
            unconfirmed = index.unconfirmed_forward_batch()
            assert unconfirmed is not None and index.pending_count == 0
            assert [v for v, _ in target_values(setup)] == [b"a", b"b"]

            await produce_to_retry(setup, b"c")
            second = forwarder(setup, PartitionWriter(setup.replicas), ids)
            await run_pass(second, setup.retry)
            # The copy of the first batch was a duplicate; c was forwarded after it.
            assert [v for v, _ in target_values(setup)] == [b"a", b"b", b"c"]
            assert index.unconfirmed_forward_batch() is None and index.pending_count == 0
    asyncio.run(scenario())


def test_an_unconfirmed_batch_that_never_reached_its_target_is_appended_by_the_next_pass(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with two_topics(tmp_path) as setup:
            await produce_to_retry(setup, b"a")

            class Unreachable(PartitionWriter):
                tried = asyncio.Event()

                async def append(self, topic: str, partition: int, batch: bytes) -> int:
                    self.tried.set()
                    raise BrokerUnavailable("no route")

            writer = Unreachable(setup.replicas)
            ids: list[int] = []
            first = forwarder(setup, writer, ids)
            first.start(setup.retry)
            await asyncio.wait_for(writer.tried.wait(), 10)
            await first.stop()
            assert target_values(setup) == []
            second = forwarder(setup, PartitionWriter(setup.replicas), ids)
            await run_pass(second, setup.retry)
            assert [v for v, _ in target_values(setup)] == [b"a"]
    asyncio.run(scenario())
