"""max.connection.creation.rate's arithmetic (kbroker/server/server.py ConnectionCreationRate):
Kafka's rate over sampled windows, the delay that brings it back to the limit, capped at one
window. Times are given, nothing waits."""

from __future__ import annotations

from kbroker.server.server import ConnectionCreationRate


def test_connections_within_the_limit_wait_for_nothing() -> None:
    limit = ConnectionCreationRate(5, window_num=2, window_s=1)
    assert [limit.record(0) for _ in range(5)] == [0] * 5  # 5 over at least one whole window: 5/s


def test_the_connection_over_the_limit_waits_what_brings_the_rate_back() -> None:
    limit = ConnectionCreationRate(5, window_num=2, window_s=1)
    for _ in range(5):
        limit.record(0)
    assert limit.record(0) == 200  # 6 in one window: (6 - 5) / 5 of the window


def test_the_delay_is_at_most_one_window() -> None:
    limit = ConnectionCreationRate(5, window_num=2, window_s=1)
    delays = [limit.record(0) for _ in range(100)]
    assert max(delays) == 1000


def test_the_rate_recovers_once_the_windows_pass() -> None:
    limit = ConnectionCreationRate(5, window_num=2, window_s=1)
    for _ in range(50):
        limit.record(0)
    assert limit.record(500) > 0
    assert limit.record(2500) == 0  # both windows expired


def test_a_limit_set_later_sees_the_connections_before_it() -> None:
    limit = ConnectionCreationRate(2**31 - 1, window_num=2, window_s=1)
    for _ in range(20):
        assert limit.record(0) == 0
    limit.limit = 5
    assert limit.record(0) == 1000
