"""A small blocking Kafka client over `protocol.connection.ClientConnection`.

Made for the command-line tools and tests: one request at a time per connection, API
versions negotiated per broker, metadata to find partition leaders. It is not a general
client (no pipelining, no retries beyond what a tool needs, no consumer groups).
"""

from __future__ import annotations

import socket
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from construct import ConstructError, Container

from protocol.connection import ClientConnection
from protocol.errors import ErrorCode, KafkaError
from protocol.messages import BY_KEY
from protocol.primitives import ProtocolError

API_VERSIONS = 18
METADATA = 3
PRODUCE = 0
FETCH = 1
LIST_OFFSETS = 2
EARLIEST = -2
LATEST = -1
ZERO_UUID = uuid.UUID(int=0)


class BrokerUnreachable(ConnectionError):
    """No connection to a broker; the message is one line for a tool to print."""


def error_for(code: int, message: str | None = None, context: str = "") -> KafkaError:
    """A KafkaError for a response's error code, with a readable message."""
    try:
        error = ErrorCode(code)
    except ValueError:
        error = ErrorCode.UNKNOWN_SERVER_ERROR
    text = message or error.name
    return KafkaError(error, f"{context}: {text}" if context else text)


def check(code: int, message: str | None = None, context: str = "") -> None:
    if code != ErrorCode.NO_ERROR:
        raise error_for(code, message, context)


def parse_bootstrap(bootstrap: str) -> list[tuple[str, int]]:
    addresses = []
    for item in bootstrap.split(","):
        host, sep, port = item.strip().rpartition(":")
        if not sep or not host or not port.isdigit():
            raise ValueError(f"invalid bootstrap address {item.strip()!r} (expected host:port)")
        addresses.append((host.strip("[]"), int(port)))
    if not addresses:
        raise ValueError("no bootstrap address given")
    return addresses


class BrokerConnection:
    """One socket to one broker, with the API versions both sides speak."""

    def __init__(self, host: str, port: int, client_id: str, timeout: float) -> None:
        self.address = f"{host}:{port}"
        try:
            self._sock = socket.create_connection((host, port), timeout=timeout)
        except OSError as e:
            raise BrokerUnreachable(f"cannot connect to broker {self.address}: {_reason(e)}") from None
        self._sock.settimeout(timeout)
        self._conn = ClientConnection(client_id)
        self.versions: dict[int, int] = self._negotiate()

    def _negotiate(self) -> dict[int, int]:
        """The highest version of each API that this module and the broker both know."""
        response = self.send(API_VERSIONS, 3, {"client_software_name": "kbroker-client",
                                                "client_software_version": "0.1.0"})
        check(response.error_code, context="ApiVersions")
        versions = {}
        for entry in response.api_keys:
            api = BY_KEY.get(entry.api_key)
            if api is None:
                continue
            high = min(api.MAX_VERSION, entry.max_version)
            if high >= max(api.MIN_VERSION, entry.min_version):
                versions[entry.api_key] = high
        return versions

    def version_for(self, api: ModuleType) -> int:
        version = self.versions.get(api.API_KEY)
        if version is None:
            raise KafkaError(ErrorCode.UNSUPPORTED_VERSION,
                             f"broker {self.address} does not support {api.NAME}")
        return version

    def send(self, api_key: int, version: int, body: Any) -> Container:
        _, data = self._conn.encode_request(api_key, version, body)
        try:
            self._sock.sendall(data)
            return self._receive()
        except TimeoutError:
            raise KafkaError(ErrorCode.REQUEST_TIMED_OUT,
                             f"no response from broker {self.address} in time") from None
        except OSError as e:
            raise BrokerUnreachable(f"connection to broker {self.address} failed: {_reason(e)}") from None
        except (ConstructError, ProtocolError) as e:
            raise BrokerUnreachable(f"unreadable response from broker {self.address}: {e}") from None

    def _receive(self) -> Container:
        while (response := self._conn.next_response()) is None:
            chunk = self._sock.recv(1 << 20)
            if not chunk:
                raise BrokerUnreachable(f"broker {self.address} closed the connection")
            self._conn.receive_data(chunk)
        return response[1]

    def close(self) -> None:
        self._sock.close()


def _reason(e: OSError) -> str:
    return e.strerror or str(e) or type(e).__name__


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


