"""The metadata store interface: topics, their partition assignment and configs, broker configs,
partition leadership state, live brokers and the controller.

Two implementations: a local file store (the embedded single node) and, for clusters, a
ZooKeeper store. Controller code is written against this interface only, so the same code runs
over both.

Every method is synchronous. The ZooKeeper store is built on kazoo, which is threaded: a call
blocks until ZooKeeper answers (well under a millisecond on one machine).

Watches (`watch_*`) call their callback once right away with the current value, and again after
every change. Callers must not assume which thread a callback runs on: the local store calls it
from the thread that made the change, the ZooKeeper store from kazoo's event thread. Code that
lives on an asyncio loop must hop back with `loop.call_soon_threadsafe(...)` and must not block
inside the callback (kazoo delivers every watch of a session on that one thread). Each `watch_*`
returns a function that cancels the watch.
"""

from __future__ import annotations

import urllib.parse
import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kbroker.security.acl import (
    AccessControlEntry,
    ResourcePattern,
    operation_name,
    parse_operation,
    parse_permission,
    permission_name,
)

Unwatch = Callable[[], None]


@dataclass(frozen=True, slots=True)
class TopicRecord:
    """A topic as the store keeps it.

    `version` is the store's version of the topic's assignment (ZooKeeper's znode version of
    `/brokers/topics/<name>`): 0 once created, one more after every `add_partitions`. A broker's
    cache never takes an older version of a topic than the one it holds, whatever order its
    watches deliver records in. Records built to be written carry -1; a record a broker changes
    itself keeps the version it was read at, so the store's next read of it replaces it.
    """

    name: str
    topic_id: uuid.UUID
    assignment: dict[int, list[int]]  # partition -> replica broker ids, preferred leader first
    configs: dict[str, str] = field(default_factory=dict)  # topic-level overrides only
    version: int = -1


@dataclass(frozen=True, slots=True)
class PartitionState:
    """Leadership of one partition, as Kafka keeps it in `.../partitions/<p>/state`.

    `version` is the store's version of this state (ZooKeeper's znode version): 0 once created,
    one more after every write. It is what `set_partition_state` compares, so a controller that
    read an older state cannot overwrite a newer one. States built to be written carry -1.
    """

    leader: int
    leader_epoch: int
    isr: list[int]
    controller_epoch: int
    version: int = -1


@dataclass(frozen=True, slots=True)
class BrokerEndpoint:
    listener: str  # listener name, e.g. PLAINTEXT
    host: str
    port: int
    security_protocol: str = "PLAINTEXT"


@dataclass(frozen=True, slots=True)
class BrokerRegistration:
    """A live broker and where clients and other brokers reach it."""

    broker_id: int
    endpoints: tuple[BrokerEndpoint, ...]
    rack: str | None = None
    timestamp_ms: int = 0  # when it registered; filled in by the store when 0


class MetadataUnavailable(Exception):
    """The store cannot be reached (ZooKeeper down or unreachable): the broker cannot start."""


class MetadataConflict(Exception):
    """A write lost a race or met state it must not overwrite. Not a Kafka wire error: the
    caller (controller code) decides what it means."""


class VersionConflict(MetadataConflict):
    """A compare-and-set found another version than the one expected: re-read and retry."""

    def __init__(self, what: str, expected: int, actual: int | None) -> None:
        found = "it does not exist" if actual is None else f"it is at version {actual}"
        super().__init__(f"{what}: expected version {expected}, but {found}")
        self.expected = expected
        self.actual = actual


class BrokerIdInUse(MetadataConflict):
    """Another live broker (another ZooKeeper session) is registered with this id."""


# ZooKeeper refuses a packet over jute.maxbuffer (~1 MiB by default) and kazoo then reports only a
# lost connection; a remote log document stays well below, path and request header included.
REMOTE_LOG_MAX_BYTES = 900_000


