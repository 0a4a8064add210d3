"""The broker's cache of pending values: taken once, dropped by truncation, bounded by its budget."""

from __future__ import annotations

from kbroker.delay.pending_cache import ENTRY_OVERHEAD, PendingValueCache, new_owner


def test_a_value_is_taken_once() -> None:
    cache = PendingValueCache()
    owner = new_owner()
    cache.put_all(owner, [(5, b"five"), (7, b"seven")])
    assert cache.take(owner, 5) == b"five"
    assert cache.take(owner, 5) is None
    assert cache.take(new_owner(), 7) is None  # another log's offset 7
    assert len(cache) == 1 and cache.size_bytes == len(b"seven") + ENTRY_OVERHEAD


def test_a_truncation_drops_the_offsets_it_removes_and_a_closed_log_all() -> None:
    cache = PendingValueCache()
    mine, other = new_owner(), new_owner()
    cache.put_all(mine, [(1, b"a"), (5, b"b"), (9, b"c")])
    cache.put_all(other, [(5, b"x")])
    cache.drop(mine, 5)
    assert cache.take(mine, 5) is None and cache.take(mine, 9) is None
    assert cache.take(mine, 1) == b"a" and cache.take(other, 5) == b"x"
    cache.put_all(mine, [(2, b"d")])
    cache.drop(mine)
    assert len(cache) == 0 and cache.size_bytes == 0


def test_the_oldest_entries_go_beyond_the_budget() -> None:
    cache = PendingValueCache(budget_bytes=3 * (ENTRY_OVERHEAD + 10))
    owner = new_owner()
    cache.put_all(owner, [(i, bytes(10)) for i in range(5)])
    assert len(cache) == 3 and cache.size_bytes <= cache.budget_bytes
    assert [cache.take(owner, i) is not None for i in range(5)] == [False, False, True, True, True]
