"""Framing, headers and the exact bytes of the flexible-version encoding."""

from __future__ import annotations

import struct
import uuid

import pytest
from construct import ConstructError, Container

from protocol.connection import (
    ClientProtocol,
    FrameTooLarge,
    MalformedRequest,
    ServerProtocol,
    TooManyEntriesRequest,
    decode_request,
    request_header_version,
    response_header_version,
)
from protocol.messages import BY_KEY
from protocol.primitives import KArray, KBytes, KString, KStruct, SegmentedWriter, build_into
from tests.protocol.strategies import api_structs, build, expected_parse, normalise, parse_exact

PRODUCE, FETCH, METADATA, CONTROLLED_SHUTDOWN, API_VERSIONS = 0, 1, 3, 7, 18


def frame(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


def joined(parts: list) -> bytes:
    return b"".join(bytes(p) if isinstance(p, bytes | bytearray | memoryview) else p.read_bytes() for p in parts)


class Slice:
    """An "external" records slice, as a log segment would hand out."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.reads = 0

    @property
    def size(self) -> int:
        return len(self.data)

    def read_bytes(self) -> bytes:
        self.reads += 1
        return self.data


# --- framing -------------------------------------------------------------------------


def test_pipelined_requests_come_out_in_order() -> None:
    client = ClientProtocol(client_id="pipeline")
    frames = [
        client.encode_request(API_VERSIONS, 3, {"client_software_name": "t", "client_software_version": "1"}),
        client.encode_request(METADATA, 12, {"topics": None}),
        client.encode_request(METADATA, 1, {"topics": [{"name": "a"}]}),
        client.encode_request(PRODUCE, 9, {"acks": 1, "timeout_ms": 5, "topic_data": []}),
    ]
    server = ServerProtocol()
    server.receive_data(b"".join(data for _, data in frames))
    seen = []
    while (request := server.next_request()) is not None:
        seen.append((request.header.correlation_id, request.header.api_key, request.header.api_version))
        assert request.header.client_id == "pipeline"
        assert request.known
    assert seen == [(0, API_VERSIONS, 3), (1, METADATA, 12), (2, METADATA, 1), (3, PRODUCE, 9)]
    assert [c for c, _ in frames] == [0, 1, 2, 3]


def test_partial_frames_wait_for_more_bytes() -> None:
    _, first = ClientProtocol().encode_request(METADATA, 9, {"topics": [{"name": "orders"}]})
    _, second = ClientProtocol().encode_request(API_VERSIONS, 0, {})
    server = ServerProtocol()
    stream = first + second
    decoded = []
    for i in range(len(stream)):
        server.receive_data(stream[i : i + 1])
        request = server.next_request()
        if request is not None:
            decoded.append((i + 1, request.header.api_key))
    assert decoded == [(len(first), METADATA), (len(stream), API_VERSIONS)]
    assert server.next_request() is None


def test_request_size_is_the_frame_size() -> None:
    _, data = ClientProtocol().encode_request(METADATA, 12, {"topics": []})
    server = ServerProtocol()
    server.receive_data(data)
    request = server.next_request()
    assert request is not None and request.size == len(data) - 4


@pytest.mark.parametrize("size", [65, 1 << 30, 0x7FFFFFFF, -1, -(1 << 31)])
def test_oversized_or_negative_frame_is_rejected_from_its_prefix(size: int) -> None:
    server = ServerProtocol(max_request_size=64)
    server.receive_data(struct.pack(">i", size))  # no payload needed to decide
    with pytest.raises(FrameTooLarge):
        server.next_request()


def test_frame_of_exactly_max_size_is_accepted() -> None:
    _, data = ClientProtocol(client_id="x" * 10).encode_request(API_VERSIONS, 0, {})
    server = ServerProtocol(max_request_size=len(data) - 4)
    server.receive_data(data)
    assert server.next_request() is not None
    assert issubclass(FrameTooLarge, ConstructError) and issubclass(MalformedRequest, ConstructError)


def test_garbage_body_raises_malformed_request_with_header() -> None:
    header = struct.pack(">hhih", METADATA, 12, 4242, 3) + b"cli" + b"\x00"
    server = ServerProtocol()
    server.receive_data(frame(header + b"\xff" * 6))
    with pytest.raises(MalformedRequest) as info:
        server.next_request()
    h = info.value.header
    assert h is not None
    assert (h.api_key, h.api_version, h.correlation_id, h.client_id) == (METADATA, 12, 4242, "cli")
    # The bad frame was consumed; the connection can answer and carry on.
    _, good = ClientProtocol().encode_request(METADATA, 12, {"topics": []})
    server.receive_data(good)
    assert server.next_request() is not None


def test_truncated_header_raises_malformed_request() -> None:
    server = ServerProtocol()
    server.receive_data(frame(struct.pack(">hh", METADATA, 1)))
    with pytest.raises(MalformedRequest) as info:
        server.next_request()
    assert info.value.header is None
    server.receive_data(frame(struct.pack(">hhih", METADATA, 1, 9, 10) + b"abc"))  # client_id cut short
    with pytest.raises(MalformedRequest) as info:
        server.next_request()
    assert info.value.header is not None and info.value.header.correlation_id == 9


def test_unknown_api_or_version_yields_header_without_body() -> None:
    server = ServerProtocol()
    server.receive_data(frame(struct.pack(">hhih", 999, 0, 1, -1)))
    server.receive_data(frame(struct.pack(">hhih", API_VERSIONS, 99, 2, 1) + b"k\x00"))
    unknown_api, unknown_version = server.next_request(), server.next_request()
    assert unknown_api is not None and not unknown_api.known and unknown_api.api is None
    assert unknown_api.header.client_id is None
    assert unknown_version is not None and not unknown_version.known
    assert unknown_version.api is BY_KEY[API_VERSIONS]
    assert unknown_version.header.client_id == "k"


# --- headers -------------------------------------------------------------------------


def test_request_header_v2_keeps_client_id_a_classic_nullable_string() -> None:
    body = {"client_software_name": "kb", "client_software_version": "1"}
    _, data = ClientProtocol(client_id="abc").encode_request(API_VERSIONS, 3, body)
    payload = (
        b"\x00\x12\x00\x03"  # api key 18, version 3
        b"\x00\x00\x00\x00"  # correlation id
        b"\x00\x03abc"  # client_id: int16 length, not compact
        b"\x00"  # header tagged fields
        b"\x03kb\x021"  # compact strings: length + 1
        b"\x00"  # body tagged fields
    )
    assert data == frame(payload)
    _, null_id = ClientProtocol(client_id=None).encode_request(API_VERSIONS, 3, body)
    assert null_id[12:15] == b"\xff\xff\x00"
    server = ServerProtocol()
    server.receive_data(data + null_id)
    first, second = server.next_request(), server.next_request()
    assert first is not None and second is not None
    assert (first.header.client_id, second.header.client_id) == ("abc", None)
    assert normalise(first.body) == body


def test_request_header_v1_for_classic_versions() -> None:
    _, data = ClientProtocol(client_id="c").encode_request(METADATA, 0, {"topics": [{"name": "t"}]})
    assert data == frame(b"\x00\x03\x00\x00" + b"\x00\x00\x00\x00" + b"\x00\x01c" + b"\x00\x00\x00\x01" + b"\x00\x01t")


def test_controlled_shutdown_v0_uses_request_header_v0() -> None:
    api = BY_KEY[CONTROLLED_SHUTDOWN]
    assert request_header_version(api, 0) == 0 and request_header_version(api, 1) == 1
    _, data = ClientProtocol(client_id="ignored").encode_request(CONTROLLED_SHUTDOWN, 0, {"broker_id": 5})
    assert data == frame(b"\x00\x07\x00\x00" + b"\x00\x00\x00\x00" + b"\x00\x00\x00\x05")
    server = ServerProtocol()
    server.receive_data(data)
    request = server.next_request()
    assert request is not None and request.body is not None and request.body.broker_id == 5


def test_header_versions_follow_flexible_versions() -> None:
    for key, api in BY_KEY.items():
        for version in api.REQUEST:
            flexible = api.FLEXIBLE_FROM is not None and version >= api.FLEXIBLE_FROM
            if key != CONTROLLED_SHUTDOWN or version > 0:
                assert request_header_version(api, version) == (2 if flexible else 1)
            assert response_header_version(api, version) == (1 if flexible and key != API_VERSIONS else 0)


def _serve(api_key: int, version: int, request_body: dict, response_body: dict,
           client: ClientProtocol | None = None) -> tuple[ServerProtocol, list]:
    """A request of `client` (a new one by default) served: the server and its answer's parts."""
    client = client or ClientProtocol()
    correlation_id, data = client.encode_request(api_key, version, request_body)
    server = ServerProtocol()
    server.receive_data(data)
    request = server.next_request()
    assert request is not None and request.header.correlation_id == correlation_id
    return server, server.encode_response(request.header, response_body)


def test_flexible_response_uses_header_v1_with_empty_tagged_section() -> None:
    _, parts = _serve(METADATA, 12, {"topics": []}, {"brokers": [], "topics": []})
    data = joined(parts)
    body = build(BY_KEY[METADATA].RESPONSE[12], {"brokers": [], "topics": []})
    assert data == frame(b"\x00\x00\x00\x00" + b"\x00" + body)


def test_classic_response_uses_header_v0() -> None:
    _, parts = _serve(METADATA, 8, {"topics": []}, {"brokers": [], "topics": []})
    data = joined(parts)
    assert data == frame(b"\x00\x00\x00\x00" + build(BY_KEY[METADATA].RESPONSE[8], {"brokers": [], "topics": []}))


# ApiVersions v3 response, correlation id 7, one api key, no features: written by hand.
API_VERSIONS_V3_RESPONSE = frame(
    b"\x00\x00\x00\x07"  # response header v0: correlation id, no tagged section
    b"\x00\x00"  # error_code
    b"\x02"  # compact array of one element
    b"\x00\x12\x00\x00\x00\x04\x00"  # api_key 18, min 0, max 4, element tagged section
    b"\x00\x00\x00\x00"  # throttle_time_ms
    b"\x00"  # no tagged fields: all hold their defaults
)


@pytest.mark.parametrize("version", [3, 4])
def test_api_versions_response_uses_header_v0_and_omits_default_tags(version: int) -> None:
    body = {"error_code": 0, "api_keys": [{"api_key": 18, "min_version": 0, "max_version": 4}]}
    explicit_defaults = {**body, "supported_features": [], "finalized_features_epoch": -1,
                         "finalized_features": [], "zk_migration_ready": False}
    server = ServerProtocol()
    header = _header(API_VERSIONS, version, 7)
    assert joined(server.encode_response(header, body)) == API_VERSIONS_V3_RESPONSE
    assert joined(server.encode_response(header, explicit_defaults)) == API_VERSIONS_V3_RESPONSE


def test_api_versions_answer_to_unknown_version_is_v0() -> None:
    header = _header(API_VERSIONS, 99, 3)
    parts = ServerProtocol().encode_response(header, {"error_code": 35, "api_keys": []}, version=0)
    assert joined(parts) == frame(b"\x00\x00\x00\x03" + b"\x00\x23" + b"\x00\x00\x00\x00")


def _header(api_key: int, version: int, correlation_id: int):
    from protocol.connection import RequestHeader

    return RequestHeader(api_key, version, correlation_id, "client")


def test_non_default_tagged_fields_are_written_in_tag_order() -> None:
    body = {"error_code": 0, "api_keys": [], "zk_migration_ready": True, "finalized_features_epoch": 5}
    data = build(BY_KEY[API_VERSIONS].RESPONSE[3], body)
    assert data == (
        b"\x00\x00" + b"\x01" + b"\x00\x00\x00\x00"
        + b"\x02"  # two tagged fields
        + b"\x01\x08" + struct.pack(">q", 5)  # tag 1, 8 bytes
        + b"\x03\x01\x01"  # tag 3, 1 byte, true
    )
    parsed = parse_exact(BY_KEY[API_VERSIONS].RESPONSE[3], data)
    assert parsed.zk_migration_ready is True and parsed.finalized_features_epoch == 5
    assert parsed.supported_features == [] and parsed.finalized_features == []


def test_unknown_tagged_fields_are_skipped() -> None:
    con = BY_KEY[API_VERSIONS].RESPONSE[3]
    data = (
        b"\x00\x00" + b"\x01" + b"\x00\x00\x00\x00"
        + b"\x03"  # three tagged fields, two unknown
        + b"\x03\x01\x01"  # zk_migration_ready
        + b"\x09\x03xyz"  # tag 9: unknown
        + b"\xc8\x01\x00"  # tag 200 (two-byte varint): unknown, empty
    )
    parsed = parse_exact(con, data)
    assert parsed.zk_migration_ready is True
    assert normalise(parsed) == normalise({**con.defaults(), "zk_migration_ready": True})
    # ...also in a request header and body, through the connection.
    payload = struct.pack(">hhih", API_VERSIONS, 3, 11, 1) + b"c" + b"\x01\x05\x02hi" + b"\x02a\x02b" + b"\x01\x00\x00"
    server = ServerProtocol()
    server.receive_data(frame(payload))
    request = server.next_request()
    assert request is not None and request.header.correlation_id == 11
    assert normalise(request.body) == {"client_software_name": "a", "client_software_version": "b"}


# --- compact encodings ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("con", "value", "wire"),
    [
        (KString(compact=True, nullable=True), None, b"\x00"),
        (KString(compact=True, nullable=True), "", b"\x01"),
        (KString(compact=True), "ab", b"\x03ab"),
        (KString(compact=True), "é", b"\x03\xc3\xa9"),  # length in UTF-8 bytes
        (KString(compact=True), "x" * 127, b"\x80\x01" + b"x" * 127),  # two-byte varint
        (KString(nullable=True), None, b"\xff\xff"),
        (KString(), "", b"\x00\x00"),
        (KBytes(compact=True, nullable=True), None, b"\x00"),
        (KBytes(compact=True), b"", b"\x01"),
        (KBytes(compact=True), b"\x00\xff", b"\x03\x00\xff"),
        (KBytes(nullable=True), None, b"\xff\xff\xff\xff"),
        (KBytes(), b"z", b"\x00\x00\x00\x01z"),
        (KArray(KString(compact=True), compact=True, nullable=True), None, b"\x00"),
        (KArray(KString(compact=True), compact=True), [], b"\x01"),
        (KArray(KString(compact=True), compact=True), ["a", ""], b"\x03\x02a\x01"),
        (KArray(KString(), nullable=True), None, b"\xff\xff\xff\xff"),
    ],
)
def test_length_prefixes(con, value, wire: bytes) -> None:
    assert build(con, value) == wire
    assert normalise(parse_exact(con, wire)) == value


