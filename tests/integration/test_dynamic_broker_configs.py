"""Dynamic broker configs (KIP-226) on real brokers: cluster-wide defaults and per-broker values
through AlterConfigs and IncrementalAlterConfigs, Kafka's checks and kbroker's refusals, their
effect without a restart, their persistence, Kafka's own kafka-configs.sh, the ZooKeeper
layout and the change reaching every broker, and DescribeConfigs against Apache Kafka 3.9."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from compat_tests.kafka_local import LocalKafka, kafka_home_or_skip, run_tool
from kbroker.client import Client
from kbroker.metadata.local_store import STORE_FILE
from protocol.errors import ErrorCode
from tests.brokers import BrokerProcess
from tests.conftest import create_topic
from tests.rawclient import RawClient
from tests.waiting import wait_until

DESCRIBE_CONFIGS, ALTER_CONFIGS, INCREMENTAL_ALTER_CONFIGS = 32, 33, 44
TOPIC, BROKER = 2, 4
SET, DELETE, APPEND = 0, 1, 2
DYNAMIC_BROKER, DYNAMIC_DEFAULT, STATIC, DEFAULT = 2, 3, 4, 5
INT, LONG = 3, 5


def incremental(bootstrap: str, name: str, *ops: tuple[str, int, str | None],
                validate_only: bool = False) -> tuple[int, str | None]:
    body = {"resources": [{"resource_type": BROKER, "resource_name": name, "configs": [
        {"name": n, "config_operation": op, "value": v} for n, op, v in ops]}], "validate_only": validate_only}
    with RawClient(bootstrap) as client:
        response = client.request(INCREMENTAL_ALTER_CONFIGS, 1, body).responses[0]
    return response.error_code, response.error_message


def legacy_alter(bootstrap: str, name: str, configs: dict[str, str]) -> tuple[int, str | None]:
    body = {"resources": [{"resource_type": BROKER, "resource_name": name, "configs": [
        {"name": n, "value": v} for n, v in configs.items()]}], "validate_only": False}
    with RawClient(bootstrap) as client:
        response = client.request(ALTER_CONFIGS, 2, body).responses[0]
    return response.error_code, response.error_message


def describe(bootstrap: str, name: str, keys: list[str] | None = None, resource_type: int = BROKER) -> dict[str, Any]:
    body = {"resources": [{"resource_type": resource_type, "resource_name": name, "configuration_keys": keys}],
            "include_synonyms": True, "include_documentation": False}
    with RawClient(bootstrap) as client:
        result = client.request(DESCRIBE_CONFIGS, 4, body).results[0]
    assert result.error_code == ErrorCode.NO_ERROR, result.error_message
    return {entry.name: entry for entry in result.configs}


def value_and_source(entry: Any) -> tuple[str | None, int]:
    return entry.value, entry.config_source


def synonyms(entry: Any) -> list[tuple[str, str | None, int]]:
    return [(s.name, s.value, s.source) for s in entry.synonyms]

def produce_one(bootstrap: str, topic: str, size: int) -> str | None:
    """Produce one record of `size` bytes; the error name, or None when it was written."""
    producer = Producer({"bootstrap.servers": bootstrap, "message.max.bytes": 10_000_000, "retries": 0})
    outcome: list[str | None] = []
    producer.produce(topic, b"x" * size, on_delivery=lambda e, _m: outcome.append(e and e.name()))
    producer.flush(30)
    return outcome[0]


def leader_of(brokers: list[BrokerProcess], topic: str) -> int:
    with Client(",".join(b.bootstrap for b in brokers)) as client:
        return client.metadata([topic], refresh=True).topic(topic).partitions[0].leader


# -- takes effect at once ----------------------------------------------------------------------


def test_cluster_default_message_max_bytes_applies_at_once(make_broker) -> None:
    broker = make_broker()
    topic = create_topic(broker.bootstrap, "follows-message-max-bytes")
    assert produce_one(broker.bootstrap, topic, 5000) is None
    assert incremental(broker.bootstrap, "", ("message.max.bytes", SET, "2000")) == (ErrorCode.NO_ERROR, None)
    assert produce_one(broker.bootstrap, topic, 5000) == "MSG_SIZE_TOO_LARGE"
    entry = describe(broker.bootstrap, topic, ["max.message.bytes"], TOPIC)["max.message.bytes"]
    assert value_and_source(entry) == ("2000", DYNAMIC_DEFAULT)
    assert entry.config_type == INT
    # A value for this broker beats the cluster default; deleting it brings the default back.
    assert incremental(broker.bootstrap, "0", ("message.max.bytes", SET, "100000"))[0] == ErrorCode.NO_ERROR
    assert produce_one(broker.bootstrap, topic, 5000) is None
    assert incremental(broker.bootstrap, "0", ("message.max.bytes", DELETE, None))[0] == ErrorCode.NO_ERROR
    assert produce_one(broker.bootstrap, topic, 5000) == "MSG_SIZE_TOO_LARGE"


def test_max_connections_per_ip_applies_to_new_connections_at_once(make_broker) -> None:
    broker = make_broker()
    with RawClient(broker.bootstrap) as first:
        assert incremental(broker.bootstrap, "", ("max.connections.per.ip", SET, "1"))[0] == ErrorCode.NO_ERROR
        second = RawClient(broker.bootstrap)
        try:
            assert second.read_frame() is None  # closed at once: 127.0.0.1 already has one
        finally:
            second.close()
        first.request(DESCRIBE_CONFIGS, 4, {"resources": [], "include_synonyms": False})  # still served


# -- Kafka's checks and kbroker's refusals -------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "config", "value", "code", "message"),
    [
        ("", "num.partitions", "3", ErrorCode.INVALID_REQUEST,
         "Cannot update these configs dynamically: Set(num.partitions)"),
        ("", "advertised.listeners", "PLAINTEXT://127.0.0.1:1", ErrorCode.INVALID_REQUEST,
         "Cannot update these configs at default cluster level, broker id must be specified: Set(advertised.listeners)"),
        ("0", "ssl.keystore.location", "/k", ErrorCode.INVALID_REQUEST,
         "These security configs can be dynamically updated only per-listener using the listener prefix: "
         "HashSet(ssl.keystore.location)"),
        ("", "log.retention.ms", "abc", ErrorCode.INVALID_REQUEST,
         "Invalid value abc for configuration log.retention.ms: Not a number of type LONG"),
        ("1", "log.retention.ms", "1", ErrorCode.INVALID_REQUEST, "Unexpected broker id, expected 0, but received 1"),
        ("x", "log.retention.ms", "1", ErrorCode.INVALID_REQUEST, "Node id must be an integer, but it is: x"),
        ("0", "sasl.kerberos.min.time.before.relogin", "61000", ErrorCode.INVALID_CONFIG,
         "security kbroker does not implement"),
        ("0", "ssl.client.auth", "required", ErrorCode.INVALID_CONFIG, "kbroker reads TLS settings at start only"),
        ("0", "advertised.listeners", "PLAINTEXT://127.0.0.1:1", ErrorCode.INVALID_CONFIG,
         "binds its listeners at start"),
    ],
)
def test_refused_updates_answer_as_kafka_or_fail_closed(broker: BrokerProcess, name, config, value, code,
                                                         message) -> None:
    error_code, error_message = incremental(broker.bootstrap, name, (config, SET, value))
    assert error_code == code
    assert message in (error_message or "")
    assert legacy_alter(broker.bootstrap, name, {config: value})[0] == code
    assert config not in describe(broker.bootstrap, "")


def test_list_operations_start_from_kafkas_default(make_broker) -> None:
    broker = make_broker()
    assert incremental(broker.bootstrap, "", ("log.cleanup.policy", APPEND, "compact"))[0] == ErrorCode.NO_ERROR
    assert value_and_source(describe(broker.bootstrap, "")["log.cleanup.policy"]) == (
        "delete,compact", DYNAMIC_DEFAULT)
    assert incremental(broker.bootstrap, "", ("log.retention.ms", APPEND, "1")) == (
        ErrorCode.INVALID_CONFIG, "Config value append is not allowed for config key: log.retention.ms")


# -- stored, reported, kept across a restart ---------------------------------------------------------


def test_settings_kbroker_does_not_use_are_stored_reported_and_survive_restart(make_broker) -> None:
    broker = make_broker()
    topic = create_topic(broker.bootstrap, "follows-broker-value")
    assert incremental(broker.bootstrap, "", ("log.cleaner.threads", SET, "2"), ("num.io.threads", SET, "16"),
                       ("log.retention.ms", SET, "7200000")) == (ErrorCode.NO_ERROR, None)
    assert legacy_alter(broker.bootstrap, "0", {"log.retention.ms": "3600000"}) == (ErrorCode.NO_ERROR, None)

    def check() -> None:
        configs = describe(broker.bootstrap, "0")
        assert value_and_source(configs["log.cleaner.threads"]) == ("2", DYNAMIC_DEFAULT)
        assert synonyms(configs["log.cleaner.threads"]) == [
            ("log.cleaner.threads", "2", DYNAMIC_DEFAULT), ("log.cleaner.threads", "1", DEFAULT)]
        assert value_and_source(configs["num.io.threads"]) == ("16", DYNAMIC_DEFAULT)
        assert not configs["num.io.threads"].read_only
        # Kafka's order: per broker, cluster default, static, default; then the weaker synonyms.
        assert synonyms(configs["log.retention.ms"]) == [
            ("log.retention.ms", "3600000", DYNAMIC_BROKER), ("log.retention.ms", "7200000", DYNAMIC_DEFAULT),
            ("log.retention.hours", "336", DEFAULT)]
        assert configs["log.retention.ms"].config_type == LONG
        assert sorted(describe(broker.bootstrap, "")) == ["log.cleaner.threads", "log.retention.ms", "num.io.threads"]
        entry = describe(broker.bootstrap, topic, ["retention.ms"], TOPIC)["retention.ms"]
        assert value_and_source(entry) == ("3600000", DYNAMIC_BROKER)

    check()
    broker.restart()
    check()


def test_a_stored_security_setting_stops_the_start(make_broker) -> None:
    """Written into the store by another tool: kbroker still never serves with less protection."""
    broker = make_broker()
    assert incremental(broker.bootstrap, "", ("log.cleaner.threads", SET, "2"))[0] == ErrorCode.NO_ERROR
    assert broker.stop() == 0
    store = broker.log_dir / STORE_FILE
    document = json.loads(store.read_text())
    document["broker_configs"] = {"<default>": {"sasl.enabled.mechanisms": "PLAIN"}}
    store.write_text(json.dumps(document))
    with pytest.raises(RuntimeError, match="refusing to start"):
        broker.start()


# -- Kafka's own tool --------------------------------------------------------------------------------


def test_kafka_configs_tool_sets_and_describes_the_cluster_default(make_broker) -> None:
    home = kafka_home_or_skip()
    broker = make_broker()
    server = ["--bootstrap-server", broker.bootstrap, "--entity-type", "brokers"]
    result = run_tool(home, "kafka-configs", *server, "--entity-default", "--alter",
                      "--add-config", "log.cleaner.threads=2,log.retention.ms=7200000")
    assert result.returncode == 0, result.stderr
    result = run_tool(home, "kafka-configs", *server, "--entity-default", "--describe")
    assert result.returncode == 0, result.stderr
    assert "log.cleaner.threads=2 sensitive=false synonyms={DYNAMIC_DEFAULT_BROKER_CONFIG:log.cleaner.threads=2}" \
        in result.stdout
    result = run_tool(home, "kafka-configs", *server, "--entity-name", "0", "--describe", "--all")
    assert result.returncode == 0, result.stderr
    assert "log.retention.ms=7200000 sensitive=false synonyms={DYNAMIC_DEFAULT_BROKER_CONFIG:log.retention.ms=" \
        "7200000, DEFAULT_CONFIG:log.retention.hours=336}" in result.stdout
    result = run_tool(home, "kafka-configs", *server, "--entity-default", "--alter",
                      "--add-config", "num.partitions=3")
    assert result.returncode != 0
    assert "Cannot update these configs dynamically: Set(num.partitions)" in result.stdout + result.stderr


# -- the reference ------------------------------------------------------------------------------------


def test_types_and_flags_match_apache_kafka(make_broker, tmp_path: Path) -> None:
    home = kafka_home_or_skip()
    reference = LocalKafka(home, tmp_path / "kafka").start()
    try:
        theirs = describe(reference.bootstrap, str(reference.node_id))
    finally:
        reference.stop()
    ours = describe(make_broker().bootstrap, "0")
    common = sorted(set(ours) & set(theirs))
    assert len(common) > 100
    differences = [
        (name, (ours[name].config_type, ours[name].read_only, ours[name].is_sensitive),
         (theirs[name].config_type, theirs[name].read_only, theirs[name].is_sensitive))
        for name in common
        if (ours[name].config_type, ours[name].read_only, ours[name].is_sensitive)
        != (theirs[name].config_type, theirs[name].read_only, theirs[name].is_sensitive)
    ]
    assert differences == []


# -- ZooKeeper ----------------------------------------------------------------------------------------


def test_zookeeper_layout_and_every_broker_follows_the_default(tmp_path: Path, zk_connect: str) -> None:
    from kazoo.client import KazooClient

    brokers = [BrokerProcess(tmp_path / f"b{i}", overrides={"broker.id": str(i), "zookeeper.connect": zk_connect})
               for i in range(2)]
    try:
        for broker in brokers:
            broker.start()
        topic = create_topic(brokers[1].bootstrap, "follows-cluster-default")
        assert incremental(brokers[0].bootstrap, "", ("log.retention.ms", SET, "7200000"),
                           ("log.cleaner.threads", SET, "2")) == (ErrorCode.NO_ERROR, None)
        assert incremental(brokers[0].bootstrap, "0", ("message.max.bytes", SET, "2000000")) == (ErrorCode.NO_ERROR, None)

        def follows() -> bool:
            entry = describe(brokers[1].bootstrap, topic, ["retention.ms"], TOPIC)["retention.ms"]
            return value_and_source(entry) == ("7200000", DYNAMIC_DEFAULT)

        wait_until(follows, 20, "broker 1 following the cluster default")
        assert value_and_source(describe(brokers[1].bootstrap, "1")["log.cleaner.threads"]) == ("2", DYNAMIC_DEFAULT)
        # Broker 0's own value stays with broker 0.
        assert value_and_source(describe(brokers[1].bootstrap, "1")["message.max.bytes"]) == ("1048588", DEFAULT)

        # A topic config changed through one broker reaches the leader on the other.
        leader = leader_of(brokers, topic)
        other = brokers[1 - leader]
        assert produce_one(brokers[leader].bootstrap, topic, 5000) is None
        body = {"resources": [{"resource_type": TOPIC, "resource_name": topic, "configs": [
            {"name": "max.message.bytes", "config_operation": SET, "value": "1000"}]}], "validate_only": False}
        with RawClient(other.bootstrap) as client:
            assert client.request(INCREMENTAL_ALTER_CONFIGS, 1, body).responses[0].error_code == ErrorCode.NO_ERROR
        wait_until(lambda: produce_one(brokers[leader].bootstrap, topic, 5000) == "MSG_SIZE_TOO_LARGE", 20,
                   "the leader following the topic's new max.message.bytes")

        host, _, chroot = zk_connect.partition("/")
        zk = KazooClient(hosts=host)
        zk.start()
        try:
            default, _ = zk.get(f"/{chroot}/config/brokers/<default>")
            assert json.loads(default) == {"version": 1, "config": {"log.retention.ms": "7200000",
                                                                    "log.cleaner.threads": "2"}}
            own, _ = zk.get(f"/{chroot}/config/brokers/0")
            assert json.loads(own) == {"version": 1, "config": {"message.max.bytes": "2000000"}}
            changes = zk.get_children(f"/{chroot}/config/changes")
            paths = {json.loads(zk.get(f"/{chroot}/config/changes/{c}")[0])["entity_path"] for c in changes}
            assert {"brokers/<default>", "brokers/0"} <= paths
        finally:
            zk.stop()
    finally:
        for broker in brokers:
            broker.kill()
