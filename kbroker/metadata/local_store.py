"""The embedded single node's metadata store: one JSON document, replaced atomically on change.

What ZooKeeper keeps in ephemeral znodes (live brokers, the controller) lives in memory here:
one process is the whole cluster, so its "session" is the process. Everything else, including
partition-state versions and the controller epoch, is persisted so they keep increasing across
restarts as they do in ZooKeeper.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Generic, TypeVar

from kbroker.clock import wall_clock_ms
from kbroker.fsutil import write_atomically
from kbroker.meta_properties import new_cluster_id
from kbroker.metadata.store import (
    BrokerRegistration,
    MetadataConflict,
    MetadataStore,
    PartitionState,
    TopicRecord,
    Unwatch,
    VersionConflict,
    check_remote_log,
    decode_acl_entries,
    desanitize_entity_name,
    encode_acl_entries,
    sanitize_entity_name,
)
from kbroker.security.acl import (
    AccessControlEntry,
    ResourcePattern,
    parse_pattern_type,
    parse_resource_type,
    resource_type_name,
)
from protocol.errors import ErrorCode, KafkaError

STORE_FILE = "__kbroker_metadata.json"
# Later keys (partition_states, controller_epoch, cluster_id, ..., remote_logs) are optional: a file
# without them loads as empty.
FORMAT_VERSION = 1
CLUSTER_DEFAULT = "<default>"

T = TypeVar("T")


class _Watchers(Generic[T]):
    """Callbacks of one watched value; each one can be cancelled on its own."""

    def __init__(self) -> None:
        self._callbacks: list[Callable[[T], None]] = []

    def add(self, callback: Callable[[T], None], current: T) -> Unwatch:
        self._callbacks.append(callback)
        callback(current)

        def cancel() -> None:
            if callback in self._callbacks:
                self._callbacks.remove(callback)

        return cancel

    def fire(self, value: T) -> None:
        for callback in list(self._callbacks):
            callback(value)

    def __bool__(self) -> bool:
        return bool(self._callbacks)


class LocalMetadataStore(MetadataStore):
    """Synchronous, single-threaded: callbacks run in the caller's thread, inside the change."""

    def __init__(self, directory: Path) -> None:
        self.path = Path(directory) / STORE_FILE
        self._topics: dict[str, TopicRecord] = {}
        self._broker_configs: dict[str, dict[str, str]] = {}
        self._user_configs: dict[str, dict[str, str]] = {}
        # Client quota entities other than a named user (whose configs are `_user_configs`'):
        # "users/<default>", "users/<user>/clients/<client-id>", "clients/<client-id>" (sanitized).
        self._entity_configs: dict[str, dict[str, str]] = {}
        self._group_configs: dict[str, dict[str, str]] = {}
        self._partition_states: dict[tuple[str, int], PartitionState] = {}
        # (topic, partition) -> (the archive's document, its version); see set_remote_log.
        self._remote_logs: dict[tuple[str, int], tuple[dict[str, Any], int]] = {}
        self._controller_epoch = 0
        self._cluster_id: str | None = None
        # The "session": gone when the process is.
        self._brokers: dict[int, BrokerRegistration] = {}
        self._controller: int | None = None
        self._topic_watchers: _Watchers[set[str]] = _Watchers()
        self._broker_watchers: _Watchers[dict[int, BrokerRegistration]] = _Watchers()
        self._controller_watchers: _Watchers[int | None] = _Watchers()
        self._state_watchers: dict[tuple[str, int], _Watchers[PartitionState | None]] = {}
        self._config_watchers: list[Callable[[str, str], None]] = []
        self._acls: dict[ResourcePattern, frozenset[AccessControlEntry]] = {}
        self._acl_watchers: list[Callable[[ResourcePattern], None]] = []
        if self.path.exists():
            self._load()

    def _load(self) -> None:
        document = json.loads(self.path.read_text())
        if document.get("version") != FORMAT_VERSION:
            raise ValueError(f"{self.path}: unknown metadata format {document.get('version')!r}")
        for entry in document["topics"]:
            record = TopicRecord(
                name=entry["name"],
                topic_id=uuid.UUID(entry["topic_id"]),
                assignment={int(p): list(r) for p, r in entry["assignment"].items()},
                configs=dict(entry["configs"]),
                version=entry.get("version", 0),
            )
            self._topics[record.name] = record
        self._broker_configs = {k: dict(v) for k, v in document.get("broker_configs", {}).items()}
        self._user_configs = {k: dict(v) for k, v in document.get("user_configs", {}).items()}
        self._group_configs = {k: dict(v) for k, v in document.get("group_configs", {}).items()}
        self._entity_configs = {k: dict(v) for k, v in document.get("entity_configs", {}).items()}
        for topic, states in document.get("partition_states", {}).items():
            for partition, s in states.items():
                self._partition_states[(topic, int(partition))] = PartitionState(
                    s["leader"], s["leader_epoch"], list(s["isr"]), s["controller_epoch"], s["version"]
                )
        self._remote_logs = {
            (topic, int(partition)): (dict(entry["document"]), int(entry["version"]))
            for topic, partitions in document.get("remote_logs", {}).items()
            for partition, entry in partitions.items()
        }
        self._controller_epoch = document.get("controller_epoch", 0)
        self._cluster_id = document.get("cluster_id")
        self._acls = _decode_acls(document.get("acls", []))

    def _save(self) -> None:
        """Persist the current state; when that fails, the state goes back to what was last saved
        (a change is all or nothing: never in memory only) and KAFKA_STORAGE_ERROR is raised."""
        try:
            self._write()
        except OSError as e:
            self._revert()
            raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR, f"metadata could not be saved to {self.path}: {e}") from e

    def _revert(self) -> None:
        self._topics = {}
        self._broker_configs = {}
        self._user_configs = {}
        self._entity_configs = {}
        self._group_configs = {}
        self._partition_states = {}
        self._remote_logs = {}
        self._controller_epoch = 0
        self._cluster_id = None
        self._acls = {}
        if self.path.exists():
            self._load()

    def _write(self) -> None:
        states: dict[str, dict[str, Any]] = {}
        for (topic, partition), s in sorted(self._partition_states.items()):
            states.setdefault(topic, {})[str(partition)] = {
                "leader": s.leader, "leader_epoch": s.leader_epoch, "isr": s.isr,
                "controller_epoch": s.controller_epoch, "version": s.version,
            }
        document: dict[str, Any] = {
            "version": FORMAT_VERSION,
            "topics": [
                {
                    "name": r.name,
                    "topic_id": str(r.topic_id),
                    "assignment": {str(p): replicas for p, replicas in sorted(r.assignment.items())},
                    "configs": r.configs,
                    "version": r.version,
                }
                for r in self._topics.values()
            ],
            "broker_configs": self._broker_configs,
        }
        # Written only once used, so a single node's file stays as it was until then.
        if states:
            document["partition_states"] = states
        if self._controller_epoch:
            document["controller_epoch"] = self._controller_epoch
        if self._user_configs:
            document["user_configs"] = self._user_configs
        if self._group_configs:
            document["group_configs"] = self._group_configs
        if self._entity_configs:
            document["entity_configs"] = self._entity_configs
        if self._cluster_id is not None:
            document["cluster_id"] = self._cluster_id
        if self._remote_logs:
            document["remote_logs"] = _encode_remote_logs(self._remote_logs)
        if self._acls:
            document["acls"] = [
                {"resource_type": resource_type_name(p.resource_type), "pattern_type": p.pattern_type.name,
                 "name": p.name, **encode_acl_entries(entries)}
                for p, entries in sorted(self._acls.items())]
        write_atomically(self.path, json.dumps(document, indent=1, sort_keys=True))

    # -- topics ---------------------------------------------------------------------------------

    def create_topic(
        self, name: str, topic_id: uuid.UUID, assignment: Mapping[int, list[int]], configs: Mapping[str, str]
    ) -> None:
        if name in self._topics:
            raise KafkaError(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists.")
        self._topics[name] = TopicRecord(name, topic_id, {p: list(r) for p, r in assignment.items()}, dict(configs),
                                         version=0)
        self._save()
        self._topic_watchers.fire(set(self._topics))

    def delete_topic(self, name: str) -> None:
        if self._topics.pop(name, None) is None:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Topic '{name}' does not exist.")
        removed = [key for key in self._partition_states if key[0] == name]
        for key in removed:
            del self._partition_states[key]
        # The remote log metadata stays, as in ZooKeeper: it goes with delete_remote_logs, once the
        # archived objects it points to are removed.
        self._save()
        self._topic_watchers.fire(set(self._topics))
        for key in removed:
            if key in self._state_watchers:
                self._state_watchers[key].fire(None)

    def get_topic(self, name: str) -> TopicRecord | None:
        return self._topics.get(name)

    def list_topics(self) -> list[TopicRecord]:
        return list(self._topics.values())

    def add_partitions(self, name: str, assignment: Mapping[int, list[int]]) -> None:
        record = self._require(name)
        merged = {**record.assignment, **{p: list(r) for p, r in assignment.items()}}
        self._topics[name] = dataclasses.replace(record, assignment=merged, version=record.version + 1)
        self._save()

    def set_topic_configs(self, name: str, configs: Mapping[str, str]) -> None:
        record = self._require(name)
        self._topics[name] = dataclasses.replace(record, configs=dict(configs))  # as in ZooKeeper: same version
        self._save()
        self._config_changed("topics", name)

    def watch_topics(self, callback: Callable[[set[str]], None]) -> Unwatch:
        return self._topic_watchers.add(callback, set(self._topics))

    # -- configs --------------------------------------------------------------------------------

    def get_broker_configs(self, broker_id: int | None) -> dict[str, str]:
        return dict(self._broker_configs.get(_entity(broker_id), {}))

    def set_broker_configs(self, broker_id: int | None, configs: Mapping[str, str]) -> None:
        if configs:
            self._broker_configs[_entity(broker_id)] = dict(configs)
        else:
            self._broker_configs.pop(_entity(broker_id), None)
        self._save()
        self._config_changed("brokers", _entity(broker_id))

    def watch_config_changes(self, callback: Callable[[str, str], None]) -> Unwatch:
        self._config_watchers.append(callback)
        return lambda: self._config_watchers.remove(callback) if callback in self._config_watchers else None

    def _config_changed(self, entity_type: str, entity_name: str) -> None:
        for callback in list(self._config_watchers):
            callback(entity_type, entity_name)

    # -- users (SCRAM credentials) --------------------------------------------------------------

    def get_user_configs(self, user: str) -> dict[str, str]:
        return dict(self._user_configs.get(user, {}))

    def set_user_configs(self, user: str, configs: Mapping[str, str]) -> None:
        if configs:
            self._user_configs[user] = dict(configs)
        else:
            self._user_configs.pop(user, None)
        self._save()
        self._config_changed("users", sanitize_entity_name(user))

    def list_user_configs(self) -> dict[str, dict[str, str]]:
        return {user: dict(configs) for user, configs in self._user_configs.items()}

    # -- client quota entities ------------------------------------------------------------------

    def get_entity_configs(self, entity_path: str) -> dict[str, str]:
        user = _named_user(entity_path)
        if user is not None:
            return self.get_user_configs(user)
        return dict(self._entity_configs.get(entity_path, {}))

    def set_entity_configs(self, entity_path: str, configs: Mapping[str, str]) -> None:
        user = _named_user(entity_path)
        if user is not None:
            self.set_user_configs(user, configs)
            return
        if configs:
            self._entity_configs[entity_path] = dict(configs)
        else:
            self._entity_configs.pop(entity_path, None)
        self._save()
        entity_type, _, name = entity_path.partition("/")
        self._config_changed(entity_type, name)

    def list_entity_configs(self, entity_type: str) -> dict[str, dict[str, str]]:
        prefix = f"{entity_type}/"
        found = {path.removeprefix(prefix): dict(configs) for path, configs in self._entity_configs.items()
                 if path.startswith(prefix)}
        if entity_type == "users":
            found.update({sanitize_entity_name(user): dict(configs) for user, configs in self._user_configs.items()})
        return found

    # -- groups ---------------------------------------------------------------------------------

    def get_group_configs(self, group: str) -> dict[str, str]:
        return dict(self._group_configs.get(group, {}))

    def set_group_configs(self, group: str, configs: Mapping[str, str]) -> None:
        if configs:
            self._group_configs[group] = dict(configs)
        else:
            self._group_configs.pop(group, None)
        self._save()
        self._config_changed("groups", sanitize_entity_name(group))

    def list_group_configs(self) -> dict[str, dict[str, str]]:
        return {group: dict(configs) for group, configs in self._group_configs.items()}
    # -- ACLs -------------------------------------------------------------------------------------

    def list_acls(self) -> dict[ResourcePattern, frozenset[AccessControlEntry]]:
        return dict(self._acls)

    def get_acls(self, pattern: ResourcePattern) -> frozenset[AccessControlEntry]:
        return self._acls.get(pattern, frozenset())

    def update_acls(self, pattern: ResourcePattern, add: frozenset[AccessControlEntry],
                    remove: frozenset[AccessControlEntry]) -> frozenset[AccessControlEntry]:
        entries = (self.get_acls(pattern) - remove) | add
        if entries:
            self._acls[pattern] = entries
        else:
            self._acls.pop(pattern, None)
        self._save()
        for callback in list(self._acl_watchers):
            callback(pattern)
        return entries

    def watch_acl_changes(self, callback: Callable[[ResourcePattern], None]) -> Unwatch:
        self._acl_watchers.append(callback)
        return lambda: self._acl_watchers.remove(callback) if callback in self._acl_watchers else None

    # -- partition leadership -------------------------------------------------------------------

    def get_partition_state(self, topic: str, partition: int) -> PartitionState | None:
        return self._partition_states.get((topic, partition))

    def create_partition_states(self, topic: str, states: Mapping[int, PartitionState]) -> None:
        record = self._require(topic)
        for partition in states:
            if partition not in record.assignment:
                raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Topic '{topic}' has no partition {partition}.")
            if (topic, partition) in self._partition_states:
                raise MetadataConflict(f"partition {topic}-{partition} already has a state")
        created = {p: _with_version(s, 0) for p, s in states.items()}
        for partition, state in created.items():
            self._partition_states[(topic, partition)] = state
        self._save()
        for partition, state in created.items():
            self._fire_state(topic, partition, state)

    def set_partition_state(self, topic: str, partition: int, state: PartitionState, expected_version: int) -> int:
        current = self._partition_states.get((topic, partition))
        if current is None or current.version != expected_version:
            raise VersionConflict(
                f"state of {topic}-{partition}", expected_version, None if current is None else current.version
            )
        written = _with_version(state, expected_version + 1)
        self._partition_states[(topic, partition)] = written
        self._save()
        self._fire_state(topic, partition, written)
        return written.version

    def watch_partition_state(
        self, topic: str, partition: int, callback: Callable[[PartitionState | None], None]
    ) -> Unwatch:
        watchers = self._state_watchers.setdefault((topic, partition), _Watchers())
        return watchers.add(callback, self._partition_states.get((topic, partition)))

    def _fire_state(self, topic: str, partition: int, state: PartitionState | None) -> None:
        watchers = self._state_watchers.get((topic, partition))
        if watchers:
            watchers.fire(state)

    # -- remote log metadata --------------------------------------------------------------------

    def get_remote_log(self, topic: str, partition: int) -> tuple[dict[str, Any] | None, int]:
        found = self._remote_logs.get((topic, partition))
        return (None, -1) if found is None else (copy.deepcopy(found[0]), found[1])

    def set_remote_log(self, topic: str, partition: int, document: Mapping[str, Any], expected_version: int) -> int:
        # Through JSON as ZooKeeper does: the same documents are refused (too large, not JSON), the
        # same come back (integer keys as strings), and the caller keeps no alias of what is stored.
        encoded = json.dumps(dict(document), separators=(",", ":")).encode()
        check_remote_log(topic, partition, expected_version, encoded)
        current = self._remote_logs.get((topic, partition))
        actual = -1 if current is None else current[1]
        if actual != expected_version:
            raise VersionConflict(f"remote log metadata of {topic}-{partition}", expected_version,
                                  None if current is None else actual)
        self._remote_logs[(topic, partition)] = (json.loads(encoded), actual + 1)
        self._save()
        return actual + 1

    def delete_remote_logs(self, topic: str) -> None:
        removed = [key for key in self._remote_logs if key[0] == topic]
        if not removed:
            return  # no save: nothing changed
        for key in removed:
            del self._remote_logs[key]
        self._save()

    def list_remote_logs(self, topic: str) -> dict[int, tuple[dict[str, Any], int]]:
        return {partition: (copy.deepcopy(document), version)
                for (t, partition), (document, version) in sorted(self._remote_logs.items()) if t == topic}

    # -- brokers --------------------------------------------------------------------------------

    def register_broker(self, registration: BrokerRegistration) -> None:
        if not registration.timestamp_ms:
            registration = _stamped(registration)
        self._brokers[registration.broker_id] = registration
        self._broker_watchers.fire(dict(self._brokers))

    def live_brokers(self) -> dict[int, BrokerRegistration]:
        return dict(self._brokers)

    def watch_brokers(self, callback: Callable[[dict[int, BrokerRegistration]], None]) -> Unwatch:
        return self._broker_watchers.add(callback, dict(self._brokers))

    # -- controller -----------------------------------------------------------------------------

    def try_become_controller(self, broker_id: int) -> int | None:
        if self._controller is not None:
            return self._controller_epoch if self._controller == broker_id else None
        self._controller_epoch += 1
        self._save()  # the epoch must never go back, even across a restart
        self._controller = broker_id
        self._controller_watchers.fire(broker_id)
        return self._controller_epoch

    def controller_id(self) -> int | None:
        return self._controller

    def controller_epoch(self) -> int:
        return self._controller_epoch

    def watch_controller(self, callback: Callable[[int | None], None]) -> Unwatch:
        return self._controller_watchers.add(callback, self._controller)

    # -- cluster --------------------------------------------------------------------------------

    def get_or_create_cluster_id(self, proposed: str | None = None) -> str:
        if self._cluster_id is None:
            self._cluster_id = proposed or new_cluster_id()
            self._save()
        return self._cluster_id

    def close(self) -> None:
        """The session ends: no live broker, no controller (watchers hear of it)."""
        if self._brokers:
            self._brokers.clear()
            self._broker_watchers.fire({})
        if self._controller is not None:
            self._controller = None
            self._controller_watchers.fire(None)

    def _require(self, name: str) -> TopicRecord:
        record = self._topics.get(name)
        if record is None:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Topic '{name}' does not exist.")
        return record


def _named_user(entity_path: str) -> str | None:
    """The user whose configs `entity_path` names ("users/<sanitized user>", not the default user
    nor a user's client), desanitized; None for any other entity."""
    entity_type, _, name = entity_path.partition("/")
    if entity_type != "users" or "/" in name or name == CLUSTER_DEFAULT:
        return None
    return desanitize_entity_name(name)


def _encode_remote_logs(remote_logs: Mapping[tuple[str, int], tuple[dict[str, Any], int]]) -> dict[str, Any]:
    """{"<topic>": {"<partition>": {"version": v, "document": {...}}}}, the file's `remote_logs`."""
    encoded: dict[str, dict[str, Any]] = {}
    for (topic, partition), (document, version) in sorted(remote_logs.items()):
        encoded.setdefault(topic, {})[str(partition)] = {"version": version, "document": document}
    return encoded


def _with_version(state: PartitionState, version: int) -> PartitionState:
    return dataclasses.replace(state, isr=list(state.isr), version=version)


def _stamped(registration: BrokerRegistration) -> BrokerRegistration:
    return dataclasses.replace(registration, timestamp_ms=wall_clock_ms())


def _entity(broker_id: int | None) -> str:
    return CLUSTER_DEFAULT if broker_id is None else str(broker_id)


def _decode_acls(entries: Any) -> dict[ResourcePattern, frozenset[AccessControlEntry]]:
    """The stored ACLs; an entry that cannot be read stops the load (the broker refuses to start
    rather than authorize without it)."""
    acls = {}
    for entry in entries:
        try:
            pattern = ResourcePattern(parse_resource_type(entry["resource_type"]), str(entry["name"]),
                                      parse_pattern_type(entry["pattern_type"]))
        except (KeyError, TypeError, ValueError) as e:
            raise ValueError(f"unreadable ACL resource {entry!r}: {e}") from None
        acls[pattern] = decode_acl_entries(entry)
    return acls
