"""Fetch and ListOffsets edge cases that Kafka clients rely on, checked on the wire."""

from __future__ import annotations

import threading
import time
import uuid

import pytest
from confluent_kafka import Producer

from protocol.errors import ErrorCode
from protocol.records import read_header
from tests.conftest import create_topic
from tests.rawclient import RawClient

FETCH, LIST_OFFSETS = 1, 2
EARLIEST, LATEST, MAX_TIMESTAMP = -2, -1, -3


def produce(bootstrap: str, topic: str, batches: list[list[tuple[bytes, int | None]]]) -> None:
    """Each inner list becomes one batch (flush between them)."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 50, "compression.type": "none"})
    errors: list[object] = []
    for batch in batches:
        for value, ts in batch:
            kwargs = {"timestamp": ts} if ts is not None else {}
            producer.produce(topic, value, partition=0, on_delivery=lambda e, _m: errors.append(e) if e else None,
                             **kwargs)
        assert producer.flush(30) == 0
    assert errors == []


def fetch(client: RawClient, topic: str, offset: int, *, max_wait_ms: int = 0, min_bytes: int = 1,
          partition_max_bytes: int = 1 << 20, isolation_level: int = 0, version: int = 11):
    body = {
        "replica_id": -1, "max_wait_ms": max_wait_ms, "min_bytes": min_bytes, "max_bytes": 50 << 20,
        "isolation_level": isolation_level, "session_id": 0, "session_epoch": -1,
        "topics": [{"topic": topic, "partitions": [{"partition": 0, "fetch_offset": offset,
                                                      "partition_max_bytes": partition_max_bytes}]}],
    }
    response = client.request(FETCH, version, body)
    return response.responses[0].partitions[0]


def list_offset(client: RawClient, topic: str, timestamp: int, version: int = 7):
    body = {"replica_id": -1, "isolation_level": 0,
            "topics": [{"name": topic, "partitions": [{"partition_index": 0, "timestamp": timestamp}]}]}
    return client.request(LIST_OFFSETS, version, body).topics[0].partitions[0]


def batch_bases(records: bytes) -> list[int]:
    bases, position = [], 0
    while position + 61 <= len(records):
        header = read_header(records, position)
        bases.append(header.base_offset)
        position += header.size
    return bases


def test_fetch_from_the_middle_of_a_batch_returns_the_whole_batch(broker, new_topic) -> None:
    topic = new_topic()
    produce(broker.bootstrap, topic, [[(b"a%d" % i, None) for i in range(5)], [(b"b", None)]])
    with RawClient(broker.bootstrap) as client:
        part = fetch(client, topic, 3)
    assert part.error_code == ErrorCode.NO_ERROR
    assert part.high_watermark == 6 and part.last_stable_offset == 6
    assert batch_bases(part.records) == [0, 5], "the batch holding offset 3 starts at 0"


def test_partition_max_bytes_still_returns_one_whole_batch(broker, new_topic) -> None:
    topic = new_topic()
    produce(broker.bootstrap, topic, [[(b"x" * 500, None)] * 4, [(b"y" * 500, None)] * 4])
    with RawClient(broker.bootstrap) as client:
        part = fetch(client, topic, 0, partition_max_bytes=100)
    assert batch_bases(part.records) == [0], "the first batch comes even when larger than the limit"


def test_long_poll_waits_for_data_and_wakes_on_produce(broker, new_topic) -> None:
    topic = new_topic()
    with RawClient(broker.bootstrap, timeout=30) as client:
        started = time.monotonic()
        empty = fetch(client, topic, 0, max_wait_ms=300, min_bytes=1)
        waited = time.monotonic() - started
        assert empty.records in (None, b"") and waited >= 0.25, "an empty fetch waits max_wait_ms"

        threading.Timer(0.5, produce, (broker.bootstrap, topic, [[(b"late", None)]])).start()
        started = time.monotonic()
        part = fetch(client, topic, 0, max_wait_ms=20_000, min_bytes=1)
        assert batch_bases(part.records) == [0]
        assert time.monotonic() - started < 15, "the produce wakes the fetch long before max_wait_ms"



@pytest.mark.parametrize("version", [12, 13])
def test_fetch_with_nothing_to_read_answers_without_waiting(broker, version: int) -> None:
    """Kafka answers at once when no partition can be read (ReplicaManager: fetchInfos.isEmpty).
    The Java consumer's close() sends such a fetch (no partitions, session epoch -1) and waits
    for it; a broker that held it for max_wait_ms made every consumer close that much slower."""
    topics = [] if version == 12 else [{"topic_id": uuid.uuid4(), "partitions": [
        {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 20}]}]
    body = {"replica_id": -1, "max_wait_ms": 20_000, "min_bytes": 1, "max_bytes": 50 << 20, "isolation_level": 0,
            "session_id": 0, "session_epoch": -1, "topics": topics, "forgotten_topics_data": []}
    with RawClient(broker.bootstrap, timeout=30) as client:
        started = time.monotonic()
        response = client.request(FETCH, version, body)
        waited = time.monotonic() - started
    assert response.error_code == ErrorCode.NO_ERROR
    if version == 13:
        assert [p.error_code for p in response.responses[0].partitions] == [ErrorCode.UNKNOWN_TOPIC_ID]
    assert waited < 10, f"held for {waited:.1f}s of max_wait_ms 20s"

def test_fetch_out_of_range_and_unknown_partition(broker, new_topic) -> None:
    topic = new_topic()
    produce(broker.bootstrap, topic, [[(b"one", None)]])
    with RawClient(broker.bootstrap) as client:
        assert fetch(client, topic, 5).error_code == ErrorCode.OFFSET_OUT_OF_RANGE
        assert fetch(client, topic, 1).error_code == ErrorCode.NO_ERROR  # the log end itself is fine
        assert fetch(client, "no-such-topic-here", 0).error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


@pytest.mark.parametrize("isolation_level", [0, 1])
def test_isolation_levels_both_read_committed_data(broker, new_topic, isolation_level: int) -> None:
    topic = new_topic()
    produce(broker.bootstrap, topic, [[(b"v", None)]])
    with RawClient(broker.bootstrap) as client:
        part = fetch(client, topic, 0, isolation_level=isolation_level)
    assert batch_bases(part.records) == [0] and part.last_stable_offset == 1


def test_list_offsets_earliest_latest_by_time_and_max_timestamp(broker, new_topic) -> None:
    topic = new_topic()
    base = int(time.time() * 1000) - 100_000
    produce(broker.bootstrap, topic, [
        [(b"t0", base), (b"t1", base + 10)],
        [(b"t2", base + 50_000), (b"t3", base + 20)],  # the max timestamp is in the middle
        [(b"t4", base + 30)],
    ])
    with RawClient(broker.bootstrap) as client:
        assert list_offset(client, topic, EARLIEST).offset == 0
        assert list_offset(client, topic, LATEST).offset == 5
        by_time = list_offset(client, topic, base + 5)
        assert (by_time.offset, by_time.timestamp) == (1, base + 10)
        assert list_offset(client, topic, base + 60_000).offset == -1, "no record that late"
        newest = list_offset(client, topic, MAX_TIMESTAMP)
        assert (newest.offset, newest.timestamp) == (2, base + 50_000)


def test_log_append_time_replaces_producer_timestamps(broker) -> None:
    topic = create_topic(broker.bootstrap, "append-time", 1, {"message.timestamp.type": "LogAppendTime"})
    before = int(time.time() * 1000)
    produce(broker.bootstrap, topic, [[(b"old", 1_000), (b"older", 2_000)]])
    with RawClient(broker.bootstrap) as client:
        part = fetch(client, topic, 0)
    header = read_header(part.records, 0)
    assert header.attributes & 0x08, "the timestamp-type bit says LogAppendTime"
    assert header.max_timestamp >= before


def test_a_librdkafka_consumer_below_the_log_start_resets_and_reads_on(broker, new_topic) -> None:
    """A consumer whose position fell below the log start (retention, DeleteRecords) gets
    OFFSET_OUT_OF_RANGE, resets by auto.offset.reset and reads on. Fetch answers for partitions
    with an error used to carry null records; librdkafka could not parse them ("invalid
    MessageSetSize -1"), never saw the error, never reset, and looped for good."""
    from confluent_kafka import Consumer, TopicPartition
    from confluent_kafka.admin import AdminClient

    topic = new_topic()
    produce(broker.bootstrap, topic, [[(b"v%d" % i, None) for i in range(10)]])
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})  # kept: its futures need it alive
    deleted = admin.delete_records([TopicPartition(topic, 0, 6)])
    assert deleted[TopicPartition(topic, 0)].result(timeout=15).low_watermark == 6

    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"below-{uuid.uuid4().hex[:6]}",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition(topic, 0, 2)])  # below the log start of 6
        values: list[bytes] = []
        deadline = time.monotonic() + 30
        while len(values) < 4 and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                values.append(message.value())
    finally:
        consumer.close()
    assert values == [b"v6", b"v7", b"v8", b"v9"]


