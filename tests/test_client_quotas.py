"""The quota arithmetic of kbroker/cluster/client_quotas.py against Kafka's (ClientQuotaManager,
Rate, SampledStat), with time given by hand: no sleeping."""

from __future__ import annotations

import pytest

from kbroker.cluster.client_quotas import (
    DEFAULT,
    UNLIMITED,
    MutationQuotaManager,
    QuotaEntity,
    QuotaManager,
)
from kbroker.rates import Rate, TokenBucket, throttle_time_ms
from protocol.errors import ErrorCode, KafkaError

MB = 1_000_000


def test_rate_spans_at_least_ten_whole_windows() -> None:
    rate = Rate(11, 1000)
    rate.record(5000, 0)
    assert rate.window_size(0) == 10_000  # one early burst is not a huge rate
    assert rate.measure(0) == 500.0
    assert rate.window_size(3500) == 3500 + 7 * 1000  # 3 whole windows, plus the 7 missing of 10
    rate.record(5000, 12_000)  # 12 s later: the first sample aged out (11 windows)
    assert rate.measure(12_000) == 500.0


def test_rate_windows_advance_on_the_grid_of_the_first() -> None:
    rate = Rate(11, 1000)
    rate.record(1, 100)
    rate.record(1, 2350)  # the new sample starts at 2100, not 2350
    # The first sample (from 100) expired at 11_100: 9.9 s since 2100, plus the missing window.
    assert rate.window_size(12_000) == 9900 + 1000
    assert rate.window_size(12_500) == 12_500 - 2100  # 10 whole windows


def test_throttle_time_is_kafkas() -> None:
    # X = (O - T) / T * W
    assert throttle_time_ms(1.5 * MB, 1 * MB, 10_000) == 5000
    assert throttle_time_ms(1.0001 * MB, 1 * MB, 10_000) == 1


def test_record_throttles_only_over_the_quota() -> None:
    manager = QuotaManager("producer_byte_rate")
    manager.update(QuotaEntity(None, "c1"), 1 * MB)
    assert manager.enabled
    assert manager.record("User:ANONYMOUS", "c1", 10 * MB, 0) == 0  # 10 MB over 10 s: exactly the quota
    # One more MB: 11 MB over 10.5 s, (1.0476 - 1) / 1 * 10.5 s = 500 ms.
    assert manager.record("User:ANONYMOUS", "c1", 1 * MB, 500) == 500
    assert manager.record("User:ANONYMOUS", "other", 50 * MB, 500) == 0  # no quota for that client id


def test_unrecord_takes_a_fetch_back() -> None:
    manager = QuotaManager("consumer_byte_rate")
    manager.update(QuotaEntity(None, DEFAULT), 2 * MB)
    assert manager.record("User:ANONYMOUS", "c", 30 * MB, 0) > 0
    manager.unrecord("User:ANONYMOUS", "c", 30 * MB, 0)
    assert manager.record("User:ANONYMOUS", "c", 1 * MB, 0) == 0
    assert manager.max_value_in_window("User:ANONYMOUS", "c") == 20 * MB


PRECEDENCE = [  # Kafka's order, most specific first
    QuotaEntity("alice", "c1"), QuotaEntity("alice", DEFAULT), QuotaEntity("alice", None),
    QuotaEntity(DEFAULT, "c1"), QuotaEntity(DEFAULT, DEFAULT), QuotaEntity(DEFAULT, None),
    QuotaEntity(None, "c1"), QuotaEntity(None, DEFAULT),
]


@pytest.mark.parametrize("level", range(len(PRECEDENCE)))
def test_precedence(level: int) -> None:
    """With quotas at `level` and every less specific level, the one at `level` applies."""
    manager = QuotaManager("producer_byte_rate")
    for value, entity in enumerate(PRECEDENCE[level:], start=1):
        manager.update(entity, float(value * 1000))
    assert manager.quota("User:alice", "c1") == 1000.0
    # Another user and client fall to the defaults below the named levels.
    expected = next((v for v, e in enumerate(PRECEDENCE[level:], start=1) if "alice" not in (e.user, e.client_id)
                     and "c1" not in (e.user, e.client_id)), None)
    other = manager.quota("User:bob", "c2")
    assert other == (UNLIMITED if expected is None else expected * 1000.0)


def test_clients_of_a_user_quota_share_one_rate() -> None:
    manager = QuotaManager("producer_byte_rate")
    manager.update(QuotaEntity("alice", None), 1 * MB)
    assert manager.record("User:alice", "a", 6 * MB, 0) == 0
    assert manager.record("User:alice", "b", 6 * MB, 0) > 0  # together over the user's quota
    assert manager.record("User:bob", "b", 6 * MB, 0) == 0  # no quota


def test_removed_quota_no_longer_throttles_but_stays_enabled() -> None:
    manager = QuotaManager("producer_byte_rate")
    entity = QuotaEntity(None, "c1")
    manager.update(entity, 1000.0)
    manager.update(entity, None)
    assert manager.enabled  # as Kafka: until a restart
    assert manager.record("User:ANONYMOUS", "c1", 50 * MB, 0) == 0


def test_special_characters_are_sanitized_alike() -> None:
    manager = QuotaManager("producer_byte_rate")
    manager.update(QuotaEntity.of_names("carol smith", "app/1"), 1000.0)
    assert manager.quota("User:carol smith", "app/1") == 1000.0
    assert QuotaEntity.of_names("carol smith", "app/1").path == "users/carol%20smith/clients/app%2F1"
    assert QuotaEntity.from_path("users", "carol%20smith/clients/app%2F1") == QuotaEntity.of_names("carol smith", "app/1")
    assert QuotaEntity.from_path("users", "<default>") == QuotaEntity(DEFAULT, None)
    assert QuotaEntity(DEFAULT, DEFAULT).wire() == [("user", None), ("client-id", None)]


