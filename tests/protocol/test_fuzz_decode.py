"""Hostile input into ServerProtocol: only ConstructError subclasses may escape.

Random frames, and valid requests of every API and version mutated (bit flips,
truncation, insertions, length fields set to huge or negative values), are fed in random
chunks. Decoding must end in a request, None, FrameTooLarge or MalformedRequest: never
IndexError, UnicodeDecodeError, MemoryError, ... and never a large allocation.
"""

from __future__ import annotations

import struct
import tracemalloc
from typing import Any

import pytest
from construct import ConstructError
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from protocol.connection import ClientProtocol, FrameTooLarge, MalformedRequest, Request, ServerProtocol
from protocol.messages import BY_KEY
from tests.protocol.strategies import build, normalise, parse_exact, value_strategy

MAX_REQUEST = 1 << 20
FUZZ = settings(deadline=None, database=None, suppress_health_check=list(HealthCheck))
REQUESTS = [(key, version) for key in sorted(BY_KEY) for version in sorted(BY_KEY[key].REQUEST)]
HUGE = [
    b"\x7f\xff\xff\xff",  # int32 max: a 2 GB length
    b"\x80\x00\x00\x00",  # int32 min
    b"\xff\xff\xff\xff",  # -1 (null) as int32, or 2^32-1 as a uvarint prefix
    b"\xff\xfe",  # -2 as int16
    b"\x7f\xff",  # int16 max
    b"\xff\xff\xff\xff\x0f",  # uvarint 2^32-1
    b"\x80\x80\x80\x80\x80\x01",  # uvarint longer than 5 bytes
    b"\x90\x80\x80\x80\x01",  # uvarint 2^28 + 16
]


def frame(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


def drain(server: ServerProtocol) -> list[Request]:
    """Everything the server decodes; stops where a real connection would close."""
    decoded: list[Request] = []
    while True:
        try:
            request = server.next_request()
        except FrameTooLarge:
            return decoded
        except MalformedRequest:
            continue  # the frame was consumed: answer it and carry on
        except ConstructError as e:  # allowed, but the documented contract is the two above
            pytest.fail(f"undocumented ConstructError {type(e).__name__}: {e}")
        if request is None:
            return decoded
        decoded.append(request)


def feed(data: bytes, cuts: list[int]) -> list[Request]:
    server = ServerProtocol(max_request_size=MAX_REQUEST)
    decoded: list[Request] = []
    start = 0
    for cut in sorted({min(c, len(data)) for c in cuts} | {len(data)}):
        server.receive_data(data[start:cut])
        start = cut
        decoded += drain(server)
    for request in decoded:
        check_decoded(request)
    return decoded


def check_decoded(request: Request) -> None:
    """A body that did decode is well-formed: it rebuilds, and rebuilds to itself."""
    if request.body is None or request.api is None:
        return
    con = request.api.REQUEST[request.header.api_version]
    data = build(con, request.body)
    assert normalise(parse_exact(con, data)) == normalise(request.body)


# --- strategies ----------------------------------------------------------------------


@st.composite
def valid_request(draw: st.DrawFn) -> bytes:
    key, version = draw(st.sampled_from(REQUESTS))
    body = draw(value_strategy(BY_KEY[key].REQUEST[version]))
    client_id = draw(st.none() | st.text(max_size=8))
    return ClientProtocol(client_id=client_id).encode_request(key, version, body)[1]


@st.composite
def mutated(draw: st.DrawFn, data: bytes) -> tuple[bytes, bool]:
    """A mutation of a framed request, and whether its size prefix still matches."""
    payload = bytearray(data[4:])
    reframe = True
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(["flip", "truncate", "huge", "insert", "delete", "prefix"]))
        pos = draw(st.integers(0, max(len(payload) - 1, 0)))
        if kind == "flip" and payload:
            payload[pos] ^= 1 << draw(st.integers(0, 7))
        elif kind == "truncate":
            del payload[pos:]
        elif kind == "huge":
            pattern = draw(st.sampled_from(HUGE))
            payload[pos : pos + len(pattern)] = pattern
        elif kind == "insert":
            payload[pos:pos] = draw(st.binary(min_size=1, max_size=8))
        elif kind == "delete":
            del payload[pos : pos + draw(st.integers(1, 8))]
        elif kind == "prefix":
            reframe = False  # keep the now-wrong size prefix
    return (frame(bytes(payload)) if reframe else data[:4] + bytes(payload)), reframe


@st.composite
def random_frame(draw: st.DrawFn) -> bytes:
    api_key = draw(st.sampled_from(sorted(BY_KEY)) | st.integers(-(1 << 15), (1 << 15) - 1))
    api = BY_KEY.get(api_key)
    version = draw(st.integers(-1, (api.MAX_VERSION + 2) if api else 20) | st.integers(-(1 << 15), (1 << 15) - 1))
    header = struct.pack(">hhi", api_key, version, draw(st.integers(-(1 << 31), (1 << 31) - 1)))
    client_id_length = draw(st.sampled_from([-1, 0, 3, 0x7FFF, -2]))
    tail = draw(st.binary(max_size=200))
    return frame(header + struct.pack(">h", client_id_length) + tail)


