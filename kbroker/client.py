"""A small blocking Kafka client over `protocol.connection.ClientProtocol`.

Made for the command-line tools and tests: one request at a time per connection, API
versions negotiated per broker, metadata to find partition leaders. It is not a general
client (no pipelining, no retries beyond what a tool needs, no group membership: it only
administers groups).
"""

from __future__ import annotations

import socket
import struct
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, TypeVar

from construct import ConstructError, Container

from kbroker.clock import wall_clock_ms
from kbroker.security.client_config import ClientSecurity
from kbroker.security.sasl_client import authenticate_sync
from protocol import record_batch
from protocol.connection import ClientProtocol
from protocol.errors import ErrorCode, KafkaError
from protocol.messages import BY_KEY, consumer_protocol_assignment, consumer_protocol_subscription
from protocol.primitives import ProtocolError, parse_all

API_VERSIONS = 18
METADATA = 3
PRODUCE = 0
FETCH = 1
LIST_OFFSETS = 2
CREATE_TOPICS = 19
DELETE_TOPICS = 20
DESCRIBE_CONFIGS = 32
CREATE_PARTITIONS = 37
INCREMENTAL_ALTER_CONFIGS = 44
FIND_COORDINATOR = 10
OFFSET_COMMIT = 8
OFFSET_FETCH = 9
DESCRIBE_GROUPS = 15
LIST_GROUPS = 16
DELETE_GROUPS = 42
OFFSET_DELETE = 47
WRITE_TXN_MARKERS = 27
ELECT_LEADERS = 43
ALTER_PARTITION_REASSIGNMENTS = 45
LIST_PARTITION_REASSIGNMENTS = 46
DESCRIBE_PRODUCERS = 61
DESCRIBE_TRANSACTIONS = 65
LIST_TRANSACTIONS = 66
EARLIEST = -2
LATEST = -1
ZERO_UUID = uuid.UUID(int=0)
GROUP_KEY = 0  # FindCoordinator key type of a group
TRANSACTION_KEY = 1  # ... and of a transactional id
CONSUMER_PROTOCOL_TYPE = "consumer"
COORDINATOR_RETRIABLE = frozenset({
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.NOT_COORDINATOR})
_INT16 = struct.Struct(">h")
_T = TypeVar("_T")


COMPRESSION_CODECS = {c.name.lower(): int(c) for c in record_batch.Compression}
CREATE_TIME, LOG_APPEND_TIME = record_batch.TimestampType
# Config resource types and IncrementalAlterConfigs operations, as numbered on the wire.
TOPIC_RESOURCE, BROKER_RESOURCE = 2, 4
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3
CONFIG_SOURCES = {
    0: "UNKNOWN", 1: "DYNAMIC_TOPIC_CONFIG", 2: "DYNAMIC_BROKER_CONFIG", 3: "DYNAMIC_DEFAULT_BROKER_CONFIG",
    4: "STATIC_BROKER_CONFIG", 5: "DEFAULT_CONFIG", 6: "DYNAMIC_BROKER_LOGGER_CONFIG",
    7: "CLIENT_METRICS_CONFIG", 8: "GROUP_CONFIG",
}


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

    def __init__(self, host: str, port: int, client_id: str, timeout: float,
                 security: ClientSecurity | None = None) -> None:
        self.address = f"{host}:{port}"
        try:
            self._sock = socket.create_connection((host, port), timeout=timeout)
            if security is not None:  # TLS (SSL, SASL_SSL): its handshake here
                self._sock = security.wrap(self._sock, host)
        except OSError as e:
            raise BrokerUnreachable(f"cannot connect to broker {self.address}: {_reason(e)}") from None
        self._sock.settimeout(timeout)
        self._conn = ClientProtocol(client_id)
        self.versions: dict[int, int] = self._negotiate()
        if security is not None and security.sasl is not None:  # SASL_PLAINTEXT, SASL_SSL
            authenticate_sync(self.send, security.sasl)

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
        """Send one request and wait for its response."""
        return self._exchange(api_key, version, body, expect_response=True)

    def send_only(self, api_key: int, version: int, body: Any) -> None:
        """Send a request the broker does not answer (a produce with acks=0)."""
        self._exchange(api_key, version, body, expect_response=False)

    def _exchange(self, api_key: int, version: int, body: Any, expect_response: bool) -> Container:
        _, data = self._conn.encode_request(api_key, version, body)
        try:
            self._sock.sendall(data)
            return self._receive() if expect_response else Container()
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


