"""Transaction markers for partitions led by other brokers, sent by the transaction coordinator.

In a cluster the coordinator appends a COMMIT/ABORT marker itself only where this broker leads
the partition; for the others it sends WriteTxnMarkers to each leader, as Kafka's
TransactionMarkerChannelManager does, and keeps the transaction in Prepare* until all are written.
Which broker leads a partition comes from the cluster's `Controller` (its metadata cache).
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from kbroker.cluster.broker_client import AsyncBrokerClient, BrokerUnavailable
from protocol.errors import ErrorCode

if TYPE_CHECKING:
    from kbroker.cluster.controller import Controller

WRITE_TXN_MARKERS = 27
# Marker answers after which a partition needs nothing more: written, or superseded by a newer
# epoch or coordinator (Kafka drops those markers too).
_MARKER_DONE = frozenset({ErrorCode.NO_ERROR, ErrorCode.INVALID_PRODUCER_EPOCH,
                          ErrorCode.TRANSACTION_COORDINATOR_FENCED})


class MarkerSender:
    """Writes transaction markers on partitions led by other brokers (Kafka's
    TransactionMarkerChannelManager): WriteTxnMarkers to each leader, retried until every
    partition has its marker, following leadership changes."""

    RETRY_S = 0.1

    def __init__(self, cluster: Controller, local_id: int) -> None:
        self.cluster = cluster
        self.local_id = local_id
        self._clients: dict[int, AsyncBrokerClient] = {}

    async def __call__(self, partitions: list[tuple[str, int]], producer_id: int, producer_epoch: int,
                       committed: bool) -> None:
        pending = set(partitions)
        while pending:
            for leader, owned in self._by_leader(pending).items():
                pending -= await self._send(leader, owned, producer_id, producer_epoch, committed)
            if pending:
                await asyncio.sleep(self.RETRY_S)  # until leaders are elected or reachable again

    def _by_leader(self, pending: set[tuple[str, int]]) -> dict[int, list[tuple[str, int]]]:
        by_leader: dict[int, list[tuple[str, int]]] = {}
        for topic, index in list(pending):
            if self.cluster.cache.topic(topic) is None:
                pending.discard((topic, index))  # deleted: nothing left to mark
                continue
            state = self.cluster.state_of(topic, index)
            if state is not None and state.leader >= 0:
                by_leader.setdefault(state.leader, []).append((topic, index))
        return by_leader

    async def _send(self, leader: int, owned: list[tuple[str, int]], producer_id: int, producer_epoch: int,
                    committed: bool) -> set[tuple[str, int]]:
        """The partitions that have their marker now (or no longer need one)."""
        address = self.cluster.endpoint_of(leader)
        if address is None:
            return set()
        client = self._clients.get(leader)
        if client is None or client.address != f"{address[0]}:{address[1]}":
            client = self._clients[leader] = AsyncBrokerClient(*address, f"txn-markers-{self.local_id}",
                                                               ssl_context=self.cluster.inter_broker_ssl,
                                                               sasl=self.cluster.inter_broker_sasl)
        topics: dict[str, list[int]] = {}
        for topic, index in owned:
            topics.setdefault(topic, []).append(index)
        body = {"markers": [{"producer_id": producer_id, "producer_epoch": producer_epoch,
                             "transaction_result": committed, "coordinator_epoch": 0,
                             "topics": [{"name": t, "partition_indexes": ps} for t, ps in topics.items()]}]}
        try:
            response = await client.request(WRITE_TXN_MARKERS, 1, body)
        except BrokerUnavailable:
            return set()
        done = set()
        for topic in response.markers[0].topics:
            for result in topic.partitions:
                if result.error_code in _MARKER_DONE:
                    done.add((topic.name, result.partition_index))
        return done
