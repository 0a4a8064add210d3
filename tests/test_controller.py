"""The controller's reaction to another broker's registrations and topic changes, on a real
ZooKeeper with an in-process controller broker; the other broker is only a session (its
registration, its writes), so its death and return, and the moment of its writes, are exact."""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import threading
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from kazoo.exceptions import ConnectionLoss

from kbroker.broker import Broker
from kbroker.config import BrokerConfig
from kbroker.metadata.store import (
    BrokerEndpoint,
    BrokerRegistration,
    MetadataStore,
    PartitionState,
    TopicRecord,
)
from kbroker.metadata.zk_store import ZooKeeperMetadataStore
from tests.test_replication import until


async def started_broker_zero(tmp_path: Path, zk_connect: str) -> Broker:
    """Broker 0, in this process, on the test's ZooKeeper (the first to come: the controller)."""
    config = BrokerConfig.load(None, ["broker.id=0", f"log.dirs={tmp_path / 'b0'}",
                                      "listeners=PLAINTEXT://127.0.0.1:0", f"zookeeper.connect={zk_connect}"])
    broker = Broker(config)
    await broker.start()
    return broker


def test_a_bounced_leader_loses_leadership_even_if_the_watch_saw_no_gap(tmp_path: Path, zk_connect: str) -> None:
    """A broker that dies and registers again before the controller re-reads the broker list
    (ZooKeeper watches fire once; the list read afterwards already has the new registration)
    must still be treated as failed: it forgot what it held, so its leadership moves."""

    async def scenario() -> None:
        controller = await started_broker_zero(tmp_path, zk_connect)
        other = ZooKeeperMetadataStore(zk_connect)
        try:
            first = BrokerRegistration(1, (BrokerEndpoint("PLAINTEXT", "127.0.0.1", 1),), timestamp_ms=1000)
            other.register_broker(first)
            view = controller.cluster
            assert view is not None
            await until(lambda: sorted(view.brokers) == [0, 1] and view.controller == 0)
            controller.store.create_topic("t", uuid.uuid4(), {0: [1, 0]}, {})
            controller.store.create_partition_states("t", {0: PartitionState(1, 0, [1, 0], view.controller_epoch)})
            await until(lambda: (s := view.state_of("t", 0)) is not None and s.leader == 1)

            # The watch's next read already shows broker 1 again, registered by its new process.
            view._on_brokers({0: view.brokers[0], 1: dataclasses.replace(first, timestamp_ms=2000)})

            state = controller.store.get_partition_state("t", 0)
            assert state is not None and state.leader == 0 and state.leader_epoch >= 1, state
            assert state.isr == [0]  # the bounced broker rejoins the ISR by catching up again
        finally:
            other.close()
            await controller.stop()

    asyncio.run(scenario())


@pytest.mark.parametrize("failed_reads", [0, 1], ids=["next-read-ok", "next-read-fails"])
def test_a_topic_grown_while_its_record_was_read_has_all_its_partitions_hosted(
        tmp_path: Path, zk_connect: str, monkeypatch: pytest.MonkeyPatch, failed_reads: int) -> None:
    """CreatePartitions announces itself by rewriting partition 0's state. Made between this
    broker's read of the new topic and its watch on partition 0, it is only that watch's first
    value: the broker must still learn of the new partitions, and host them as their replica;
    also when its next read of the topic fails (ZooKeeper's connection lost meanwhile)."""

    def grow(other: MetadataStore, controller_epoch: int) -> None:
        """As `TopicManager._add_in_store` writes it: the new assignment, the new states, then
        partition 0's state rewritten unchanged."""
        other.add_partitions("growing", {1: [0], 2: [0]})
        other.create_partition_states("growing", {p: PartitionState(0, 0, [0], controller_epoch) for p in (1, 2)})
        rewrite_state(other, "growing", 0)

    def hosted(broker: Broker) -> bool:
        return all((p := broker.replicas.find("growing", i)) is not None and p.is_leader for i in range(3))

    host_despite_a_change_while_reading(tmp_path, zk_connect, monkeypatch, "growing", {0: [0]}, 0, grow, hosted,
                                        failed_reads)


