"""Every user's SCRAM credentials, in memory, as Kafka's CredentialCache keeps them.

Loaded from the metadata store at start and kept current through its change notifications
(`("users", <sanitized name>)`, written by AlterUserScramCredentials on any broker), so a SCRAM
exchange never waits on ZooKeeper. A stored value that is not a credential is logged (without
its content) and left out: that user cannot authenticate with that mechanism.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from kbroker.metadata.store import MetadataStore, desanitize_entity_name
from kbroker.security.scram import ScramCredential, scram_credentials

log = logging.getLogger("kbroker.credentials")


class UserCredentials:
    def __init__(self, store: MetadataStore) -> None:
        self._store = store
        self._users: dict[str, dict[str, ScramCredential]] = {}
        self._unwatch: Callable[[], None] | None = None

    def load(self) -> None:
        self._users = {user: scram_credentials(configs, user) for user, configs in self._store.list_user_configs().items()}

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        """Follow changes made through any broker."""
        def on_change(entity_type: str, entity_name: str) -> None:
            if entity_type == "users":
                loop.call_soon_threadsafe(self._changed, entity_name)

        self._unwatch = self._store.watch_config_changes(on_change)

    def stop(self) -> None:
        if self._unwatch is not None:
            self._unwatch()
            self._unwatch = None

    def _changed(self, sanitized_name: str) -> None:
        try:
            self.reload(desanitize_entity_name(sanitized_name))
        except Exception:
            log.exception("reloading the credentials of a changed user failed")

    def reload(self, user: str) -> None:
        """Read one user's credentials again (after a change here or on another broker)."""
        credentials = scram_credentials(self._store.get_user_configs(user), user)
        if credentials:
            self._users[user] = credentials
        else:
            self._users.pop(user, None)

    def scram(self, mechanism: str, user: str) -> ScramCredential | None:
        return self._users.get(user, {}).get(mechanism)
