"""kbroker's table of broker configs against Kafka 3.9's: types, read-only flags, levels, and the
checks of a dynamic update (no broker needed; tests/integration/test_dynamic_broker_configs.py
compares the same against the reference broker on the wire)."""

from __future__ import annotations

import pytest

from kbroker import dynamic_config
from kbroker.config import BROKER_CONFIG_DEFS, BrokerConfig, is_unhonoured_security_setting
from protocol.errors import ErrorCode, KafkaError

# Kafka 3.9's answers (DescribeConfigs of a 3.9.0 broker): name -> (type, read-only).
KAFKA_ANSWERS = {
    "advertised.listeners": ("STRING", False),
    "log.cleaner.threads": ("INT", False),
    "num.io.threads": ("INT", False),
    "log.retention.ms": ("LONG", False),
    "log.retention.hours": ("INT", True),
    "num.partitions": ("INT", True),
    "message.max.bytes": ("INT", False),
    "max.connections": ("INT", False),
    "log.cleaner.enable": ("BOOLEAN", True),
    "log.cleaner.backoff.ms": ("LONG", False),
    "log.cleanup.policy": ("LIST", False),
    "log.cleaner.min.cleanable.ratio": ("DOUBLE", False),
    "offsets.topic.replication.factor": ("SHORT", True),
    "producer.id.expiration.ms": ("INT", False),
    "queued.max.request.bytes": ("LONG", True),
    "leader.imbalance.check.interval.seconds": ("LONG", True),
    "broker.id": ("INT", True),
}


@pytest.mark.parametrize("name", sorted(KAFKA_ANSWERS))
def test_types_and_read_only_flags_are_kafkas(name: str) -> None:
    kind, read_only = KAFKA_ANSWERS[name]
    assert dynamic_config.config_type(name) == kind
    assert dynamic_config.is_read_only(name) == read_only


def test_every_config_kbroker_knows_has_a_type_and_only_passwords_are_sensitive() -> None:
    for name in BROKER_CONFIG_DEFS:
        kind = dynamic_config.config_type(name)
        assert kind is not None, name
        assert dynamic_config.is_sensitive(name) == (kind == "PASSWORD"), name
    assert dynamic_config.is_sensitive("remote.log.storage.s3.secret.access.key")
    assert dynamic_config.is_sensitive("ssl.keystore.password")
    assert dynamic_config.is_sensitive("some.plugin.setting")  # Kafka cannot tell it is harmless


def test_a_config_definition_is_dynamic_exactly_when_kafkas_is() -> None:
    assert BROKER_CONFIG_DEFS["max.connections"].dynamic
    assert BROKER_CONFIG_DEFS["log.retention.ms"].dynamic
    assert not BROKER_CONFIG_DEFS["log.retention.hours"].dynamic
    assert not BROKER_CONFIG_DEFS["num.partitions"].dynamic


def _check(props: dict[str, str], per_broker: bool = False, current: dict[str, str] | None = None) -> KafkaError:
    with pytest.raises(KafkaError) as excinfo:
        dynamic_config.check_update(props, per_broker, (current or {}).get)
    return excinfo.value


