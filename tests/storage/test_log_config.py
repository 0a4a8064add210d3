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


def test_delayed_delivery_can_be_turned_off_but_not_half_way() -> None:
    assert LogConfig().delayed_delivery_enable
    assert not LogConfig.from_properties({"delayed.delivery.enable": "false"}).delayed_delivery_enable
    for configs in ({"delayed.delivery.enable": "false", "delivery.delay.ms": "10"},
                    {"delayed.delivery.enable": "false", "retry.target.topic": "orders"}):
        with pytest.raises(KafkaError, match="delayed.delivery.enable=true") as caught:
            LogConfig.from_properties(configs)
        assert caught.value.code == ErrorCode.INVALID_CONFIG


def test_retry_configs_default_and_validate() -> None:
    config = LogConfig()
    assert (config.retry_target_topic, config.retry_backoff_ms, config.retry_dead_letter_topic) == \
        ("", (1000, 10000, 60000), "")
    assert not config.is_retry_topic
    assert TOPIC_CONFIG_DEFAULTS["retry.backoff.ms"] == "1000,10000,60000"
    parsed = LogConfig.from_properties({"retry.target.topic": "orders", "retry.backoff.ms": "5, 50",
                                        "retry.dead.letter.topic": "orders.dead"})
    assert parsed.is_retry_topic
    assert (parsed.retry_backoff_ms, parsed.retry_dead_letter_topic) == ((5, 50), "orders.dead")
    for value in ("", "1000,soon", "-1", "1000,-5", " , "):
        with pytest.raises(KafkaError) as caught:
            LogConfig.from_properties({"retry.backoff.ms": value})
        assert caught.value.code == ErrorCode.INVALID_CONFIG, value
    with pytest.raises(KafkaError, match="retry.backoff.ms 5000 is above delay.max.ms 1000"):
        LogConfig.from_properties({"retry.target.topic": "orders", "retry.backoff.ms": "10,5000",
                                   "delay.max.ms": "1000"})
    # Only a retry topic's backoffs count: the default ones do not refuse a short delay.max.ms.
    assert LogConfig.from_properties({"delay.max.ms": "1000"}).delay_max_ms == 1000
    with pytest.raises(KafkaError, match="retry.target.topic is not"):
        LogConfig.from_properties({"retry.dead.letter.topic": "orders.dead"})