@pytest.mark.parametrize("con", [KString(), KString(compact=True), KBytes(), KBytes(compact=True),
                                 KArray(KString()), KArray(KString(), compact=True)])
def test_null_is_rejected_where_not_nullable(con) -> None:
    null = b"\xff\xff" if isinstance(con, KString) and not con.compact else b"\xff\xff\xff\xff"
    with pytest.raises(ConstructError):
        parse_exact(con, b"\x00" if con.compact else null)
    with pytest.raises(ConstructError):
        build(con, None)


def _flexible_structs(con, seen: dict[int, KStruct]) -> None:
    if isinstance(con, KArray):
        _flexible_structs(con.element, seen)
    elif isinstance(con, KStruct):
        if con.flexible:
            seen[id(con)] = con
        for f in (*con.fields, *con.tagged.values()):
            _flexible_structs(f.con, seen)


def test_every_flexible_struct_ends_with_a_tagged_section() -> None:
    flexible: dict[int, KStruct] = {}
    for _, con in api_structs():
        _flexible_structs(con, flexible)
    assert len(flexible) > 300
    for con in flexible.values():
        data = build(con, {})
        assert data.endswith(b"\x00"), con
        # Nested: a flexible struct inside an array still closes with its own section.
        assert build(KArray(con, compact=True), [{}, {}]) == b"\x03" + data + data


