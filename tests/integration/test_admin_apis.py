"""Admin APIs through real admin clients (confluent-kafka, kafka-python) and, for exact
edge cases, on the wire: configs, partitions, records, cluster, log dirs, leader epochs."""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    ResourceType,
)
from kafka.admin import KafkaAdminClient

from protocol.errors import ErrorCode
from tests.brokers import BrokerProcess
from tests.conftest import create_topic
from tests.rawclient import RawClient

METADATA, DELETE_RECORDS, OFFSET_FOR_LEADER_EPOCH, DESCRIBE_CONFIGS, ALTER_CONFIGS = 3, 21, 23, 32, 33
CREATE_PARTITIONS, INCREMENTAL_ALTER_CONFIGS, DESCRIBE_CLUSTER, DESCRIBE_TOPIC_PARTITIONS = 37, 44, 60, 75
TOPIC, BROKER, BROKER_LOGGER = 2, 4, 8
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3


def admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap})


def topic_configs(bootstrap: str, topic: str) -> dict[str, ConfigEntry]:
    client = admin(bootstrap)  # the client must outlive its futures
    futures = client.describe_configs([ConfigResource(ResourceType.TOPIC, topic)])
    return next(iter(futures.values())).result(timeout=15)


def incremental(bootstrap: str, resource_type: ResourceType, name: str, ops: list[tuple[str, str | None, object]],
                validate_only: bool = False) -> None:
    entries = [ConfigEntry(key, value, incremental_operation=op) for key, value, op in ops]
    resource = ConfigResource(resource_type, name, incremental_configs=entries)
    client = admin(bootstrap)
    futures = client.incremental_alter_configs([resource], validate_only=validate_only)
    next(iter(futures.values())).result(timeout=15)


def kafka_error(excinfo: pytest.ExceptionInfo[KafkaException]) -> int:
    return excinfo.value.args[0].code()


def produce(bootstrap: str, topic: str, count: int, partition: int = 0) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    errors: list[object] = []
    for i in range(count):
        producer.produce(topic, b"v%d" % i, partition=partition, on_delivery=lambda e, _m: e and errors.append(e))
    assert producer.flush(30) == 0
    assert errors == []


# -- DescribeConfigs / AlterConfigs / IncrementalAlterConfigs -------------------------------------