def test_request_time_throttle_is_at_most_one_window() -> None:
    # request_percentage: 1 % of a second per second; 500 ms of handling at once is far over it,
    # but Kafka's request quota throttles for at most one quota window.
    manager = QuotaManager("request_percentage", window_num=2, window_size_seconds=1, bounded=True)
    manager.update(QuotaEntity(None, "busy"), 1.0)
    assert manager.record("User:ANONYMOUS", "busy", 50.0, 0) == 1000
    unbounded = QuotaManager("producer_byte_rate", window_num=2, window_size_seconds=1)
    unbounded.update(QuotaEntity(None, "busy"), 1.0)
    assert unbounded.record("User:ANONYMOUS", "busy", 50.0, 0) > 1000


# -- controller mutations: Kafka's TokenBucket and Strict/PermissiveControllerMutationQuota ----------


def test_token_bucket_refills_at_the_quota_up_to_the_burst() -> None:
    bucket = TokenBucket()
    assert bucket.measure(10.0, 20.0, 0) == 20.0  # starts full: samples * window * quota
    bucket.record(26, 10.0, 20.0, 0)
    assert bucket.measure(10.0, 20.0, 0) == -6.0  # a record may take it below zero
    assert bucket.measure(10.0, 20.0, 600) == 0.0  # 10 tokens a second
    assert bucket.measure(10.0, 20.0, 10_000) == 20.0  # never above the burst
    bucket.record(-100, 10.0, 20.0, 10_000)
    assert bucket.measure(10.0, 20.0, 10_000) == 20.0


def _mutations(quota: float = 10.0, window_num: int = 2) -> MutationQuotaManager:
    manager = MutationQuotaManager(window_num, 1)  # burst: window_num seconds of the quota
    manager.update(QuotaEntity(None, "c1"), quota)
    assert manager.enabled
    return manager


def test_strict_refuses_once_the_credits_are_below_zero_not_before() -> None:
    quota = _mutations().new_quota("User:ANONYMOUS", "c1", strict=True)
    for _ in range(4):  # 20 credits: 14, 8, 2, then -4 (the topic that takes them over passes)
        quota.record(6, 0)
    assert quota.throttle_time_ms(0) == 0  # Kafka's strict quota does not throttle that request
    with pytest.raises(KafkaError) as refused:
        quota.record(6, 0)
    assert refused.value.code == ErrorCode.THROTTLING_QUOTA_EXCEEDED
    assert refused.value.message is None  # as Kafka answers it
    assert quota.throttle_time_ms(0) == 400  # 4 credits below zero at 10 a second
    assert quota.throttle_time_ms(150) == 250  # less the time since it was refused
    assert quota.throttle_time_ms(1000) == 0
    # Nothing was taken for the refused topic: at 400 ms the credits are back at zero, enough.
    later = _mutations()
    strict = later.new_quota("User:ANONYMOUS", "c1", strict=True)
    strict.record(24, 0)
    with pytest.raises(KafkaError):
        strict.record(1, 399)
    strict.record(6, 400)


def test_a_new_request_is_refused_at_once_while_the_credits_are_below_zero() -> None:
    manager = _mutations()
    manager.new_quota("User:ANONYMOUS", "c1", strict=True).record(30, 0)  # one request, -10
    quota = manager.new_quota("User:ANONYMOUS", "c1", strict=True)
    with pytest.raises(KafkaError):
        quota.record(1, 200)
    assert quota.throttle_time_ms(200) == 800


def test_permissive_records_everything_and_throttles() -> None:
    quota = _mutations().new_quota("User:ANONYMOUS", "c1", strict=False)
    quota.record(6, 0)
    quota.record(6, 0)
    quota.record(6, 0)
    assert quota.throttle_time_ms(0) == 0  # 2 credits left
    quota.record(6, 0)
    assert quota.throttle_time_ms(0) == 400
    quota.record(6, 100)  # 4 - 1 refilled + 6: 9 below zero
    assert quota.throttle_time_ms(100) == 900
    assert quota.throttle_time_ms(300) == 700


def test_mutation_quota_entities_and_burst() -> None:
    manager = MutationQuotaManager()  # 11 windows of 1 s: a burst of 110 at 10 a second
    manager.update(QuotaEntity(DEFAULT, None), 10.0)
    quota = manager.new_quota("User:alice", "any", strict=False)
    quota.record(110, 0)
    assert quota.throttle_time_ms(0) == 0
    quota.record(1, 0)
    assert quota.throttle_time_ms(0) == 100
    assert quota.entity == ("user", "alice")
    # alice's clients share her bucket; bob has his own.
    with pytest.raises(KafkaError):
        manager.new_quota("User:alice", "other", strict=True).record(1, 0)
    manager.new_quota("User:bob", "any", strict=True).record(110, 0)
    # No quota for this identity: never throttled.
    unlimited = _mutations().new_quota("User:ANONYMOUS", "c2", strict=True)
    for _ in range(100):
        unlimited.record(1000, 0)
    assert unlimited.throttle_time_ms(0) == 0


def test_a_changed_mutation_quota_applies_to_the_credits_held() -> None:
    manager = _mutations(10.0)
    manager.new_quota("User:ANONYMOUS", "c1", strict=False).record(20, 0)  # 0 left
    manager.update(QuotaEntity(None, "c1"), 100.0)  # refills at 100 a second, burst 200
    quota = manager.new_quota("User:ANONYMOUS", "c1", strict=False)
    quota.record(150, 1000)  # 100 refilled in the second
    assert quota.throttle_time_ms(1000) == 500
