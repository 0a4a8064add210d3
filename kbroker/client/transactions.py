"""`TransactionsClient`: transactions as an admin sees them. ListTransactions on every broker,
DescribeTransactions through the coordinator, DescribeProducers of a partition, and an ABORT
marker (WriteTxnMarkers) for a transaction left hanging."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from kbroker.client.coordinators import TRANSACTION_KEY, CoordinatorClient
from kbroker.client.errors import check

WRITE_TXN_MARKERS = 27
DESCRIBE_PRODUCERS = 61
DESCRIBE_TRANSACTIONS = 65
LIST_TRANSACTIONS = 66


@dataclass(frozen=True)
class TransactionListing:
    transactional_id: str
    producer_id: int
    state: str


@dataclass(frozen=True)
class TransactionDescription:
    coordinator_id: int
    transactional_id: str
    producer_id: int
    producer_epoch: int
    state: str
    timeout_ms: int
    start_time_ms: int  # -1 when no transaction is open
    partitions: list[tuple[str, int]]


@dataclass(frozen=True)
class ProducerState:
    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_timestamp: int
    coordinator_epoch: int
    current_txn_start_offset: int  # -1 when none is open


class TransactionsClient(CoordinatorClient):
    """Listing, describing and aborting transactions, and a partition's producers."""

    def list_transactions(self, states: Iterable[str] = (), producer_ids: Iterable[int] = ()
                          ) -> dict[int, list[TransactionListing]]:
        """Transactional ids each broker coordinates (only those in `states` / of `producer_ids`)."""
        body = {"state_filters": list(states), "producer_id_filters": list(producer_ids), "duration_filter": -1}
        listings = {}
        for node in sorted(self.metadata(refresh=True).brokers):
            response = self.request(LIST_TRANSACTIONS, body, node=node)
            check(response.error_code, context=f"list transactions of broker {node}")
            listings[node] = [TransactionListing(t.transactional_id, t.producer_id, t.transaction_state)
                              for t in response.transaction_states]
        return listings

    def describe_transaction(self, transactional_id: str) -> TransactionDescription:
        return self._retry_coordinator(lambda: self._describe_transaction(transactional_id))

    def _describe_transaction(self, transactional_id: str) -> TransactionDescription:
        coordinator = self._find_coordinator(transactional_id, TRANSACTION_KEY)
        response = self.request(DESCRIBE_TRANSACTIONS, {"transactional_ids": [transactional_id]},
                                node=coordinator.node_id)
        state = response.transaction_states[0]
        check(state.error_code, context=f"transactional id {transactional_id}")
        partitions = sorted((t.topic, p) for t in state.topics for p in t.partitions)
        return TransactionDescription(coordinator.node_id, transactional_id, state.producer_id, state.producer_epoch,
                                      state.transaction_state, state.transaction_timeout_ms,
                                      state.transaction_start_time_ms, partitions)

    def describe_producers(self, topic: str, partition: int, node: int | None = None) -> list[ProducerState]:
        """The active producers of a partition, as its leader (or replica `node`) knows them."""
        node = self.leader(topic, partition) if node is None else node
        body = {"topics": [{"name": topic, "partition_indexes": [partition]}]}
        result = self.request(DESCRIBE_PRODUCERS, body, node=node).topics[0].partitions[0]
        check(result.error_code, result.error_message, f"{topic}-{partition}")
        return [ProducerState(p.producer_id, p.producer_epoch, p.last_sequence, p.last_timestamp,
                              p.coordinator_epoch, p.current_txn_start_offset)
                for p in result.active_producers]

    def abort_transaction(self, topic: str, partition: int, producer_id: int, producer_epoch: int,
                          coordinator_epoch: int) -> None:
        """Write an ABORT marker for the producer's open transaction to the partition's leader."""
        body = {"markers": [{"producer_id": producer_id, "producer_epoch": producer_epoch,
                             "transaction_result": False, "coordinator_epoch": coordinator_epoch,
                             "topics": [{"name": topic, "partition_indexes": [partition]}]}]}
        result = self.request(WRITE_TXN_MARKERS, body, node=self.leader(topic, partition))
        check(result.markers[0].topics[0].partitions[0].error_code, context=f"{topic}-{partition}")