cuts = st.lists(st.integers(0, 400), max_size=4)


# --- tests ---------------------------------------------------------------------------


@settings(FUZZ, max_examples=300)
@given(st.binary(max_size=300), cuts)
def test_raw_bytes(data: bytes, chunk_cuts: list[int]) -> None:
    feed(data, chunk_cuts)


@settings(FUZZ, max_examples=500)
@given(st.lists(random_frame(), min_size=1, max_size=3), cuts)
def test_random_frames(frames: list[bytes], chunk_cuts: list[int]) -> None:
    feed(b"".join(frames), chunk_cuts)


@settings(FUZZ, max_examples=1200)
@given(st.data(), cuts)
def test_mutated_valid_requests(data: st.DataObject, chunk_cuts: list[int]) -> None:
    original = data.draw(valid_request())
    bad, framed = data.draw(mutated(original))
    decoded = feed(bad + original, chunk_cuts)
    if framed:  # the damage stays inside its frame: the intact request after it decodes
        assert decoded and decoded[-1].known
        assert decoded[-1].size == len(original) - 4


@settings(FUZZ, max_examples=300)
@given(valid_request(), cuts)
def test_valid_requests_decode_whatever_the_chunking(data: bytes, chunk_cuts: list[int]) -> None:
    decoded = feed(data + data, chunk_cuts)
    assert len(decoded) == 2 and decoded[0].known
    assert decoded[0].header == decoded[1].header


# --- huge lengths fail fast, without allocating ----------------------------------------

SWEEP = [
    (0, 3, {"acks": 1, "timeout_ms": 1, "topic_data": [{"name": "t", "partition_data": [
        {"index": 0, "records": b"r" * 40}]}]}),
    (0, 9, {"acks": 1, "timeout_ms": 1, "topic_data": [{"name": "t", "partition_data": [
        {"index": 0, "records": b"r" * 40}]}]}),
    (3, 1, {"topics": [{"name": "orders"}, {"name": "payments"}]}),
    (3, 12, {"topics": [{"name": "orders"}], "allow_auto_topic_creation": True}),
    (1, 12, {"topics": [{"topic": "t", "partitions": [{"partition": 0, "fetch_offset": 1}]}],
             "forgotten_topics_data": [{"topic": "f", "partitions": [1, 2]}]}),
    (11, 0, {"group_id": "g", "member_id": "", "protocol_type": "consumer",
             "protocols": [{"name": "range", "metadata": b"\x00\x01"}]}),
    (19, 5, {"topics": [{"name": "t", "num_partitions": 1, "replication_factor": 1,
                         "configs": [{"name": "k", "value": "v"}]}]}),
]


def _sweep(payload: bytes) -> list[bytes]:
    variants = [payload[:pos] + p + payload[pos + len(p):] for pos in range(len(payload)) for p in HUGE]
    return variants + [payload[:n] for n in range(len(payload))]


@pytest.mark.parametrize(("api_key", "version", "body"), SWEEP, ids=[f"{BY_KEY[k].NAME}-v{v}" for k, v, _ in SWEEP])
def test_every_length_field_set_huge_fails_fast(api_key: int, version: int, body: dict[str, Any]) -> None:
    _, data = ClientProtocol(client_id="sweep").encode_request(api_key, version, body)
    variants = _sweep(data[4:])
    assert len(variants) > 300
    tracemalloc.start()
    try:
        for variant in variants:
            feed(frame(variant), [])
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 4 << 20, f"decoding allocated {peak} bytes at peak"


def test_two_gigabyte_frame_is_refused_from_its_prefix() -> None:
    server = ServerProtocol()  # default 100 MiB limit
    server.receive_data(b"\x7f\xff\xff\xff" + b"\x00" * 16)
    with pytest.raises(FrameTooLarge):
        server.next_request()


@pytest.mark.parametrize(
    "body",
    [
        b"\xff\xff\xff\xff" + b"\x7f\xff\xff\xff",  # transactional_id null, acks/timeout... then 2 GB array
        b"\xff\xff" + b"\x00\x01" + b"\x00\x00\x00\x01" + b"\x7f\xff\xff\xff",  # topic_data of 2^31-1 topics
        b"\xff\xff" + b"\x00\x01" + b"\x00\x00\x00\x01" + b"\x00\x00\x00\x01" + b"\x00\x01t"
        + b"\x00\x00\x00\x01" + b"\x00\x00\x00\x00" + b"\x7f\xff\xff\xff",  # 2 GB records
        b"\xff\xff" + b"\x00\x01" + b"\x00\x00\x00\x01" + b"\x00\x00\x00\x01" + b"\x00\x01t"
        + b"\x00\x00\x00\x01" + b"\x00\x00\x00\x00" + b"\x0f\xff\xff\xff",  # 256 MiB records, just under the cap
    ],
)
def test_huge_inner_lengths_are_malformed(body: bytes) -> None:
    payload = struct.pack(">hhih", 0, 3, 1, 1) + b"c" + body
    tracemalloc.start()
    try:
        server = ServerProtocol()
        server.receive_data(frame(payload))
        with pytest.raises(MalformedRequest) as info:
            server.next_request()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert info.value.header is not None and info.value.header.api_key == 0
    assert peak < 1 << 20