def test_fetch_v17_reads_by_topic_id_and_takes_a_replica_directory_id(broker, new_topic) -> None:
    """Fetch v17 (KIP-853) adds a tagged ReplicaDirectoryId to each partition, which only KRaft
    voters use: a broker reads the partition as at v16, as Kafka's does."""
    topic = new_topic()
    produce(broker.bootstrap, topic, [[(b"first", None)], [(b"second", None)]])
    directory_id = uuid.uuid4()
    with RawClient(broker.bootstrap) as client:
        advertised = {k.api_key: (k.min_version, k.max_version) for k in client.request(18, 3, {}).api_keys}
        assert advertised[FETCH] == (0, 17)  # as Apache Kafka 3.9.0 advertises
        metadata = client.request(3, 12, {"topics": [{"name": topic}], "allow_auto_topic_creation": False})
        topic_id = metadata.topics[0].topic_id
        body = {
            "max_wait_ms": 0, "min_bytes": 1, "max_bytes": 50 << 20, "isolation_level": 0,
            "session_id": 0, "session_epoch": 0,  # a full fetch that opens a session
            "topics": [{"topic_id": topic_id, "partitions": [
                {"partition": 0, "current_leader_epoch": -1, "fetch_offset": 0, "last_fetched_epoch": -1,
                 "log_start_offset": -1, "partition_max_bytes": 1 << 20, "replica_directory_id": directory_id}]}],
            "forgotten_topics_data": [], "rack_id": "",
        }
        _, frame = client.conn.encode_request(FETCH, 17, body)
        assert directory_id.bytes in frame, "the tagged field is on the wire"
        client.sock.sendall(frame)
        full = client.read_response()
        assert (full.error_code, full.session_id != 0) == (ErrorCode.NO_ERROR, True)
        [answer] = full.responses
        [part] = answer.partitions
        assert (answer.topic_id, part.error_code, part.high_watermark) == (topic_id, ErrorCode.NO_ERROR, 2)
        assert batch_bases(part.records) == [0, 1]

        # The session goes on at v17: an incremental fetch from the new position.
        produce(broker.bootstrap, topic, [[(b"third", None)]])
        body["session_id"], body["session_epoch"] = full.session_id, 1
        body["topics"][0]["partitions"][0]["fetch_offset"] = 2
        incremental = client.request(FETCH, 17, body)
        assert incremental.error_code == ErrorCode.NO_ERROR
        assert batch_bases(incremental.responses[0].partitions[0].records) == [2]
