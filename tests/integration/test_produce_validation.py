"""Produce refuses what Kafka's LogValidator refuses, over the wire, and nothing refused blocks
a consumer.

EXPECTED holds, for each malformed batch of tests/storage/test_log_validator.py, the error code
Apache Kafka 3.9.0 answered to the same Produce v9 bytes (run against the reference broker of
../shared/kafka-3.9.0) and kbroker's answer. They differ where Kafka's answer is an accident:
Kafka answers UNKNOWN_SERVER_ERROR (-1) when an internal exception escapes its validator (an
unknown codec, a payload its decompressor rejects, records it cannot parse), where kbroker
answers INVALID_RECORD, which clients also treat as final; and Kafka accepts uncompressed records
whose offset deltas do not count from 0, which kbroker refuses (no client writes them, and
consumers would see offsets outside the batch).
"""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from protocol.errors import ErrorCode
from protocol.record_batch import Record, encode_batch
from tests.rawclient import RawClient
from tests.storage.test_log_validator import UNREADABLE

PRODUCE = 0
KAFKA_UNKNOWN = -1
# name -> (Kafka 3.9.0's code, kbroker's code)
EXPECTED = {
    "codec 5": (KAFKA_UNKNOWN, ErrorCode.INVALID_RECORD),
    "codec 6": (KAFKA_UNKNOWN, ErrorCode.INVALID_RECORD),
    "codec 7": (KAFKA_UNKNOWN, ErrorCode.INVALID_RECORD),
    "gzip flag on plain records": (KAFKA_UNKNOWN, ErrorCode.INVALID_RECORD),
    "plain flag on lz4 records": (ErrorCode.INVALID_RECORD, ErrorCode.INVALID_RECORD),
    "random bytes with a valid CRC": (KAFKA_UNKNOWN, ErrorCode.INVALID_RECORD),
    "one record more claimed": (ErrorCode.INVALID_RECORD, ErrorCode.INVALID_RECORD),
    "one record fewer claimed": (ErrorCode.INVALID_RECORD, ErrorCode.INVALID_RECORD),
    "2^31-1 records claimed": (ErrorCode.INVALID_RECORD, ErrorCode.INVALID_RECORD),
    "offset deltas 0, 5, 2": (ErrorCode.NO_ERROR, ErrorCode.INVALID_RECORD),
    "corrupt records inside gzip": (ErrorCode.INVALID_RECORD, ErrorCode.INVALID_RECORD),
    "one record more claimed inside gzip": (ErrorCode.INVALID_RECORD, ErrorCode.INVALID_RECORD),
    "record length 0": (ErrorCode.INVALID_RECORD, ErrorCode.INVALID_RECORD),
    "record length -1": (ErrorCode.INVALID_RECORD, ErrorCode.INVALID_RECORD),
    "bytes after the last record": (ErrorCode.INVALID_RECORD, ErrorCode.INVALID_RECORD),
    "key length past the record": (ErrorCode.INVALID_RECORD, ErrorCode.INVALID_RECORD),
    "negative header count": (ErrorCode.INVALID_RECORD, ErrorCode.INVALID_RECORD),
}


def produce(client: RawClient, topic: str, batch: bytes, version: int = 9):
    answer = client.request(PRODUCE, version, {"acks": 1, "timeout_ms": 5000, "topic_data": [
        {"name": topic, "partition_data": [{"index": 0, "records": batch}]}]})
    return answer.responses[0].partition_responses[0]


def consume_all(bootstrap: str, topic: str, expected: int) -> list[bytes]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{topic}", "enable.auto.commit": False,
                         "check.crcs": True})
    consumer.assign([TopicPartition(topic, 0, 0)])
    values: list[bytes] = []
    deadline = time.monotonic() + 30
    try:
        while len(values) < expected and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None:
                continue
            if message.error():
                raise KafkaException(message.error())
            values.append(message.value())
    finally:
        consumer.close()
    return values


def test_every_case_has_an_expectation() -> None:
    assert set(EXPECTED) == set(UNREADABLE)


