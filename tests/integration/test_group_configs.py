"""Group configs (KIP-848/KIP-932) on real brokers: IncrementalAlterConfigs, AlterConfigs and
DescribeConfigs of GROUP resources with Kafka 4.2's checks and messages, their synonyms and
sources, persistence across a restart, the ZooKeeper layout and every broker following a change,
`kbroker configs --entity-type groups`, and the settings taking effect: a share group's
`share.auto.offset.reset`, its heartbeat interval and a consumer group's.

Kafka 3.9's kafka-configs.sh has no `groups` entity type (group configs came with Kafka 4), so
the wire is exercised with the raw protocol and confluent-kafka's admin client."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer, ShareConsumer
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

from protocol.errors import ErrorCode
from tests.brokers import BrokerProcess
from tests.conftest import create_topic
from tests.rawclient import RawClient
from tests.waiting import wait_until

pytestmark = pytest.mark.timeout(300)

DESCRIBE_CONFIGS, ALTER_CONFIGS, INCREMENTAL_ALTER_CONFIGS = 32, 33, 44
CONSUMER_GROUP_HEARTBEAT, SHARE_GROUP_HEARTBEAT = 68, 76
GROUP = 32
SET, DELETE = 0, 1
STATIC, DEFAULT, GROUP_CONFIG = 4, 5, 8
INT, STRING = 3, 2


def incremental(bootstrap: str, group: str, *ops: tuple[str, int, str | None],
                validate_only: bool = False) -> tuple[int, str | None]:
    body = {"resources": [{"resource_type": GROUP, "resource_name": group, "configs": [
        {"name": n, "config_operation": op, "value": v} for n, op, v in ops]}], "validate_only": validate_only}
    with RawClient(bootstrap) as client:
        response = client.request(INCREMENTAL_ALTER_CONFIGS, 1, body).responses[0]
    return response.error_code, response.error_message


def legacy_alter(bootstrap: str, group: str, configs: dict[str, str]) -> tuple[int, str | None]:
    body = {"resources": [{"resource_type": GROUP, "resource_name": group, "configs": [
        {"name": n, "value": v} for n, v in configs.items()]}], "validate_only": False}
    with RawClient(bootstrap) as client:
        response = client.request(ALTER_CONFIGS, 2, body).responses[0]
    return response.error_code, response.error_message


def describe(bootstrap: str, group: str, keys: list[str] | None = None) -> tuple[int, str | None, dict[str, Any]]:
    body = {"resources": [{"resource_type": GROUP, "resource_name": group, "configuration_keys": keys}],
            "include_synonyms": True, "include_documentation": True}
    with RawClient(bootstrap) as client:
        result = client.request(DESCRIBE_CONFIGS, 4, body).results[0]
    return result.error_code, result.error_message, {entry.name: entry for entry in result.configs}


def configs_of(bootstrap: str, group: str) -> dict[str, Any]:
    code, message, entries = describe(bootstrap, group)
    assert code == ErrorCode.NO_ERROR, message
    return entries


def synonyms(entry: Any) -> list[tuple[str, str | None, int]]:
    return [(s.name, s.value, s.source) for s in entry.synonyms]


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Any:
    process = BrokerProcess(tmp_path_factory.mktemp("group-configs"), overrides={
        "offsets.topic.num.partitions": "1", "group.share.record.lock.duration.ms": "20000"}).start()
    yield process
    process.kill()


def test_set_describe_and_delete_with_sources_and_synonyms(broker: BrokerProcess) -> None:
    group = "described"
    before = configs_of(broker.bootstrap, group)
    # Kafka 4.2's names, and KIP-1191's dead-letter configs.
    assert {"consumer.session.timeout.ms", "consumer.heartbeat.interval.ms", "share.session.timeout.ms",
            "share.heartbeat.interval.ms", "share.record.lock.duration.ms", "share.delivery.count.limit",
            "share.partition.max.record.locks", "share.auto.offset.reset", "share.isolation.level",
            "errors.deadletterqueue.topic.name"} <= set(before)
    lock = before["share.record.lock.duration.ms"]
    # A group without its own value gets the broker's, which server.properties set here.
    assert (lock.value, lock.config_source, lock.config_type, lock.read_only) == ("20000", STATIC, INT, False)
    assert synonyms(lock) == [("group.share.record.lock.duration.ms", "20000", STATIC),
                              ("group.share.record.lock.duration.ms", "30000", DEFAULT)]
    reset = before["share.auto.offset.reset"]
    assert (reset.value, reset.config_source, reset.config_type, synonyms(reset)) == ("latest", DEFAULT, STRING, [])
    assert reset.documentation

    assert incremental(broker.bootstrap, group, ("share.record.lock.duration.ms", SET, "45000"),
                       ("share.auto.offset.reset", SET, "earliest")) == (ErrorCode.NO_ERROR, None)
    after = configs_of(broker.bootstrap, group)
    lock = after["share.record.lock.duration.ms"]
    assert (lock.value, lock.config_source) == ("45000", GROUP_CONFIG)
    assert synonyms(lock)[0] == ("share.record.lock.duration.ms", "45000", GROUP_CONFIG)
    assert (after["share.auto.offset.reset"].value, after["share.auto.offset.reset"].config_source) == \
        ("earliest", GROUP_CONFIG)
    assert configs_of(broker.bootstrap, "other")["share.auto.offset.reset"].value == "latest"

    assert incremental(broker.bootstrap, group, ("share.record.lock.duration.ms", DELETE, None)) == \
        (ErrorCode.NO_ERROR, None)
    after = configs_of(broker.bootstrap, group)
    assert (after["share.record.lock.duration.ms"].value, after["share.record.lock.duration.ms"].config_source) == \
        ("20000", STATIC)
    assert after["share.auto.offset.reset"].value == "earliest"

    # AlterConfigs replaces the whole set.
    assert legacy_alter(broker.bootstrap, group, {"share.isolation.level": "read_committed"}) == \
        (ErrorCode.NO_ERROR, None)
    after = configs_of(broker.bootstrap, group)
    assert after["share.isolation.level"].value == "read_committed"
    assert (after["share.auto.offset.reset"].value, after["share.auto.offset.reset"].config_source) == \
        ("latest", DEFAULT)


@pytest.mark.parametrize(("name", "value", "code", "message"), [
    ("foo", "1", ErrorCode.INVALID_CONFIG, "Unknown group config name: foo"),
    ("share.record.lock.duration.ms", "abc", ErrorCode.INVALID_CONFIG,
     "Invalid value abc for configuration share.record.lock.duration.ms: Not a number of type INT"),
    ("share.record.lock.duration.ms", "500", ErrorCode.INVALID_CONFIG,
     "Invalid value 500 for configuration share.record.lock.duration.ms: Value must be at least 1000"),
    ("share.record.lock.duration.ms", "5000", ErrorCode.INVALID_CONFIG,
     "share.record.lock.duration.ms must be greater than or equal to group.share.min.record.lock.duration.ms"),
    ("share.record.lock.duration.ms", "70000", ErrorCode.INVALID_CONFIG,
     "share.record.lock.duration.ms must be less than or equal to group.share.max.record.lock.duration.ms"),
    ("share.delivery.count.limit", "11", ErrorCode.INVALID_CONFIG,
     "share.delivery.count.limit must be less than or equal to group.share.max.delivery.count.limit"),
    ("consumer.session.timeout.ms", "40000", ErrorCode.INVALID_CONFIG,
     "consumer.session.timeout.ms must be greater than or equal to group.consumer.min.session.timeout.ms"),
    ("share.isolation.level", "serializable", ErrorCode.INVALID_CONFIG,
     "Invalid value serializable for configuration share.isolation.level: String must be one of: read_committed, "
     "read_uncommitted"),
    ("share.auto.offset.reset", "none", ErrorCode.INVALID_CONFIG,
     "Invalid value none for configuration share.auto.offset.reset: Invalid value `none` for configuration "
     "share.auto.offset.reset. The value must be either 'earliest', 'latest' or of the format "
     "'by_duration:<PnDTnHnMn.nS>'."),
    ("share.auto.offset.reset", "by_duration:-PT1H", ErrorCode.INVALID_CONFIG, None),
    ("share.renew.acknowledge.enable", "yes", ErrorCode.INVALID_CONFIG,
     "Invalid value yes for configuration share.renew.acknowledge.enable: Expected value to be either true or false"),
    ("errors.deadletterqueue.topic.name", "__dlq", ErrorCode.INVALID_CONFIG,
     "errors.deadletterqueue.topic.name: DLQ topic name must not start with '__'"),
])
def test_refused_as_kafka_refuses(broker: BrokerProcess, name: str, value: str, code: int,
                                  message: str | None) -> None:
    answer = incremental(broker.bootstrap, "refused", (name, SET, value))
    assert answer[0] == code
    if message is not None:
        assert answer[1] == message
    assert name not in {n for n, e in configs_of(broker.bootstrap, "refused").items()
                        if e.config_source == GROUP_CONFIG}


def test_cross_checks_empty_names_and_accepted_values(broker: BrokerProcess) -> None:
    group = "checked"
    assert incremental(broker.bootstrap, group, ("share.heartbeat.interval.ms", SET, "15000"),
                       ("share.session.timeout.ms", SET, "45000")) == (ErrorCode.NO_ERROR, None)
    code, message = incremental(broker.bootstrap, group, ("share.session.timeout.ms", SET, "15000"))
    assert (code, message) == (ErrorCode.INVALID_CONFIG,
                               "share.session.timeout.ms must be greater than or equal to "
                               "group.share.min.session.timeout.ms")
    for value in ("by_duration:PT1H", "by_duration:P1DT2H30M", "by_duration:PT0.5S", "earliest"):
        assert incremental(broker.bootstrap, group, ("share.auto.offset.reset", SET, value)) == \
            (ErrorCode.NO_ERROR, None), value
    assert incremental(broker.bootstrap, "", ("share.auto.offset.reset", SET, "earliest")) == \
        (ErrorCode.INVALID_REQUEST, "Default group resources are not allowed.")
    assert describe(broker.bootstrap, "")[:2] == (ErrorCode.INVALID_REQUEST, "Group name must not be empty")
    # validate_only changes nothing.
    assert incremental(broker.bootstrap, group, ("share.isolation.level", SET, "read_committed"),
                       validate_only=True) == (ErrorCode.NO_ERROR, None)
    assert configs_of(broker.bootstrap, group)["share.isolation.level"].value == "read_uncommitted"


def test_confluent_admin_client_alters_and_describes_a_group(broker: BrokerProcess) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    resource = ConfigResource(ResourceType.GROUP, "via-librdkafka", incremental_configs=[
        ConfigEntry("share.delivery.count.limit", "3", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([resource])[resource].result(15)
    described = admin.describe_configs([ConfigResource(ResourceType.GROUP, "via-librdkafka")])
    entries = next(iter(described.values())).result(15)
    assert entries["share.delivery.count.limit"].value == "3"


def test_share_group_starts_where_its_reset_config_says(broker: BrokerProcess) -> None:
    """Kafka's default (latest) skips what was produced before the group; earliest does not."""
    topic = create_topic(broker.bootstrap, "reset-earliest")
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(5):
        producer.produce(topic, f"old-{i}".encode())
    assert producer.flush(30) == 0
    group = "starts-at-earliest"
    assert incremental(broker.bootstrap, group, ("share.auto.offset.reset", SET, "earliest")) == \
        (ErrorCode.NO_ERROR, None)
    consumer = ShareConsumer({"bootstrap.servers": broker.bootstrap, "group.id": group})
    consumer.subscribe([topic])
    seen: list[bytes] = []
    try:
        wait_until(lambda: seen.extend(m.value() for m in consumer.poll(0.5) if m.error() is None) or len(seen) >= 5,
                   60, "the records produced before the group existed")
    finally:
        consumer.close()
    assert sorted(seen) == [f"old-{i}".encode() for i in range(5)]


