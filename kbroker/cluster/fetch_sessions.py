"""Incremental fetch sessions (KIP-227): the broker remembers what a fetcher asked for last time,
so a steady-state fetch names only the partitions whose position changed, and its response
carries only the partitions with something new (records, a moved high watermark or log start,
an error). Followers fetching hundreds of partitions every few milliseconds gain the most.

Session metadata in a request: epoch 0 asks for a new session (a full fetch), epoch -1 for none
(a full fetch, and `session_id`, if set, is closed); any other epoch continues `session_id`,
and must be exactly the session's current epoch.
"""

from __future__ import annotations

import random
import uuid
from dataclasses import dataclass

INVALID_SESSION_ID = 0
INITIAL_EPOCH = 0
FINAL_EPOCH = -1

# (topic id, topic name, partition): v13+ fetchers name topics by id, older ones by name.
PartitionKey = tuple[uuid.UUID, str | None, int]


def next_epoch(epoch: int) -> int:
    """Epochs count up from 1 and wrap back to 1 (0 and -1 have their meanings)."""
    return 1 if epoch >= 2**31 - 1 else epoch + 1


@dataclass(slots=True)
class CachedPartition:
    """A partition of a session: the fetcher's last request for it, and what it was last told."""

    fetch_offset: int
    max_bytes: int
    leader_epoch: int
    fetcher_log_start: int
    high_watermark: int = -1  # as last sent; -1 after an error, so the next answer includes it
    log_start_offset: int = -1

    def must_respond(self, records_size: int, high_watermark: int, log_start_offset: int, error: bool) -> bool:
        """Whether an incremental response includes this partition; remembers what it says."""
        respond = records_size > 0 or error
        if high_watermark != self.high_watermark:
            self.high_watermark = high_watermark
            respond = True
        if log_start_offset != self.log_start_offset:
            self.log_start_offset = log_start_offset
            respond = True
        if error:
            self.high_watermark = -1
        return respond


@dataclass(slots=True)
class FetchSession:
    id: int
    privileged: bool  # a follower's: consumers' sessions are evicted first
    partitions: dict[PartitionKey, CachedPartition]
    created_ms: int
    last_used_ms: int
    epoch: int = 1  # what the next request must carry

    def update(self, changed: dict[PartitionKey, CachedPartition], forgotten: list[PartitionKey]) -> None:
        for key, wanted in changed.items():
            cached = self.partitions.get(key)
            if cached is None:
                self.partitions[key] = wanted
            else:
                cached.fetch_offset = wanted.fetch_offset
                cached.max_bytes = wanted.max_bytes
                cached.leader_epoch = wanted.leader_epoch
                cached.fetcher_log_start = wanted.fetcher_log_start
        for key in forgotten:
            self.partitions.pop(key, None)

    def move_to_end(self, key: PartitionKey) -> None:
        """After it returned records: the others come first next time, each getting its turn at max_bytes."""
        cached = self.partitions.pop(key, None)
        if cached is not None:
            self.partitions[key] = cached


class FetchSessionCache:
    """Sessions by id, at most `max_entries` (`max.incremental.fetch.session.cache.slots`). When
    full, a new session takes the place of the least recently used one that has been idle for
    `eviction_ms`, or of any consumer's session if a follower asks; otherwise the fetcher goes on
    without a session (session id 0), as the protocol allows."""

    def __init__(self, max_entries: int = 1000, eviction_ms: int = 120_000) -> None:
        self.max_entries = max_entries
        self.eviction_ms = eviction_ms
        self.sessions: dict[int, FetchSession] = {}  # least recently used first

    def __len__(self) -> int:
        return len(self.sessions)

    def get(self, session_id: int) -> FetchSession | None:
        return self.sessions.get(session_id)

    def touch(self, session: FetchSession, now_ms: int) -> None:
        session.last_used_ms = now_ms
        self.sessions.pop(session.id, None)
        self.sessions[session.id] = session

    def remove(self, session_id: int) -> FetchSession | None:
        return self.sessions.pop(session_id, None)

    def create(self, privileged: bool, partitions: dict[PartitionKey, CachedPartition], now_ms: int) -> int:
        """A new session's id, or INVALID_SESSION_ID when there is no room for it."""
        if self.max_entries <= 0 or (len(self.sessions) >= self.max_entries and not self._evict(privileged, now_ms)):
            return INVALID_SESSION_ID
        session_id = random.randint(1, 2**31 - 1)
        while session_id in self.sessions:
            session_id = random.randint(1, 2**31 - 1)
        self.sessions[session_id] = FetchSession(session_id, privileged, partitions, now_ms, now_ms)
        return session_id

    def _evict(self, privileged: bool, now_ms: int) -> bool:
        victim = next((s for s in self.sessions.values() if now_ms - s.last_used_ms > self.eviction_ms), None)
        if victim is None and privileged:
            victim = next((s for s in self.sessions.values() if not s.privileged), None)
        if victim is None:
            return False
        del self.sessions[victim.id]
        return True