def test_malformed_batches_are_refused_and_consumers_read_on(broker, new_topic) -> None:
    topic = new_topic()
    good = encode_batch([Record(0, int(time.time() * 1000), b"k", b"good")])
    answers = {}
    with RawClient(broker.bootstrap) as client:
        assert produce(client, topic, good).error_code == 0
        for name, batch in UNREADABLE.items():
            answer = produce(client, topic, batch)
            answers[name] = answer.error_code
            assert answer.base_offset == -1
        last = produce(client, topic, good)
    assert answers == {name: kbroker for name, (_, kbroker) in EXPECTED.items()}
    # Nothing refused moved the log end: the second good batch follows the first.
    assert (last.error_code, last.base_offset) == (0, 1)
    assert consume_all(broker.bootstrap, topic, 2) == [b"good", b"good"]


def test_record_errors_name_the_refused_records(broker, new_topic) -> None:
    # Kafka 3.9.0's answer to these bytes, field for field (record_errors from Produce v8).
    topic = new_topic(configs={"cleanup.policy": "compact"})
    now = int(time.time() * 1000)
    batch = encode_batch([Record(0, now, b"a", b"x"), Record(1, now, None, b"y"), Record(2, now, b"c", b"z"),
                          Record(3, now, None, b"w")])
    message = f"Compacted topic cannot accept message without key in topic partition {topic}-0"
    with RawClient(broker.bootstrap) as client:
        v9 = produce(client, topic, batch, 9)
        v7 = produce(client, topic, batch, 7)
    assert v9.error_code == ErrorCode.INVALID_RECORD
    assert [(e.batch_index, e.batch_index_error_message) for e in v9.record_errors] == [(1, message), (3, message)]
    assert v9.error_message.startswith("One or more records have been rejected due to 2 record errors in total")
    assert v7.error_code == ErrorCode.INVALID_RECORD  # before v8 the code alone


def test_timestamp_record_errors(broker, new_topic) -> None:
    topic = new_topic(configs={"message.timestamp.before.max.ms": "60000"})
    now = int(time.time() * 1000)
    batch = encode_batch([Record(0, now, b"a", b"x"), Record(1, now - 3_600_000, b"b", b"y")])
    with RawClient(broker.bootstrap) as client:
        answer = produce(client, topic, batch)
    assert answer.error_code == ErrorCode.INVALID_TIMESTAMP
    assert answer.error_message == "One or more records have been rejected due to invalid timestamp"
    assert [e.batch_index for e in answer.record_errors] == [1]


@pytest.mark.parametrize("linger_ms", [0, 50])
def test_a_real_producer_sees_keyless_records_refused_on_a_compacted_topic(broker, new_topic, linger_ms) -> None:
    topic = new_topic(configs={"cleanup.policy": "compact"})
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": linger_ms,
                         "enable.idempotence": False, "retries": 0})
    reports: dict[bytes, object] = {}
    producer.produce(topic, b"kept", key=b"k", on_delivery=lambda err, msg: reports.__setitem__(msg.value(), err))
    producer.flush(10)
    producer.produce(topic, b"keyless", on_delivery=lambda err, msg: reports.__setitem__(msg.value(), err))
    producer.flush(10)
    assert reports[b"kept"] is None
    assert reports[b"keyless"] is not None and reports[b"keyless"].code() == ErrorCode.INVALID_RECORD
    assert consume_all(broker.bootstrap, topic, 1) == [b"kept"]


def test_malformed_record_sets_are_refused_before_the_acks(broker, new_topic) -> None:
    """Kafka checks each record set (ProduceRequest.validateRecords) before the replica manager
    checks acks: Kafka 3.9.0 answers INVALID_RECORD for the empty record set and
    INVALID_REQUIRED_ACKS for the well-formed one."""
    topic = new_topic(partitions=2)
    good = encode_batch([Record(0, int(time.time() * 1000), None, b"v")])
    with RawClient(broker.bootstrap) as client:
        answer = client.request(PRODUCE, 9, {"acks": 5, "timeout_ms": 5000, "topic_data": [
            {"name": topic, "partition_data": [{"index": 0, "records": b""}, {"index": 1, "records": good}]}]})
    assert [(p.index, p.error_code) for p in answer.responses[0].partition_responses] == [
        (0, ErrorCode.INVALID_RECORD), (1, ErrorCode.INVALID_REQUIRED_ACKS)]