def _share_heartbeat(bootstrap: str, group: str, topic: str) -> Any:
    body = {"group_id": group, "member_id": uuid.uuid4().hex[:22], "member_epoch": 0, "rack_id": None,
            "subscribed_topic_names": [topic]}
    with RawClient(bootstrap) as client:
        return client.request(SHARE_GROUP_HEARTBEAT, 1, body)


def _consumer_heartbeat(bootstrap: str, group: str, topic: str) -> Any:
    body = {"group_id": group, "member_id": uuid.uuid4().hex[:22], "member_epoch": 0, "instance_id": None,
            "rack_id": None, "rebalance_timeout_ms": 30000, "subscribed_topic_names": [topic],
            "subscribed_topic_regex": None, "server_assignor": None, "topic_partitions": []}
    with RawClient(bootstrap) as client:
        return client.request(CONSUMER_GROUP_HEARTBEAT, 1, body)


def test_heartbeat_intervals_follow_the_group_configs(broker: BrokerProcess) -> None:
    topic = create_topic(broker.bootstrap, "heartbeats")
    assert _share_heartbeat(broker.bootstrap, "share-hb-default", topic).heartbeat_interval_ms == 5000
    assert incremental(broker.bootstrap, "share-hb", ("share.heartbeat.interval.ms", SET, "7000")) == \
        (ErrorCode.NO_ERROR, None)
    answer = _share_heartbeat(broker.bootstrap, "share-hb", topic)
    assert (answer.error_code, answer.heartbeat_interval_ms) == (ErrorCode.NO_ERROR, 7000)

    assert incremental(broker.bootstrap, "consumer-hb", ("consumer.heartbeat.interval.ms", SET, "8000")) == \
        (ErrorCode.NO_ERROR, None)
    answer = _consumer_heartbeat(broker.bootstrap, "consumer-hb", topic)
    assert (answer.error_code, answer.heartbeat_interval_ms) == (ErrorCode.NO_ERROR, 8000)
    assert _consumer_heartbeat(broker.bootstrap, "consumer-hb-default", topic).heartbeat_interval_ms == 5000