def test_a_partition_reassigned_here_while_its_record_was_read_is_hosted(
        tmp_path: Path, zk_connect: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The same for a reassignment that adds this broker to a partition's replicas."""

    def reassign(other: MetadataStore, controller_epoch: int) -> None:
        """Phase one, as `Controller._assign_and_touch` writes it: target + current replicas,
        then the partition's state rewritten unchanged."""
        other.add_partitions("moving", {0: [0, 1]})
        rewrite_state(other, "moving", 0)

    def hosted(broker: Broker) -> bool:
        return (p := broker.replicas.find("moving", 0)) is not None and not p.is_leader and p.leader_id == 1

    host_despite_a_change_while_reading(tmp_path, zk_connect, monkeypatch, "moving", {0: [1]}, 1, reassign, hosted)


def host_despite_a_change_while_reading(
        tmp_path: Path, zk_connect: str, monkeypatch: pytest.MonkeyPatch, topic: str,
        assignment: dict[int, list[int]], leader: int, change: Callable[[MetadataStore, int], None],
        hosted: Callable[[Broker], bool], failed_reads: int = 0) -> None:
    """Broker 0 runs in-process; broker 1 is another session that creates `topic` (partition 0
    led by `leader`) and makes `change` to it right after broker 0's topics watch has read the
    new record, on the store's thread, before broker 0 sets partition-state watches from it on
    the event loop; broker 0's next `failed_reads` reads of the topic fail. Broker 0 must come to
    host what `hosted` says."""

    async def scenario() -> None:
        broker = await started_broker_zero(tmp_path, zk_connect)
        other = ZooKeeperMetadataStore(zk_connect)
        try:
            other.register_broker(BrokerRegistration(1, (BrokerEndpoint("PLAINTEXT", "127.0.0.1", 1),)))
            view = broker.cluster
            assert view is not None
            await until(lambda: sorted(view.brokers) == [0, 1] and view.controller == 0)
            created = threading.Event()
            epoch = view.controller_epoch
            monkeypatch.setattr(broker.store, "get_topic", changed_after_first_read(
                broker.store.get_topic, topic, created, lambda: change(other, epoch), failed_reads))
            other.create_topic(topic, uuid.uuid4(), assignment, {})
            other.create_partition_states(topic, {0: PartitionState(leader, 0, [leader], epoch)})
            created.set()

            await until(lambda: hosted(broker))
            stored = other.get_topic(topic)
            assert stored is not None and broker.metadata_cache.topics[topic].assignment == stored.assignment
        finally:
            other.close()
            await broker.stop()

    asyncio.run(scenario())


def changed_after_first_read(read: Callable[[str], TopicRecord | None], topic: str, created: threading.Event,
                             change: Callable[[], None], failed_reads: int) -> Callable[[str], TopicRecord | None]:
    """`read`, except that the first read of `topic` is followed at once by `change`, made once
    the topic's creation is complete (`created`): the reader acts on the record it read only
    after the change. The `failed_reads` reads of `topic` after it fail as a read in flight
    when ZooKeeper's connection is lost does."""
    reads = itertools.count()

    def read_then_change(name: str) -> TopicRecord | None:
        if name != topic:
            return read(name)
        number = next(reads)
        if 0 < number <= failed_reads:
            raise ConnectionLoss()
        record = read(name)
        if number == 0:
            assert created.wait(10), "the topic's creation did not complete"
            change()
        return record
    return read_then_change


def rewrite_state(store: MetadataStore, topic: str, index: int) -> None:
    """What `Controller.touch_state` does: the state written again unchanged, so watches fire."""
    state = store.get_partition_state(topic, index)
    assert state is not None
    store.set_partition_state(topic, index, dataclasses.replace(state, version=-1), state.version)
