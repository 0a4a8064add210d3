"""Dead letters of share groups (KIP-1191) with confluent-kafka's ShareConsumer against a real
broker: a REJECTed record and one RELEASEd until the delivery-count limit each appear once in the
group's dead-letter topic, with KIP-1191's `__dlq.errors.*` headers (and the record itself when
the group copies records); a missing topic is created when the broker allows it; a topic that did
not opt in gets nothing."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import AcknowledgeType, Consumer, Producer, ShareConsumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from protocol.errors import ErrorCode
from tests.brokers import BrokerProcess
from tests.rawclient import RawClient
from tests.waiting import wait_until

pytestmark = pytest.mark.timeout(300)

INCREMENTAL_ALTER_CONFIGS, GROUP, SET = 44, 32, 0
ACTIONS = {b"reject-me": AcknowledgeType.REJECT, b"release-me": AcknowledgeType.RELEASE,
           b"accept-me": AcknowledgeType.ACCEPT}


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path_factory.mktemp("dead-letters"), overrides={
        "offsets.topic.num.partitions": "1", "errors.deadletterqueue.auto.create.topics.enable": "true"}).start()
    yield process
    if process.alive:
        assert process.stop() == 0, process.log_tail()


def _create(broker: BrokerProcess, name: str, partitions: int = 1, **configs: str) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1, config=configs)])[name].result(15)


def _group_configs(broker: BrokerProcess, group: str, **configs: str) -> None:
    body = {"resources": [{"resource_type": GROUP, "resource_name": group, "configs": [
        {"name": n.replace("_", "."), "config_operation": SET, "value": v} for n, v in configs.items()]}],
        "validate_only": False}
    with RawClient(broker.bootstrap) as client:
        answer = client.request(INCREMENTAL_ALTER_CONFIGS, 1, body).responses[0]
    assert answer.error_code == ErrorCode.NO_ERROR, answer.error_message


def _produce_jobs(broker: BrokerProcess, topic: str) -> None:
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for value in ACTIONS:
        producer.produce(topic, value, key=b"key-" + value, headers=[("origin", b"test")], timestamp=1_000_000)
    assert producer.flush(30) == 0


def _settle_until_archived(broker: BrokerProcess, group: str, topic: str) -> list[tuple[bytes, int]]:
    """Consume with explicit acknowledgements: REJECT, RELEASE (every delivery), ACCEPT, until the
    released record reached the delivery-count limit (2). The (value, delivery count) seen."""
    consumer = ShareConsumer({"bootstrap.servers": broker.bootstrap, "group.id": group,
                              "share.acknowledgement.mode": "explicit"})
    consumer.subscribe([topic])
    seen: list[tuple[bytes, int]] = []
    try:
        def settle() -> bool:
            messages = [m for m in consumer.poll(0.5) if m.error() is None]
            for message in messages:
                seen.append((message.value(), message.delivery_count()))
                consumer.acknowledge(message, ACTIONS[message.value()])
            if messages:
                consumer.commit_sync(10)
            return (b"release-me", 2) in seen
        wait_until(settle, 90, "the released record delivered up to its limit")
    finally:
        consumer.close()
    return seen


def _dead_letters(broker: BrokerProcess, topic: str, partitions: int, count: int) -> list[Any]:
    """Every record of the topic, once it holds `count` (and not more)."""
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"reader-{uuid.uuid4()}",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    records: list[Any] = []
    try:
        def ends() -> int:
            return sum(consumer.get_watermark_offsets(TopicPartition(topic, p), 5)[1] for p in range(partitions))
        wait_until(lambda: ends() >= count, 60, f"{count} dead letters in {topic}")
        wait_until(lambda: records.extend(m for m in consumer.consume(10, 0.5) if m.error() is None)
                   or len(records) >= count, 30, "reading the dead letters")
        assert ends() == count
    finally:
        consumer.close()
    return records


def _headers(record: Any) -> dict[str, bytes]:
    return dict(record.headers() or [])


def test_rejected_and_exhausted_records_reach_the_dead_letter_topic_once(broker: BrokerProcess) -> None:
    _create(broker, "jobs")
    _create(broker, "dlq.jobs", **{"errors.deadletterqueue.group.enable": "true"})
    _group_configs(broker, "workers", share_auto_offset_reset="earliest", share_delivery_count_limit="2",
                   errors_deadletterqueue_topic_name="dlq.jobs", errors_deadletterqueue_copy_record_enable="true")
    _produce_jobs(broker, "jobs")
    seen = _settle_until_archived(broker, "workers", "jobs")
    assert sorted(seen) == [(b"accept-me", 1), (b"reject-me", 1), (b"release-me", 1), (b"release-me", 2)]

    letters = sorted(_dead_letters(broker, "dlq.jobs", 1, 2), key=lambda r: r.value())
    assert [(r.key(), r.value()) for r in letters] == [(b"key-reject-me", b"reject-me"),
                                                       (b"key-release-me", b"release-me")]
    rejected, exhausted = (_headers(r) for r in letters)
    assert rejected == {"origin": b"test", "__dlq.errors.topic": b"jobs", "__dlq.errors.partition": b"0",
                        "__dlq.errors.offset": b"0", "__dlq.errors.group": b"workers",
                        "__dlq.errors.delivery.count": b"1", "__dlq.errors.message": b"Offset rejected by client."}
    assert exhausted == {"origin": b"test", "__dlq.errors.topic": b"jobs", "__dlq.errors.partition": b"0",
                         "__dlq.errors.offset": b"1", "__dlq.errors.group": b"workers",
                         "__dlq.errors.delivery.count": b"2",
                         "__dlq.errors.message": b"Offset delivery count exceeded the threshold."}
    # Written now, not with the source's timestamp: retention counts from the dead letter's writing.
    assert all(r.timestamp()[1] > 1_000_000 for r in letters)


def test_a_missing_topic_is_created_and_records_are_not_copied_by_default(broker: BrokerProcess) -> None:
    _create(broker, "tasks", partitions=3)
    _group_configs(broker, "pointers", share_auto_offset_reset="earliest", share_delivery_count_limit="2",
                   errors_deadletterqueue_topic_name="dlq.created")
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for value in ACTIONS:
        producer.produce("tasks", value, partition=2)
    assert producer.flush(30) == 0
    _settle_until_archived(broker, "pointers", "tasks")

    letters = _dead_letters(broker, "dlq.created", 1, 2)
    assert {(r.key(), r.value()) for r in letters} == {(None, None)}
    assert sorted(_headers(r)["__dlq.errors.offset"] for r in letters) == [b"0", b"1"]
    assert {_headers(r)["__dlq.errors.partition"] for r in letters} == {b"2"}
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    from confluent_kafka.admin import ConfigResource, ResourceType
    resource = ConfigResource(ResourceType.TOPIC, "dlq.created")
    configs = admin.describe_configs([resource])[resource].result(15)
    assert configs["errors.deadletterqueue.group.enable"].value == "true"


def test_a_topic_that_did_not_opt_in_gets_nothing(broker: BrokerProcess) -> None:
    _create(broker, "chores")
    _create(broker, "dlq.plain")
    _group_configs(broker, "refused", share_auto_offset_reset="earliest", share_delivery_count_limit="2",
                   errors_deadletterqueue_topic_name="dlq.plain")
    _produce_jobs(broker, "chores")
    _settle_until_archived(broker, "refused", "chores")
    wait_until(lambda: "DLQ is not enabled on configured DLQ topic for share group: refused, topic: dlq.plain."
               in broker.log_text(), 30, "the dead letters refused")
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "nobody"})
    try:
        assert consumer.get_watermark_offsets(TopicPartition("dlq.plain", 0), 5) == (0, 0)
    finally:
        consumer.close()


def test_dead_letters_reach_a_partition_led_by_another_broker(tmp_path: Any, zk_connect: str) -> None:
    brokers = [BrokerProcess(tmp_path / f"b{i}", overrides={
        "broker.id": str(i), "zookeeper.connect": zk_connect, "offsets.topic.num.partitions": "1",
        "offsets.topic.replication.factor": "1",
        # Two brokers: the share-state topic's default (3 replicas) cannot be placed, as in Kafka.
        "share.coordinator.state.topic.replication.factor": "1", "share.coordinator.state.topic.min.isr": "1",
        "share.coordinator.state.topic.num.partitions": "1"}) for i in range(2)]
    try:
        for process in brokers:
            process.start()
        # The source partition led by broker 0, the dead-letter partition by broker 1.
        _create_placed(brokers[0], "jobs", 0)
        _create_placed(brokers[0], "dlq.jobs", 1, {"errors.deadletterqueue.group.enable": "true"})
        _group_configs(brokers[0], "workers", share_auto_offset_reset="earliest", share_delivery_count_limit="2",
                       errors_deadletterqueue_topic_name="dlq.jobs")
        wait_until(lambda: _group_config_seen(brokers[0], "workers"), 20, "the group's configs on broker 0")
        _produce_jobs(brokers[0], "jobs")
        _settle_until_archived(brokers[0], "workers", "jobs")
        letters = _dead_letters(brokers[1], "dlq.jobs", 1, 2)
        assert sorted(_headers(r)["__dlq.errors.message"] for r in letters) == [
            b"Offset delivery count exceeded the threshold.", b"Offset rejected by client."]
    finally:
        for process in brokers:
            process.kill()


def _group_config_seen(broker: BrokerProcess, group: str) -> bool:
    body = {"resources": [{"resource_type": GROUP, "resource_name": group,
                           "configuration_keys": ["errors.deadletterqueue.topic.name"]}],
            "include_synonyms": False, "include_documentation": False}
    with RawClient(broker.bootstrap) as client:
        result = client.request(32, 4, body).results[0]
    return [c.value for c in result.configs] == ["dlq.jobs"]


def _create_placed(broker: BrokerProcess, name: str, replica: int, configs: dict[str, str] | None = None) -> None:
    body = {"topics": [{"name": name, "num_partitions": -1, "replication_factor": -1,
                        "assignments": [{"partition_index": 0, "broker_ids": [replica]}],
                        "configs": [{"name": k, "value": v} for k, v in (configs or {}).items()]}],
            "timeout_ms": 15000, "validate_only": False}
    with RawClient(broker.bootstrap) as client:
        result = client.request(19, 5, body).topics[0]
    assert result.error_code == ErrorCode.NO_ERROR, result.error_message