def _kbroker(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kbroker.cli.main", *args], capture_output=True, text=True,
                          timeout=60, cwd=Path(__file__).resolve().parents[2])


def test_kbroker_configs_tool_and_persistence(make_broker) -> None:
    broker = make_broker()
    group = ["--bootstrap-server", broker.bootstrap, "--entity-type", "groups", "--entity-name", "tooled"]
    result = _kbroker("configs", *group, "--alter", "--add-config",
                      "share.isolation.level=read_committed,share.delivery.count.limit=4")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "Completed updating config for group tooled."
    result = _kbroker("configs", *group, "--describe")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "Dynamic configs for group tooled are:",
        "  share.delivery.count.limit=4 sensitive=false synonyms={GROUP_CONFIG:share.delivery.count.limit=4, "
        "DEFAULT_CONFIG:group.share.delivery.count.limit=5}",
        "  share.isolation.level=read_committed sensitive=false synonyms={GROUP_CONFIG:share.isolation.level="
        "read_committed}",
    ]
    result = _kbroker("configs", *group, "--alter", "--add-config", "share.delivery.count.limit=50")
    assert result.returncode != 0
    assert "share.delivery.count.limit must be less than or equal to group.share.max.delivery.count.limit" in \
        result.stdout + result.stderr

    assert broker.stop() == 0
    broker.start()
    assert configs_of(broker.bootstrap, "tooled")["share.delivery.count.limit"].value == "4"


