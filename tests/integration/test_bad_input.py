"""Acceptance: bad input gets a Kafka error code or a closed connection, never a dead broker."""

from __future__ import annotations

import contextlib
import random
import socket
import struct

import pytest
from confluent_kafka import KafkaError as CKError
from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from protocol.connection import ClientProtocol, decode_request
from protocol.errors import ErrorCode
from protocol.records import HEADER_SIZE
from tests.rawclient import RawClient

FUZZ_FRAMES = 10_000
CLASSIFIED_FRAMES = 1_500
SILENCE_S = 1.0


def seed_frames(topic: str) -> list[bytes]:
    """Valid request frames (without size prefix) of many APIs, to mutate."""
    client = ClientProtocol("fuzz")
    bodies = [
        (18, 3, {"client_software_name": "fuzz", "client_software_version": "1"}),
        (18, 0, {}),
        (3, 12, {"topics": [{"name": topic}], "allow_auto_topic_creation": False}),
        (3, 1, {"topics": [{"name": topic}]}),
        (0, 9, {"acks": 1, "timeout_ms": 1000,
                "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": b"\0" * 70}]}]}),
        (1, 12, {"max_wait_ms": 10, "min_bytes": 1, "max_bytes": 1 << 20, "session_epoch": -1,
                 "topics": [{"topic": topic, "partitions": [{"partition": 0, "fetch_offset": 0,
                                                              "partition_max_bytes": 65536}]}]}),
        (2, 7, {"replica_id": -1, "topics": [{"name": topic, "partitions": [{"partition_index": 0,
                                                                               "timestamp": -1}]}]}),
        (19, 7, {"topics": [{"name": "fuzz-created", "num_partitions": 1, "replication_factor": 1}],
                 "timeout_ms": 1000, "validate_only": True}),
    ]
    return [client.encode_request(key, version, body)[1][4:] for key, version, body in bodies]


def mutate(frame: bytes, rng: random.Random) -> bytes:
    data = bytearray(frame)
    choice = rng.randrange(6)
    if choice == 0:  # flip bits
        for _ in range(rng.randint(1, 8)):
            data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
    elif choice == 1:  # truncate
        del data[rng.randrange(len(data)) :]
    elif choice == 2:  # plant a huge or negative length somewhere
        pos = rng.randrange(max(1, len(data) - 4))
        data[pos : pos + 4] = struct.pack(">i", rng.choice([-2, -1, 0x7FFFFFFF, 0x40000000]))
    elif choice == 3:  # random api key/version
        data[0:4] = struct.pack(">hh", rng.randint(-5, 100), rng.randint(-2, 30))
    elif choice == 4:  # pure noise
        data = bytearray(rng.randbytes(rng.randint(0, 64)))
    else:  # append garbage
        data += rng.randbytes(rng.randint(1, 32))
    return bytes(data)


def legitimately_silent(frame: bytes) -> bool:
    """Requests a broker may rightly leave unanswered for a while: acks=0 or a long poll."""
    try:
        request = decode_request(memoryview(frame))
    except Exception:
        return False
    body = request.body
    if body is None:
        return False
    if request.header.api_key == 0:
        return body.acks == 0
    if request.header.api_key == 1:
        return body.max_wait_ms >= SILENCE_S * 1000
    return False


def classify(bootstrap: str, frame: bytes) -> str:
    """'response', 'closed' or 'silent' for one frame on a fresh connection."""
    with RawClient(bootstrap, timeout=SILENCE_S) as client:
        client.send_raw(frame)
        try:
            response = client.read_frame()
        except TimeoutError:
            return "silent"
    if response is None:
        return "closed"
    correlation_id = struct.unpack_from(">i", frame, 4)[0] if len(frame) >= 8 else None
    assert struct.unpack_from(">i", response, 0)[0] == correlation_id, "response to another request"
    return "response"


def assert_broker_serves(bootstrap: str, topic: str) -> None:
    with RawClient(bootstrap) as client:
        response = client.request(3, 12, {"topics": [{"name": topic}], "allow_auto_topic_creation": False})
        assert response.topics[0].error_code == ErrorCode.NO_ERROR


def test_fuzzed_frames_never_kill_the_broker(broker, new_topic) -> None:
    topic = new_topic()
    rng = random.Random(1234)
    seeds = seed_frames(topic)
    outcomes = {"response": 0, "closed": 0, "silent": 0}
    bystander = RawClient(broker.bootstrap)  # an innocent connection that must keep working
    for i in range(CLASSIFIED_FRAMES):
        frame = mutate(rng.choice(seeds), rng)
        outcome = classify(broker.bootstrap, frame)
        if outcome == "silent":
            assert legitimately_silent(frame), f"no answer and no close for frame {frame[:32].hex()}"
        outcomes[outcome] += 1
        if i % 250 == 0:
            bystander.request(18, 3, {})
    sent = CLASSIFIED_FRAMES
    while sent < FUZZ_FRAMES:  # the rest pipelined, many frames per connection
        with socket.create_connection(("127.0.0.1", broker.port), timeout=5) as sock:
            burst = [mutate(rng.choice(seeds), rng) for _ in range(50)]
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                sock.sendall(b"".join(struct.pack(">i", len(f)) + f for f in burst))
            sent += len(burst)
        bystander.request(18, 3, {})
    assert broker.alive, broker.log_text()
    assert outcomes["response"] > 0 and outcomes["closed"] > 0
    assert_broker_serves(broker.bootstrap, topic)
    bystander.close()


