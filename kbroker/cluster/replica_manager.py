"""The partitions this broker hosts: appends, reads and waits for data."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterable

from kbroker.cluster.partition import Partition
from kbroker.storage.log_config import LogConfig
from kbroker.storage.log_manager import LogManager
from protocol.errors import ErrorCode, KafkaError


class ReplicaManager:
    def __init__(self, broker_id: int, log_manager: LogManager) -> None:
        self.broker_id = broker_id
        self.log_manager = log_manager
        self._partitions: dict[tuple[str, int], Partition] = {}

    def host(
        self,
        topic: str,
        index: int,
        topic_id: uuid.UUID,
        config: LogConfig,
        replicas: list[int],
        leader_epoch: int = 0,
    ) -> Partition:
        """Open (or create) the log of a partition this broker leads."""
        key = (topic, index)
        partition = self._partitions.get(key)
        if partition is None:
            log = self.log_manager.get_or_create_log(topic, index, config)
            # A single replica's whole log is committed: the HW is the log end.
            log.high_watermark = log.log_end_offset
            # As a new leader does in Kafka: its epoch starts at the log end, so OffsetForLeaderEpoch
            # answers for the current epoch even before anything is written in it.
            log.epochs.assign(leader_epoch, log.log_end_offset)
            partition = Partition(topic, index, topic_id, log, self.broker_id, leader_epoch, replicas, list(replicas))
            self._partitions[key] = partition
        return partition

    def get(self, topic: str, index: int) -> Partition:
        partition = self._partitions.get((topic, index))
        if partition is None:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        return partition

    def find(self, topic: str, index: int) -> Partition | None:
        return self._partitions.get((topic, index))

    def partitions(self) -> Iterable[Partition]:
        return self._partitions.values()

    def partitions_of(self, topic: str) -> list[Partition]:
        return sorted((p for p in self._partitions.values() if p.topic == topic), key=lambda p: p.index)

    def remove_topic(self, topic: str) -> None:
        for partition in self.partitions_of(topic):
            del self._partitions[(topic, partition.index)]
            partition.wake_waiters()
            self.log_manager.delete_log(topic, partition.index)

    def update_config(self, topic: str, config: LogConfig) -> None:
        self.log_manager.update_config(topic, config)

    async def wait_for_data(self, partitions: Iterable[Partition], timeout_s: float) -> None:
        """Return when any of `partitions` gets new data, or after `timeout_s`."""
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        watched = list(partitions)
        for partition in watched:
            partition.add_waiter(waiter)
        try:
            await asyncio.wait_for(waiter, timeout_s)
        except TimeoutError:
            pass
        finally:
            for partition in watched:
                partition.remove_waiter(waiter)
