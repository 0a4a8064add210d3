from __future__ import annotations

import pytest

from kbroker.storage.log_config import LONG_MAX, TOPIC_CONFIG_DEFAULTS, LogConfig
from protocol.errors import ErrorCode, KafkaError


def test_defaults_are_kafkas_except_two_week_retention() -> None:
    config = LogConfig()
    assert config.segment_bytes == 1073741824
    assert config.segment_ms == 604800000
    assert config.retention_ms == 1209600000
    assert config.retention_bytes == -1
    assert config.cleanup_policy == ("delete",)
    assert config.max_message_bytes == 1048588
    assert config.message_timestamp_after_max_ms == 3600000
    assert config.message_timestamp_before_max_ms == LONG_MAX
    assert config.flush_messages == LONG_MAX and config.flush_ms == LONG_MAX
    assert config.file_delete_delay_ms == 60000
    assert TOPIC_CONFIG_DEFAULTS["retention.ms"] == "1209600000"
    assert TOPIC_CONFIG_DEFAULTS["cleanup.policy"] == "delete"
    assert TOPIC_CONFIG_DEFAULTS["compression.type"] == "producer"
    assert TOPIC_CONFIG_DEFAULTS["unclean.leader.election.enable"] == "false"


def test_from_properties_parses_and_round_trips() -> None:
    config = LogConfig.from_properties({
        "cleanup.policy": "compact, delete",
        "retention.ms": "-1",
        "segment.bytes": " 2048 ",
        "min.cleanable.dirty.ratio": "0.25",
        "preallocate": "TRUE",
        "message.timestamp.type": "LogAppendTime",
    })
    assert config.cleanup_policy == ("compact", "delete") and config.compact and config.delete
    assert config.retention_ms == -1
    assert config.segment_bytes == 2048
    assert config.min_cleanable_dirty_ratio == 0.25
    assert config.preallocate is True
    assert config.log_append_time
    assert LogConfig.from_properties(config.to_properties()) == config


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("segment.bytes", "abc"),
        ("segment.bytes", "13"),
        ("segment.ms", "0"),
        ("retention.ms", "-2"),
        ("cleanup.policy", "compact,forever"),
        ("min.cleanable.dirty.ratio", "1.5"),
        ("compression.type", "brotli"),
        ("message.timestamp.type", "createtime"),
        ("unclean.leader.election.enable", "yes"),
        ("min.insync.replicas", "0"),
        ("no.such.config", "1"),
    ],
)
def test_invalid_values_raise_invalid_config(name: str, value: str) -> None:
    with pytest.raises(KafkaError) as caught:
        LogConfig.from_properties({name: value})
    assert caught.value.code == ErrorCode.INVALID_CONFIG
    assert name in str(caught.value)


def test_min_compaction_lag_above_max_is_rejected() -> None:
    with pytest.raises(KafkaError) as caught:
        LogConfig.from_properties({"min.compaction.lag.ms": "10", "max.compaction.lag.ms": "5"})
    assert caught.value.code == ErrorCode.INVALID_CONFIG


def test_delay_configs_default_and_validate() -> None:
    config = LogConfig()
    assert (config.delivery_delay_ms, config.delay_max_ms, config.delay_tick_ms) == (0, 3456000000, 100)
    assert TOPIC_CONFIG_DEFAULTS["delay.max.ms"] == "3456000000"
    parsed = LogConfig.from_properties({"delivery.delay.ms": "5000", "delay.max.ms": "60000", "delay.tick.ms": "10"})
    assert (parsed.delivery_delay_ms, parsed.delay_max_ms, parsed.delay_tick_ms) == (5000, 60000, 10)
    for name, value in [("delivery.delay.ms", "-1"), ("delay.max.ms", "0"), ("delay.tick.ms", "0"),
                        ("delay.tick.ms", "3600001"), ("delivery.delay.ms", "soon")]:
        with pytest.raises(KafkaError) as caught:
            LogConfig.from_properties({name: value})
        assert caught.value.code == ErrorCode.INVALID_CONFIG
    with pytest.raises(KafkaError, match="above delay.max.ms"):
        LogConfig.from_properties({"delivery.delay.ms": "2000", "delay.max.ms": "1000"})
