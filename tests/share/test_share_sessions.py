"""Share sessions (kbroker/share/share_sessions.py): epochs and errors as Kafka's ShareFetch and
ShareAcknowledge give them."""

from __future__ import annotations

import pytest

from kbroker.share.share_sessions import MAX_EPOCH, ShareSessionCache, next_epoch
from protocol.errors import ErrorCode, KafkaError


def _error(call: object, *args: object) -> ErrorCode:
    with pytest.raises(KafkaError) as raised:
        call(*args)  # type: ignore[operator]
    return raised.value.code


def test_a_session_opens_moves_on_and_changes_its_partitions() -> None:
    cache: ShareSessionCache[tuple[str, int]] = ShareSessionCache()
    session = cache.for_fetch("g", "m", 0, [("t", 0), ("t", 1)], [], has_acknowledgements=False, now_ms=1)
    assert (session.epoch, list(session.partitions)) == (1, [("t", 0), ("t", 1)])
    session = cache.for_fetch("g", "m", 1, [("u", 0)], [("t", 0)], has_acknowledgements=True, now_ms=2)
    assert (session.epoch, list(session.partitions)) == (2, [("t", 1), ("u", 0)])
    assert cache.for_acknowledge("g", "m", 2, now_ms=3).epoch == 3
    # The final epoch finds the session and leaves closing to the caller.
    assert cache.for_fetch("g", "m", -1, [], [], has_acknowledgements=True, now_ms=4) is session
    assert cache.close("g", "m") is session
    assert cache.get("g", "m") is None


def test_epoch_errors() -> None:
    cache: ShareSessionCache[str] = ShareSessionCache()
    assert _error(cache.for_fetch, "g", "m", 1, [], [], False, 0) == ErrorCode.SHARE_SESSION_NOT_FOUND
    assert _error(cache.for_fetch, "g", "m", -1, [], [], False, 0) == ErrorCode.SHARE_SESSION_NOT_FOUND
    assert _error(cache.for_acknowledge, "g", "m", 1, 0) == ErrorCode.SHARE_SESSION_NOT_FOUND
    cache.for_fetch("g", "m", 0, ["p"], [], False, 0)
    assert _error(cache.for_fetch, "g", "m", 5, [], [], False, 0) == ErrorCode.INVALID_SHARE_SESSION_EPOCH
    assert _error(cache.for_acknowledge, "g", "m", 0, 0) == ErrorCode.INVALID_SHARE_SESSION_EPOCH
    # A new session cannot acknowledge, a final fetch cannot fetch.
    assert _error(cache.for_fetch, "g", "m", 0, ["p"], [], True, 0) == ErrorCode.INVALID_REQUEST
    assert _error(cache.for_fetch, "g", "m", -1, ["p"], [], False, 0) == ErrorCode.INVALID_REQUEST
    # Another member's session is another session.
    assert _error(cache.for_fetch, "g", "other", 1, [], [], False, 0) == ErrorCode.SHARE_SESSION_NOT_FOUND


def test_opening_again_replaces_and_the_cache_is_bounded() -> None:
    cache: ShareSessionCache[str] = ShareSessionCache(max_sessions=2)
    cache.for_fetch("g", "a", 0, ["p"], [], False, 0)
    cache.for_fetch("g", "a", 1, [], [], False, 0)
    assert cache.for_fetch("g", "a", 0, ["q"], [], False, 0).epoch == 1  # replaced, numbered afresh
    cache.for_fetch("g", "b", 0, ["p"], [], False, 0)
    assert _error(cache.for_fetch, "g", "c", 0, ["p"], [], False, 0) == ErrorCode.SHARE_SESSION_LIMIT_REACHED
    # A member that has a session may always open it again.
    assert cache.for_fetch("g", "b", 0, ["p"], [], False, 0).epoch == 1
    assert len(cache) == 2


def test_epochs_wrap_past_the_largest_to_one() -> None:
    assert next_epoch(1) == 2
    assert next_epoch(MAX_EPOCH) == 1


def test_whether_any_session_of_a_group_reads_a_partition() -> None:
    """Broker.end_share_session lets go of the share partitions no session reads any more."""
    cache: ShareSessionCache[str] = ShareSessionCache()
    cache.for_fetch("g", "m1", 0, ["p0", "p1"], [], False, 0)
    cache.for_fetch("g", "m2", 0, ["p1"], [], False, 0)
    cache.for_fetch("other", "m3", 0, ["p2"], [], False, 0)
    assert cache.reads("g", "p1") and cache.reads("g", "p0")
    assert not cache.reads("g", "p2")  # another group's
    cache.close("g", "m1")
    assert cache.reads("g", "p1") and not cache.reads("g", "p0")