@pytest.mark.parametrize(
    ("props", "per_broker", "code", "message"),
    [
        ({"num.partitions": "3"}, True, ErrorCode.INVALID_REQUEST,
         "Cannot update these configs dynamically: Set(num.partitions)"),
        ({"advertised.listeners": "PLAINTEXT://h:1"}, False, ErrorCode.INVALID_REQUEST,
         "Cannot update these configs at default cluster level, broker id must be specified: "
         "Set(advertised.listeners)"),
        ({"ssl.keystore.location": "/k"}, True, ErrorCode.INVALID_REQUEST,
         "These security configs can be dynamically updated only per-listener using the listener prefix: "
         "HashSet(ssl.keystore.location)"),
        ({"log.retention.ms": "soon"}, False, ErrorCode.INVALID_REQUEST,
         "Invalid value soon for configuration log.retention.ms: Not a number of type LONG"),
        ({"message.max.bytes": "3000000000"}, False, ErrorCode.INVALID_REQUEST,
         "Invalid value 3000000000 for configuration message.max.bytes: Not a number of type INT"),
        ({"log.segment.bytes": "10"}, False, ErrorCode.INVALID_REQUEST,
         "Invalid value 10 for configuration log.segment.bytes: Value must be at least 14"),
        ({"log.message.timestamp.type": "Foo"}, False, ErrorCode.INVALID_REQUEST,
         "Invalid value Foo for configuration log.message.timestamp.type: String must be one of: "
         "CreateTime, LogAppendTime"),
        ({"log.cleanup.policy": "delete,foo"}, False, ErrorCode.INVALID_REQUEST,
         "String must be one of: compact, delete"),
        ({"sasl.kerberos.min.time.before.relogin": "61000"}, True, ErrorCode.INVALID_CONFIG,
         "security kbroker does not implement"),
        ({"listener.name.plaintext.ssl.client.auth": "required"}, True, ErrorCode.INVALID_CONFIG,
         "kbroker reads TLS settings at start only"),
        ({"listener.name.ssl.ssl.keystore.location": "/k.pem"}, True, ErrorCode.INVALID_CONFIG,
         "kbroker reads TLS settings at start only"),
        ({"max.connection.creation.rate": "0"}, False, ErrorCode.INVALID_REQUEST, "Invalid max.connection.creation.rate 0"),
        ({"max.connection.creation.rate": "-1"}, False, ErrorCode.INVALID_REQUEST, "Value must be at least 0"),
        ({"listeners": "PLAINTEXT://127.0.0.1:1"}, True, ErrorCode.INVALID_CONFIG, "binds its listeners at start"),
    ],
)
def test_updates_kafka_or_kbroker_refuses(props, per_broker, code, message) -> None:
    error = _check(props, per_broker)
    assert error.code == code
    assert message in error.message


def test_thread_pools_change_by_at_most_a_factor_of_two() -> None:
    assert "at least half the current value 8" in _check({"num.io.threads": "3"}, current={"num.io.threads": "8"}).message
    assert "double the current value 8" in _check({"num.io.threads": "17"}, current={"num.io.threads": "8"}).message
    dynamic_config.check_update({"num.io.threads": "16"}, False, {"num.io.threads": "8"}.get)
    assert _check({"log.cleaner.threads": "0"}, current={"log.cleaner.threads": "1"}).message == (
        "Log cleaner threads should be at least 1")


def test_kafkas_other_settings_and_custom_names_are_accepted() -> None:
    accepted = {"log.cleaner.threads": "2", "num.io.threads": "8", "log.cleaner.io.max.bytes.per.second": "1e6",
                "metric.reporters": "", "compression.gzip.level": "-1", "my.plugin.setting": "x"}
    dynamic_config.check_update(accepted, False, {"log.cleaner.threads": "1"}.get)
    assert not any(is_unhonoured_security_setting(n, v) for n, v in accepted.items())


def test_synonyms_are_listed_source_by_source_from_the_described_name_on() -> None:
    config = BrokerConfig({"log.retention.hours": "24"})
    config.apply_dynamic({"log.retention.ms": "7200000"}, {"log.retention.minutes": "30"})
    # Kafka's ConfigHelper: per-broker, cluster default, static, default; weaker names after stronger.
    assert dynamic_config.synonym_chain("log.retention.ms", config.layers()) == [
        ("log.retention.ms", "7200000", "dynamic-default"),
        ("log.retention.hours", "24", "static"),
        ("log.retention.hours", "336", "default"),
    ]
    assert dynamic_config.synonym_chain("log.retention.minutes", config.layers())[0] == (
        "log.retention.minutes", "30", "dynamic")
    assert dynamic_config.synonym_chain("log.flush.interval.ms", config.layers()) == []


def test_dynamic_values_win_over_static_ones_for_dynamic_configs_only() -> None:
    config = BrokerConfig({"max.connections": "50", "num.partitions": "2"})
    config.apply_dynamic({"max.connections": "100", "num.partitions": "9"}, {"max.connections": "7"})
    assert config.get("max.connections") == 7
    assert config.get("num.partitions") == 2
    config.apply_dynamic({"max.connections": "100"}, {})
    assert config.get("max.connections") == 100
    config.apply_dynamic({}, {})
    assert config.get("max.connections") == 50
