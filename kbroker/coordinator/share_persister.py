"""How a share-partition leader reaches the share coordinator (Kafka's DefaultStatePersister).

The coordinator of (group, topic id, partition) is the leader of the `__share_group_state`
partition its key hashes to: this broker's own `ShareCoordinator` when it leads that partition,
else the leader, over Initialize/Read/WriteShareGroupState (v0, between kbroker brokers). Which
broker leads comes from the cluster's metadata, as Kafka's persister finds it in its metadata
cache rather than asking FindCoordinator each time.

A request the coordinator cannot answer yet (the topic being created, no leader elected, the
leader unreachable or not yet loaded) is retried until `retry_timeout_s` has passed: a failover
of the coordinator takes a ZooKeeper session's timeout, and an acknowledgement waits for it.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from kbroker.cluster.broker_client import AsyncBrokerClient, BrokerUnavailable
from kbroker.coordinator.share_coordinator import (
    NO_EPOCH,
    TOPIC,
    ShareCoordinator,
    StateRead,
    StateSummary,
    summarize,
)
from kbroker.coordinator.share_state_records import PersistedBatch
from protocol.errors import ErrorCode, KafkaError

if TYPE_CHECKING:
    from kbroker.cluster.controller import Controller

INITIALIZE, READ, WRITE, DELETE = 83, 84, 85, 86
RETRY_S = 0.1
CONNECTIONS_PER_BROKER = 4  # one request at a time on each
# Answers after which asking again (maybe elsewhere) may succeed.
log = logging.getLogger("kbroker.share")
RETRIABLE = frozenset({ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE,
                       ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.REQUEST_TIMED_OUT,
                       ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.NOT_ENOUGH_REPLICAS,
                       ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND})

T = TypeVar("T")


class SharePersister:
    def __init__(self, coordinator: ShareCoordinator, cluster: Controller | None, local_id: int,
                 retry_timeout_s: float = 30.0) -> None:
        self.coordinator = coordinator
        self.cluster = cluster
        self.local_id = local_id
        self.retry_timeout_s = retry_timeout_s
        self._clients: dict[int, list[tuple[AsyncBrokerClient, asyncio.Lock]]] = {}
        self._unavailable_reason: str | None = None

    # -- the three calls -------------------------------------------------------------------------

    async def read(self, group_id: str, topic_id: uuid.UUID, partition: int, leader_epoch: int) -> StateRead:
        body = {"group_id": group_id, "topics": [{"topic_id": topic_id, "partitions": [
            {"partition": partition, "leader_epoch": leader_epoch}]}]}
        return await self._call(
            group_id, topic_id, partition,
            lambda: self.coordinator.read(group_id, topic_id, partition, leader_epoch),
            READ, body, _read_answer, lambda answer: answer.error)

    async def initialize(self, group_id: str, topic_id: uuid.UUID, partition: int, state_epoch: int,
                         start_offset: int) -> int:
        body = {"group_id": group_id, "topics": [{"topic_id": topic_id, "partitions": [
            {"partition": partition, "state_epoch": state_epoch, "start_offset": start_offset}]}]}
        return await self._call(
            group_id, topic_id, partition,
            lambda: self.coordinator.initialize(group_id, topic_id, partition, state_epoch, start_offset),
            INITIALIZE, body, _error_answer, lambda code: code)

    async def write(self, group_id: str, topic_id: uuid.UUID, partition: int, state_epoch: int, leader_epoch: int,
                    start_offset: int, batches: Sequence[PersistedBatch]) -> int:
        body = {"group_id": group_id, "topics": [{"topic_id": topic_id, "partitions": [
            {"partition": partition, "state_epoch": state_epoch, "leader_epoch": leader_epoch,
             "start_offset": start_offset,
             "state_batches": [{"first_offset": b.first_offset, "last_offset": b.last_offset,
                                "delivery_state": b.delivery_state, "delivery_count": b.delivery_count}
                               for b in batches]}]}]}
        return await self._call(
            group_id, topic_id, partition,
            lambda: self.coordinator.write(group_id, topic_id, partition, state_epoch, leader_epoch, start_offset,
                                           batches),
            WRITE, body, _error_answer, lambda code: code)

    async def summary(self, group_id: str, topic_id: uuid.UUID, partition: int) -> StateSummary:
        """The state's start offset and what past it is done with, recording no reader. A
        remote coordinator is asked with ReadShareGroupState at no leader epoch (nothing fenced):
        the summary API (87) of Kafka 4.0's early access lacks the counts the lag needs, and the
        state's leader epoch (left -1 then)."""
        body = {"group_id": group_id, "topics": [{"topic_id": topic_id, "partitions": [
            {"partition": partition, "leader_epoch": NO_EPOCH}]}]}
        return await self._call(
            group_id, topic_id, partition,
            lambda: self.coordinator.summary(group_id, topic_id, partition),
            READ, body, lambda response: summarize(_read_answer(response)), lambda answer: answer.error)

    async def delete(self, group_id: str, topic_id: uuid.UUID, partition: int) -> int:
        """Forget a share partition's state (DeleteShareGroupState)."""
        body = {"group_id": group_id, "topics": [{"topic_id": topic_id, "partitions": [{"partition": partition}]}]}
        return await self._call(
            group_id, topic_id, partition,
            lambda: self.coordinator.delete(group_id, topic_id, partition),
            DELETE, body, _error_answer, lambda code: code)

    async def ask_broker(self, broker_id: int, api_key: int, version: int, body: dict[str, Any]) -> Any:
        """One request to another broker over this persister's connections (None when it cannot
        be reached): for the end offsets the lag of a share partition led elsewhere needs."""
        return await self._remote(broker_id, api_key, body, lambda response: response, version)

    # -- routing ---------------------------------------------------------------------------------

    async def _call(self, group_id: str, topic_id: uuid.UUID, partition: int, local: Callable[[], Awaitable[T]],
                    api_key: int, body: dict[str, Any], parse: Callable[[Any], T], error_of: Callable[[T], int]) -> T:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.retry_timeout_s
        while True:
            answer = await self._once(group_id, topic_id, partition, local, api_key, body, parse)
            code = ErrorCode.COORDINATOR_NOT_AVAILABLE if answer is None else error_of(answer)
            if code not in RETRIABLE or loop.time() >= deadline:
                return answer if answer is not None else parse(None)
            await asyncio.sleep(RETRY_S)

    async def _once(self, group_id: str, topic_id: uuid.UUID, partition: int, local: Callable[[], Awaitable[T]],
                    api_key: int, body: dict[str, Any], parse: Callable[[Any], T]) -> T | None:
        """The coordinator's answer, or None when there is none to ask yet."""
        topic = self.coordinator.topic
        try:
            topic.ensure()  # created on first use, as Kafka does
        except KafkaError as e:
            # E.g. fewer brokers alive than its replication factor: say so once, not per retry.
            if e.message != self._unavailable_reason:
                self._unavailable_reason = e.message
                log.warning("the share coordinator's topic %s cannot be created: %s", topic.name, e.message)
            return None
        if self.cluster is None:
            return await local()
        index = self.coordinator.partition_of(group_id, topic_id, partition)
        state = self.cluster.state_of(TOPIC, index)
        if state is None or state.leader < 0:
            return None
        if state.leader == self.local_id:
            return await local()
        return await self._remote(state.leader, api_key, body, parse)

    async def _remote(self, leader: int, api_key: int, body: dict[str, Any], parse: Callable[[Any], T],
                      version: int = 0) -> T | None:
        assert self.cluster is not None
        address = self.cluster.endpoint_of(leader)
        if address is None:
            return None
        client, lock = self._client(leader, address)
        async with lock:
            try:
                response = await client.request(api_key, version, body)
            except BrokerUnavailable:
                return None
        return parse(response)

    def _client(self, broker_id: int, address: tuple[str, int]) -> tuple[AsyncBrokerClient, asyncio.Lock]:
        """A free connection to the broker (or the least busy one), opened on demand."""
        assert self.cluster is not None
        pool = self._clients.setdefault(broker_id, [])
        if pool and pool[0][0].address != f"{address[0]}:{address[1]}":
            pool.clear()  # the broker came back elsewhere
        for client, lock in pool:
            if not lock.locked():
                return client, lock
        if len(pool) < CONNECTIONS_PER_BROKER:
            pool.append((AsyncBrokerClient(*address, f"share-persister-{self.local_id}",
                                           ssl_context=self.cluster.inter_broker_ssl,
                                           sasl=self.cluster.inter_broker_sasl), asyncio.Lock()))
            return pool[-1]
        return pool[len(pool) - 1]

    async def close(self) -> None:
        for pool in self._clients.values():
            for client, _ in pool:
                await client.close()
        self._clients.clear()


def _partition_result(response: Any) -> Any:
    if response is None or not response.results or not response.results[0].partitions:
        return None
    return response.results[0].partitions[0]


def _error_answer(response: Any) -> int:
    result = _partition_result(response)
    return ErrorCode.COORDINATOR_NOT_AVAILABLE if result is None else result.error_code


def _read_answer(response: Any) -> StateRead:
    result = _partition_result(response)
    if result is None:
        return StateRead(ErrorCode.COORDINATOR_NOT_AVAILABLE)
    if result.error_code != ErrorCode.NO_ERROR:
        return StateRead(result.error_code)
    return StateRead(ErrorCode.NO_ERROR, result.state_epoch, result.start_offset,
                     tuple(PersistedBatch(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count)
                           for b in result.state_batches))