# --- client <-> server round trips ---------------------------------------------------


def test_fetch_response_sends_external_records_as_a_separate_part() -> None:
    records = Slice(b"R" * 300)
    topic_id = uuid.UUID("11111111-2222-3333-4444-555555555555")
    partition = {"partition_index": 0, "high_watermark": 10, "records": records}
    body = {"session_id": 1, "responses": [{"topic_id": topic_id, "partitions": [partition]}]}
    client = ClientProtocol()
    correlation_id, data = client.encode_request(FETCH, 13, {"max_wait_ms": 10, "topics": []})
    server = ServerProtocol()
    server.receive_data(data)
    request = server.next_request()
    assert request is not None
    parts = server.encode_response(request.header, body)
    assert len(parts) == 3 and parts[1] is records and records.reads == 0
    assert struct.unpack(">i", parts[0][:4])[0] == len(parts[0]) + records.size + len(parts[2]) - 4
    client.receive_data(joined(parts))
    response = client.next_response()
    assert response is not None
    got_id, got = response
    assert got_id == correlation_id
    got_partition = got.responses[0].partitions[0]
    assert got.responses[0].topic_id == topic_id
    assert got_partition.records == b"R" * 300 and got_partition.high_watermark == 10
    assert client.next_response() is None


def test_records_built_from_mixed_parts() -> None:
    con = KBytes(compact=True, nullable=True)
    writer = SegmentedWriter()
    writer.write(b"<")
    build_into(con, [b"head", Slice(b"middle"), bytearray(b"tail")], writer)
    writer.write(b">")
    parts = writer.parts()
    assert [type(p).__name__ for p in parts] == ["bytes", "Slice", "bytes"]
    assert joined(parts) == b"<" + b"\x0f" + b"headmiddletail" + b">"
    assert writer.total_size == len(joined(parts))


