"""ACLs in ZooKeeper, as Kafka's ZkAclStore keeps them: a znode per resource pattern (literal
patterns under `/kafka-acl`, prefixed ones under `/kafka-acl-extended/prefixed`), changed by
compare-and-set, and a change queue per pattern type that every broker follows. The layout's
paths and documents are in `zk_layout.py`; the store (`zk_store.py`) hands its session here."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError
from kazoo.protocol.states import ZnodeStat
from kazoo.recipe.watchers import ChildrenWatch

from kbroker.metadata.store import MetadataConflict, Unwatch, decode_acl_entries, encode_acl_entries
from kbroker.metadata.zk_layout import (
    ACL_CHANGE_PREFIX,
    LITERAL_ACL_CHANGES_PATH,
    LITERAL_ACL_PATH,
    PREFIXED_ACL_CHANGES_PATH,
    PREFIXED_ACL_PATH,
    acl_path,
    change_sequence,
    decode_acl_change,
    encode_json,
)
from kbroker.metadata.zk_watch import CancellableWatch, call_guarded
from kbroker.security.acl import (
    AccessControlEntry,
    PatternType,
    ResourcePattern,
    parse_resource_type,
    resource_type_name,
)

log = logging.getLogger("kbroker.metadata.zk")

Read = Callable[[str], "tuple[Any, ZnodeStat] | None"]
ReadMany = Callable[[list[str]], "list[tuple[Any, ZnodeStat] | None]"]


class ZooKeeperAcls:
    def __init__(self, client: KazooClient, get: Read, get_many: ReadMany, purge_changes: Callable[[str], None],
                 cas_attempts: int) -> None:
        self._client = client
        self._get = get  # the store's reads of decoded znodes, and its purge of old notifications
        self._get_many = get_many
        self._purge_changes = purge_changes
        self._cas_attempts = cas_attempts

    def list_acls(self) -> dict[ResourcePattern, frozenset[AccessControlEntry]]:
        patterns: list[ResourcePattern] = []
        for root, pattern_type in ((LITERAL_ACL_PATH, PatternType.LITERAL), (PREFIXED_ACL_PATH, PatternType.PREFIXED)):
            for type_name in self._client.retry(self._client.get_children, root):
                resource_type = parse_resource_type(type_name)
                names = self._client.retry(self._client.get_children, f"{root}/{type_name}")
                patterns += [ResourcePattern(resource_type, name, pattern_type) for name in names]
        found = self._get_many([acl_path(p) for p in patterns])
        return {p: decode_acl_entries(r[0]) for p, r in zip(patterns, found, strict=True)
                if r is not None and r[0] is not None}

    def get_acls(self, pattern: ResourcePattern) -> frozenset[AccessControlEntry]:
        found = self._get(acl_path(pattern))
        return decode_acl_entries(found[0]) if found is not None and found[0] is not None else frozenset()

    def update_acls(self, pattern: ResourcePattern, add: frozenset[AccessControlEntry],
                    remove: frozenset[AccessControlEntry]) -> frozenset[AccessControlEntry]:
        path = acl_path(pattern)
        for _ in range(self._cas_attempts):
            found = self._get(path)
            current = decode_acl_entries(found[0]) if found is not None and found[0] is not None else frozenset()
            entries = (current - remove) | add
            if entries == current:
                return current
            try:
                if found is None:
                    self._client.create(path, encode_json(encode_acl_entries(entries)), makepath=True)
                elif entries:
                    self._client.set(path, encode_json(encode_acl_entries(entries)), version=found[1].version)
                else:
                    self._client.delete(path, version=found[1].version)
            except (BadVersionError, NodeExistsError, NoNodeError):
                continue  # another broker changed it meanwhile: read again
            self._notify_acl_change(pattern)
            return entries
        raise MetadataConflict(f"{path} keeps being changed by others")

    def _notify_acl_change(self, pattern: ResourcePattern) -> None:
        """Kafka's notifications: every broker reloads the pattern named."""
        type_name = resource_type_name(pattern.resource_type)
        if pattern.pattern_type == PatternType.LITERAL:
            root, data = LITERAL_ACL_CHANGES_PATH, f"{type_name}:{pattern.name}".encode()
        else:
            root, data = PREFIXED_ACL_CHANGES_PATH, encode_json(
                {"version": 1, "resourceType": type_name, "name": pattern.name, "patternType": pattern.pattern_type.name})
        self._client.create(f"{root}/{ACL_CHANGE_PREFIX}", data, sequence=True)
        self._purge_changes(root)

    def watch_acl_changes(self, callback: Callable[[ResourcePattern], None]) -> Unwatch:
        watches = [self._watch_acl_queue(root, callback) for root in (LITERAL_ACL_CHANGES_PATH, PREFIXED_ACL_CHANGES_PATH)]

        def cancel() -> None:
            for each in watches:
                each()
        return cancel

    def _watch_acl_queue(self, root: str, callback: Callable[[ResourcePattern], None]) -> Unwatch:
        watch = CancellableWatch()
        existing = self._client.retry(self._client.get_children, root)
        last_seen = max((change_sequence(c, ACL_CHANGE_PREFIX) for c in existing), default=-1)

        def on_children(children: list[str]) -> bool | None:
            nonlocal last_seen
            if watch.cancelled:
                return False
            new = sorted((s, c) for c in children if (s := change_sequence(c, ACL_CHANGE_PREFIX)) > last_seen)
            pending = [self._client.get_async(f"{root}/{c}") for _, c in new]
            for (sequence, _), request in zip(new, pending, strict=True):
                last_seen = sequence
                try:
                    data, _stat = request.get()
                except NoNodeError:
                    continue  # purged before we read it
                try:
                    pattern = decode_acl_change(root, data)
                except ValueError:
                    log.warning("ignoring an unreadable ACL change notification %r", data)
                    continue
                call_guarded(callback, pattern)
            return None

        ChildrenWatch(self._client, root, on_children)
        return watch.cancel
