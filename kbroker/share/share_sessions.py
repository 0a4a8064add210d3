"""Share sessions (KIP-932): the partitions a share consumer fetches from one broker, so that
each ShareFetch names only what changed. Pure state; the handlers translate the wire.

A session is keyed by (group, member) and numbered by an epoch the client sends: 0 opens a new
session (replacing any the member had), -1 closes it (after the request's acknowledgements),
anything else must be the session's current epoch, which then moves on by one. ShareAcknowledge
follows the same epochs but can neither open a session nor change its partitions.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from protocol.errors import ErrorCode, KafkaError

INITIAL_EPOCH = 0
FINAL_EPOCH = -1
MAX_EPOCH = 2**31 - 1

Key = TypeVar("Key", bound=Hashable)  # a share partition: (topic id, partition)


def next_epoch(epoch: int) -> int:
    """The epoch after `epoch`; it wraps to 1, never to the special 0 or -1."""
    return 1 if epoch >= MAX_EPOCH else epoch + 1


@dataclass
class ShareSession(Generic[Key]):
    group_id: str
    member_id: str
    epoch: int
    partitions: dict[Key, None] = field(default_factory=dict)  # ordered set
    last_used_ms: int = 0


@dataclass
class ShareSessionCache(Generic[Key]):
    """Every open share session of this broker, bounded by `max_sessions`."""

    max_sessions: int = 2000
    _sessions: dict[tuple[str, str], ShareSession[Key]] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self._sessions)

    def get(self, group_id: str, member_id: str) -> ShareSession[Key] | None:
        return self._sessions.get((group_id, member_id))

    def for_fetch(self, group_id: str, member_id: str, epoch: int, fetch: Iterable[Key],
                  forget: Iterable[Key], has_acknowledgements: bool, now_ms: int) -> ShareSession[Key]:
        """The session a ShareFetch works in, opened or updated as its epoch says (not yet
        closed for the final epoch: the caller applies the acknowledgements, then `close`s)."""
        key = (group_id, member_id)
        fetch = list(fetch)
        if epoch == FINAL_EPOCH:
            if fetch:
                raise KafkaError(ErrorCode.INVALID_REQUEST, "a final share fetch cannot fetch")
            return self._existing(key, None)
        if epoch == INITIAL_EPOCH:
            if has_acknowledgements:
                raise KafkaError(ErrorCode.INVALID_REQUEST, "a new share session has nothing to acknowledge")
            if key not in self._sessions and len(self._sessions) >= self.max_sessions:
                raise KafkaError(ErrorCode.SHARE_SESSION_LIMIT_REACHED)
            session = ShareSession[Key](group_id, member_id, next_epoch(INITIAL_EPOCH), dict.fromkeys(fetch), now_ms)
            self._sessions[key] = session
            return session
        session = self._existing(key, epoch)
        for forgotten in forget:
            session.partitions.pop(forgotten, None)
        session.partitions.update(dict.fromkeys(fetch))
        session.epoch, session.last_used_ms = next_epoch(epoch), now_ms
        return session

    def for_acknowledge(self, group_id: str, member_id: str, epoch: int, now_ms: int) -> ShareSession[Key]:
        """The session a ShareAcknowledge works in (closed by the caller after a final one)."""
        if epoch == INITIAL_EPOCH:
            raise KafkaError(ErrorCode.INVALID_SHARE_SESSION_EPOCH, "acknowledgements need an open share session")
        session = self._existing((group_id, member_id), None if epoch == FINAL_EPOCH else epoch)
        if epoch != FINAL_EPOCH:
            session.epoch, session.last_used_ms = next_epoch(epoch), now_ms
        return session

    def close(self, group_id: str, member_id: str) -> ShareSession[Key] | None:
        """Forget a member's session (final epoch, the member left, its connection closed); the
        caller releases what the member still holds in the session's partitions."""
        return self._sessions.pop((group_id, member_id), None)

    def reads(self, group_id: str, partition: Key) -> bool:
        """Whether any open session of the group fetches from `partition`."""
        return any(s.group_id == group_id and partition in s.partitions for s in self._sessions.values())

    def _existing(self, key: tuple[str, str], epoch: int | None) -> ShareSession[Key]:
        session = self._sessions.get(key)
        if session is None:
            raise KafkaError(ErrorCode.SHARE_SESSION_NOT_FOUND)
        if epoch is not None and session.epoch != epoch:
            raise KafkaError(ErrorCode.INVALID_SHARE_SESSION_EPOCH,
                             f"expected share session epoch {session.epoch}, got {epoch}")
        return session
