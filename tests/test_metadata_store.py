"""The local metadata store keeps topics and configs across reopen and refuses bad changes."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from kbroker.fsutil import temporary_path
from kbroker.metadata.local_store import STORE_FILE, LocalMetadataStore
from protocol.errors import ErrorCode, KafkaError


def test_topics_and_configs_survive_reopen(tmp_path: Path) -> None:
    store = LocalMetadataStore(tmp_path)
    topic_id = uuid.uuid4()
    store.create_topic("orders", topic_id, {0: [0], 1: [0]}, {"retention.ms": "1000"})
    store.add_partitions("orders", {2: [0]})
    store.set_topic_configs("orders", {"cleanup.policy": "compact"})
    store.set_broker_configs(None, {"log.retention.ms": "5"})
    store.set_broker_configs(0, {"message.max.bytes": "7"})
    store.create_topic("gone", uuid.uuid4(), {0: [0]}, {})
    store.delete_topic("gone")

    reopened = LocalMetadataStore(tmp_path)
    record = reopened.get_topic("orders")
    assert record is not None
    assert record.topic_id == topic_id
    assert record.assignment == {0: [0], 1: [0], 2: [0]}
    assert record.configs == {"cleanup.policy": "compact"}
    assert reopened.get_topic("gone") is None
    assert [t.name for t in reopened.list_topics()] == ["orders"]
    assert reopened.get_broker_configs(None) == {"log.retention.ms": "5"}
    assert reopened.get_broker_configs(0) == {"message.max.bytes": "7"}
    assert reopened.get_broker_configs(1) == {}


def test_duplicate_and_missing_topics_are_kafka_errors(tmp_path: Path) -> None:
    store = LocalMetadataStore(tmp_path)
    store.create_topic("t", uuid.uuid4(), {0: [0]}, {})
    with pytest.raises(KafkaError) as exists:
        store.create_topic("t", uuid.uuid4(), {0: [0]}, {})
    assert exists.value.code == ErrorCode.TOPIC_ALREADY_EXISTS
    for change in (
        lambda: store.delete_topic("nope"),
        lambda: store.add_partitions("nope", {1: [0]}),
        lambda: store.set_topic_configs("nope", {}),
    ):
        with pytest.raises(KafkaError) as missing:
            change()
        assert missing.value.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_an_interrupted_save_leaves_the_previous_state(tmp_path: Path) -> None:
    store = LocalMetadataStore(tmp_path)
    store.create_topic("kept", uuid.uuid4(), {0: [0]}, {})
    # A crash between writing the temporary file and renaming it leaves a stray .tmp behind.
    temporary_path(tmp_path / STORE_FILE).write_text("{ not json")
    assert [t.name for t in LocalMetadataStore(tmp_path).list_topics()] == ["kept"]


# -- remote log metadata, on both stores ----------------------------------------------------------
