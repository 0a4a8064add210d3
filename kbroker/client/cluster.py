"""`ClusterClient`: the cluster as a client sees it. Connections to the bootstrap broker and
to each node it learns of, requests routed to a node at the version both sides speak, and the
cluster metadata (brokers, topics, partition leaders, the controller) cached until refreshed.

The other parts of the client (admin, data, groups, transactions) are subclasses of it.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Self

from construct import Container

from kbroker.client.connection import BrokerConnection, parse_bootstrap
from kbroker.client.errors import BrokerUnreachable, check
from kbroker.security.client_config import ClientSecurity
from protocol.errors import ErrorCode, KafkaError
from protocol.messages import BY_KEY
from protocol.primitives import ZERO_UUID

METADATA = 3


@dataclass
class PartitionMetadata:
    partition: int
    leader: int
    leader_epoch: int
    replicas: list[int]
    isr: list[int]
    error_code: int = 0


@dataclass
class TopicMetadata:
    name: str
    topic_id: uuid.UUID
    is_internal: bool
    partitions: dict[int, PartitionMetadata] = field(default_factory=dict)
    error_code: int = 0


@dataclass
class ClusterMetadata:
    cluster_id: str | None
    controller_id: int
    brokers: dict[int, tuple[str, int]]
    topics: dict[str, TopicMetadata]

    def topic(self, name: str) -> TopicMetadata:
        """The topic, or a KafkaError saying why it cannot be used."""
        meta = self.topics.get(name)
        if meta is None:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Topic '{name}' does not exist")
        if meta.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Topic '{name}' does not exist")
        check(meta.error_code, context=f"topic {name}")
        return meta


class ClusterClient:
    """Connections to, and metadata of, a cluster reached through `bootstrap` ("host:port[,host:port]")."""

    def __init__(self, bootstrap: str, client_id: str = "kbroker-tools", timeout: float = 30.0,
                 security: ClientSecurity | None = None) -> None:
        self.client_id = client_id
        self.timeout = timeout
        self.security = security  # TLS and SASL settings (--command-config); None: plaintext
        self._addresses = parse_bootstrap(bootstrap)
        self._bootstrap = self._connect_any()
        self._nodes: dict[int, BrokerConnection] = {}
        self._metadata: ClusterMetadata | None = None
        self._topics: dict[str, TopicMetadata] = {}

    def _connect_any(self) -> BrokerConnection:
        failures = []
        for host, port in self._addresses:
            try:
                return BrokerConnection(host, port, self.client_id, self.timeout, self.security)
            except BrokerUnreachable as e:
                failures.append(str(e))
        if len(failures) == 1:
            raise BrokerUnreachable(failures[0])
        raise BrokerUnreachable("cannot connect to any bootstrap broker: " + "; ".join(failures))

    # -- requests ----------------------------------------------------------------------------

    def request(self, api_key: int, body: Any, version: int | None = None, node: int | None = None) -> Container:
        """Send one request (to `node`, else the bootstrap broker) and return the response body."""
        conn, version = self._route(api_key, version, node)
        return conn.send(api_key, version, body)

    def _route(self, api_key: int, version: int | None, node: int | None) -> tuple[BrokerConnection, int]:
        conn = self._bootstrap if node is None else self.connection(node)
        return conn, conn.version_for(BY_KEY[api_key]) if version is None else version

    def version(self, api_key: int, node: int | None = None) -> int:
        conn = self._bootstrap if node is None else self.connection(node)
        return conn.version_for(BY_KEY[api_key])

    def connection(self, node: int) -> BrokerConnection:
        conn = self._nodes.get(node)
        if conn is not None:
            return conn
        address = self.metadata().brokers.get(node) or self.metadata(refresh=True).brokers.get(node)
        if address is None:
            raise KafkaError(ErrorCode.BROKER_NOT_AVAILABLE, f"broker {node} is not in the cluster metadata")
        host, port = address
        if f"{host}:{port}" == self._bootstrap.address:
            conn = self._bootstrap
        else:
            conn = BrokerConnection(host, port, self.client_id, self.timeout, self.security)
        self._nodes[node] = conn
        return conn

    # -- metadata ----------------------------------------------------------------------------

    def metadata(self, topics: Iterable[str] | None = None, refresh: bool = False,
                 auto_create: bool = False) -> ClusterMetadata:
        """Cluster metadata for `topics` (all topics when None); cached until `refresh`.

        `auto_create` lets the broker create unknown topics, as a Kafka producer's requests do.
        """
        if topics is None and self._metadata is not None and not refresh:
            return self._metadata
        version = self.version(METADATA)
        names = None if topics is None else list(topics)
        if names is None and version == 0:
            names = []  # v0 has no null array: empty means all topics
        body = {
            "topics": None if names is None else [{"name": n, "topic_id": ZERO_UUID} for n in names],
            "allow_auto_topic_creation": auto_create,
        }
        meta = _cluster_metadata(self.request(METADATA, body, version))
        if topics is None:
            self._metadata = meta
        self._topics.update((t.name, t) for t in meta.topics.values() if t.error_code == ErrorCode.NO_ERROR)
        return meta

    def wait_for_topic(self, topic: str, auto_create: bool = False) -> TopicMetadata:
        """The topic once every partition has a leader (a new topic may briefly have none)."""
        deadline = time.monotonic() + self.timeout
        backoff = 0.01
        while True:
            try:
                meta = self.metadata([topic], auto_create=auto_create).topic(topic)
                if meta.partitions and all(p.leader >= 0 for p in meta.partitions.values()):
                    return meta
            except KafkaError as e:
                if e.code != ErrorCode.LEADER_NOT_AVAILABLE:
                    raise
            if time.monotonic() + backoff > deadline:
                raise KafkaError(ErrorCode.LEADER_NOT_AVAILABLE, f"topic '{topic}' has partitions without a leader")
            time.sleep(backoff)  # retry backoff, as Kafka clients have: the broker pushes nothing
            backoff = min(backoff * 2, 0.5)

    def leader(self, topic: str, partition: int) -> int:
        """The partition's leader, from the last metadata seen for the topic (fetched if none)."""
        meta = self._topics.get(topic) or self.metadata([topic]).topic(topic)
        info = meta.partitions.get(partition)
        if info is None:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                             f"partition {partition} of topic '{topic}' does not exist")
        check(info.error_code, context=f"{topic}-{partition}")
        if info.leader < 0:
            raise KafkaError(ErrorCode.LEADER_NOT_AVAILABLE, f"{topic}-{partition} has no leader")
        return info.leader

    def controller(self) -> int | None:
        """The controller's node id, where Kafka's admin client sends topic changes."""
        controller = self.metadata(refresh=True).controller_id
        return controller if controller >= 0 else None

    # -- lifecycle ---------------------------------------------------------------------------

    def close(self) -> None:
        for conn in {id(c): c for c in (self._bootstrap, *self._nodes.values())}.values():
            conn.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _cluster_metadata(response: Container) -> ClusterMetadata:
    brokers = {b.node_id: (b.host, b.port) for b in response.brokers}
    topics = {}
    for t in response.topics:
        partitions = {
            p.partition_index: PartitionMetadata(
                p.partition_index, p.leader_id, p.leader_epoch, list(p.replica_nodes), list(p.isr_nodes),
                p.error_code)
            for p in t.partitions
        }
        topics[t.name] = TopicMetadata(t.name, t.topic_id, t.is_internal, partitions, t.error_code)
    return ClusterMetadata(response.cluster_id, response.controller_id, brokers, topics)
