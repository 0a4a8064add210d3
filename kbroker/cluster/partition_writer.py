"""Appending a batch to any partition of the cluster, as the broker itself: through the
ReplicaManager when this broker leads the partition, else as a Produce to its leader over the
inter-broker listener. For the broker's own writers to other topics: share groups' dead letters,
retry topics' forwarding.

acks=all always: these writes stand for records a client was told are safe.
"""

from __future__ import annotations

from collections.abc import Callable

from kbroker.clock import wall_clock_ms
from kbroker.cluster.broker_client import AsyncBrokerClient
from kbroker.cluster.replica_manager import ReplicaManager
from kbroker.storage.log_validator import RecordValidationError
from protocol.errors import ErrorCode, KafkaError

PRODUCE, PRODUCE_VERSION = 0, 9
TIMEOUT_MS = 30_000

# The leader of a partition led elsewhere: (broker id, (host, port) of its inter-broker listener).
RemoteLeader = Callable[[str, int], tuple[int, tuple[str, int]] | None]
ClientFactory = Callable[[str, int], AsyncBrokerClient]


class PartitionWriter:
    def __init__(self, replicas: ReplicaManager, remote_leader: RemoteLeader | None = None,
                 client_factory: ClientFactory | None = None) -> None:
        self.replicas = replicas
        self.remote_leader = remote_leader
        self.client_factory = client_factory
        self._clients: dict[int, AsyncBrokerClient] = {}

    async def append(self, topic: str, partition: int, batch: bytes) -> int:
        """Append `batch` with acks=all; returns its base offset (for an idempotent batch already
        appended, the offset it got then). Raises KafkaError with the partition's error, or
        BrokerUnavailable when the leader cannot be reached."""
        local = self.replicas.find(topic, partition)
        if local is not None and local.is_leader:
            return await self._append_locally(topic, partition, batch)
        return await self._produce_remote(topic, partition, batch)

    async def close(self) -> None:
        for client in self._clients.values():
            await client.close()
        self._clients.clear()

    async def _append_locally(self, topic: str, partition: int, batch: bytes) -> int:
        appended = await self.replicas.append([(topic, partition, batch)], -1, TIMEOUT_MS, wall_clock_ms())
        if appended.replicated is not None:
            await appended.replicated
        result = appended.results[0]
        if result.error != ErrorCode.NO_ERROR:
            raise _error(result.error, result.message, result.record_errors)
        return result.base_offset

    async def _produce_remote(self, topic: str, partition: int, batch: bytes) -> int:
        leader = self.remote_leader(topic, partition) if self.remote_leader is not None else None
        if leader is None or self.client_factory is None:
            raise KafkaError(ErrorCode.LEADER_NOT_AVAILABLE, f"no leader known for {topic}-{partition}")
        broker_id, (host, port) = leader
        client = self._clients.get(broker_id)
        if client is None or client.address != f"{host}:{port}":
            client = self._clients[broker_id] = self.client_factory(host, port)
        body = {"transactional_id": None, "acks": -1, "timeout_ms": TIMEOUT_MS,
                "topic_data": [{"name": topic, "partition_data": [{"index": partition, "records": batch}]}]}
        response = await client.request(PRODUCE, PRODUCE_VERSION, body)
        answer = response.responses[0].partition_responses[0]
        if answer.error_code != ErrorCode.NO_ERROR:
            record_errors = [(e.batch_index, e.batch_index_error_message or "") for e in answer.record_errors or []]
            raise _error(answer.error_code, answer.error_message, record_errors)
        return answer.base_offset


def _error(code: int, message: str | None, record_errors: list[tuple[int, str]]) -> KafkaError:
    """The partition's error; a RecordValidationError naming the refused records when it did."""
    if record_errors:
        return RecordValidationError(ErrorCode(code), message or "", list(record_errors))
    return KafkaError(ErrorCode(code), message or "")
