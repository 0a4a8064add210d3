"""The partitions this broker hosts: their roles, appends, reads and waits for data.

On one node every partition is led here. In a cluster the controller's decisions arrive as
`become_leader` / `become_follower` / `stop_replica`, as Kafka's LeaderAndIsr and StopReplica
do; followers are fed by one `ReplicaFetcher` per leader broker, and the leaders shrink their
ISR on the periodic tick (`replica.lag.time.max.ms`).
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import uuid
from collections.abc import Callable, Iterable, Iterator

from kbroker.cluster.partition import IsrWriter, Partition
from kbroker.cluster.replica_fetcher import FetcherConfig, ReplicaFetcher
from kbroker.security.sasl_config import SaslCredentials
from kbroker.storage.log_config import LogConfig
from kbroker.storage.log_manager import LogManager
from protocol.errors import ErrorCode, KafkaError

log = logging.getLogger("kbroker.replication")

EndpointLookup = Callable[[int], "tuple[str, int] | None"]  # broker id -> (host, port) it listens on


class ReplicaManager:
    def __init__(
        self, broker_id: int, log_manager: LogManager, *, endpoint_of: EndpointLookup | None = None,
        isr_writer: IsrWriter | None = None, fetcher_config: FetcherConfig | None = None,
    ) -> None:
        self.broker_id = broker_id
        self.log_manager = log_manager
        self.endpoint_of = endpoint_of  # the leader's address on the inter-broker listener
        self.inter_broker_ssl: ssl.SSLContext | None = None  # TLS when that listener is SSL
        self.inter_broker_sasl: SaslCredentials | None = None  # the login when it is SASL
        self.isr_writer = isr_writer
        self.fetcher_config = fetcher_config or FetcherConfig()
        self._partitions: dict[tuple[str, int], Partition] = {}
        self._fetchers: dict[int, ReplicaFetcher] = {}

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

    # -- roles (what the controller decides) --------------------------------------------------

    def _open(self, topic: str, index: int, topic_id: uuid.UUID, config: LogConfig, leader_id: int) -> Partition:
        key = (topic, index)
        partition = self._partitions.get(key)
        if partition is None:
            log_ = self.log_manager.get_or_create_log(topic, index, config)
            partition = Partition(topic, index, topic_id, log_, leader_id, -1, local_id=self.broker_id,
                                  isr_writer=self.isr_writer)
            self._partitions[key] = partition
        return partition

    def become_leader(
        self, topic: str, index: int, topic_id: uuid.UUID, config: LogConfig, leader_epoch: int,
        replicas: list[int], isr: list[int], now_ms: int,
    ) -> Partition:
        partition = self._open(topic, index, topic_id, config, self.broker_id)
        self._stop_fetching(partition)
        if partition.is_leader and partition.leader_epoch == leader_epoch:
            partition.update_membership(replicas, isr, now_ms)  # ISR or replica changes only
            return partition
        partition.make_leader(leader_epoch, replicas, isr, now_ms)
        return partition

    def become_follower(
        self, topic: str, index: int, topic_id: uuid.UUID, config: LogConfig, leader_id: int, leader_epoch: int,
        replicas: list[int], isr: list[int],
    ) -> Partition:
        partition = self._open(topic, index, topic_id, config, leader_id)
        if not partition.is_leader and partition.leader_id == leader_id and partition.leader_epoch == leader_epoch:
            partition.replicas, partition.isr = list(replicas), list(isr)
            return partition
        self._stop_fetching(partition)
        partition.make_follower(leader_id, leader_epoch, replicas, isr)
        if leader_id >= 0:
            self._fetcher_for(leader_id).add(partition)
        return partition

    def stop_replica(self, topic: str, index: int, delete: bool) -> None:
        partition = self._partitions.pop((topic, index), None)
        if partition is None:
            return
        self._stop_fetching(partition)
        partition.make_follower(-1, partition.leader_epoch, partition.replicas, partition.isr)
        if delete:
            self.log_manager.delete_log(topic, index)

    def _fetcher_for(self, leader_id: int) -> ReplicaFetcher:
        fetcher = self._fetchers.get(leader_id)
        if fetcher is None:
            endpoint = self.endpoint_of(leader_id) if self.endpoint_of is not None else None
            if endpoint is None:
                raise KafkaError(ErrorCode.BROKER_NOT_AVAILABLE, f"no address for broker {leader_id}")
            fetcher = ReplicaFetcher(self.broker_id, leader_id, *endpoint, self.fetcher_config, self.inter_broker_ssl,
                                     self.inter_broker_sasl)
            self._fetchers[leader_id] = fetcher
        return fetcher

    def _stop_fetching(self, partition: Partition) -> None:
        for fetcher in self._fetchers.values():
            fetcher.remove(partition.topic, partition.index)

    def shrink_isrs(self, now_ms: int, max_lag_ms: int) -> None:
        """Leaders drop followers that have not caught up within `replica.lag.time.max.ms`."""
        for partition in list(self._partitions.values()):
            for replica in partition.shrink_isr(now_ms, max_lag_ms):
                log.info("%s: broker %d fell out of the ISR, now %s", partition.name, replica, partition.isr)

    async def stop(self) -> None:
        for fetcher in self._fetchers.values():
            await fetcher.stop()
        self._fetchers.clear()

    # -- lookups --------------------------------------------------------------------------------

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
        for _ in self.remove_topic_steps(topic):
            pass

    def remove_topic_steps(self, topic: str) -> Iterator[None]:
        """Remove a topic's partitions one at a time (a step each)."""
        for partition in self.partitions_of(topic):
            del self._partitions[(topic, partition.index)]
            # A follower stops fetching it here: this broker's own DeleteTopics comes before the
            # ZooKeeper watch, which then finds nothing to stop, and a fetcher still asking for a
            # deleted partition gets UNKNOWN_TOPIC_OR_PARTITION from the leader on every round.
            self._stop_fetching(partition)
            partition.wake_waiters()
            self.log_manager.delete_log(topic, partition.index)
            yield

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
