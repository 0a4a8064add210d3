"""The controller's reaction to broker registrations, on a real ZooKeeper with an in-process
controller broker; the other broker is only a registration, so its death and return are exact."""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
from pathlib import Path

from kbroker.broker import Broker
from kbroker.config import BrokerConfig
from kbroker.metadata.store import BrokerEndpoint, BrokerRegistration, PartitionState
from kbroker.metadata.zk_store import ZooKeeperMetadataStore
from tests.test_replication import until


def test_a_bounced_leader_loses_leadership_even_if_the_watch_saw_no_gap(tmp_path: Path, zk_connect: str) -> None:
    """A broker that dies and registers again before the controller re-reads the broker list
    (ZooKeeper watches fire once; the list read afterwards already has the new registration)
    must still be treated as failed: it forgot what it held, so its leadership moves."""

    async def scenario() -> None:
        config = BrokerConfig.load(None, ["broker.id=0", f"log.dirs={tmp_path / 'b0'}",
                                          "listeners=PLAINTEXT://127.0.0.1:0", f"zookeeper.connect={zk_connect}"])
        controller = Broker(config)
        await controller.start()
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