def test_produce_request_with_external_records_round_trips() -> None:
    records = Slice(b"\x00" * 61)
    body = {"transactional_id": None, "acks": -1, "timeout_ms": 1000,
            "topic_data": [{"name": "t", "partition_data": [{"index": 3, "records": records}]}]}
    for version in (3, 9, 11):
        _, data = ClientProtocol().encode_request(PRODUCE, version, body)
        server = ServerProtocol()
        server.receive_data(data)
        request = server.next_request()
        assert request is not None and request.body is not None
        partition = request.body.topic_data[0].partition_data[0]
        assert (partition.index, partition.records) == (3, records.data)


@pytest.mark.parametrize(
    ("api_key", "version", "request_body", "response_body"),
    [
        (API_VERSIONS, 0, {}, {"error_code": 0, "api_keys": [{"api_key": 1, "min_version": 0, "max_version": 17}]}),
        (API_VERSIONS, 4, {"client_software_name": "n", "client_software_version": "v"},
         {"error_code": 0, "api_keys": [], "throttle_time_ms": 3, "zk_migration_ready": True}),
        (METADATA, 12, {"topics": [{"topic_id": uuid.uuid4(), "name": None}]},
         {"brokers": [{"node_id": 1, "host": "h", "port": 9092, "rack": None}], "cluster_id": "c",
          "controller_id": 1, "topics": []}),
        (10, 4, {"key_type": 0, "coordinator_keys": ["g"]},
         {"coordinators": [{"key": "g", "node_id": 1, "host": "h", "port": 1, "error_code": 0}]}),
        (PRODUCE, 7, {"acks": 1, "timeout_ms": 1, "topic_data": []},
         {"responses": [{"name": "t", "partition_responses": [{"index": 0, "base_offset": 5}]}]}),
    ],
)
def test_client_server_round_trip(api_key: int, version: int, request_body: dict, response_body: dict) -> None:
    api = BY_KEY[api_key]
    client, server = ClientProtocol(client_id="rt"), ServerProtocol()
    correlation_id, data = client.encode_request(api_key, version, request_body)
    server.receive_data(data)
    request = server.next_request()
    assert request is not None and request.api is api and request.body is not None
    assert build(api.REQUEST[version], request.body) == build(api.REQUEST[version], request_body)
    client.receive_data(joined(server.encode_response(request.header, response_body)))
    response = client.next_response()
    assert response is not None and response[0] == correlation_id
    assert isinstance(response[1], Container)
    assert normalise(response[1]) == expected_parse(api.RESPONSE[version], response_body)


