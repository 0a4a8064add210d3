"""The transaction coordinator: transactional ids, their producer epochs and transactions.

Kafka's state machine per transactional id:

    Empty ──AddPartitions/AddOffsets──▶ Ongoing ──EndTxn(commit)──▶ PrepareCommit ──markers──▶ CompleteCommit
                                           └──EndTxn(abort) / timeout──▶ PrepareAbort ──markers──▶ CompleteAbort

Every state change is written to `__transaction_state` before it is acknowledged; markers are
control batches appended to each partition of the transaction (all local on one node), and the
group coordinator settles transactional offsets when a marker reaches `__consumer_offsets`.
A new InitProducerId for the same transactional id bumps the epoch, which fences the old
producer, and aborts what it left open.
"""

from __future__ import annotations

import asyncio
import enum
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from kbroker.clock import wall_clock_ms
from kbroker.coordinator.offsets_topic import TOPIC as OFFSETS_TOPIC
from kbroker.coordinator.offsets_topic import InternalTopic
from kbroker.storage.producer_state import AppendOrigin
from protocol.coordinator_records import (
    TransactionValue,
    decode_transaction_key,
    decode_transaction_value,
    encode_transaction_key,
    encode_transaction_value,
)
from protocol.errors import ErrorCode, KafkaError
from protocol.primitives import ProtocolError
from protocol.record_batch import ControlType, encode_end_txn_batch

if TYPE_CHECKING:
    from kbroker.cluster.producer_ids import ProducerIdManager
    from kbroker.cluster.replica_manager import ReplicaManager
    from kbroker.coordinator.group_coordinator import GroupCoordinator

log = logging.getLogger("kbroker.transactions")

TOPIC = "__transaction_state"
COORDINATOR_EPOCH = 0  # one coordinator per transactional id until leadership can move (replication)
MAX_EPOCH = 32767
E = ErrorCode


class TxnState(enum.IntEnum):
    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7

    @property
    def display(self) -> str:
        return "".join(word.capitalize() for word in self.name.split("_"))


@dataclass(frozen=True, slots=True)
class TxnConfig:
    max_timeout_ms: int = 900_000
    abort_check_interval_ms: int = 10_000
    transactional_id_expiration_ms: int = 7 * 24 * 3600 * 1000


@dataclass(eq=False)
class TxnMetadata:
    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnState = TxnState.EMPTY
    partitions: dict[str, set[int]] = field(default_factory=dict)
    start_ms: int = -1
    last_update_ms: int = -1

    def record(self) -> TransactionValue:
        return TransactionValue(
            self.producer_id, self.producer_epoch, self.timeout_ms, self.state,
            {t: sorted(ps) for t, ps in self.partitions.items()}, self.last_update_ms, self.start_ms,
        )

    def partition_list(self) -> list[tuple[str, int]]:
        return sorted((t, p) for t, ps in self.partitions.items() for p in ps)


