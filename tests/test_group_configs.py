"""Group config checks (kbroker/cluster/group_configs.py) against Kafka 4.2's GroupConfig rules."""

from __future__ import annotations

import pytest

from kbroker.cluster.group_configs import auto_offset_reset, parse_duration_ms, validate
from kbroker.config import BrokerConfig
from protocol.errors import ErrorCode, KafkaError


def _broker(**settings: str) -> BrokerConfig:
    return BrokerConfig({"log.dirs": "/nonexistent", **settings})


def test_session_timeout_must_exceed_the_heartbeat_interval_of_the_whole_config() -> None:
    broker = _broker(**{"group.share.min.session.timeout.ms": "1000", "group.share.min.heartbeat.interval.ms": "1000"})
    validate({"share.session.timeout.ms": "6000"}, broker)
    # The stored heartbeat interval takes part, as Kafka 4.2 validates the group's whole config.
    with pytest.raises(KafkaError) as refused:
        validate({"share.session.timeout.ms": "6000", "share.heartbeat.interval.ms": "6000"}, broker)
    assert (refused.value.code, refused.value.message) == (
        ErrorCode.INVALID_CONFIG, "share.session.timeout.ms must be greater than share.heartbeat.interval.ms")


def test_bounds_come_from_the_broker() -> None:
    validate({"share.delivery.count.limit": "12"}, _broker(**{"group.share.max.delivery.count.limit": "12"}))
    with pytest.raises(KafkaError, match="must be less than or equal to group.share.max.delivery.count.limit"):
        validate({"share.delivery.count.limit": "12"}, _broker())


@pytest.mark.parametrize(("text", "millis"), [
    ("PT1H", 3_600_000), ("P1D", 86_400_000), ("PT0.5S", 500), ("pt2m", 120_000), ("P1DT2H30M", 95_400_000),
    ("-PT1S", -1000), ("PT", None), ("P", None), ("1H", None), ("P1H", None),
])
def test_iso_durations_as_java_parses_them(text: str, millis: int | None) -> None:
    assert parse_duration_ms(text) == millis


def test_auto_offset_reset_strategies() -> None:
    assert auto_offset_reset("latest") == ("latest", None)
    assert auto_offset_reset("by_duration:PT10S") == ("by_duration", 10_000)
    for bad in ("none", "by_duration:", "by_duration:-PT1S", "Earliest"):
        with pytest.raises(ValueError):
            auto_offset_reset(bad)