def test_an_entry_budget_stops_a_request_at_an_arrays_length_not_at_its_bytes() -> None:
    """The server decodes a large frame on its loop when it holds few entries: a megabyte of
    records in one partition fits a small budget; a few hundred partitions do not, and are
    refused from the array's length, before any of them is built."""
    def produce(partitions: int, record_bytes: int) -> memoryview:
        body = {"transactional_id": None, "acks": 1, "timeout_ms": 1000, "topic_data": [
            {"name": "t", "partition_data": [{"index": i, "records": b"r" * record_bytes} for i in range(partitions)]}]}
        _, data = ClientProtocol().encode_request(PRODUCE, 9, body)
        return memoryview(data)[4:]

    big = decode_request(produce(1, 1 << 20), max_entries=256)
    assert len(big.body.topic_data[0].partition_data[0].records) == 1 << 20
    with pytest.raises(TooManyEntriesRequest) as info:
        decode_request(produce(300, 1), max_entries=256)
    assert isinstance(info.value, MalformedRequest) and info.value.header.api_key == PRODUCE
    assert len(decode_request(produce(300, 1), max_entries=100_000).body.topic_data[0].partition_data) == 300


# --- responses read a frame at a time (the inter-broker client) ------------------------------


def _fetch_answer(records: bytes) -> tuple[ClientProtocol, bytes]:
    """A Fetch v12 answer to a request of `client`, as the frame after its size prefix."""
    client = ClientProtocol()
    partition = {"partition_index": 0, "high_watermark": 10, "records": records}
    _, parts = _serve(FETCH, 12, {"replica_id": 1, "topics": []},
                      {"responses": [{"topic": "t", "partitions": [partition]}]}, client)
    answer = joined(parts)
    assert client.response_size(answer[:4]) == len(answer) - 4
    return client, answer[4:]


def test_a_whole_response_frame_is_parsed_with_its_records_a_view_into_it() -> None:
    records = bytes(range(256)) * 64  # 16 KiB: above the size parsed as a view
    client, answer = _fetch_answer(records)
    body = client.parse_response(answer)[1]
    parsed = body.responses[0].partitions[0].records
    assert isinstance(parsed, memoryview) and parsed.obj is answer, "the records were copied"
    assert bytes(parsed) == records and body.responses[0].topic == "t"


def test_a_response_size_beyond_the_limit_is_refused_from_its_prefix() -> None:
    client = ClientProtocol(max_response_size=1024)
    assert client.response_size(struct.pack(">i", 1024)) == 1024
    for size in (1025, -1, 0):
        with pytest.raises(FrameTooLarge):
            client.response_size(struct.pack(">i", size))
