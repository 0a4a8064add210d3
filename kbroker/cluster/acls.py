"""ACLs of the cluster: the broker's authorizer, fed from the metadata store and kept current.

At start every ACL is read from the store (`load`); a store whose ACLs cannot be read stops the
start, since authorizing without them could allow what they deny. Afterwards each change made
by any broker arrives as a store notification naming one resource pattern (ZooKeeper's
`/kafka-acl-changes` and `/kafka-acl-extended-changes`, as Kafka writes them): the pattern's
entries are read again on the store's thread and handed to the event loop, so the loop never
waits for ZooKeeper. CreateAcls and DeleteAcls write through the `StoreWriter` (compare-and-set
on the pattern's znode) and apply their own result at once.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

from kbroker.cluster.store_writer import StoreWriter
from kbroker.metadata.store import MetadataStore, Unwatch
from kbroker.security.acl import (
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    Authorizer,
    InvalidAcl,
    ResourcePattern,
    parse_super_users,
    validate_new_binding,
)
from protocol.errors import ErrorCode, KafkaError

log = logging.getLogger("kbroker.acls")


class AclStoreUnreadable(Exception):
    """The ACLs could not be read at start: the broker must not serve."""


@dataclass(frozen=True, slots=True)
class AclResult:
    error: int = ErrorCode.NO_ERROR
    message: str | None = None


@dataclass(frozen=True, slots=True)
class DeleteResult:
    """What one DeleteAcls filter removed, or why it failed."""

    deleted: list[AclBinding]
    error: int = ErrorCode.NO_ERROR
    message: str | None = None


class AclService:
    def __init__(self, store: MetadataStore, writer: StoreWriter, super_users: str | None = None,
                 allow_everyone_if_no_acl_found: bool = False) -> None:
        self.store = store
        self.writer = writer
        self.authorizer = Authorizer(parse_super_users(super_users), allow_everyone_if_no_acl_found)
        self._unwatch: Unwatch | None = None

    def load(self) -> None:
        try:
            table = self.store.list_acls()
        except Exception as e:
            raise AclStoreUnreadable(f"the ACLs in the metadata store cannot be read: {e}") from e
        self.authorizer.replace_all(table)
        log.info("authorizer loaded %d ACL(s) on %d resource pattern(s)", self.authorizer.count(), len(table))

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        """Follow the changes any broker makes."""
        def on_change(pattern: ResourcePattern) -> None:
            try:
                entries = self.store.get_acls(pattern)
            except Exception:
                # The previous entries stay in force (never none): the next notification or a
                # restart reads them again.
                log.exception("reading the changed ACLs of %s failed; keeping the previous ones", pattern)
                return
            if not loop.is_closed():
                loop.call_soon_threadsafe(self._apply, pattern, entries)

        self._unwatch = self.store.watch_acl_changes(on_change)

    def stop(self) -> None:
        if self._unwatch is not None:
            self._unwatch()
            self._unwatch = None

    def _apply(self, pattern: ResourcePattern, entries: frozenset[AccessControlEntry]) -> None:
        self.authorizer.set_acls(pattern, entries)

    # -- CreateAcls / DeleteAcls ----------------------------------------------------------------

    async def create(self, bindings: list[AclBinding]) -> list[AclResult]:
        """Each binding is checked, then added; results in request order."""
        results: list[AclResult] = []
        for binding in bindings:
            try:
                validate_new_binding(binding)
            except InvalidAcl as e:
                results.append(AclResult(ErrorCode.INVALID_REQUEST, str(e)))
                continue
            try:
                stored = await self.writer.run(self.store.update_acls, binding.pattern,
                                               frozenset({binding.entry}), frozenset())
            except KafkaError as e:
                results.append(AclResult(e.code, e.message))
                continue
            except Exception as e:  # the store failed: this binding was not created
                log.exception("storing ACL %s failed", binding)
                results.append(AclResult(ErrorCode.UNKNOWN_SERVER_ERROR, str(e)))
                continue
            self._apply(binding.pattern, stored)
            results.append(AclResult())
        return results

    async def delete(self, filters: list[AclBindingFilter]) -> list[DeleteResult]:
        """Every ACL each filter matches is removed (Kafka applies all filters to the ACLs as
        they were before the request)."""
        matched = [self.authorizer.acls(f) for f in filters]
        results: list[DeleteResult] = []
        for acl_filter, bindings in zip(filters, matched, strict=True):
            if acl_filter.unknown():
                results.append(DeleteResult([], ErrorCode.INVALID_REQUEST, "filter has an UNKNOWN element"))
                continue
            by_pattern: dict[ResourcePattern, set[AccessControlEntry]] = {}
            for binding in bindings:
                by_pattern.setdefault(binding.pattern, set()).add(binding.entry)
            try:
                for pattern, entries in by_pattern.items():
                    stored = await self.writer.run(self.store.update_acls, pattern, frozenset(), frozenset(entries))
                    self._apply(pattern, stored)
            except Exception as e:
                log.exception("deleting ACLs failed")
                code = e.code if isinstance(e, KafkaError) else ErrorCode.UNKNOWN_SERVER_ERROR
                results.append(DeleteResult([], code, str(e)))
                continue
            results.append(DeleteResult(bindings))
        return results


