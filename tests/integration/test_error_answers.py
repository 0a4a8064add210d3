"""A request that fails as a whole gets Kafka's error answer, never silence.

Reproduction of the hang: a Metadata v10 request with one topic whose name is null (the bytes
below). The broker used to build an answer that could not be encoded; the exception escaped
the connection task, nothing was sent, and the client waited forever.
"""

from __future__ import annotations

import struct
import time
import uuid

import pytest

from protocol.errors import ErrorCode
from tests.rawclient import RawClient

METADATA = 3

# Metadata v10 (flexible): header v2 (api 3, version 10, correlation 7, client id "hang"), then
# topics: compact array of 1 (0x02) holding {topic_id: 16 zero bytes, name: null (0x00), no tags},
# then the three booleans (auto-create, cluster and topic authorized operations) false, no tags.
NULL_NAME_V10 = (
    struct.pack(">hhih", METADATA, 10, 7, 4) + b"hang" + b"\x00"
    + b"\x02" + bytes(16) + b"\x00" + b"\x00"
    + b"\x00\x00\x00" + b"\x00"
)


def test_metadata_v10_with_a_null_topic_name_is_answered_with_invalid_request(broker) -> None:
    with RawClient(broker.bootstrap, timeout=5) as client:
        client.send_raw(NULL_NAME_V10)
        started = time.monotonic()
        frame = client.read_frame()
        assert frame is not None, "the broker closed instead of answering"
        assert time.monotonic() - started < 5
        (correlation,) = struct.unpack_from(">i", frame, 0)
        assert correlation == 7
        # The same request through the client encoder, to parse the answer with its schema.
        answer = client.request(METADATA, 10, {"topics": [{"name": None}], "allow_auto_topic_creation": False})
    # Kafka: InvalidRequestException("Topic name can not be null for version 10"), answered by
    # MetadataRequest.getErrorResponse: the topic comes back with the error and the name "".
    assert [(t.error_code, t.name, list(t.partitions)) for t in answer.topics] == [(ErrorCode.INVALID_REQUEST, "", [])]


@pytest.mark.parametrize("version", [10, 11])
def test_metadata_before_v12_refuses_topic_ids(broker, version: int) -> None:
    topic_id = uuid.uuid4()
    with RawClient(broker.bootstrap) as client:
        answer = client.request(METADATA, version, {"topics": [{"name": "x", "topic_id": topic_id}],
                                                    "allow_auto_topic_creation": False})
    assert [(t.error_code, t.name) for t in answer.topics] == [(ErrorCode.INVALID_REQUEST, "x")]


def test_metadata_v12_with_a_null_name_and_no_id_is_an_unknown_id(broker) -> None:
    with RawClient(broker.bootstrap) as client:
        answer = client.request(METADATA, 12, {"topics": [{"name": None}], "allow_auto_topic_creation": False})
    assert [t.error_code for t in answer.topics] == [ErrorCode.UNKNOWN_TOPIC_ID]


def test_metadata_describes_a_topic_named_many_times_once(broker, new_topic) -> None:
    # Reproduction of the 52 MB answer: a 10,000-partition topic named 200 times in one request.
    # Kafka reads the names as a set; so does the broker now (a small topic shows it just as well).
    topic = new_topic(partitions=3)
    with RawClient(broker.bootstrap) as client:
        answer = client.request(METADATA, 12, {"topics": [{"name": topic}] * 200, "allow_auto_topic_creation": False})
    assert [t.name for t in answer.topics] == [topic]
    assert len(answer.topics[0].partitions) == 3


def test_metadata_v0_with_an_empty_list_means_every_topic(broker, new_topic) -> None:
    topic = new_topic()
    with RawClient(broker.bootstrap) as client:
        answer = client.request(METADATA, 0, {"topics": []})
    assert topic in {t.name for t in answer.topics}


def test_illegal_topic_names_are_refused_before_any_lookup(broker) -> None:
    names = ["", ".", "..", "a" * 250, "bad name", "x/y"]
    with RawClient(broker.bootstrap) as client:
        answer = client.request(METADATA, 12, {"topics": [{"name": n} for n in names],
                                               "allow_auto_topic_creation": True})
    assert [(t.name, t.error_code) for t in answer.topics] == [(n, ErrorCode.INVALID_TOPIC) for n in names]
