"""The fetch session cache's room rules, epoch arithmetic and what an incremental answer
includes (the wire behaviour is in tests/integration/test_fetch_sessions.py)."""

from __future__ import annotations

import uuid

from kbroker.cluster.fetch_sessions import (
    INVALID_SESSION_ID,
    CachedPartition,
    FetchSession,
    FetchSessionCache,
    next_epoch,
)
from kbroker.cluster.partition import QUIET
from kbroker.handlers.fetch import _news

KEY = (uuid.UUID(int=0), "t", 0)


def partitions() -> dict[tuple[uuid.UUID, str | None, int], CachedPartition]:
    return {KEY: CachedPartition(0, 1 << 20, -1, -1)}


def test_a_full_cache_makes_room_only_from_idle_sessions_or_for_followers() -> None:
    cache = FetchSessionCache(max_entries=2, eviction_ms=1000)
    first = cache.create(False, partitions(), now_ms=0)
    second = cache.create(False, partitions(), now_ms=500)
    assert INVALID_SESSION_ID not in (first, second) and first != second
    assert cache.create(False, partitions(), now_ms=900) == INVALID_SESSION_ID  # both in use

    follower = cache.create(True, partitions(), now_ms=900)  # a follower may take a consumer's place
    assert follower != INVALID_SESSION_ID and len(cache) == 2
    assert cache.get(first) is None  # the least recently used one went

    assert cache.create(False, partitions(), now_ms=1400) == INVALID_SESSION_ID  # nobody idle for 1 s yet
    cache.touch(cache.get(follower), now_ms=1400)  # type: ignore[arg-type]
    late = cache.create(False, partitions(), now_ms=1600)  # `second` has been idle for 1.1 s
    assert late != INVALID_SESSION_ID and cache.get(second) is None and cache.get(follower) is not None


def test_no_sessions_when_the_cache_has_no_slots() -> None:
    assert FetchSessionCache(max_entries=0).create(True, partitions(), now_ms=0) == INVALID_SESSION_ID


def test_epochs_wrap_to_one() -> None:
    assert next_epoch(0) == 1 and next_epoch(41) == 42 and next_epoch(2**31 - 1) == 1


def test_a_cached_partition_reports_only_news() -> None:
    cached = CachedPartition(0, 1 << 20, -1, -1, high_watermark=5, log_start_offset=0)
    assert not cached.must_respond(0, 5, 0, error=False)
    assert cached.must_respond(0, 6, 0, error=False) and not cached.must_respond(0, 6, 0, error=False)
    assert cached.must_respond(10, 6, 0, error=False)  # records always
    assert cached.must_respond(0, 6, 2, error=False)  # a moved log start
    assert cached.must_respond(0, -1, -1, error=True) and cached.must_respond(0, -1, -1, error=True)
    assert cached.must_respond(0, 6, 2, error=False)  # after an error, the next answer is news too


def test_a_quiet_read_is_no_news_and_leaves_what_was_told() -> None:
    """A follower's session partition the replica manager passed over (QUIET) is left out of the
    incremental answer, and the session still remembers the high watermark it last sent."""
    session = FetchSession(1, True, {KEY: CachedPartition(7, 1 << 20, 1, 0, high_watermark=7, log_start_offset=0)},
                           created_ms=0, last_used_ms=0)
    assert _news(session, [(KEY, "t", QUIET)]) == []
    assert session.partitions[KEY].high_watermark == 7 and session.partitions[KEY].log_start_offset == 0