class TransactionCoordinator:
    def __init__(
        self, topic: InternalTopic, config: TxnConfig, producer_ids: ProducerIdManager, replicas: ReplicaManager,
        groups: GroupCoordinator, partition_exists: object,
    ) -> None:
        self.topic = topic
        self.config = config
        self.producer_ids = producer_ids
        self.replicas = replicas
        self.groups = groups
        self.partition_exists = partition_exists  # (topic, partition) -> bool
        self.transactions: dict[str, TxnMetadata] = {}
        # In a cluster: (partitions, producer id, epoch, committed) -> markers written on their leaders.
        self.remote_markers: Callable[[list[tuple[str, int]], int, int, bool], Awaitable[None]] | None = None
        self._marker_tasks: set[asyncio.Task[None]] = set()

    # -- startup ---------------------------------------------------------------------------------

    def load(self, only: int | None = None) -> None:
        """Rebuild the transactional ids of the partitions this broker leads (or of partition
        `only`, just taken over) and finish transactions caught mid-commit."""
        if not self.topic.exists():
            return
        for partition, batch in self.topic.batches(only):
            for record in batch.records:
                self._replay(partition.name, record.key, record.value)
        for txn in list(self.transactions.values()):
            if txn.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
                log.info("completing transaction %s left in %s", txn.transactional_id, txn.state.display)
                self._write_markers_and_complete(txn)
        log.info("loaded %d transactional ids", len(self.transactions))

    def unload(self, partition: int) -> None:
        """Another broker coordinates `partition` of `__transaction_state` now."""
        for transactional_id in [t for t in self.transactions if self.topic.partition_of(t) == partition]:
            del self.transactions[transactional_id]

    def _replay(self, where: str, key: bytes | None, value: bytes | None) -> None:
        if key is None:
            return
        try:
            transactional_id = decode_transaction_key(key)
            if value is None:
                self.transactions.pop(transactional_id, None)
                return
            v = decode_transaction_value(value)
        except (ProtocolError, ValueError) as e:
            log.warning("skipping an unreadable record of %s: %s", where, e)
            return
        self.transactions[transactional_id] = TxnMetadata(
            transactional_id, v.producer_id, v.producer_epoch, v.timeout_ms, TxnState(v.status),
            {t: set(ps) for t, ps in v.partitions.items()}, v.start_ms, v.last_update_ms,
        )

    # -- InitProducerId --------------------------------------------------------------------------

    def init_producer(
        self, transactional_id: str, timeout_ms: int, producer_id: int = -1, producer_epoch: int = -1
    ) -> tuple[int, int]:
        """(producer id, epoch) for a transactional producer; aborts and fences a previous one."""
        if not transactional_id:
            raise KafkaError(E.INVALID_REQUEST, "empty transactional id")
        self._check_coordinator(transactional_id)
        if not 0 < timeout_ms <= self.config.max_timeout_ms:
            raise KafkaError(E.INVALID_TRANSACTION_TIMEOUT)
        txn = self.transactions.get(transactional_id)
        if txn is None:
            txn = TxnMetadata(transactional_id, self.producer_ids.next_id(), 0, timeout_ms)
            self._persist(txn, TxnState.EMPTY)
            return txn.producer_id, txn.producer_epoch
        if producer_id >= 0 and (producer_id, producer_epoch) != (txn.producer_id, txn.producer_epoch):
            # KIP-360: only the current producer may ask to bump its own epoch.
            raise KafkaError(E.PRODUCER_FENCED)
        if txn.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT, TxnState.PREPARE_EPOCH_FENCE):
            raise KafkaError(E.CONCURRENT_TRANSACTIONS)
        if txn.state == TxnState.ONGOING:
            # The previous incarnation left a transaction open: fence it and abort what it wrote.
            self._bump_epoch(txn)
            self._end(txn, committed=False)
            if txn.state == TxnState.PREPARE_ABORT:
                # Markers are on their way to other brokers: the producer retries, as with Kafka.
                raise KafkaError(E.CONCURRENT_TRANSACTIONS)
        else:
            self._bump_epoch(txn)
        txn.timeout_ms = timeout_ms
        txn.start_ms = -1
        self._persist(txn, TxnState.EMPTY)
        return txn.producer_id, txn.producer_epoch

    def _bump_epoch(self, txn: TxnMetadata) -> None:
        if txn.producer_epoch >= MAX_EPOCH - 1:
            txn.producer_id, txn.producer_epoch = self.producer_ids.next_id(), 0
        else:
            txn.producer_epoch += 1

    # -- AddPartitionsToTxn / AddOffsetsToTxn ----------------------------------------------------

    def add_partitions(
        self, transactional_id: str, producer_id: int, producer_epoch: int, partitions: list[tuple[str, int]],
        verify_only: bool = False,
    ) -> dict[tuple[str, int], int]:
        try:
            txn = self._txn_for(transactional_id, producer_id, producer_epoch)
        except KafkaError as e:
            return {tp: e.code for tp in partitions}
        unknown = {tp for tp in partitions if not self.partition_exists(*tp)}
        if unknown:
            return {tp: E.UNKNOWN_TOPIC_OR_PARTITION if tp in unknown else E.OPERATION_NOT_ATTEMPTED for tp in partitions}
        if verify_only:
            added = set(txn.partition_list()) if txn.state == TxnState.ONGOING else set()
            return {tp: E.NO_ERROR if tp in added else E.INVALID_TXN_STATE for tp in partitions}
        self._add(txn, partitions)
        return {tp: E.NO_ERROR for tp in partitions}

    def verify_partition(self, transactional_id: str | None, producer_id: int, producer_epoch: int, topic: str,
                         partition: int) -> None:
        """A partition leader's check before a producer's first transactional write to it (KIP-890):
        the partition must be in the producer's ongoing transaction, so no write can start a
        transaction that no coordinator will ever end."""
        if transactional_id is None:
            raise KafkaError(E.INVALID_TXN_STATE, "a transactional write without a transactional id")
        code = self.add_partitions(transactional_id, producer_id, producer_epoch, [(topic, partition)],
                                   verify_only=True)[(topic, partition)]
        if code == E.NOT_COORDINATOR and self.remote_markers is not None:
            return  # coordinated by another broker: asking it (AddPartitionsToTxn verify_only) is to come
        if code in (E.NOT_COORDINATOR, E.COORDINATOR_NOT_AVAILABLE, E.COORDINATOR_LOAD_IN_PROGRESS,
                    E.CONCURRENT_TRANSACTIONS):
            raise KafkaError(E.NOT_ENOUGH_REPLICAS, "transaction verification is not possible yet")  # retriable
        if code in (E.PRODUCER_FENCED, E.INVALID_PRODUCER_ID_MAPPING):
            raise KafkaError(E.INVALID_PRODUCER_EPOCH, f"producer {producer_id} epoch {producer_epoch} is not "
                             f"the current one of {transactional_id}")
        if code != E.NO_ERROR:
            raise KafkaError(E.INVALID_TXN_STATE, f"{topic}-{partition} is not part of the ongoing transaction of "
                             f"{transactional_id}")

    def add_offsets(self, transactional_id: str, producer_id: int, producer_epoch: int, group_id: str) -> None:
        txn = self._txn_for(transactional_id, producer_id, producer_epoch)
        self.groups.topic.ensure()
        self._add(txn, [(OFFSETS_TOPIC, self.groups.topic.partition_of(group_id))])

    def _add(self, txn: TxnMetadata, partitions: list[tuple[str, int]]) -> None:
        fresh = txn.state != TxnState.ONGOING
        if fresh:
            txn.partitions = {}
        if not fresh and all(p in txn.partitions.get(t, set()) for t, p in partitions):
            return  # nothing new: no write needed
        for topic, partition in partitions:
            txn.partitions.setdefault(topic, set()).add(partition)
        if fresh:
            txn.start_ms = wall_clock_ms()
        self._persist(txn, TxnState.ONGOING)

    def _txn_for(self, transactional_id: str, producer_id: int, producer_epoch: int) -> TxnMetadata:
        self._check_coordinator(transactional_id)
        txn = self.transactions.get(transactional_id)
        if txn is None or txn.producer_id != producer_id:
            raise KafkaError(E.INVALID_PRODUCER_ID_MAPPING)
        if producer_epoch != txn.producer_epoch:
            raise KafkaError(E.PRODUCER_FENCED)
        if txn.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT, TxnState.PREPARE_EPOCH_FENCE):
            raise KafkaError(E.CONCURRENT_TRANSACTIONS)
        return txn

    # -- EndTxn ----------------------------------------------------------------------------------

    def end_transaction(self, transactional_id: str, producer_id: int, producer_epoch: int, committed: bool) -> None:
        txn = self._txn_for(transactional_id, producer_id, producer_epoch)
        if txn.state == TxnState.ONGOING:
            self._end(txn, committed)
            return
        done = TxnState.COMPLETE_COMMIT if committed else TxnState.COMPLETE_ABORT
        if txn.state == done:
            return  # a retry of an EndTxn that already went through
        raise KafkaError(E.INVALID_TXN_STATE, f"EndTxn({'commit' if committed else 'abort'}) in state {txn.state.display}")

    def _end(self, txn: TxnMetadata, committed: bool) -> None:
        self._persist(txn, TxnState.PREPARE_COMMIT if committed else TxnState.PREPARE_ABORT)
        self._write_markers_and_complete(txn)
        log.info("transaction %s (producer %d epoch %d) %s over %d partitions", txn.transactional_id,
                 txn.producer_id, txn.producer_epoch, "committed" if committed else "aborted",
                 len(txn.partition_list()))

    def _write_markers_and_complete(self, txn: TxnMetadata) -> None:
        """Markers to every partition of the transaction, then Complete*. Partitions led here get
        theirs at once; those led by other brokers get WriteTxnMarkers from a background task, and
        the transaction stays in Prepare* (CONCURRENT_TRANSACTIONS to its producer) until then."""
        committed = txn.state == TxnState.PREPARE_COMMIT
        now = wall_clock_ms()
        remote = []
        for topic, index in txn.partition_list():
            partition = self.replicas.find(topic, index)
            if self.remote_markers is not None and (partition is None or not partition.is_leader):
                remote.append((topic, index))
                continue
            try:
                write_marker(self.replicas, self.groups, topic, index, txn.producer_id, txn.producer_epoch,
                             COORDINATOR_EPOCH, committed, now)
            except KafkaError as e:
                if e.code != E.UNKNOWN_TOPIC_OR_PARTITION:  # deleted since it joined the transaction
                    raise
        if remote and self.remote_markers is not None:
            task = asyncio.get_running_loop().create_task(self._complete_remotely(txn, remote, committed))
            self._marker_tasks.add(task)
            task.add_done_callback(self._marker_tasks.discard)
            return
        self._complete(txn, committed)

    def _complete(self, txn: TxnMetadata, committed: bool) -> None:
        txn.partitions = {}
        self._persist(txn, TxnState.COMPLETE_COMMIT if committed else TxnState.COMPLETE_ABORT)

    async def _complete_remotely(self, txn: TxnMetadata, partitions: list[tuple[str, int]], committed: bool) -> None:
        assert self.remote_markers is not None
        epoch = (txn.producer_id, txn.producer_epoch)
        await self.remote_markers(partitions, txn.producer_id, txn.producer_epoch, committed)
        if self.transactions.get(txn.transactional_id) is txn and (txn.producer_id, txn.producer_epoch) == epoch:
            self._complete(txn, committed)

    # -- timeouts and queries --------------------------------------------------------------------

    def abort_timed_out(self, now: int) -> int:
        """Abort transactions open longer than their timeout, bumping the epoch so the producer
        that abandoned them is fenced."""
        aborted = 0
        for txn in list(self.transactions.values()):
            if txn.state == TxnState.ONGOING and txn.start_ms + txn.timeout_ms <= now:
                log.info("aborting transaction %s: open for more than %d ms", txn.transactional_id, txn.timeout_ms)
                self._bump_epoch(txn)
                self._end(txn, committed=False)
                aborted += 1
        return aborted

    def describe(self, transactional_id: str) -> TxnMetadata:
        self._check_coordinator(transactional_id)
        txn = self.transactions.get(transactional_id)
        if txn is None:
            raise KafkaError(E.TRANSACTIONAL_ID_NOT_FOUND)
        return txn

    def list(self, states: set[str], producer_ids: set[int]) -> list[TxnMetadata]:
        return [
            t for t in self.transactions.values()
            if (not states or t.state.display in states) and (not producer_ids or t.producer_id in producer_ids)
        ]

    # -- persistence -----------------------------------------------------------------------------

    def _check_coordinator(self, transactional_id: str) -> None:
        self.topic.ensure()
        if self.topic.hosted(transactional_id) is None:
            raise KafkaError(E.NOT_COORDINATOR)

    def _persist(self, txn: TxnMetadata, state: TxnState) -> None:
        """Write the new state first; only then does it take effect (and get acknowledged)."""
        previous = txn.state
        txn.state = state
        txn.last_update_ms = wall_clock_ms()
        entry = (encode_transaction_key(txn.transactional_id), encode_transaction_value(txn.record()))
        try:
            self.topic.write(txn.transactional_id, [entry], txn.last_update_ms)
        except KafkaError:
            txn.state = previous
            raise
        self.transactions[txn.transactional_id] = txn


def write_marker(
    replicas: ReplicaManager, groups: GroupCoordinator, topic: str, index: int, producer_id: int,
    producer_epoch: int, coordinator_epoch: int, committed: bool, now: int,
) -> None:
    """Append a COMMIT/ABORT marker to a partition this broker leads (what WriteTxnMarkers asks
    of a partition leader); on `__consumer_offsets` it also settles the producer's pending offsets."""
    partition = replicas.find(topic, index)
    if partition is None:
        raise KafkaError(E.UNKNOWN_TOPIC_OR_PARTITION)
    marker = encode_end_txn_batch(ControlType.COMMIT if committed else ControlType.ABORT, producer_id=producer_id,
                                  producer_epoch=producer_epoch, coordinator_epoch=coordinator_epoch, timestamp=now)
    partition.append_as_leader(marker, now, origin=AppendOrigin.COORDINATOR)
    if topic == OFFSETS_TOPIC:
        groups.complete_transaction(producer_id, committed, index)
