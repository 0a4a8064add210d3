"""The broker's in-memory metadata: lookups by name and id, and states that never go back."""

from __future__ import annotations

import uuid

import pytest

from kbroker.cluster.metadata_cache import MetadataCache
from kbroker.metadata.store import PartitionState, TopicRecord
from protocol.errors import ErrorCode, KafkaError


def test_topics_are_found_by_name_and_by_id_until_removed() -> None:
    cache = MetadataCache()
    record = TopicRecord("t", uuid.uuid4(), {0: [1, 2], 1: [2, 1]})
    cache.put_topic(record)
    assert cache.topic("t") is record and cache.topic_by_id(record.topic_id) is record
    assert cache.partition_exists("t", 1) and not cache.partition_exists("t", 2)
    cache.put_state("t", 0, PartitionState(1, 0, [1, 2], 1, version=0))
    assert cache.remove_topic("t") is record
    assert cache.topic_by_id(record.topic_id) is None and cache.state_of("t", 0) is None
    with pytest.raises(KafkaError) as missing:
        cache.require("t")
    assert missing.value.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_an_older_state_never_replaces_a_newer_one() -> None:
    """A watch may deliver a state after this broker wrote (and cached) a newer version."""
    cache = MetadataCache()
    cache.put_topic(TopicRecord("t", uuid.uuid4(), {0: [1, 2]}))
    assert cache.put_state("t", 0, PartitionState(1, 3, [1], 1, version=5))
    assert not cache.put_state("t", 0, PartitionState(1, 3, [1, 2], 1, version=4))
    assert cache.state_of("t", 0) == PartitionState(1, 3, [1], 1, version=5)
    assert cache.put_state("t", 0, PartitionState(1, 3, [1], 1, version=5))  # the same again: taken


def test_an_older_version_of_a_topic_never_replaces_a_newer_one() -> None:
    """A record read before a CreatePartitions may be delivered after one read since."""
    cache = MetadataCache()
    topic_id = uuid.uuid4()
    grown = TopicRecord("t", topic_id, {0: [1], 1: [1]}, version=1)
    assert cache.put_topic(grown)
    assert not cache.put_topic(TopicRecord("t", topic_id, {0: [1]}, version=0))
    assert cache.topic("t") is grown and cache.topic_by_id(topic_id) is grown
    assert cache.put_topic(TopicRecord("t", topic_id, {0: [1], 1: [1]}, {"retention.ms": "1"}, version=1))
    re_created = TopicRecord("t", uuid.uuid4(), {0: [1]}, version=0)
    assert cache.put_topic(re_created) and cache.topic("t") is re_created


def test_a_re_created_topic_starts_without_the_old_states() -> None:
    cache = MetadataCache()
    old = TopicRecord("t", uuid.uuid4(), {0: [1]})
    cache.put_topic(old)
    cache.put_state("t", 0, PartitionState(1, 7, [1], 1, version=9))
    cache.put_topic(TopicRecord("t", uuid.uuid4(), {0: [1]}))  # deleted and created again elsewhere
    assert cache.topic_by_id(old.topic_id) is None and cache.state_of("t", 0) is None
    assert cache.put_state("t", 0, PartitionState(1, 0, [1], 1, version=0))