class Client:
    """Blocking client for a cluster reached through `bootstrap` ("host:port[,host:port]")."""

    def __init__(self, bootstrap: str, client_id: str = "kbroker-tools", timeout: float = 30.0) -> None:
        self.client_id = client_id
        self.timeout = timeout
        self._addresses = parse_bootstrap(bootstrap)
        self._bootstrap = self._connect_any()
        self._nodes: dict[int, BrokerConnection] = {}
        self._metadata: ClusterMetadata | None = None

    def _connect_any(self) -> BrokerConnection:
        failures = []
        for host, port in self._addresses:
            try:
                return BrokerConnection(host, port, self.client_id, self.timeout)
            except BrokerUnreachable as e:
                failures.append(str(e))
        if len(failures) == 1:
            raise BrokerUnreachable(failures[0])
        raise BrokerUnreachable("cannot connect to any bootstrap broker: " + "; ".join(failures))

    # -- requests ----------------------------------------------------------------------------

    def request(self, api_key: int, body: Any, version: int | None = None, node: int | None = None) -> Container:
        """Send one request (to `node`, else the bootstrap broker) and return the response body."""
        conn = self._bootstrap if node is None else self.connection(node)
        if version is None:
            version = conn.version_for(BY_KEY[api_key])
        return conn.send(api_key, version, body)

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
            conn = BrokerConnection(host, port, self.client_id, self.timeout)
        self._nodes[node] = conn
        return conn

    # -- metadata ----------------------------------------------------------------------------

    def metadata(self, topics: Iterable[str] | None = None, refresh: bool = False) -> ClusterMetadata:
        """Cluster metadata for `topics` (all topics when None); cached until `refresh`."""
        if topics is None and self._metadata is not None and not refresh:
            return self._metadata
        version = self.version(METADATA)
        names = None if topics is None else list(topics)
        if names is None and version == 0:
            names = []  # v0 has no null array: empty means all topics
        body = {
            "topics": None if names is None else [{"name": n, "topic_id": ZERO_UUID} for n in names],
            "allow_auto_topic_creation": False,
        }
        meta = _cluster_metadata(self.request(METADATA, body, version))
        if topics is None:
            self._metadata = meta
        return meta

    def leader(self, topic: str, partition: int) -> int:
        meta = self.metadata([topic]).topic(topic)
        info = meta.partitions.get(partition)
        if info is None:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                             f"partition {partition} of topic '{topic}' does not exist")
        check(info.error_code, context=f"{topic}-{partition}")
        if info.leader < 0:
            raise KafkaError(ErrorCode.LEADER_NOT_AVAILABLE, f"{topic}-{partition} has no leader")
        return info.leader

    # -- data --------------------------------------------------------------------------------

    def produce(self, topic: str, partition: int, batch: bytes, acks: int = -1, timeout_ms: int = 30000) -> int:
        """Append one encoded record batch; returns its base offset."""
        node = self.leader(topic, partition)
        body = {
            "transactional_id": None,
            "acks": acks,
            "timeout_ms": timeout_ms,
            "topic_data": [{"name": topic, "partition_data": [{"index": partition, "records": batch}]}],
        }
        response = self.request(PRODUCE, body, node=node)
        if acks == 0:
            return -1
        result = response.responses[0].partition_responses[0]
        check(result.error_code, result.error_message, f"produce to {topic}-{partition}")
        return result.base_offset

    def list_offsets(self, topic: str, partitions: Iterable[int], timestamp: int,
                     isolation_level: int = 0) -> dict[int, int]:
        """Offset for `timestamp` (EARLIEST, LATEST or a time in ms) of each partition."""
        by_leader: dict[int, list[int]] = {}
        for p in partitions:
            by_leader.setdefault(self.leader(topic, p), []).append(p)
        offsets = {}
        for node, parts in by_leader.items():
            body = {
                "replica_id": -1,
                "isolation_level": isolation_level,
                "topics": [{"name": topic, "partitions": [
                    {"partition_index": p, "current_leader_epoch": -1, "timestamp": timestamp}
                    for p in parts]}],
            }
            response = self.request(LIST_OFFSETS, body, node=node)
            for result in response.topics[0].partitions:
                check(result.error_code, context=f"list offsets of {topic}-{result.partition_index}")
                offsets[result.partition_index] = result.offset
        return offsets

    def fetch(self, node: int, positions: dict[tuple[str, int], int], *, topic_ids: dict[str, uuid.UUID],
              max_wait_ms: int = 500, max_bytes: int = 52428800, partition_max_bytes: int = 1048576,
              isolation_level: int = 0) -> Container:
        """One Fetch to `node` for the given (topic, partition) → offset; the raw response."""
        topics: dict[str, list[dict[str, Any]]] = {}
        for (topic, partition), offset in positions.items():
            topics.setdefault(topic, []).append({
                "partition": partition,
                "current_leader_epoch": -1,
                "fetch_offset": offset,
                "last_fetched_epoch": -1,
                "log_start_offset": -1,
                "partition_max_bytes": partition_max_bytes,
            })
        body = {
            "replica_id": -1,
            "max_wait_ms": max_wait_ms,
            "min_bytes": 1,
            "max_bytes": max_bytes,
            "isolation_level": isolation_level,
            "session_id": 0,
            "session_epoch": -1,
            # Versions before 13 name the topic, later ones give its id; the schema picks.
            "topics": [{"topic": t, "topic_id": topic_ids.get(t, ZERO_UUID), "partitions": parts}
                       for t, parts in topics.items()],
            "forgotten_topics_data": [],
            "rack_id": "",
        }
        return self.request(FETCH, body, node=node)

    # -- lifecycle ---------------------------------------------------------------------------

    def close(self) -> None:
        for conn in {id(c): c for c in (self._bootstrap, *self._nodes.values())}.values():
            conn.close()

    def __enter__(self) -> Client:
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