def test_unsupported_api_versions_version_gets_v0_error_with_key_list(broker) -> None:
    with RawClient(broker.bootstrap) as client:
        frame = struct.pack(">hhih", 18, 99, 7, -1)  # ApiVersions v99, null client id
        client.send_raw(frame)
        response = client.read_frame()
    assert response is not None
    correlation_id, error_code, count = struct.unpack_from(">ihi", response, 0)
    assert correlation_id == 7
    assert error_code == ErrorCode.UNSUPPORTED_VERSION
    keys = {struct.unpack_from(">h", response, 10 + 6 * i)[0] for i in range(count)}
    assert {0, 1, 3, 18} <= keys


def test_unsupported_version_of_other_api_closes_connection(broker) -> None:
    with RawClient(broker.bootstrap) as client:
        client.send_raw(struct.pack(">hhih", 3, 99, 1, -1))
        assert client.read_frame() is None


def test_produce_v2_legacy_version_closes_connection(broker) -> None:
    with RawClient(broker.bootstrap) as client:
        client.send_raw(struct.pack(">hhih", 0, 2, 1, -1) + b"\0" * 10)
        assert client.read_frame() is None


def test_oversize_frame_closes_only_that_connection(make_broker) -> None:
    small = make_broker(**{"socket.request.max.bytes": "1000"})
    with RawClient(small.bootstrap) as other, RawClient(small.bootstrap) as client:
        client.sock.sendall(struct.pack(">i", 5000) + b"\0" * 5000)
        assert client.read_frame() is None
        assert other.request(18, 3, {}).error_code == ErrorCode.NO_ERROR


def test_legacy_magic_batch_is_rejected(broker, new_topic) -> None:
    topic = new_topic()
    batch = bytearray(HEADER_SIZE + 10)
    struct.pack_into(">qib", batch, 0, 0, len(batch) - 12, 0)
    batch[16] = 1  # magic 1
    with RawClient(broker.bootstrap) as client:
        response = client.request(0, 9, {"acks": 1, "timeout_ms": 1000, "topic_data": [
            {"name": topic, "partition_data": [{"index": 0, "records": bytes(batch)}]}]})
    error = response.responses[0].partition_responses[0].error_code
    assert error == ErrorCode.INVALID_RECORD  # Kafka's ProduceRequest.validateRecords


def test_clients_cannot_write_to_internal_topics(broker) -> None:
    from protocol.record_batch import Record, encode_batch

    with RawClient(broker.bootstrap) as client:
        client.request(10, 4, {"key_type": 0, "coordinator_keys": ["g"]})  # creates __consumer_offsets
        response = client.request(0, 9, {"acks": 1, "timeout_ms": 1000, "topic_data": [
            {"name": "__consumer_offsets", "partition_data": [
                {"index": 0, "records": encode_batch([Record(0, 0, b"k", b"v")])}]}]})
    assert response.responses[0].partition_responses[0].error_code == ErrorCode.INVALID_TOPIC


def test_unknown_topic_without_auto_create(make_broker) -> None:
    node = make_broker(**{"auto.create.topics.enable": "false"})
    producer = Producer({"bootstrap.servers": node.bootstrap, "message.timeout.ms": 3000})
    errors: list[CKError] = []
    producer.produce("no-such-topic", b"x", on_delivery=lambda err, msg: errors.append(err))
    producer.flush(15)
    assert errors and errors[0].code() in (CKError.UNKNOWN_TOPIC_OR_PART, CKError._UNKNOWN_TOPIC,
                                          CKError._MSG_TIMED_OUT)
    with RawClient(node.bootstrap) as client:
        response = client.request(3, 12, {"topics": [{"name": "no-such-topic"}], "allow_auto_topic_creation": True})
    assert response.topics[0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


@pytest.mark.parametrize("name", ["bad/name", "a" * 250, "..", "spaces in name"])
def test_invalid_topic_names(broker, name: str) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    future = admin.create_topics([NewTopic(name, 1, 1)])[name]
    with pytest.raises(KafkaException) as info:
        future.result(timeout=15)
    assert info.value.args[0].code() == CKError.TOPIC_EXCEPTION


def test_oversize_message_is_refused(broker, new_topic) -> None:
    topic = new_topic(configs={"max.message.bytes": "2000"})
    producer = Producer({"bootstrap.servers": broker.bootstrap, "message.max.bytes": 1_000_000})
    errors: list[CKError] = []
    producer.produce(topic, b"x" * 10_000, on_delivery=lambda err, msg: errors.append(err))
    producer.flush(15)
    assert errors and errors[0] is not None and errors[0].code() == CKError.MSG_SIZE_TOO_LARGE
