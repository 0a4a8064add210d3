"""The cluster's metadata store: ZooKeeper, through kazoo, in Kafka's znode layout
(`zk_layout.py`: paths and JSON documents).

Every call blocks until ZooKeeper answers: kazoo runs the session on its own threads, and the
store is meant to be called from any of them. Watch callbacks run on kazoo's event thread (see
`kbroker.metadata.store`): hop to an asyncio loop with `loop.call_soon_threadsafe`.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import uuid
from collections.abc import Callable, Mapping
from typing import Any

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import (
    BadVersionError,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    RolledBackError,
    RuntimeInconsistency,
)
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.protocol.states import ZnodeStat
from kazoo.recipe.watchers import ChildrenWatch, DataWatch

from kbroker.clock import wall_clock_ms
from kbroker.meta_properties import new_cluster_id
from kbroker.metadata.store import (
    BrokerIdInUse,
    BrokerRegistration,
    MetadataConflict,
    MetadataStore,
    MetadataUnavailable,
    PartitionState,
    TopicRecord,
    Unwatch,
    VersionConflict,
    check_remote_log,
    desanitize_entity_name,
    sanitize_entity_name,
)
from kbroker.metadata.zk_acls import ZooKeeperAcls
from kbroker.metadata.zk_layout import (
    BROKER_CONFIGS_PATH,
    BROKER_IDS_PATH,
    CLUSTER_ID_PATH,
    CONFIG_CHANGE_EXPIRATION_MS,
    CONFIG_CHANGE_PREFIX,
    CONFIG_CHANGES_PATH,
    CONFIG_ROOT,
    CONTROLLER_EPOCH_PATH,
    CONTROLLER_PATH,
    DELETE_TOPICS_PATH,
    GROUP_CONFIGS_PATH,
    TOP_LEVEL_PATHS,
    TOPIC_CONFIGS_PATH,
    TOPICS_PATH,
    USER_CONFIGS_PATH,
    broker_path,
    change_sequence,
    config_entity,
    decode_broker,
    decode_state,
    decode_topic,
    encode_broker,
    encode_json,
    encode_state,
    encode_topic,
    legal_topic,
    partition_state_path,
    remote_log_path,
    remote_logs_path,
    topic_path,
)
from kbroker.metadata.zk_watch import CancellableWatch, call_guarded
from kbroker.security.acl import (
    AccessControlEntry,
    ResourcePattern,
)
from protocol.errors import ErrorCode, KafkaError

log = logging.getLogger("kbroker.metadata.zk")

_CAS_ATTEMPTS = 20  # a compare-and-set loop only repeats while others keep winning


class ZooKeeperUnavailable(MetadataUnavailable):
    """The store could not open a session with ZooKeeper."""


class ZooKeeperMetadataStore(MetadataStore):
    """One ZooKeeper session: ephemeral znodes (this broker's registration, the controller role
    if it wins) live as long as it does. After the session expires (the broker was cut off for
    longer than the session timeout) the registration is made again once connected."""

    def __init__(self, connect: str, session_timeout_ms: int = 18_000, connection_timeout_ms: int | None = None) -> None:
        """`connect` is Kafka's `zookeeper.connect`: host:port[,host:port...][/chroot]. The chroot
        is created when missing, as Kafka does."""
        self.connect = connect
        hosts, slash, chroot = connect.partition("/")
        timeout_s = (connection_timeout_ms or session_timeout_ms) / 1000
        if slash and chroot.strip("/"):
            self._ensure_chroot(hosts, "/" + chroot.strip("/"), timeout_s)
        self._client = KazooClient(hosts=connect, timeout=session_timeout_ms / 1000)
        self._acls = ZooKeeperAcls(self._client, self._get, self._get_many, self._purge_changes, _CAS_ATTEMPTS)
        self._start(self._client, timeout_s, connect)
        self._registration: BrokerRegistration | None = None
        self._session_lost = False
        self._closed = False
        self._lock = threading.Lock()
        self._client.add_listener(self._on_state)
        for path in TOP_LEVEL_PATHS:
            self._client.ensure_path(path)

    @staticmethod
    def _start(client: KazooClient, timeout_s: float, connect: str) -> None:
        try:
            client.start(timeout=timeout_s)
        except KazooTimeoutError:
            client.stop()
            client.close()
            raise ZooKeeperUnavailable(f"could not connect to ZooKeeper at {connect} within {timeout_s:g} s") from None

    @classmethod
    def _ensure_chroot(cls, hosts: str, chroot: str, timeout_s: float) -> None:
        client = KazooClient(hosts=hosts)
        cls._start(client, timeout_s, hosts)
        try:
            client.ensure_path(chroot)
        finally:
            client.stop()
            client.close()

    @property
    def session_id(self) -> int:
        return self._client.client_id[0]

    def close(self) -> None:
        """Close the session: ZooKeeper deletes its ephemeral znodes at once, so the others see
        this broker (and its controller role) go without waiting for a timeout."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._client.stop()
        self._client.close()

    def _on_state(self, state: str) -> None:
        # Runs on kazoo's connection thread: must not block, so the work is spawned.
        if self._closed:
            return
        if state == KazooState.LOST:
            self._session_lost = True
            log.warning("ZooKeeper session lost: this broker is unregistered until it reconnects")
        elif state == KazooState.SUSPENDED:
            log.warning("ZooKeeper connection suspended")
        elif state == KazooState.CONNECTED and self._session_lost:
            self._session_lost = False
            if self._registration is not None:
                self._client.handler.spawn(self._register_again)

    def _register_again(self) -> None:
        registration = self._registration
        if registration is None:
            return
        try:
            self._create_registration(registration)
            log.info("registered broker %d again in a new ZooKeeper session", registration.broker_id)
        except Exception:
            log.exception("could not register broker %d again", registration.broker_id)

    # -- helpers --------------------------------------------------------------------------------

    def _get(self, path: str) -> tuple[Any, ZnodeStat] | None:
        """The decoded JSON and stat of a znode, None if it does not exist."""
        try:
            data, stat = self._client.retry(self._client.get, path)
        except NoNodeError:
            return None
        return (json.loads(data) if data else None), stat

    def _get_many(self, paths: list[str]) -> list[tuple[Any, ZnodeStat] | None]:
        """Like `_get` for several znodes at once: the requests are pipelined on the session."""
        pending = [self._client.get_async(path) for path in paths]
        results: list[tuple[Any, ZnodeStat] | None] = []
        for request in pending:
            try:
                data, stat = request.get()
            except NoNodeError:
                results.append(None)
                continue
            results.append(((json.loads(data) if data else None), stat))
        return results

    def _set_or_create(self, path: str, data: bytes) -> None:
        for _ in range(_CAS_ATTEMPTS):
            try:
                self._client.set(path, data)
                return
            except NoNodeError:
                pass
            try:
                self._client.create(path, data, makepath=True)
                return
            except NodeExistsError:
                continue  # created meanwhile: set it
        raise MetadataConflict(f"{path} keeps being created and deleted")

    def _notify_config_change(self, entity_type: str, entity_name: str) -> None:
        """Kafka's change notification: brokers watching /config/changes reload the entity."""
        self._client.create(
            f"{CONFIG_CHANGES_PATH}/{CONFIG_CHANGE_PREFIX}",
            encode_json({"version": 2, "entity_path": f"{entity_type}/{entity_name}"}),
            sequence=True,
        )
        self._purge_changes(CONFIG_CHANGES_PATH)

    def _purge_changes(self, root: str) -> None:
        """Delete notifications older than Kafka's 15 minutes, which every broker has seen."""
        horizon = wall_clock_ms() - CONFIG_CHANGE_EXPIRATION_MS
        children = self._client.get_children(root)
        stats = [self._client.exists_async(f"{root}/{c}") for c in children]
        for child, request in zip(children, stats, strict=True):
            stat = request.get()
            if stat is not None and stat.ctime < horizon:
                with contextlib.suppress(NoNodeError):
                    self._client.delete(f"{root}/{child}")

    # -- topics ---------------------------------------------------------------------------------

    def create_topic(
        self, name: str, topic_id: uuid.UUID, assignment: Mapping[int, list[int]], configs: Mapping[str, str]
    ) -> None:
        if not legal_topic(name):
            raise KafkaError(ErrorCode.INVALID_TOPIC, f"topic name {name!r} is illegal")
        config_path = f"{TOPIC_CONFIGS_PATH}/{name}"
        config_data = encode_json({"version": 1, "config": dict(configs)})
        for _ in range(_CAS_ATTEMPTS):
            # The config and the topic appear together (Kafka writes the config first, then the
            # topic, so a watcher of topics always finds its config); a stale config is replaced.
            transaction = self._client.transaction()
            stale = self._client.exists(config_path)
            if stale is None:
                transaction.create(config_path, config_data)
            else:
                transaction.set_data(config_path, config_data, version=stale.version)
            transaction.create(topic_path(name), encode_topic(topic_id, assignment))
            results = transaction.commit()
            if not _failed(results):
                return
            if isinstance(results[1], NodeExistsError):
                raise KafkaError(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists.")
            if not isinstance(results[0], (NodeExistsError, NoNodeError, BadVersionError)):
                raise _first_error(results)
            # The config node changed between exists() and the commit: look again.
        raise MetadataConflict(f"could not create topic {name}: its config keeps changing")

    def delete_topic(self, name: str) -> None:
        if not legal_topic(name) or self._client.exists(topic_path(name)) is None:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Topic '{name}' does not exist.")
        # Kafka's controller order: the topic with its partition states, then its config. The
        # remote log metadata under /kbroker/remote_log stays (see `delete_remote_logs`).
        try:
            self._client.delete(topic_path(name), recursive=True)
        except NoNodeError:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Topic '{name}' does not exist.") from None
        for path in (f"{TOPIC_CONFIGS_PATH}/{name}", f"{DELETE_TOPICS_PATH}/{name}"):
            with contextlib.suppress(NoNodeError):
                self._client.delete(path)

    def get_topic(self, name: str) -> TopicRecord | None:
        if not legal_topic(name):
            return None
        topic, config = self._get_many([topic_path(name), f"{TOPIC_CONFIGS_PATH}/{name}"])
        if topic is None:
            return None
        return decode_topic(name, topic[0], config[0] if config else None, topic[1].version)

    def list_topics(self) -> list[TopicRecord]:
        names = self._client.retry(self._client.get_children, TOPICS_PATH)
        paths = [p for n in names for p in (topic_path(n), f"{TOPIC_CONFIGS_PATH}/{n}")]
        results = self._get_many(paths)
        records = []
        for i, name in enumerate(names):
            topic, config = results[2 * i], results[2 * i + 1]
            if topic is not None:  # deleted since it was listed
                records.append(decode_topic(name, topic[0], config[0] if config else None, topic[1].version))
        return records

    def add_partitions(self, name: str, assignment: Mapping[int, list[int]]) -> None:
        path = topic_path(name)
        for _ in range(_CAS_ATTEMPTS):
            current = self._get(path) if legal_topic(name) else None
            if current is None:
                raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Topic '{name}' does not exist.")
            document, stat = current
            partitions = {**document.get("partitions", {}), **{str(p): list(r) for p, r in assignment.items()}}
            document = {**document, "version": 3, "partitions": partitions}
            try:
                self._client.set(path, encode_json(document), version=stat.version)
                return
            except BadVersionError:
                continue  # changed meanwhile: merge into the newer assignment
            except NoNodeError:
                raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Topic '{name}' does not exist.") from None
        raise MetadataConflict(f"could not add partitions to {name}: its assignment keeps changing")

    def set_topic_configs(self, name: str, configs: Mapping[str, str]) -> None:
        if not legal_topic(name) or self._client.exists(topic_path(name)) is None:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Topic '{name}' does not exist.")
        self._set_or_create(f"{TOPIC_CONFIGS_PATH}/{name}", encode_json({"version": 1, "config": dict(configs)}))
        self._notify_config_change("topics", name)

    def watch_topics(self, callback: Callable[[set[str]], None]) -> Unwatch:
        watch = CancellableWatch()

        def on_children(children: list[str]) -> bool | None:
            if watch.cancelled:
                return False
            call_guarded(callback, set(children))
            return None

        ChildrenWatch(self._client, TOPICS_PATH, on_children)
        return watch.cancel

    # -- configs --------------------------------------------------------------------------------

    def get_broker_configs(self, broker_id: int | None) -> dict[str, str]:
        found = self._get(f"{BROKER_CONFIGS_PATH}/{config_entity(broker_id)}")
        if found is None or not found[0]:
            return {}
        return {k: str(v) for k, v in found[0].get("config", {}).items()}

    def set_broker_configs(self, broker_id: int | None, configs: Mapping[str, str]) -> None:
        # Kafka keeps the entity's znode, with an empty config, when its last override goes.
        self._set_or_create(
            f"{BROKER_CONFIGS_PATH}/{config_entity(broker_id)}", encode_json({"version": 1, "config": dict(configs)})
        )
        self._notify_config_change("brokers", config_entity(broker_id))

    def watch_config_changes(self, callback: Callable[[str, str], None]) -> Unwatch:
        watch = CancellableWatch()
        existing = self._client.retry(self._client.get_children, CONFIG_CHANGES_PATH)
        last_seen = max((change_sequence(c) for c in existing), default=-1)

        def on_children(children: list[str]) -> bool | None:
            nonlocal last_seen
            if watch.cancelled:
                return False
            new = sorted((s, c) for c in children if (s := change_sequence(c)) > last_seen)
            found = self._get_many([f"{CONFIG_CHANGES_PATH}/{c}" for _, c in new])
            for (sequence, _), result in zip(new, found, strict=True):
                last_seen = sequence
                if result is None or not result[0]:
                    continue  # purged before we read it
                entity_type, _, entity_name = str(result[0].get("entity_path", "")).partition("/")
                call_guarded(callback, entity_type, entity_name)
            return None

        ChildrenWatch(self._client, CONFIG_CHANGES_PATH, on_children)
        return watch.cancel

    # -- users (SCRAM credentials) --------------------------------------------------------------

    def get_user_configs(self, user: str) -> dict[str, str]:
        found = self._get(f"{USER_CONFIGS_PATH}/{sanitize_entity_name(user)}")
        if found is None or not found[0]:
            return {}
        return {k: str(v) for k, v in found[0].get("config", {}).items()}

    def set_user_configs(self, user: str, configs: Mapping[str, str]) -> None:
        # As Kafka's AdminZkClient.changeConfigs: the znode stays (empty) when the last config goes.
        name = sanitize_entity_name(user)
        self._set_or_create(f"{USER_CONFIGS_PATH}/{name}", encode_json({"version": 1, "config": dict(configs)}))
        self._notify_config_change("users", name)

    def list_user_configs(self) -> dict[str, dict[str, str]]:
        return self._list_entity_configs(USER_CONFIGS_PATH)

    # -- client quota entities ------------------------------------------------------------------

    def get_entity_configs(self, entity_path: str) -> dict[str, str]:
        found = self._get(f"{CONFIG_ROOT}/{entity_path}")
        if found is None or not found[0]:
            return {}
        return {k: str(v) for k, v in (found[0].get("config") or {}).items()}

    def set_entity_configs(self, entity_path: str, configs: Mapping[str, str]) -> None:
        # As Kafka's AdminZkClient.changeConfigs: the znode stays (empty) when the last config goes.
        self._set_or_create(f"{CONFIG_ROOT}/{entity_path}", encode_json({"version": 1, "config": dict(configs)}))
        entity_type, _, name = entity_path.partition("/")
        self._notify_config_change(entity_type, name)

    def list_entity_configs(self, entity_type: str) -> dict[str, dict[str, str]]:
        root = f"{CONFIG_ROOT}/{entity_type}"
        try:
            names = self._client.retry(self._client.get_children, root)
        except NoNodeError:
            return {}
        paths = list(names)
        if entity_type == "users":  # and each user's clients (fetchAllChildEntityConfigs)
            pending = [(name, self._client.get_children_async(f"{root}/{name}/clients")) for name in names]
            for name, request in pending:
                try:
                    paths += [f"{name}/clients/{child}" for child in request.get()]
                except NoNodeError:
                    continue
        entities = {}
        for path, found in zip(paths, self._get_many([f"{root}/{p}" for p in paths]), strict=True):
            configs = {k: str(v) for k, v in ((found[0] or {}).get("config") or {}).items()} if found else {}
            if configs:
                entities[path] = configs
        return entities

    def _list_entity_configs(self, root: str) -> dict[str, dict[str, str]]:
        try:
            names = self._client.retry(self._client.get_children, root)
        except NoNodeError:
            return {}
        results = self._get_many([f"{root}/{name}" for name in names])
        entities = {}
        for name, found in zip(names, results, strict=True):
            configs = {k: str(v) for k, v in ((found[0] or {}).get("config") or {}).items()} if found else {}
            if configs:
                entities[desanitize_entity_name(name)] = configs
        return entities

    # -- groups ---------------------------------------------------------------------------------

    def get_group_configs(self, group: str) -> dict[str, str]:
        found = self._get(f"{GROUP_CONFIGS_PATH}/{sanitize_entity_name(group)}")
        if found is None or not found[0]:
            return {}
        return {k: str(v) for k, v in found[0].get("config", {}).items()}

    def set_group_configs(self, group: str, configs: Mapping[str, str]) -> None:
        name = sanitize_entity_name(group)
        self._set_or_create(f"{GROUP_CONFIGS_PATH}/{name}", encode_json({"version": 1, "config": dict(configs)}))
        self._notify_config_change("groups", name)

    def list_group_configs(self) -> dict[str, dict[str, str]]:
        return self._list_entity_configs(GROUP_CONFIGS_PATH)

    # -- ACLs -------------------------------------------------------------------------------------

    def list_acls(self) -> dict[ResourcePattern, frozenset[AccessControlEntry]]:
        return self._acls.list_acls()

    def get_acls(self, pattern: ResourcePattern) -> frozenset[AccessControlEntry]:
        return self._acls.get_acls(pattern)

    def update_acls(self, pattern: ResourcePattern, add: frozenset[AccessControlEntry],
                    remove: frozenset[AccessControlEntry]) -> frozenset[AccessControlEntry]:
        return self._acls.update_acls(pattern, add, remove)

    def watch_acl_changes(self, callback: Callable[[ResourcePattern], None]) -> Unwatch:
        return self._acls.watch_acl_changes(callback)

    # -- partition leadership -------------------------------------------------------------------

    def get_partition_state(self, topic: str, partition: int) -> PartitionState | None:
        found = self._get(partition_state_path(topic, partition)) if legal_topic(topic) else None
        return None if found is None else decode_state(found[0], found[1].version)

    def create_partition_states(self, topic: str, states: Mapping[int, PartitionState]) -> None:
        for _ in range(_CAS_ATTEMPTS):
            record = self.get_topic(topic)
            if record is None:
                raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Topic '{topic}' does not exist.")
            missing = sorted(set(states) - set(record.assignment))
            if missing:
                raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Topic '{topic}' has no partition {missing[0]}.")
            partitions_path = f"{topic_path(topic)}/partitions"
            parents = [partitions_path, *(f"{partitions_path}/{p}" for p in sorted(states))]
            exists = [self._client.exists_async(path) for path in parents]
            transaction = self._client.transaction()
            for path, request in zip(parents, exists, strict=True):
                if request.get() is None:
                    transaction.create(path)
            for partition, state in sorted(states.items()):
                transaction.create(partition_state_path(topic, partition), encode_state(state))
            results = transaction.commit()
            if not _failed(results):
                return
            # Results follow the operations: the parents created first, then the states.
            state_results = results[len(results) - len(states):]
            if any(isinstance(r, NodeExistsError) for r in state_results):
                raise MetadataConflict(f"a partition of {topic} already has a state")
            # Otherwise a parent appeared (another creator) or the topic went: look again.
        raise MetadataConflict(f"could not create the partition states of {topic}")

    def set_partition_state(self, topic: str, partition: int, state: PartitionState, expected_version: int) -> int:
        path = partition_state_path(topic, partition)
        what = f"state of {topic}-{partition}"
        if not legal_topic(topic):
            raise VersionConflict(what, expected_version, None)
        try:
            stat = self._client.set(path, encode_state(state), version=expected_version)
        except BadVersionError:
            current = self._client.exists(path)
            raise VersionConflict(what, expected_version, None if current is None else current.version) from None
        except NoNodeError:
            raise VersionConflict(what, expected_version, None) from None
        return stat.version

    def watch_partition_state(
        self, topic: str, partition: int, callback: Callable[[PartitionState | None], None]
    ) -> Unwatch:
        watch = CancellableWatch()

        def on_data(data: bytes | None, stat: ZnodeStat | None) -> bool | None:
            if watch.cancelled:
                return False
            state = None if data is None or stat is None else decode_state(json.loads(data), stat.version)
            call_guarded(callback, state)
            return None

        DataWatch(self._client, partition_state_path(topic, partition), on_data)
        return watch.cancel

    # -- remote log metadata --------------------------------------------------------------------

    def get_remote_log(self, topic: str, partition: int) -> tuple[dict[str, Any] | None, int]:
        found = self._get(remote_log_path(topic, partition)) if legal_topic(topic) else None
        return (None, -1) if found is None else (found[0], found[1].version)

    def set_remote_log(self, topic: str, partition: int, document: Mapping[str, Any], expected_version: int) -> int:
        if not legal_topic(topic):
            raise KafkaError(ErrorCode.INVALID_TOPIC, f"topic name {topic!r} is illegal")
        data = encode_json(dict(document))
        check_remote_log(topic, partition, expected_version, data)
        if expected_version == -1:  # never passed to set, where it would mean "any version"
            return self._create_remote_log(topic, partition, data)
        path = remote_log_path(topic, partition)
        try:
            stat = self._client.set(path, data, version=expected_version)
        except BadVersionError:
            current = self._client.exists(path)
            raise VersionConflict(_remote_log_what(topic, partition), expected_version,
                                  None if current is None else current.version) from None
        except NoNodeError:
            raise VersionConflict(_remote_log_what(topic, partition), expected_version, None) from None
        return stat.version

    def _create_remote_log(self, topic: str, partition: int, data: bytes) -> int:
        """The first document: version 0, as every new znode. Like the other writes, not wrapped
        in kazoo's retry: a create that landed before the connection dropped would be retried into
        a false conflict; the caller re-reads instead."""
        path = remote_log_path(topic, partition)
        try:
            self._client.create(path, data, makepath=True)
        except NodeExistsError:
            current = self._client.exists(path)
            raise VersionConflict(_remote_log_what(topic, partition), -1,
                                  None if current is None else current.version) from None
        return 0

    def delete_remote_logs(self, topic: str) -> None:
        if not legal_topic(topic):
            return
        for _ in range(_CAS_ATTEMPTS):
            try:
                # kazoo deletes the children first, then the parent; a document created between
                # the two (a broker still archiving) fails the parent's delete: go round again.
                self._client.delete(remote_logs_path(topic), recursive=True)
                return
            except NoNodeError:
                return
            except NotEmptyError:
                continue
        raise MetadataConflict(f"the remote log metadata of {topic} keeps being written while it is deleted")

    def list_remote_logs(self, topic: str) -> dict[int, tuple[dict[str, Any], int]]:
        if not legal_topic(topic):
            return {}
        try:
            children = self._client.retry(self._client.get_children, remote_logs_path(topic))
        except NoNodeError:
            return {}
        partitions = sorted(int(c) for c in children if c.isdigit())
        found = self._get_many([remote_log_path(topic, p) for p in partitions])
        return {p: (result[0], result[1].version)
                for p, result in zip(partitions, found, strict=True) if result is not None}  # None: deleted since

    # -- brokers --------------------------------------------------------------------------------

    def register_broker(self, registration: BrokerRegistration) -> None:
        if not registration.timestamp_ms:
            registration = BrokerRegistration(
                registration.broker_id, registration.endpoints, registration.rack, wall_clock_ms()
            )
        self._create_registration(registration)
        self._registration = registration

    def _create_registration(self, registration: BrokerRegistration) -> None:
        path = broker_path(registration.broker_id)
        data = encode_broker(registration)
        for _ in range(_CAS_ATTEMPTS):
            try:
                self._client.create(path, data, ephemeral=True)
                return
            except NodeExistsError:
                pass
            stat = self._client.exists(path)
            if stat is None:
                continue  # the holder's session expired between the two calls: create again
            if stat.ephemeralOwner == self.session_id:
                # Ours already (a retry, or a new registration in the same session): replace it.
                self._client.set(path, data, version=stat.version)
                return
            raise BrokerIdInUse(
                f"broker.id {registration.broker_id} is registered by another live broker "
                f"(ZooKeeper session {stat.ephemeralOwner})"
            )
        raise MetadataConflict(f"{path} keeps being created and deleted")

    def live_brokers(self) -> dict[int, BrokerRegistration]:
        children = self._client.retry(self._client.get_children, BROKER_IDS_PATH)
        return self._read_brokers(children)

    def _read_brokers(self, children: list[str]) -> dict[int, BrokerRegistration]:
        ids = sorted(int(c) for c in children if c.isdigit())
        results = self._get_many([broker_path(i) for i in ids])
        return {i: decode_broker(i, found[0]) for i, found in zip(ids, results, strict=True) if found is not None}

    def watch_brokers(self, callback: Callable[[dict[int, BrokerRegistration]], None]) -> Unwatch:
        watch = CancellableWatch()

        def on_children(children: list[str]) -> bool | None:
            if watch.cancelled:
                return False
            call_guarded(callback, self._read_brokers(children))
            return None

        ChildrenWatch(self._client, BROKER_IDS_PATH, on_children)
        return watch.cancel

    # -- controller -----------------------------------------------------------------------------

    def try_become_controller(self, broker_id: int) -> int | None:
        """Kafka's election: create the ephemeral /controller and bump /controller_epoch in one
        transaction, the epoch compared by version, so two winners (or two equal epochs) are
        impossible even if ZooKeeper sessions race."""
        controller_data = encode_json({"version": 2, "brokerid": broker_id, "timestamp": str(wall_clock_ms()),
                                   "kraftControllerEpoch": -1})
        for _ in range(_CAS_ATTEMPTS):
            epoch, epoch_version = self._read_controller_epoch()
            transaction = self._client.transaction()
            transaction.create(CONTROLLER_PATH, controller_data, ephemeral=True)
            transaction.set_data(CONTROLLER_EPOCH_PATH, str(epoch + 1).encode(), version=epoch_version)
            results = transaction.commit()
            if not _failed(results):
                log.info("broker %d is the controller, epoch %d", broker_id, epoch + 1)
                return epoch + 1
            if isinstance(results[0], NodeExistsError):
                holder = self._client.exists(CONTROLLER_PATH)
                if holder is not None and holder.ephemeralOwner == self.session_id and self.controller_id() == broker_id:
                    return self.controller_epoch()
                if holder is not None:
                    return None
                continue  # the holder's session ended meanwhile: try again
            if not isinstance(results[1], BadVersionError):
                raise _first_error(results)
            # Another election bumped the epoch between our read and our commit: read again.
        raise MetadataConflict("controller election did not settle")

    def _read_controller_epoch(self) -> tuple[int, int]:
        """The epoch and its znode version, creating /controller_epoch with 0 the first time."""
        try:
            data, stat = self._client.retry(self._client.get, CONTROLLER_EPOCH_PATH)
        except NoNodeError:
            with contextlib.suppress(NodeExistsError):
                self._client.create(CONTROLLER_EPOCH_PATH, b"0")
            data, stat = self._client.get(CONTROLLER_EPOCH_PATH)
        return int(data), stat.version

    def controller_id(self) -> int | None:
        found = self._get(CONTROLLER_PATH)
        return None if found is None or not found[0] else int(found[0]["brokerid"])

    def controller_epoch(self) -> int:
        try:
            data, _ = self._client.retry(self._client.get, CONTROLLER_EPOCH_PATH)
        except NoNodeError:
            return 0
        return int(data)

    def watch_controller(self, callback: Callable[[int | None], None]) -> Unwatch:
        watch = CancellableWatch()

        def on_data(data: bytes | None, stat: ZnodeStat | None) -> bool | None:
            if watch.cancelled:
                return False
            call_guarded(callback, int(json.loads(data)["brokerid"]) if data else None)
            return None

        DataWatch(self._client, CONTROLLER_PATH, on_data)
        return watch.cancel

    # -- cluster --------------------------------------------------------------------------------

    def get_or_create_cluster_id(self, proposed: str | None = None) -> str:
        found = self._get(CLUSTER_ID_PATH)
        if found is None:
            # If another broker was first, its id is the one read back.
            with contextlib.suppress(NodeExistsError):
                self._client.create(CLUSTER_ID_PATH, encode_json({"version": "1", "id": proposed or new_cluster_id()}),
                                    makepath=True)
            found = self._get(CLUSTER_ID_PATH)
            assert found is not None
        return str(found[0]["id"])


# -- encoding -------------------------------------------------------------------------------------


def _remote_log_what(topic: str, partition: int) -> str:
    return f"remote log metadata of {topic}-{partition}"


def _failed(results: list[Any]) -> bool:
    return any(isinstance(r, Exception) for r in results)


def _first_error(results: list[Any]) -> Exception:
    """The operation that failed a transaction (the others report being rolled back or skipped)."""
    return next(
        r for r in results if isinstance(r, Exception) and not isinstance(r, (RolledBackError, RuntimeInconsistency))
    )


