"""The fetch session cache's room rules and epoch arithmetic (the wire behaviour is in
tests/integration/test_fetch_sessions.py)."""

from __future__ import annotations

import uuid

from kbroker.cluster.fetch_sessions import INVALID_SESSION_ID, CachedPartition, FetchSessionCache, next_epoch

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