@dataclass
class ConfigEntry:
    name: str
    value: str | None
    source: int
    read_only: bool = False
    is_sensitive: bool = False
    synonyms: list[tuple[str, str | None, int]] = field(default_factory=list)  # (name, value, source)


@dataclass
class Record:
    """A record as a client sees it: what to produce, or what a fetch returned."""

    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]] = field(default_factory=list)
    timestamp: int = -1  # -1 when producing: stamped with the current time
    timestamp_type: int = CREATE_TIME
    partition: int = -1
    offset: int = -1


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


class Client:
    """Blocking client for a cluster reached through `bootstrap` ("host:port[,host:port]")."""

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


    # -- admin -------------------------------------------------------------------------------

    def controller(self) -> int | None:
        """The controller's node id, where Kafka's admin client sends topic changes."""
        controller = self.metadata(refresh=True).controller_id
        return controller if controller >= 0 else None

    def create_topic(self, name: str, partitions: int = -1, replication_factor: int = -1,
                     configs: dict[str, str] | None = None, timeout_ms: int = 30000) -> None:
        """Create one topic (-1 takes the broker's default); raises the topic's KafkaError."""
        body = {
            "topics": [{
                "name": name, "num_partitions": partitions, "replication_factor": replication_factor,
                "assignments": [],
                "configs": [{"name": k, "value": v} for k, v in (configs or {}).items()],
            }],
            "timeout_ms": timeout_ms,
            "validate_only": False,
        }
        result = self.request(CREATE_TOPICS, body, node=self.controller()).topics[0]
        check(result.error_code, result.error_message)

    def delete_topics(self, names: list[str], timeout_ms: int = 30000) -> dict[str, KafkaError | None]:
        """Delete topics by name; the error (or None) of each."""
        body = {"topic_names": names, "topics": [{"name": n, "topic_id": ZERO_UUID} for n in names],
                "timeout_ms": timeout_ms}
        response = self.request(DELETE_TOPICS, body, node=self.controller())
        return {r.name: error_for(r.error_code, r.error_message) if r.error_code else None
                for r in response.responses}

    def create_partitions(self, topic: str, count: int, timeout_ms: int = 30000) -> None:
        """Grow `topic` to `count` partitions in total."""
        body = {"topics": [{"name": topic, "count": count, "assignments": None}],
                "timeout_ms": timeout_ms, "validate_only": False}
        result = self.request(CREATE_PARTITIONS, body, node=self.controller()).results[0]
        check(result.error_code, result.error_message)

    def describe_configs(self, resource_type: int, name: str) -> list[ConfigEntry]:
        """Every config of a topic or broker ("" for the broker defaults), with synonyms."""
        body = {"resources": [{"resource_type": resource_type, "resource_name": name,
                               "configuration_keys": None}],
                "include_synonyms": True, "include_documentation": False}
        result = self.request(DESCRIBE_CONFIGS, body, node=_broker_node(resource_type, name)).results[0]
        check(result.error_code, result.error_message)
        return [
            ConfigEntry(c.name, c.value, _config_source(c), c.read_only, c.is_sensitive,
                        [(s.name, s.value, s.source) for s in c.synonyms])
            for c in result.configs
        ]

    def incremental_alter_configs(self, resource_type: int, name: str,
                                  operations: list[tuple[str, int, str | None]]) -> None:
        """Apply (config name, SET/DELETE/APPEND/SUBTRACT, value) operations to one resource."""
        body = {"resources": [{"resource_type": resource_type, "resource_name": name,
                               "configs": [{"name": k, "config_operation": op, "value": v}
                                           for k, op, v in operations]}],
                "validate_only": False}
        node = _broker_node(resource_type, name)
        result = self.request(INCREMENTAL_ALTER_CONFIGS, body, node=node).responses[0]
        check(result.error_code, result.error_message)

    # -- data --------------------------------------------------------------------------------

    def produce(self, topic: str, partition: int, batch: bytes, acks: int = -1, timeout_ms: int = 30000) -> int:
        """Append one encoded record batch; returns its base offset (-1 with acks=0)."""
        return self.produce_batches(topic, {partition: batch}, acks, timeout_ms).get(partition, -1)

    def produce_batches(self, topic: str, batches: dict[int, bytes], acks: int = -1,
                        timeout_ms: int = 30000) -> dict[int, int]:
        """Append one encoded batch to each partition, one request per leader; base offsets."""
        by_leader: dict[int, list[int]] = {}
        for partition in batches:
            by_leader.setdefault(self.leader(topic, partition), []).append(partition)
        offsets = {}
        for node, partitions in by_leader.items():
            body = {
                "transactional_id": None,
                "acks": acks,
                "timeout_ms": timeout_ms,
                "topic_data": [{"name": topic, "partition_data": [
                    {"index": p, "records": batches[p]} for p in partitions]}],
            }
            conn, version = self._route(PRODUCE, None, node)
            if acks == 0:
                conn.send_only(PRODUCE, version, body)  # the broker sends no response
                continue
            response = conn.send(PRODUCE, version, body)
            for result in response.responses[0].partition_responses:
                check(result.error_code, result.error_message, f"produce to {topic}-{result.index}")
                offsets[result.index] = result.base_offset
        return offsets

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

    # -- consumer groups ---------------------------------------------------------------------

    def find_coordinator(self, group_id: str) -> Coordinator:
        """The broker coordinating `group_id`, asked again while it is still being set up."""
        return self._retry_coordinator(lambda: self._find_coordinator(group_id))

    def _find_coordinator(self, key: str, key_type: int = GROUP_KEY) -> Coordinator:
        version = self.version(FIND_COORDINATOR)
        if version >= 4:
            body = {"key_type": key_type, "coordinator_keys": [key]}
            result = self.request(FIND_COORDINATOR, body, version).coordinators[0]
        else:
            result = self.request(FIND_COORDINATOR, {"key": key, "key_type": key_type}, version)
        what = "group" if key_type == GROUP_KEY else "transactional id"
        check(result.error_code, result.error_message, f"coordinator of {what} {key}")
        return Coordinator(result.node_id, result.host, result.port)

    def _retry_coordinator(self, call: Callable[[], _T]) -> _T:
        """`call`, repeated while the group's coordinator is loading, moving or not yet available."""
        deadline = time.monotonic() + self.timeout
        backoff = 0.05
        while True:
            try:
                return call()
            except KafkaError as e:
                if e.code not in COORDINATOR_RETRIABLE or time.monotonic() + backoff > deadline:
                    raise
            time.sleep(backoff)  # retry backoff, as Kafka's admin client has: the broker pushes nothing
            backoff = min(backoff * 2, 1.0)

    def list_groups(self, states: Iterable[str] = ()) -> list[GroupListing]:
        """Every group known to any broker (those in `states` only, if given), sorted by id."""
        wanted = list(states)
        listings: dict[str, GroupListing] = {}
        for node in sorted(self.metadata(refresh=True).brokers):
            version = self.version(LIST_GROUPS, node)
            if wanted and version < 4:
                raise KafkaError(ErrorCode.UNSUPPORTED_VERSION, f"broker {node} cannot filter groups by state")
            response = self.request(LIST_GROUPS, {"states_filter": wanted, "types_filter": []}, version, node)
            check(response.error_code, context=f"list groups of broker {node}")
            listings.update((g.group_id, GroupListing(g.group_id, g.protocol_type, g.group_state))
                            for g in response.groups)
        return [listings[g] for g in sorted(listings)]

    def describe_group(self, group_id: str) -> GroupDescription:
        """State, protocol and members of a group (assignments decoded for consumer groups)."""
        return self._retry_coordinator(lambda: self._describe_group(group_id))

    def _describe_group(self, group_id: str) -> GroupDescription:
        coordinator = self._find_coordinator(group_id)
        body = {"groups": [group_id], "include_authorized_operations": False}
        result = self.request(DESCRIBE_GROUPS, body, node=coordinator.node_id).groups[0]
        check(result.error_code, context=f"group {group_id}")
        consumer = result.protocol_type in (CONSUMER_PROTOCOL_TYPE, "")
        members = [
            GroupMember(m.member_id, m.group_instance_id, m.client_id, m.client_host,
                        _decoded(decode_assignment, m.member_assignment, []) if consumer else [],
                        _decoded(decode_subscription, m.member_metadata, []) if consumer else [])
            for m in result.members
        ]
        return GroupDescription(group_id, result.group_state, result.protocol_type, result.protocol_data,
                                members, coordinator)

    def fetch_offsets(self, group_id: str, partitions: Iterable[tuple[str, int]] | None = None
                      ) -> dict[tuple[str, int], int]:
        """Committed offsets of `partitions` (all the group has when None); uncommitted ones are left out."""
        wanted = None if partitions is None else list(partitions)
        return self._retry_coordinator(lambda: self._fetch_offsets(group_id, wanted))

    def _fetch_offsets(self, group_id: str, partitions: list[tuple[str, int]] | None) -> dict[tuple[str, int], int]:
        node = self._find_coordinator(group_id).node_id
        version = self.version(OFFSET_FETCH, node)
        topics = None if partitions is None else [
            {"name": t, "partition_indexes": parts} for t, parts in _by_topic(partitions).items()]
        if topics is None and version < 2:
            raise KafkaError(ErrorCode.UNSUPPORTED_VERSION, "the broker cannot fetch all of a group's offsets")
        if version >= 8:
            group = {"group_id": group_id, "member_id": None, "member_epoch": -1, "topics": topics}
            result = self.request(OFFSET_FETCH, {"groups": [group], "require_stable": False}, version, node).groups[0]
        else:
            body = {"group_id": group_id, "topics": topics, "require_stable": False}
            result = self.request(OFFSET_FETCH, body, version, node)
        check(result.error_code, context=f"offsets of group {group_id}")
        offsets = {}
        for topic in result.topics:
            for p in topic.partitions:
                check(p.error_code, context=f"offset of {topic.name}-{p.partition_index}")
                if p.committed_offset >= 0:  # -1: nothing committed
                    offsets[(topic.name, p.partition_index)] = p.committed_offset
        return dict(sorted(offsets.items()))

    def commit_offsets(self, group_id: str, offsets: dict[tuple[str, int], int]) -> dict[tuple[str, int], int]:
        """Commit as an admin does (generation -1, no member: the group must be empty); error per partition."""
        return self._retry_coordinator(lambda: self._commit_offsets(group_id, offsets))

    def _commit_offsets(self, group_id: str, offsets: dict[tuple[str, int], int]) -> dict[tuple[str, int], int]:
        node = self._find_coordinator(group_id).node_id
        body = {
            "group_id": group_id, "generation_id_or_member_epoch": -1, "member_id": "", "group_instance_id": None,
            "retention_time_ms": -1,
            "topics": [{"name": t, "partitions": [
                {"partition_index": p, "committed_offset": offsets[(t, p)], "committed_leader_epoch": -1,
                 "committed_metadata": "", "commit_timestamp": -1} for p in parts]}
                for t, parts in _by_topic(offsets).items()],
        }
        response = self.request(OFFSET_COMMIT, body, node=node)
        errors = {(t.name, p.partition_index): p.error_code for t in response.topics for p in t.partitions}
        _raise_retriable(errors.values())
        return errors

    def delete_groups(self, group_ids: Iterable[str]) -> dict[str, int]:
        """Delete (empty) groups; the error code of each (0 when deleted)."""
        return {g: self._retry_coordinator(lambda g=g: self._delete_group(g)) for g in group_ids}

    def _delete_group(self, group_id: str) -> int:
        node = self._find_coordinator(group_id).node_id
        result = self.request(DELETE_GROUPS, {"groups_names": [group_id]}, node=node).results[0]
        _raise_retriable([result.error_code])
        return result.error_code

    def delete_offsets(self, group_id: str, partitions: Iterable[tuple[str, int]]
                       ) -> tuple[int, dict[tuple[str, int], int]]:
        """Drop committed offsets (OffsetDelete): the group's error code, and each partition's."""
        wanted = list(partitions)
        return self._retry_coordinator(lambda: self._delete_offsets(group_id, wanted))

    def _delete_offsets(self, group_id: str, partitions: list[tuple[str, int]]
                        ) -> tuple[int, dict[tuple[str, int], int]]:
        node = self._find_coordinator(group_id).node_id
        body = {"group_id": group_id, "topics": [
            {"name": t, "partitions": [{"partition_index": p} for p in parts]}
            for t, parts in _by_topic(partitions).items()]}
        response = self.request(OFFSET_DELETE, body, node=node)
        _raise_retriable([response.error_code])
        return response.error_code, {(t.name, p.partition_index): p.error_code
                                     for t in response.topics for p in t.partitions}

    # -- lifecycle ---------------------------------------------------------------------------

    def elect_leaders(self, unclean: bool, partitions: list[tuple[str, int]] | None
                      ) -> dict[tuple[str, int], int]:
        """ElectLeaders (preferred, or unclean) for `partitions` (None: all); error code per partition."""
        topics: dict[str, list[int]] | None = None
        if partitions is not None:
            topics = {}
            for topic, index in partitions:
                topics.setdefault(topic, []).append(index)
        body = {"election_type": 1 if unclean else 0, "timeout_ms": int(self.timeout * 1000),
                "topic_partitions": None if topics is None else
                [{"topic": t, "partitions": ps} for t, ps in topics.items()]}
        controller = self.controller()
        response = self.request(ELECT_LEADERS, body, node=controller)
        check(response.error_code, context="ElectLeaders")
        return {(t.topic, r.partition_id): r.error_code for t in response.replica_election_results
                for r in t.partition_result}

    def alter_partition_reassignments(self, targets: dict[tuple[str, int], list[int] | None]
                                      ) -> dict[tuple[str, int], int]:
        """Move partitions to these replicas (None cancels); error code per partition."""
        topics: dict[str, list[dict[str, Any]]] = {}
        for (topic, index), replicas in targets.items():
            topics.setdefault(topic, []).append({"partition_index": index, "replicas": replicas})
        body = {"timeout_ms": int(self.timeout * 1000),
                "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]}
        response = self.request(ALTER_PARTITION_REASSIGNMENTS, body, node=self.controller())
        check(response.error_code, response.error_message, "AlterPartitionReassignments")
        return {(t.name, p.partition_index): p.error_code for t in response.responses for p in t.partitions}

    def list_partition_reassignments(self) -> dict[tuple[str, int], tuple[list[int], list[int], list[int]]]:
        """(replicas, adding, removing) of the reassignments in progress, from every broker."""
        ongoing = {}
        for node in sorted(self.metadata(refresh=True).brokers):
            response = self.request(LIST_PARTITION_REASSIGNMENTS, {"timeout_ms": 30000, "topics": None}, node=node)
            check(response.error_code, response.error_message, "ListPartitionReassignments")
            ongoing.update({(t.name, p.partition_index): (list(p.replicas), list(p.adding_replicas),
                                                          list(p.removing_replicas))
                            for t in response.topics for p in t.partitions})
        return ongoing

    # -- transactions ------------------------------------------------------------------------

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


def _broker_node(resource_type: int, name: str) -> int | None:
    """A broker's own configs are described and altered on that broker, as Kafka requires."""
    if resource_type == BROKER_RESOURCE and name.isdigit():
        return int(name)
    return None


def _config_source(entry: Container) -> int:
    # DescribeConfigs v0 has no config_source, only is_default.
    if entry.config_source == -1:
        return 5 if entry.is_default else 0
    return entry.config_source


# -- record batches ------------------------------------------------------------------------------


def encode_batch(records: list[Record], compression: int = record_batch.NONE) -> bytes:
    """One RecordBatch v2 holding `records`, stamped now where they carry no timestamp.

    No producer id: the tools' producer is not idempotent, as Kafka's console producer was not.
    """
    if not records:
        raise ValueError("a batch holds at least one record")
    now = wall_clock_ms()
    return record_batch.encode_batch(
        [record_batch.Record(delta, r.timestamp if r.timestamp >= 0 else now, r.key, r.value, list(r.headers))
         for delta, r in enumerate(records)],
        compression=compression,
    )


def decode_batches(data: bytes | memoryview | None, partition: int = -1) -> tuple[list[Record], int | None]:
    """The data records in a fetched record set, and the offset after its last whole batch.

    A fetch may end with a partial batch (cut at the size limit); it is left for the next fetch.
    Control batches (transaction markers) are skipped but still advance the offset.
    """
    records: list[Record] = []
    next_offset = None
    for batch in record_batch.decode_batches(data or b""):
        next_offset = batch.next_offset
        if batch.is_control:
            continue
        records += [Record(r.key, r.value, r.headers, r.timestamp, batch.timestamp_type, partition, r.offset)
                    for r in batch.records]
    return records, next_offset


# -- consumer groups -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Coordinator:
    node_id: int
    host: str
    port: int


@dataclass
class GroupListing:
    group_id: str
    protocol_type: str
    state: str  # "" from brokers before ListGroups v4


@dataclass
class GroupMember:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    assignment: list[tuple[str, int]]  # (topic, partition), from ConsumerProtocolAssignment
    subscription: list[str]  # topics, from ConsumerProtocolSubscription


@dataclass
class GroupDescription:
    group_id: str
    state: str  # Kafka's names: Empty, Stable, PreparingRebalance, CompletingRebalance, Dead
    protocol_type: str
    protocol: str  # the assignor chosen, e.g. "range"
    members: list[GroupMember]
    coordinator: Coordinator


def decode_assignment(data: bytes | None) -> list[tuple[str, int]]:
    """The (topic, partition) pairs of a consumer member's assignment bytes; [] for none."""
    body = _consumer_protocol(consumer_protocol_assignment.SCHEMA, data)
    return [] if body is None else [(t.topic, p) for t in body.assigned_partitions for p in t.partitions]


def decode_subscription(data: bytes | None) -> list[str]:
    """The topics of a consumer member's subscription (its metadata for the chosen protocol)."""
    body = _consumer_protocol(consumer_protocol_subscription.SCHEMA, data)
    return [] if body is None else list(body.topics)


def _consumer_protocol(schemas: dict[int, Any], data: bytes | None) -> Container | None:
    """An int16 version, then that version's struct; newer versions read as the newest known, as Kafka does."""
    if not data:
        return None
    if len(data) < 2:
        raise ProtocolError("consumer protocol bytes without a version")
    version = _INT16.unpack_from(data)[0]
    if version < 0:
        raise ProtocolError(f"invalid consumer protocol version {version}")
    return parse_all(schemas[min(version, max(schemas))], memoryview(data)[2:])


def _decoded(decode: Callable[[bytes | None], _T], data: bytes | None, default: _T) -> _T:
    # A member's bytes are whatever its client wrote: unreadable ones should not fail a describe.
    try:
        return decode(data)
    except ConstructError:
        return default


def _by_topic(partitions: Iterable[tuple[str, int]]) -> dict[str, list[int]]:
    topics: dict[str, list[int]] = {}
    for topic, partition in sorted(partitions):
        topics.setdefault(topic, []).append(partition)
    return topics


def _raise_retriable(codes: Iterable[int]) -> None:
    """Coordinator errors become exceptions, so `Client._retry_coordinator` asks again."""
    for code in codes:
        if code in COORDINATOR_RETRIABLE:
            raise error_for(code)
