"""Every user's SCRAM credentials, in memory, as Kafka's CredentialCache keeps them.

Loaded from the metadata store at start and kept current through its change notifications
(`("users", <sanitized name>)`, written by AlterUserScramCredentials on any broker), so a SCRAM
exchange or DescribeUserScramCredentials never waits on ZooKeeper; a changed user is read on the
store's thread. Changes made here run on the store writer's thread (`alter`). A stored value that is not a credential is logged (without
its content) and left out: that user cannot authenticate with that mechanism.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from kbroker.cluster.store_writer import StoreWriter
from kbroker.metadata.store import MetadataStore, desanitize_entity_name
from kbroker.security.scram import ScramCredential, scram_credentials

log = logging.getLogger("kbroker.credentials")


class UserCredentials:
    def __init__(self, store: MetadataStore, writer: StoreWriter) -> None:
        self._store = store
        self._writer = writer
        self._users: dict[str, dict[str, ScramCredential]] = {}
        self._unwatch: Callable[[], None] | None = None

    def load(self) -> None:
        self._users = {user: scram_credentials(configs, user) for user, configs in self._store.list_user_configs().items()}

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        """Follow changes made through any broker: the user's configs are read on the thread
        that reports the change (ZooKeeper's), then held on the loop."""
        def on_change(entity_type: str, entity_name: str) -> None:
            if entity_type != "users" or "/" in entity_name:
                return  # not a user's configs (a user's client-id quotas: "<user>/clients/<client-id>")
            try:
                user = desanitize_entity_name(entity_name)
                configs = self._store.get_user_configs(user)
            except Exception:
                log.exception("reading the credentials of a changed user failed")
                return
            loop.call_soon_threadsafe(self._hold, user, configs)

        self._unwatch = self._store.watch_config_changes(on_change)

    def stop(self) -> None:
        if self._unwatch is not None:
            self._unwatch()
            self._unwatch = None

    async def alter(self, user: str, edit: Callable[[dict[str, str]], dict[str, str]]) -> None:
        """Replace the user's stored configs by `edit(current)` on the store writer's thread (read
        and write together, in order with every other write of this broker), then hold them here
        at once; the other brokers hear of it through the change notification. A KafkaError
        raised by `edit` leaves everything as it was."""
        def read_edit_write() -> dict[str, str]:
            configs = edit(self._store.get_user_configs(user))
            self._store.set_user_configs(user, configs)
            return configs

        self._hold(user, await self._writer.run(read_edit_write))

    def _hold(self, user: str, configs: dict[str, str]) -> None:
        credentials = scram_credentials(configs, user)
        if credentials:
            self._users[user] = credentials
        else:
            self._users.pop(user, None)

    def scram(self, mechanism: str, user: str) -> ScramCredential | None:
        return self._users.get(user, {}).get(mechanism)

    def of(self, user: str) -> dict[str, ScramCredential]:
        """The user's credentials by mechanism name (empty when it has none)."""
        return dict(self._users.get(user, {}))

    def users(self) -> list[str]:
        """Every user with a credential, sorted."""
        return sorted(self._users)