class RemoteLogTooLarge(MetadataConflict):
    """A remote log document is too large to store (over REMOTE_LOG_MAX_BYTES as compact JSON).

    A MetadataConflict rather than a ValueError: the document grows with the data archived, so this
    is a write the store refuses at run time, not a caller's mistake, and callers already treat a
    refused metadata write as "this partition's archiving failed, back off" without stopping the
    others. Unlike a VersionConflict, re-reading and retrying does not help: fewer segments must be
    recorded (the archive's retention must catch up)."""

    def __init__(self, topic: str, partition: int, size: int) -> None:
        super().__init__(f"remote log metadata of {topic}-{partition} is {size} bytes as JSON, over the "
                         f"{REMOTE_LOG_MAX_BYTES} bytes the metadata store keeps in one document")
        self.size = size


def check_remote_log(topic: str, partition: int, expected_version: int, encoded: bytes) -> None:
    """Refuse, the same way in every store, a write no store can take: a document ZooKeeper would
    fail on obscurely (a dropped connection) is refused by the local store too, so a single node
    never holds what a cluster could not; and ZooKeeper's set reads version -1 as "any version",
    so no other negative version may pass for one."""
    if partition < 0:
        raise ValueError(f"partition {partition} of {topic} is negative")
    if expected_version < -1:
        raise ValueError(f"expected_version {expected_version} is neither -1 (create) nor a version")
    if len(encoded) > REMOTE_LOG_MAX_BYTES:
        raise RemoteLogTooLarge(topic, partition, len(encoded))


_SANITIZE_SAFE = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-_")


def sanitize_entity_name(name: str) -> str:
    """Kafka's Sanitizer.sanitize: a user name as a znode name and in change notifications
    (URL encoding, with space as %20 and '*' as %2A)."""
    return "".join(chr(b) if chr(b) in _SANITIZE_SAFE else f"%{b:02X}" for b in name.encode())


def desanitize_entity_name(name: str) -> str:
    """Kafka's Sanitizer.desanitize."""
    return urllib.parse.unquote(name, errors="strict")


