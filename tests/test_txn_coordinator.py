"""The transaction coordinator over a real broker's storage, in-process: what a restart must
recover that the wire tests cannot stop at exactly the right moment."""

from __future__ import annotations

import asyncio
from pathlib import Path

from kbroker.broker import Broker
from kbroker.cluster.topics import TopicSpec
from kbroker.coordinator.group_offsets import OffsetCommit
from kbroker.coordinator.offsets_topic import partition_for
from kbroker.coordinator.txn_coordinator import TxnState
from protocol.errors import ErrorCode
from protocol.record_batch import Record, encode_batch
from tests.test_group_coordinator import started


def transactional_write(broker: Broker, topic: str, producer_id: int, epoch: int, sequence: int = 0) -> None:
    batch = encode_batch([Record(0, 1, None, b"v")], producer_id=producer_id, producer_epoch=epoch,
                         base_sequence=sequence, transactional=True)
    broker.replicas.get(topic, 0).append_as_leader(batch, 1)


def test_a_commit_caught_between_prepare_and_markers_completes_on_restart(tmp_path: Path) -> None:
    async def scenario() -> None:
        broker = await started(tmp_path)
        broker.topics.create(TopicSpec("out", 1))
        txns = broker.transactions
        pid, epoch = txns.init_producer("crashy", 10_000)
        txns.add_partitions("crashy", pid, epoch, [("out", 0)])
        transactional_write(broker, "out", pid, epoch)
        assert broker.replicas.get("out", 0).last_stable_offset == 0
        txns._persist(txns.transactions["crashy"], TxnState.PREPARE_COMMIT)  # the broker dies right here
        await broker.stop()

        again = await started(tmp_path)
        try:
            assert again.transactions.transactions["crashy"].state == TxnState.COMPLETE_COMMIT
            partition = again.replicas.get("out", 0)
            assert partition.last_stable_offset == partition.high_watermark == 2  # data + COMMIT marker
            assert partition.log.collect_aborted_transactions(0, 2) == []
        finally:
            await again.stop()

    asyncio.run(scenario())


def test_an_open_transaction_survives_a_restart_and_times_out_later(tmp_path: Path) -> None:
    async def scenario() -> None:
        broker = await started(tmp_path)
        broker.topics.create(TopicSpec("out", 1))
        pid, epoch = broker.transactions.init_producer("slow", 5_000)
        broker.transactions.add_partitions("slow", pid, epoch, [("out", 0)])
        transactional_write(broker, "out", pid, epoch)
        start_ms = broker.transactions.transactions["slow"].start_ms
        await broker.stop()

        again = await started(tmp_path)
        try:
            txn = again.transactions.transactions["slow"]
            assert (txn.state, txn.start_ms) == (TxnState.ONGOING, start_ms)
            assert again.transactions.abort_timed_out(start_ms + 4_999) == 0
            assert again.transactions.abort_timed_out(start_ms + 5_000) == 1
            assert (txn.state, txn.producer_epoch) == (TxnState.COMPLETE_ABORT, epoch + 1)  # the old producer is fenced
            assert again.replicas.get("out", 0).log.collect_aborted_transactions(0, 2) == [(pid, 0)]
            assert again.transactions.add_partitions("slow", pid, epoch, [("out", 0)]) == \
                {("out", 0): ErrorCode.PRODUCER_FENCED}
        finally:
            await again.stop()

    asyncio.run(scenario())


def two_groups_on_different_partitions(partitions: int = 50) -> tuple[str, str]:
    """Two groups, the second in a partition replayed before the first's (partitions replay in order)."""
    first = next(f"eos-{i}" for i in range(1000) if partition_for(f"eos-{i}", partitions) > 0)
    second = next(f"eos-{i}" for i in range(1000)
                  if partition_for(f"eos-{i}", partitions) < partition_for(first, partitions))
    return first, second


def test_transactional_offsets_replay_per_partition_of_their_markers(tmp_path: Path) -> None:
    """A producer's committed transaction on one group must not settle its later, still open,
    transaction on a group in another partition of __consumer_offsets."""
    async def scenario() -> None:
        broker = await started(tmp_path)
        broker.topics.create(TopicSpec("in", 1))
        first, second = two_groups_on_different_partitions()
        txns, groups = broker.transactions, broker.groups
        pid, epoch = txns.init_producer("pipeline", 10_000)

        def commit_offset(group: str, offset: int) -> None:
            txns.add_offsets("pipeline", pid, epoch, group)
            errors = groups.commit_transactional(group, pid, epoch, -1, "", None,
                                                 [OffsetCommit("in", 0, offset, -1, None)])
            assert errors == [ErrorCode.NO_ERROR]

        commit_offset(first, 10)
        txns.end_transaction("pipeline", pid, epoch, committed=True)
        commit_offset(second, 20)  # left open
        await broker.stop()

        again = await started(tmp_path)
        try:
            assert again.groups.fetch_offsets(first, None)[("in", 0)].offset == 10
            assert again.groups.fetch_offsets(second, [("in", 0)])[("in", 0)] is None
            assert again.groups.has_pending(second, ("in", 0))
            again.transactions.end_transaction("pipeline", pid, epoch, committed=False)
            assert not again.groups.has_pending(second, ("in", 0))
            assert again.groups.fetch_offsets(second, [("in", 0)])[("in", 0)] is None
        finally:
            await again.stop()

    asyncio.run(scenario())
