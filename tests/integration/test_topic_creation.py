"""Topic creation is all or nothing: a creation that fails leaves no ghost topic.

Reproduction of the ghost: something on disk stops the broker from creating a partition's log
(here a plain file where the partition's directory must go). The topic used to be saved and
kept in memory anyway: it showed "Leader: none" and every produce to it timed out until a
restart. Now the client gets KAFKA_STORAGE_ERROR and nothing of the topic remains.
"""

from __future__ import annotations

import json

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from kbroker.fsutil import temporary_path
from kbroker.metadata.local_store import STORE_FILE, LocalMetadataStore
from protocol.errors import ErrorCode, KafkaError
from tests.rawclient import RawClient

CREATE_TOPICS, METADATA = 19, 3


def create(client: RawClient, name: str, partitions: int) -> int:
    answer = client.request(CREATE_TOPICS, 5, {"topics": [{"name": name, "num_partitions": partitions,
                                                           "replication_factor": 1, "assignments": [], "configs": []}],
                                               "timeout_ms": 10000, "validate_only": False})
    return answer.topics[0].error_code


def describe(client: RawClient, name: str) -> int:
    answer = client.request(METADATA, 12, {"topics": [{"name": name}], "allow_auto_topic_creation": False})
    return answer.topics[0].error_code


def test_a_failed_creation_leaves_no_ghost_topic(broker) -> None:
    name = "ghost-topic"
    obstacle = broker.log_dir / f"{name}-2"
    obstacle.write_text("not a partition directory")
    with RawClient(broker.bootstrap) as client:
        assert create(client, name, 4) == ErrorCode.KAFKA_STORAGE_ERROR
        assert describe(client, name) == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        # No half-made partitions (those created before the failure wait for deferred deletion).
        assert not [p for p in broker.log_dir.glob(f"{name}-*") if p.is_dir() and not p.name.endswith("-delete")]
        obstacle.unlink()
        assert create(client, name, 4) == ErrorCode.NO_ERROR
    producer = Producer({"bootstrap.servers": broker.bootstrap, "message.timeout.ms": 10000})
    delivered = []
    producer.produce(name, b"after", partition=2, on_delivery=lambda err, msg: delivered.append(err))
    producer.flush(15)
    assert delivered == [None]


def test_the_admin_client_sees_the_failure(broker) -> None:
    name = "ghost-admin"
    (broker.log_dir / f"{name}-0").write_text("x")
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    future = admin.create_topics([NewTopic(name, 1, 1)], operation_timeout=10)[name]
    try:
        future.result(timeout=30)
        raise AssertionError("the creation should have failed")
    except Exception as e:  # confluent_kafka.KafkaException carrying the broker's error
        assert e.args[0].code() == ErrorCode.KAFKA_STORAGE_ERROR
    assert name not in admin.list_topics(timeout=10).topics


def test_a_metadata_change_that_cannot_be_saved_is_undone(tmp_path) -> None:
    store = LocalMetadataStore(tmp_path)
    import uuid

    store.create_topic("kept", uuid.uuid4(), {0: [0]}, {})
    temporary_path(tmp_path / STORE_FILE).mkdir()  # the next save cannot write its temporary file
    try:
        store.create_topic("lost", uuid.uuid4(), {0: [0]}, {})
        raise AssertionError("the save should have failed")
    except KafkaError as e:
        assert e.code == ErrorCode.KAFKA_STORAGE_ERROR
    assert [t.name for t in store.list_topics()] == ["kept"]  # not left in memory only
    assert [t["name"] for t in json.loads((tmp_path / STORE_FILE).read_text())["topics"]] == ["kept"]