class MetadataStore(ABC):
    # -- topics ---------------------------------------------------------------------------------

    @abstractmethod
    def create_topic(
        self, name: str, topic_id: uuid.UUID, assignment: Mapping[int, list[int]], configs: Mapping[str, str]
    ) -> None:
        """Persist a new topic; raises TOPIC_ALREADY_EXISTS if the name is taken."""

    @abstractmethod
    def delete_topic(self, name: str) -> None:
        """Remove the topic, its configs and its partition states; UNKNOWN_TOPIC_OR_PARTITION if absent.
        Its remote log metadata stays: it is what finds the archived objects, so it goes only with
        an explicit `delete_remote_logs`, once they are removed."""

    @abstractmethod
    def get_topic(self, name: str) -> TopicRecord | None: ...

    @abstractmethod
    def list_topics(self) -> list[TopicRecord]: ...

    @abstractmethod
    def add_partitions(self, name: str, assignment: Mapping[int, list[int]]) -> None: ...

    @abstractmethod
    def set_topic_configs(self, name: str, configs: Mapping[str, str]) -> None:
        """Replace the topic's config overrides."""

    @abstractmethod
    def watch_topics(self, callback: Callable[[set[str]], None]) -> Unwatch:
        """Call `callback(names)` now and whenever a topic is created or deleted."""

    # -- configs --------------------------------------------------------------------------------

    @abstractmethod
    def get_broker_configs(self, broker_id: int | None) -> dict[str, str]:
        """Dynamic broker configs; `None` is the cluster-wide default entity."""

    @abstractmethod
    def set_broker_configs(self, broker_id: int | None, configs: Mapping[str, str]) -> None: ...

    @abstractmethod
    def watch_config_changes(self, callback: Callable[[str, str], None]) -> Unwatch:
        """Call `callback(entity_type, entity_name)` after each later change of dynamic configs:
        ("topics", name), ("brokers", id or "<default>"), ("users", sanitized user name, or
        "<user>/clients/<client-id>" for a user's client), ("clients", sanitized client id) or
        ("groups", sanitized group id), so every broker can reload what
        another one changed. Unlike the other watches, nothing is reported right away."""

    # -- users (SCRAM credentials) --------------------------------------------------------------

    @abstractmethod
    def get_user_configs(self, user: str) -> dict[str, str]:
        """The stored configs of `user`, as Kafka keeps them in `/config/users/<user>`: SCRAM
        credentials, `SCRAM-SHA-256` -> `salt=...,stored_key=...,server_key=...,iterations=...`
        (salted and hashed: never a password). Empty when there are none."""

    @abstractmethod
    def set_user_configs(self, user: str, configs: Mapping[str, str]) -> None:
        """Replace the configs of `user`; every broker hears of it through `watch_config_changes`
        as ("users", sanitize_entity_name(user))."""

    @abstractmethod
    def list_user_configs(self) -> dict[str, dict[str, str]]:
        """user -> configs, for every user that has some."""

    # -- client quota entities (users, clients, users' clients) ---------------------------------

    @abstractmethod
    def get_entity_configs(self, entity_path: str) -> dict[str, str]:
        """The stored configs of a client quota entity, named by its path under `/config` with
        sanitized names (`<default>` for a default): `users/<user>`, `clients/<client-id>` or
        `users/<user>/clients/<client-id>`. `users/<user>` is the same entity as
        `get_user_configs(user)`: quotas and SCRAM credentials share it, as in Kafka."""

    @abstractmethod
    def set_entity_configs(self, entity_path: str, configs: Mapping[str, str]) -> None:
        """Replace the configs of the entity; every broker hears of it through
        `watch_config_changes` as ("users", "<user>/clients/<client-id>"), ("clients", ...)."""

    @abstractmethod
    def list_entity_configs(self, entity_type: str) -> dict[str, dict[str, str]]:
        """Entity path below `entity_type` ("users" or "clients") -> configs, for every entity
        that has some: for "users" both `<user>` and `<user>/clients/<client-id>` (Kafka's
        fetchAllEntityConfigs and fetchAllChildEntityConfigs)."""

    # -- groups (KIP-848/KIP-932 group configs) -------------------------------------------------

    @abstractmethod
    def get_group_configs(self, group: str) -> dict[str, str]:
        """The dynamic configs of group `group` (`share.auto.offset.reset`, ...), as kept in
        `/config/groups/<group>`. Empty when there are none."""

    @abstractmethod
    def set_group_configs(self, group: str, configs: Mapping[str, str]) -> None:
        """Replace the configs of `group`; every broker hears of it through `watch_config_changes`
        as ("groups", sanitize_entity_name(group))."""

    @abstractmethod
    def list_group_configs(self) -> dict[str, dict[str, str]]:
        """group -> configs, for every group that has some."""

    # -- partition leadership -------------------------------------------------------------------

    @abstractmethod
    def get_partition_state(self, topic: str, partition: int) -> PartitionState | None: ...

    @abstractmethod
    def create_partition_states(self, topic: str, states: Mapping[int, PartitionState]) -> None:
        """The first state of each new partition of an existing topic, all or none: raises
        UNKNOWN_TOPIC_OR_PARTITION for a partition the topic lacks, MetadataConflict if a state
        exists already. The created states have version 0."""

    @abstractmethod
    def set_partition_state(self, topic: str, partition: int, state: PartitionState, expected_version: int) -> int:
        """Replace the state if it is still at `expected_version`; returns the new version.
        Raises VersionConflict otherwise (also when the state does not exist)."""

    @abstractmethod
    def watch_partition_state(
        self, topic: str, partition: int, callback: Callable[[PartitionState | None], None]
    ) -> Unwatch:
        """Call `callback(state)` now and after every change (None while it does not exist)."""

    # -- remote log metadata (the tiered-storage archive) ------------------------------------------
    # Kafka keeps it in the __remote_log_metadata topic; here one JSON document per partition,
    # written with compare-and-set so that of two brokers that both believe they lead a partition
    # (a deposed leader that has not noticed yet) only one can record what it archived.

    @abstractmethod
    def get_remote_log(self, topic: str, partition: int) -> tuple[dict[str, Any] | None, int]:
        """The partition's document and its version (ZooKeeper's znode version); (None, -1) when
        there is none. The document is the caller's own copy."""

    @abstractmethod
    def set_remote_log(self, topic: str, partition: int, document: Mapping[str, Any], expected_version: int) -> int:
        """Write the document if the stored one is still at `expected_version` (-1: only if there is
        none yet, which creates it at version 0); returns the new version. Raises VersionConflict
        otherwise, RemoteLogTooLarge when it is over REMOTE_LOG_MAX_BYTES as compact JSON. The
        document must be JSON (dicts with string keys, lists, strings, numbers)."""

    @abstractmethod
    def delete_remote_logs(self, topic: str) -> None:
        """Remove the documents of every partition of the topic (nothing to do when there are
        none): called when the topic is gone and so are its archived objects. A document created
        afterwards starts again at version 0."""

    @abstractmethod
    def list_remote_logs(self, topic: str) -> dict[int, tuple[dict[str, Any], int]]:
        """partition -> (document, version) for every partition of the topic that has one."""

    # -- brokers --------------------------------------------------------------------------------

    @abstractmethod
    def register_broker(self, registration: BrokerRegistration) -> None:
        """Announce this broker for as long as its session lives (an ephemeral znode in
        ZooKeeper: it disappears when the broker dies). Raises BrokerIdInUse if another live
        broker holds the id."""

    @abstractmethod
    def live_brokers(self) -> dict[int, BrokerRegistration]: ...

    @abstractmethod
    def watch_brokers(self, callback: Callable[[dict[int, BrokerRegistration]], None]) -> Unwatch:
        """Call `callback(live brokers)` now and whenever a broker registers or goes away."""

    # -- controller -----------------------------------------------------------------------------

    @abstractmethod
    def try_become_controller(self, broker_id: int) -> int | None:
        """Claim the controller role for this session; returns the new controller epoch (one
        more than any before it) when this broker won, the current epoch if this session already
        holds the role, None if another broker holds it. The role ends with the session."""

    @abstractmethod
    def controller_id(self) -> int | None: ...

    @abstractmethod
    def controller_epoch(self) -> int:
        """The epoch of the latest controller; 0 before any was elected."""

    @abstractmethod
    def watch_controller(self, callback: Callable[[int | None], None]) -> Unwatch:
        """Call `callback(controller id or None)` now and whenever the controller changes."""

    # -- ACLs -----------------------------------------------------------------------------------

    @abstractmethod
    def list_acls(self) -> dict[ResourcePattern, frozenset[AccessControlEntry]]:
        """Every resource pattern that has ACLs, with its entries. Raises when they cannot be
        read (an unreadable ACL must never be taken for no ACL)."""

    @abstractmethod
    def get_acls(self, pattern: ResourcePattern) -> frozenset[AccessControlEntry]: ...

    @abstractmethod
    def update_acls(self, pattern: ResourcePattern, add: frozenset[AccessControlEntry],
                    remove: frozenset[AccessControlEntry]) -> frozenset[AccessControlEntry]:
        """Add and remove entries of one resource pattern atomically (compare-and-set against
        concurrent writers), notify every broker, and return the entries now stored."""

    @abstractmethod
    def watch_acl_changes(self, callback: Callable[[ResourcePattern], None]) -> Unwatch:
        """Call `callback(pattern)` after each later change of a pattern's ACLs, made by any
        broker. Nothing is reported right away."""

    # -- cluster --------------------------------------------------------------------------------

    @abstractmethod
    def get_or_create_cluster_id(self, proposed: str | None = None) -> str:
        """The cluster's id; the first caller stores `proposed` (or a new random id)."""

    @abstractmethod
    def close(self) -> None:
        """End this store's session: its broker registration and controller role go away."""


# -- ACL entries as Kafka stores them (kafka.security.authorizer.AclEntry) --------------------------


def encode_acl_entries(entries: frozenset[AccessControlEntry]) -> dict[str, Any]:
    """`{"version":1,"acls":[{"principal","permissionType","operation","host"}]}`, Kafka's JSON."""
    return {"version": 1, "acls": [
        {"principal": e.principal, "permissionType": permission_name(e.permission),
         "operation": operation_name(e.operation), "host": e.host}
        for e in sorted(entries)]}


def decode_acl_entries(document: Any) -> frozenset[AccessControlEntry]:
    """The entries of Kafka's JSON; raises ValueError on anything else (never an empty set for a
    document it cannot read)."""
    try:
        return frozenset(
            AccessControlEntry(str(a["principal"]), str(a["host"]), parse_operation(str(a["operation"])),
                               parse_permission(str(a["permissionType"])))
            for a in document["acls"])
    except (KeyError, TypeError, ValueError) as e:
        raise ValueError(f"unreadable ACL document {document!r}: {e}") from None
