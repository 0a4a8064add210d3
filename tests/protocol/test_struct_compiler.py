"""The compiled codecs agree with the KStruct interpreter on every declaration.

Values come from the strategies derived from the declarations (tests/protocol/strategies.py):
the compiled builder writes the interpreter's bytes, the compiled parser reads them back to the
interpreter's values and stops where it stops, and damaged bytes make both fail with a
ConstructError or both read the same thing.
"""

from __future__ import annotations

import io
from typing import Any

import pytest
from construct import ConstructError
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from protocol.messages import BY_KEY
from protocol.primitives import (
    KStruct,
    SegmentedWriter,
    TooManyEntries,
    UnknownFieldError,
    build_context,
    parse_context,
)
from protocol.struct_compiler import builder, parser
from tests.protocol.strategies import api_structs, data_structs, normalise, value_strategy

CASES = [*api_structs(), *data_structs()]
AGREEMENT = settings(max_examples=12, deadline=None, database=None,
                     suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def interpreted_bytes(con: KStruct, value: Any) -> bytes:
    writer = SegmentedWriter()
    con._build(value, writer, build_context(), "")
    return b"".join(p if isinstance(p, bytes) else p.read_bytes() for p in writer.parts())


def compiled_bytes(con: KStruct, value: Any) -> bytes:
    writer = SegmentedWriter()
    builder(con)(value, writer, build_context())
    return b"".join(p if isinstance(p, bytes) else p.read_bytes() for p in writer.parts())


def interpreted_parse(con: KStruct, data: bytes, max_entries: int | None = None) -> tuple[Any, int]:
    stream = io.BytesIO(data)
    value = con._parsereport(stream, parse_context(max_entries), "")
    return normalise(value), stream.tell()


def compiled_parse(con: KStruct, data: bytes, max_entries: int | None = None) -> tuple[Any, int]:
    value, end = parser(con)(memoryview(data), 0, parse_context(max_entries), False)
    return normalise(value), end


def outcome(parse: Any, con: KStruct, data: bytes, max_entries: int | None = None) -> Any:
    try:
        return parse(con, data, max_entries)
    except ConstructError as e:
        return type(e).__name__ if isinstance(e, TooManyEntries) else "ConstructError"


@pytest.mark.parametrize(("name", "con"), CASES, ids=[name for name, _ in CASES])
@AGREEMENT
@given(data=st.data())
def test_compiled_codecs_agree_with_the_interpreter(name: str, con: KStruct, data: st.DataObject) -> None:
    value = data.draw(value_strategy(con))
    wire = interpreted_bytes(con, value)
    assert compiled_bytes(con, value) == wire
    assert compiled_parse(con, wire) == interpreted_parse(con, wire)


@pytest.mark.parametrize(("name", "con"), CASES, ids=[name for name, _ in CASES])
@AGREEMENT
@given(data=st.data())
def test_damaged_bytes_fail_or_succeed_alike(name: str, con: KStruct, data: st.DataObject) -> None:
    wire = bytearray(interpreted_bytes(con, data.draw(value_strategy(con))))
    if wire and data.draw(st.booleans()):
        del wire[data.draw(st.integers(0, len(wire) - 1)):]
    for _ in range(data.draw(st.integers(0, 3))):
        if wire:
            wire[data.draw(st.integers(0, len(wire) - 1))] = data.draw(st.integers(0, 255))
    damaged = bytes(wire)
    budget = data.draw(st.none() | st.integers(0, 4))
    assert outcome(compiled_parse, con, damaged, budget) == outcome(interpreted_parse, con, damaged, budget)


def produce_request(records: bytes) -> dict[str, Any]:
    return {"transactional_id": None, "acks": -1, "timeout_ms": 30000,
            "topic_data": [{"name": "t", "partition_data": [{"index": 0, "records": records}]}]}


def test_large_byte_fields_are_views_only_when_asked() -> None:
    con = BY_KEY[0].REQUEST[9]
    wire = interpreted_bytes(con, produce_request(b"r" * 5000))
    small = interpreted_bytes(con, produce_request(b"r" * 10))
    as_view = parser(con)(memoryview(wire), 0, parse_context(), True)[0]
    as_copy = parser(con)(memoryview(wire), 0, parse_context(), False)[0]
    small_view = parser(con)(memoryview(small), 0, parse_context(), True)[0]
    assert isinstance(as_view.topic_data[0].partition_data[0].records, memoryview)
    assert isinstance(as_copy.topic_data[0].partition_data[0].records, bytes)
    assert isinstance(small_view.topic_data[0].partition_data[0].records, bytes)
    assert bytes(as_view.topic_data[0].partition_data[0].records) == b"r" * 5000


def test_an_unknown_key_is_refused_with_its_path() -> None:
    con = BY_KEY[0].RESPONSE[9]
    body = {"responses": [{"name": "t", "partition_responses": [{"index": 0, "eror_code": 1}]}]}
    errors = []
    for build in (interpreted_bytes, compiled_bytes):
        with pytest.raises(UnknownFieldError) as caught:
            build(con, body)
        errors.append((caught.value.struct, caught.value.keys, caught.value.path))
    assert errors[0] == errors[1] == ("PartitionProduceResponse", ["eror_code"], ["responses", "partition_responses"])


def test_the_entry_budget_stops_a_parse_at_the_array_that_exceeds_it() -> None:
    con = BY_KEY[1].REQUEST[4]  # Fetch: topics, each with partitions
    body = {"replica_id": -1, "max_wait_ms": 500, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": 0,
            "topics": [{"topic": "t", "partitions": [{"partition": i, "fetch_offset": 0, "partition_max_bytes": 1}
                                                    for i in range(3)]}]}
    wire = interpreted_bytes(con, body)
    assert compiled_parse(con, wire, 4) == interpreted_parse(con, wire, 4)
    with pytest.raises(TooManyEntries):
        compiled_parse(con, wire, 3)
    with pytest.raises(TooManyEntries):
        interpreted_parse(con, wire, 3)


def _structs_within(value: Any, found: dict[int, KStruct]) -> None:
    """Every KStruct in `value` and nested in it (fields, array elements, wrapped structs)."""
    if isinstance(value, KStruct):
        if id(value) in found:
            return
        found[id(value)] = value
        for f in (*value.fields, *value.tagged.values()):
            _structs_within(f.con, found)
    elif isinstance(value, dict):
        for item in value.values():
            _structs_within(item, found)
    elif isinstance(value, list | tuple):
        for item in value:
            _structs_within(item, found)
    elif value is not None and hasattr(value, "element"):
        _structs_within(value.element, found)
    elif value is not None and isinstance(getattr(value, "struct", None), KStruct):
        _structs_within(value.struct, found)


def record_structs() -> list[tuple[str, KStruct]]:
    """The declarations of the internal topics' records (not generated from Kafka's specs)."""
    from kbroker.coordinator import share_state_records
    from protocol import consumer_group_records, coordinator_records

    found: dict[int, KStruct] = {}
    for module in (consumer_group_records, coordinator_records, share_state_records):
        for value in vars(module).values():
            _structs_within(value, found)
    return [(f"{con.name}-{index}", con) for index, con in enumerate(found.values())]


RECORD_STRUCTS = record_structs()


@pytest.mark.parametrize(("name", "con"), RECORD_STRUCTS, ids=[name for name, _ in RECORD_STRUCTS])
def test_record_declarations_build_and_parse_alike(name: str, con: KStruct) -> None:
    """Defaults, and tagged fields given as None: some of these are written even when null."""
    for value in ({}, {f.name: None for f in con.tagged.values()}):
        wire = interpreted_bytes(con, value)
        assert compiled_bytes(con, value) == wire
        assert compiled_parse(con, wire) == interpreted_parse(con, wire)