def test_describe_topic_configs_reports_overrides_and_sources(broker: BrokerProcess, new_topic) -> None:
    topic = new_topic(configs={"retention.ms": "3600000"})
    configs = topic_configs(broker.bootstrap, topic)
    assert configs["retention.ms"].value == "3600000"
    assert configs["retention.ms"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert configs["cleanup.policy"].value == "delete"
    assert configs["cleanup.policy"].source == ConfigSource.DEFAULT_CONFIG.value
    assert configs["segment.bytes"].value == "1073741824"


def test_describe_configs_synonyms_and_key_filter_on_the_wire(broker: BrokerProcess, new_topic) -> None:
    topic = new_topic(configs={"retention.ms": "3600000"})
    body = {"resources": [{"resource_type": TOPIC, "resource_name": topic, "configuration_keys": ["retention.ms"]}],
            "include_synonyms": True, "include_documentation": False}
    with RawClient(broker.bootstrap) as client:
        result = client.request(DESCRIBE_CONFIGS, 4, body).results[0]
    assert result.error_code == ErrorCode.NO_ERROR
    assert [c.name for c in result.configs] == ["retention.ms"]
    synonyms = [(s.name, s.value) for s in result.configs[0].synonyms]
    # As Kafka's ConfigHelper: the override, then the settings of log.retention.ms and its weaker
    # synonyms; log.retention.hours alone is not listed (nothing sets log.retention.ms itself).
    assert synonyms == [("retention.ms", "3600000")]


def test_describe_configs_errors(broker: BrokerProcess) -> None:
    resources = [
        {"resource_type": TOPIC, "resource_name": "no-such-topic", "configuration_keys": None},
        {"resource_type": TOPIC, "resource_name": "bad/name", "configuration_keys": None},
        {"resource_type": BROKER, "resource_name": "42", "configuration_keys": None},
        {"resource_type": 99, "resource_name": "x", "configuration_keys": None},
    ]
    with RawClient(broker.bootstrap) as client:
        results = client.request(DESCRIBE_CONFIGS, 4, {"resources": resources}).results
    assert [r.error_code for r in results] == [
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.INVALID_TOPIC, ErrorCode.INVALID_REQUEST,
        ErrorCode.INVALID_REQUEST,
    ]


def test_describe_broker_configs(broker: BrokerProcess) -> None:
    client = admin(broker.bootstrap)
    futures = client.describe_configs([ConfigResource(ResourceType.BROKER, "0")])
    configs = next(iter(futures.values())).result(timeout=15)
    assert configs["broker.id"].value == "0"
    assert configs["broker.id"].is_read_only
    assert configs["log.dirs"].source == ConfigSource.STATIC_BROKER_CONFIG.value
    assert configs["log.retention.hours"].value == "336"


def test_incremental_alter_topic_configs(broker: BrokerProcess, new_topic) -> None:
    topic = new_topic()
    incremental(broker.bootstrap, ResourceType.TOPIC, topic, [
        ("retention.ms", "60000", AlterConfigOpType.SET),
        ("cleanup.policy", "compact", AlterConfigOpType.APPEND),
    ])
    configs = topic_configs(broker.bootstrap, topic)
    assert configs["retention.ms"].value == "60000"
    assert configs["cleanup.policy"].value == "delete,compact"

    incremental(broker.bootstrap, ResourceType.TOPIC, topic, [
        ("retention.ms", None, AlterConfigOpType.DELETE),
        ("cleanup.policy", "delete", AlterConfigOpType.SUBTRACT),
    ])
    configs = topic_configs(broker.bootstrap, topic)
    assert (configs["retention.ms"].value, configs["retention.ms"].source) == (
        str(14 * 86_400_000), ConfigSource.DEFAULT_CONFIG.value
    )
    assert configs["cleanup.policy"].value == "compact"

    incremental(broker.bootstrap, ResourceType.TOPIC, topic, [("segment.ms", "1000", AlterConfigOpType.SET)],
                validate_only=True)
    assert topic_configs(broker.bootstrap, topic)["segment.ms"].source != ConfigSource.DYNAMIC_TOPIC_CONFIG.value


@pytest.mark.parametrize(
    ("ops", "expected"),
    [
        ([("retention.ms", "5", AlterConfigOpType.APPEND)], ErrorCode.INVALID_CONFIG),
        ([("no.such.config", "5", AlterConfigOpType.SET)], ErrorCode.INVALID_CONFIG),
        ([("retention.ms", "soon", AlterConfigOpType.SET)], ErrorCode.INVALID_CONFIG),
    ],
)
def test_incremental_alter_rejects_bad_changes(broker: BrokerProcess, new_topic, ops, expected) -> None:
    topic = new_topic()
    with pytest.raises(KafkaException) as excinfo:
        incremental(broker.bootstrap, ResourceType.TOPIC, topic, ops)
    assert kafka_error(excinfo) == expected


def test_incremental_alter_errors_on_the_wire(broker: BrokerProcess, new_topic) -> None:
    topic = new_topic()

    def resource(kind: int, name: str, *configs: tuple[str, int, str | None]) -> dict:
        return {"resource_type": kind, "resource_name": name,
                "configs": [{"name": n, "config_operation": op, "value": v} for n, op, v in configs]}

    resources = [
        resource(TOPIC, "no-such-topic", ("retention.ms", SET, "1")),
        resource(TOPIC, topic, ("retention.ms", SET, "1"), ("retention.ms", DELETE, None)),
        resource(TOPIC, topic, ("retention.ms", 7, "1")),
        resource(BROKER, "0", ("broker.id", SET, "5")),
        resource(BROKER, "3", ("log.retention.ms", SET, "5")),
    ]
    with RawClient(broker.bootstrap) as client:
        responses = client.request(INCREMENTAL_ALTER_CONFIGS, 1, {"resources": resources, "validate_only": False})
    # The topic appears twice, so Kafka refuses both copies; a read-only broker config is an
    # INVALID_REQUEST from Kafka 3.9's brokers (KAFKA-13609).
    assert [r.error_code for r in responses.responses] == [
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.INVALID_REQUEST, ErrorCode.INVALID_REQUEST,
        ErrorCode.INVALID_REQUEST, ErrorCode.INVALID_REQUEST,
    ]


def test_legacy_alter_configs_replaces_all_overrides(broker: BrokerProcess, new_topic) -> None:
    topic = new_topic(configs={"retention.ms": "3600000", "segment.ms": "600000"})
    body = {"resources": [{"resource_type": TOPIC, "resource_name": topic,
                           "configs": [{"name": "max.message.bytes", "value": "2048"}]}], "validate_only": False}
    with RawClient(broker.bootstrap) as client:
        response = client.request(ALTER_CONFIGS, 2, body)
        assert response.responses[0].error_code == ErrorCode.NO_ERROR
        null_value = {"resources": [{"resource_type": TOPIC, "resource_name": topic,
                                     "configs": [{"name": "retention.ms", "value": None}]}], "validate_only": False}
        assert client.request(ALTER_CONFIGS, 2, null_value).responses[0].error_code == ErrorCode.INVALID_REQUEST
    configs = topic_configs(broker.bootstrap, topic)
    overrides = {k for k, v in configs.items() if v.source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value}
    assert overrides == {"max.message.bytes"}


def test_dynamic_broker_default_reaches_topics_and_survives_restart(make_broker) -> None:
    broker = make_broker()
    topic = create_topic(broker.bootstrap, "follows-broker-default")
    # The cluster-wide default entity has an empty name, which confluent-kafka will not send.
    body = {"resources": [{"resource_type": BROKER, "resource_name": "", "configs": [
        {"name": "log.retention.ms", "config_operation": SET, "value": "7200000"}]}], "validate_only": False}
    with RawClient(broker.bootstrap) as client:
        assert client.request(INCREMENTAL_ALTER_CONFIGS, 1, body).responses[0].error_code == ErrorCode.NO_ERROR
    entry = topic_configs(broker.bootstrap, topic)["retention.ms"]
    assert (entry.value, entry.source) == ("7200000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value)
    broker.restart()
    entry = topic_configs(broker.bootstrap, topic)["retention.ms"]
    assert (entry.value, entry.source) == ("7200000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value)


def test_broker_logger_levels(broker: BrokerProcess) -> None:
    describe = {"resources": [{"resource_type": BROKER_LOGGER, "resource_name": "0", "configuration_keys": None}]}
    alter = {"resources": [{"resource_type": BROKER_LOGGER, "resource_name": "0", "configs": [
        {"name": "kbroker", "config_operation": SET, "value": "DEBUG"}]}], "validate_only": False}
    reset = {"resources": [{"resource_type": BROKER_LOGGER, "resource_name": "0", "configs": [
        {"name": "kbroker", "config_operation": DELETE, "value": None}]}], "validate_only": False}
    bad = {"resources": [{"resource_type": BROKER_LOGGER, "resource_name": "0", "configs": [
        {"name": "kbroker", "config_operation": SET, "value": "LOUD"}]}], "validate_only": False}
    with RawClient(broker.bootstrap) as client:
        levels = {c.name: c.value for c in client.request(DESCRIBE_CONFIGS, 4, describe).results[0].configs}
        assert levels["root"] == "INFO"
        assert client.request(INCREMENTAL_ALTER_CONFIGS, 1, alter).responses[0].error_code == ErrorCode.NO_ERROR
        levels = {c.name: c.value for c in client.request(DESCRIBE_CONFIGS, 4, describe).results[0].configs}
        assert levels["kbroker"] == "DEBUG"
        assert client.request(INCREMENTAL_ALTER_CONFIGS, 1, bad).responses[0].error_code == ErrorCode.INVALID_CONFIG
        assert client.request(INCREMENTAL_ALTER_CONFIGS, 1, reset).responses[0].error_code == ErrorCode.NO_ERROR
        levels = {c.name: c.value for c in client.request(DESCRIBE_CONFIGS, 4, describe).results[0].configs}
        assert levels["kbroker"] == "INFO"


# -- CreatePartitions ----------------------------------------------------------------------------


def partition_count(bootstrap: str, topic: str) -> int:
    return len(admin(bootstrap).list_topics(topic, timeout=10).topics[topic].partitions)


def test_create_partitions_grows_topic_and_new_partitions_take_data(broker: BrokerProcess, new_topic) -> None:
    topic = new_topic(partitions=2)
    client = admin(broker.bootstrap)
    futures = client.create_partitions([NewPartitions(topic, 5)], validate_only=True)
    futures[topic].result(timeout=15)
    assert partition_count(broker.bootstrap, topic) == 2
    futures = client.create_partitions([NewPartitions(topic, 5)])
    futures[topic].result(timeout=15)
    assert partition_count(broker.bootstrap, topic) == 5
    produce(broker.bootstrap, topic, 3, partition=4)
    assert watermarks(broker.bootstrap, topic, 4) == (0, 3)


def watermarks(bootstrap: str, topic: str, partition: int) -> tuple[int, int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "watermarks"})
    try:
        return consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
    finally:
        consumer.close()


def test_create_partitions_with_manual_assignment(broker: BrokerProcess, new_topic) -> None:
    topic = new_topic(partitions=1)
    client = admin(broker.bootstrap)
    futures = client.create_partitions([NewPartitions(topic, 3, [[0], [0]])])
    futures[topic].result(timeout=15)
    assert partition_count(broker.bootstrap, topic) == 3


@pytest.mark.parametrize(
    ("count", "assignment", "expected"),
    [
        (1, None, ErrorCode.INVALID_PARTITIONS),  # shrinking
        (3, None, ErrorCode.INVALID_PARTITIONS),  # same count
        (5, [[0]], ErrorCode.INVALID_REPLICATION_ASSIGNMENT),  # too few assignments
        (4, [[7]], ErrorCode.INVALID_REPLICATION_ASSIGNMENT),  # unknown broker
        (4, [[0, 0]], ErrorCode.INVALID_REPLICATION_ASSIGNMENT),  # wrong replication factor
    ],
)
def test_create_partitions_errors(broker: BrokerProcess, new_topic, count, assignment, expected) -> None:
    topic = new_topic(partitions=3)
    assignments = [{"broker_ids": ids} for ids in assignment] if assignment is not None else None
    body = {"topics": [{"name": topic, "count": count, "assignments": assignments}],
            "timeout_ms": 10000, "validate_only": False}
    with RawClient(broker.bootstrap) as client:
        result = client.request(CREATE_PARTITIONS, 3, body).results[0]
    assert result.error_code == expected, result.error_message
    assert partition_count(broker.bootstrap, topic) == 3


def test_create_partitions_unknown_and_duplicate_topics(broker: BrokerProcess, new_topic) -> None:
    topic = new_topic()
    body = {"topics": [{"name": "no-such-topic", "count": 2, "assignments": None},
                       {"name": topic, "count": 2, "assignments": None},
                       {"name": topic, "count": 3, "assignments": None}], "timeout_ms": 10000, "validate_only": False}
    with RawClient(broker.bootstrap) as client:
        results = client.request(CREATE_PARTITIONS, 3, body).results
    assert [r.error_code for r in results] == [
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.INVALID_REQUEST, ErrorCode.INVALID_REQUEST,
    ]


# -- DeleteRecords -------------------------------------------------------------------------------


def test_delete_records_to_high_watermark_and_errors(broker: BrokerProcess, new_topic) -> None:
    topic = new_topic()
    produce(broker.bootstrap, topic, 10)
    body = {"topics": [{"name": topic, "partitions": [{"partition_index": 0, "offset": 11},
                                                        {"partition_index": 5, "offset": 1}]},
                       {"name": "no-such-topic", "partitions": [{"partition_index": 0, "offset": 1}]}],
            "timeout_ms": 10000}
    with RawClient(broker.bootstrap) as client:
        results = client.request(DELETE_RECORDS, 2, body).topics
        assert [(p.error_code, p.low_watermark) for t in results for p in t.partitions] == [
            (ErrorCode.OFFSET_OUT_OF_RANGE, -1),
            (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1),
            (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1),
        ]
        to_hw = {"topics": [{"name": topic, "partitions": [{"partition_index": 0, "offset": -1}]}],
                 "timeout_ms": 10000}
        partition = client.request(DELETE_RECORDS, 2, to_hw).topics[0].partitions[0]
    assert (partition.error_code, partition.low_watermark) == (ErrorCode.NO_ERROR, 10)
    client = admin(broker.bootstrap)
    futures = client.delete_records([TopicPartition(topic, 0, 4)])
    # Deleting below the current log start changes nothing and reports it.
    assert futures[TopicPartition(topic, 0)].result(timeout=15).low_watermark == 10


# -- DescribeCluster / DescribeLogDirs -----------------------------------------------------------


def test_describe_cluster(broker: BrokerProcess) -> None:
    client = admin(broker.bootstrap)
    description = client.describe_cluster(include_authorized_operations=True).result(timeout=15)
    assert [(n.id, n.host, n.port) for n in description.nodes] == [(0, "127.0.0.1", broker.port)]
    assert description.controller.id == 0
    assert description.cluster_id
    assert description.authorized_operations
    kp = KafkaAdminClient(bootstrap_servers=broker.bootstrap).describe_cluster()
    assert kp["cluster_id"] == description.cluster_id


def test_describe_cluster_refuses_controller_endpoint(broker: BrokerProcess) -> None:
    with RawClient(broker.bootstrap) as client:
        response = client.request(DESCRIBE_CLUSTER, 1, {"include_cluster_authorized_operations": False,
                                                        "endpoint_type": 2})
    assert response.error_code == ErrorCode.MISMATCHED_ENDPOINT_TYPE


def test_describe_log_dirs_reports_partition_sizes(broker: BrokerProcess, new_topic) -> None:
    topic = new_topic(partitions=2)
    produce(broker.bootstrap, topic, 50, partition=1)
    client = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    dirs = client.describe_log_dirs({topic: [0, 1]})[0]["log_dirs"]
    assert len(dirs) == 1 and dirs[0]["error_code"] == 0
    assert dirs[0]["log_dir"] == str(broker.log_dir.resolve())
    sizes = {p["partition_index"]: p["partition_size"] for t in dirs[0]["topics"] for p in t["partitions"]}
    assert sizes[0] == 0 and sizes[1] > 50 * 2
    assert [t["name"] for t in dirs[0]["topics"]] == [topic]
    assert dirs[0]["total_bytes"] >= dirs[0]["usable_bytes"] > 0


# -- OffsetForLeaderEpoch ------------------------------------------------------------------------


def test_offset_for_leader_epoch(broker: BrokerProcess, new_topic) -> None:
    topic = new_topic()
    produce(broker.bootstrap, topic, 7)

    def lookup(client: RawClient, partition: int, epoch: int, current: int = -1) -> tuple[int, int, int]:
        body = {"replica_id": -1, "topics": [{"topic": topic, "partitions": [
            {"partition": partition, "current_leader_epoch": current, "leader_epoch": epoch}]}]}
        result = client.request(OFFSET_FOR_LEADER_EPOCH, 4, body).topics[0].partitions[0]
        return result.error_code, result.leader_epoch, result.end_offset

    with RawClient(broker.bootstrap) as client:
        assert lookup(client, 0, 0) == (ErrorCode.NO_ERROR, 0, 7)
        assert lookup(client, 0, 0, current=0) == (ErrorCode.NO_ERROR, 0, 7)
        assert lookup(client, 0, 3) == (ErrorCode.NO_ERROR, -1, -1)  # newer than any epoch here
        assert lookup(client, 0, 0, current=4)[0] == ErrorCode.UNKNOWN_LEADER_EPOCH
        assert lookup(client, 9, 0)[0] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_offset_for_leader_epoch_on_empty_partition(broker: BrokerProcess, new_topic) -> None:
    topic = new_topic()
    body = {"replica_id": -1, "topics": [{"topic": topic, "partitions": [
        {"partition": 0, "current_leader_epoch": 0, "leader_epoch": 0}]}]}
    with RawClient(broker.bootstrap) as client:
        result = client.request(OFFSET_FOR_LEADER_EPOCH, 4, body).topics[0].partitions[0]
    # The leader's epoch starts at its log end, as in Kafka, so a consumer can validate position 0.
    assert (result.error_code, result.leader_epoch, result.end_offset) == (ErrorCode.NO_ERROR, 0, 0)


# -- DescribeTopicPartitions ---------------------------------------------------------------------


def test_describe_topic_partitions_pages_with_a_cursor(broker: BrokerProcess, new_topic) -> None:
    topics = sorted(new_topic(partitions=3) for _ in range(3))
    client = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    seen: list[tuple[str, int]] = []
    cursor = None
    pages = 0
    while True:
        page = client.describe_topic_partitions(topics, response_partition_limit=4, cursor=cursor)
        pages += 1
        seen += [(t["name"], p["partition_index"]) for t in page["topics"] for p in t["partitions"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert seen == [(t, p) for t in topics for p in range(3)]
    assert pages == 3


def test_describe_topic_partitions_errors(broker: BrokerProcess, new_topic) -> None:
    topic = new_topic()
    with RawClient(broker.bootstrap) as client:
        body = {"topics": [{"name": topic}, {"name": "no-such-topic"}, {"name": "bad/name"}],
                "response_partition_limit": 100, "cursor": None}
        by_name = {t.name: t.error_code for t in client.request(DESCRIBE_TOPIC_PARTITIONS, 0, body).topics}
        assert by_name == {topic: ErrorCode.NO_ERROR, "no-such-topic": ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                           "bad/name": ErrorCode.INVALID_TOPIC}
        stray_cursor = {"topics": [{"name": topic}], "response_partition_limit": 100,
                        "cursor": {"topic_name": "elsewhere", "partition_index": 0}}
        codes = [t.error_code for t in client.request(DESCRIBE_TOPIC_PARTITIONS, 0, stray_cursor).topics]
        assert codes == [ErrorCode.INVALID_REQUEST]



# -- Metadata by topic id (v12) ------------------------------------------------------------------


def test_metadata_by_topic_id_as_the_java_admin_client_asks(broker: BrokerProcess, new_topic) -> None:
    """Admin.describeTopics(TopicCollection.ofTopicIds(...)) sends name "" (not null) with each
    id; Kafka then looks up by id only and echoes unknown ids with UNKNOWN_TOPIC_ID."""
    topic = new_topic(partitions=2)
    unknown = uuid.uuid4()
    with RawClient(broker.bootstrap) as client:
        by_name = client.request(METADATA, 12, {"topics": [{"name": topic}], "allow_auto_topic_creation": False})
        topic_id = by_name.topics[0].topic_id
        body = {"topics": [{"name": "", "topic_id": topic_id}, {"name": "", "topic_id": unknown},
                           {"name": "", "topic_id": topic_id}],
                "allow_auto_topic_creation": True}
        topics = client.request(METADATA, 12, body).topics
        # A name next to an id is ignored, as in Kafka: no auto-creation of "ignored-name".
        mixed = client.request(METADATA, 12, {"topics": [{"name": "ignored-name", "topic_id": topic_id}],
                                              "allow_auto_topic_creation": True}).topics
        ignored = client.request(METADATA, 12, {"topics": [{"name": "ignored-name"}],
                                                "allow_auto_topic_creation": False}).topics
    assert [(t.error_code, t.name, t.topic_id, len(t.partitions)) for t in topics] == [
        (ErrorCode.NO_ERROR, topic, topic_id, 2),
        (ErrorCode.UNKNOWN_TOPIC_ID, None, unknown, 0),
    ]
    assert [(t.error_code, t.name) for t in mixed] == [(ErrorCode.NO_ERROR, topic)]
    assert [t.error_code for t in ignored] == [ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]

def test_all_admin_apis_are_advertised(broker: BrokerProcess) -> None:
    with RawClient(broker.bootstrap) as client:
        keys = {k.api_key: (k.min_version, k.max_version) for k in client.request(18, 3, {
            "client_software_name": "t", "client_software_version": "1"}).api_keys}
    expected: dict[int, tuple[int, int]] = {
        DELETE_RECORDS: (0, 2), OFFSET_FOR_LEADER_EPOCH: (0, 4), DESCRIBE_CONFIGS: (0, 4), ALTER_CONFIGS: (0, 2),
        CREATE_PARTITIONS: (0, 3), INCREMENTAL_ALTER_CONFIGS: (0, 1), DESCRIBE_CLUSTER: (0, 1), 35: (0, 4),
        DESCRIBE_TOPIC_PARTITIONS: (0, 0),
    }
    assert {k: keys.get(k) for k in expected} == expected