def test_zookeeper_layout_and_every_broker_follows(tmp_path: Path, zk_connect: str) -> None:
    from kazoo.client import KazooClient

    brokers = [BrokerProcess(tmp_path / f"b{i}", overrides={"broker.id": str(i), "zookeeper.connect": zk_connect})
               for i in range(2)]
    try:
        for process in brokers:
            process.start()
        group = "zk group/1"
        assert incremental(brokers[0].bootstrap, group, ("share.auto.offset.reset", SET, "earliest")) == \
            (ErrorCode.NO_ERROR, None)
        wait_until(lambda: configs_of(brokers[1].bootstrap, group)["share.auto.offset.reset"].value == "earliest",
                   20, "broker 1 following the group's config")
        host, _, chroot = zk_connect.partition("/")
        zk = KazooClient(hosts=host)
        zk.start()
        try:
            stored, _ = zk.get(f"/{chroot}/config/groups/zk%20group%2F1")
            assert json.loads(stored) == {"version": 1, "config": {"share.auto.offset.reset": "earliest"}}
            changes = zk.get_children(f"/{chroot}/config/changes")
            paths = {json.loads(zk.get(f"/{chroot}/config/changes/{c}")[0])["entity_path"] for c in changes}
            assert "groups/zk%20group%2F1" in paths
        finally:
            zk.stop()
    finally:
        for process in brokers:
            process.kill()


def _shared_values(broker: BrokerProcess, group: str, topic: str, want: int, timeout_s: float) -> list[bytes]:
    consumer = ShareConsumer({"bootstrap.servers": broker.bootstrap, "group.id": group})
    consumer.subscribe([topic])
    seen: list[bytes] = []
    deadline = time.monotonic() + timeout_s
    try:
        # Polls until `want` records came or the time is up (then what came, maybe nothing).
        while len(seen) < want and time.monotonic() < deadline:
            seen.extend(m.value() for m in consumer.poll(0.5) if m.error() is None)
    finally:
        consumer.close()
    return seen


def test_share_isolation_level_read_committed_waits_for_the_commit(broker: BrokerProcess) -> None:
    topic = create_topic(broker.bootstrap, "isolation")
    for group, level in (("reads-uncommitted", "read_uncommitted"), ("reads-committed", "read_committed")):
        assert incremental(broker.bootstrap, group, ("share.auto.offset.reset", SET, "earliest"),
                           ("share.isolation.level", SET, level)) == (ErrorCode.NO_ERROR, None)
    transactional = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "isolation-txn"})
    transactional.init_transactions(30)
    transactional.begin_transaction()
    transactional.produce(topic, b"pending")
    assert transactional.flush(30) == 0
    # The record is in the log: a read_uncommitted group gets it at once.
    assert _shared_values(broker, "reads-uncommitted", topic, 1, 60) == [b"pending"]
    # read_committed stops at the last stable offset: nothing while the transaction is open.
    assert _shared_values(broker, "reads-committed", topic, 1, 3) == []
    transactional.commit_transaction(30)
    assert _shared_values(broker, "reads-committed", topic, 1, 60) == [b"pending"]
