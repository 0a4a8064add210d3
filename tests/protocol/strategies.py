"""Hypothesis strategies derived from `KStruct` declarations, and value normalisation.

`value_strategy(con)` walks a declaration (KStruct fields and tagged fields, KArray,
KString, KBytes, primitives) and draws values it can build. `expected_parse(con, value)`
is what parsing the built bytes must give back: absent fields (other versions) and
omitted tagged fields come back holding their defaults.
"""

from __future__ import annotations

import io
import uuid
from collections.abc import Iterator
from types import ModuleType
from typing import Any

from construct import Construct
from hypothesis import strategies as st

from protocol.messages import (
    BY_KEY,
    consumer_protocol_assignment,
    consumer_protocol_subscription,
    request_header,
    response_header,
)
from protocol.primitives import (
    Bool,
    Float64,
    Int8,
    Int16,
    Int32,
    Int64,
    KArray,
    KBytes,
    KString,
    KStruct,
    SegmentedWriter,
    UInt16,
    UInt32,
    Uuid,
    UVarInt,
    VarInt,
    build_into,
)

MAX_ARRAY = 3
MAX_TEXT = 12
MAX_BYTES = 24


def _int(bits: int) -> st.SearchStrategy[int]:
    low, high = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    # Bias towards the edges, where sign and width mistakes show.
    return st.one_of(st.sampled_from([low, -1, 0, 1, high]), st.integers(low, high))


_PRIMITIVES: dict[int, st.SearchStrategy[Any]] = {
    id(Int8): _int(8),
    id(Int16): _int(16),
    id(Int32): _int(32),
    id(Int64): _int(64),
    id(UInt16): st.integers(0, 0xFFFF),
    id(UInt32): st.integers(0, 0xFFFFFFFF),
    id(Float64): st.floats(allow_nan=False),
    id(Bool): st.booleans(),
    id(UVarInt): st.integers(0, (1 << 32) - 1),
    id(VarInt): _int(32),
    id(Uuid): st.uuids(),
}

_cache: dict[int, st.SearchStrategy[Any]] = {}


def value_strategy(con: Construct) -> st.SearchStrategy[Any]:
    """A strategy for values `con` can build."""
    key = id(con)
    if key not in _cache:
        _cache[key] = _derive(con)
    return _cache[key]


def _nullable(con: Construct, inner: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.none() | inner if getattr(con, "nullable", False) else inner


def _derive(con: Construct) -> st.SearchStrategy[Any]:
    primitive = _PRIMITIVES.get(id(con))
    if primitive is not None:
        return primitive
    if isinstance(con, KStruct):
        required = {f.name: value_strategy(f.con) for f in con.fields}
        optional = {f.name: value_strategy(f.con) for f in con.tagged.values()}
        return _nullable(con, st.fixed_dictionaries(required, optional=optional))
    if isinstance(con, KArray):
        return _nullable(con, st.lists(value_strategy(con.element), max_size=MAX_ARRAY))
    if isinstance(con, KString):
        # Any code point but surrogates; UTF-8 lengths reach 4 bytes per character.
        return _nullable(con, st.text(max_size=MAX_TEXT))
    if isinstance(con, KBytes):
        return _nullable(con, st.binary(max_size=MAX_BYTES))
    raise TypeError(f"no strategy for {con!r}")


def normalise(value: Any) -> Any:
    """Plain dicts, lists and bytes, so parsed Containers compare with drawn values."""
    if isinstance(value, dict):
        return {k: normalise(v) for k, v in value.items() if not k.startswith("_")}
    if isinstance(value, list | tuple):
        return [normalise(v) for v in value]
    if isinstance(value, bytearray | memoryview):
        return bytes(value)
    return value


def expected_parse(con: Construct, value: Any) -> Any:
    """What parsing `build(con, value)` must return, normalised."""
    if isinstance(con, KStruct) and not (value is None and getattr(con, "nullable", False)):
        out: dict[str, Any] = {}
        for f in con.fields:
            out[f.name] = expected_parse(f.con, value[f.name] if f.name in value else f.default_value())
        for f in con.tagged.values():
            v = value.get(f.name)
            out[f.name] = normalise(f.default_value()) if f.is_default(v) else expected_parse(f.con, v)
        for f in con.absent:
            out[f.name] = normalise(f.default_value())
        return out
    if con is Uuid and value is None:
        return uuid.UUID(int=0)
    if value is None:
        return None
    if isinstance(con, KArray):
        return [expected_parse(con.element, v) for v in value]
    if isinstance(con, KBytes):
        return b"".join(bytes(p) if isinstance(p, bytes | bytearray | memoryview) else p.read_bytes()
                        for p in (value if isinstance(value, list | tuple) else [value]))
    return normalise(value)


def build(con: Construct, value: Any) -> bytes:
    writer = SegmentedWriter()
    build_into(con, value, writer)
    return b"".join(p if isinstance(p, bytes) else p.read_bytes() for p in writer.parts())


def parse_exact(con: Construct, data: bytes) -> Any:
    """Parse `data` with `con`, requiring every byte to be consumed."""
    from protocol.connection import parse_all_stream

    stream = io.BytesIO(data)
    value = parse_all_stream(con, stream)
    assert stream.tell() == len(data), f"{len(data) - stream.tell()} trailing bytes after parse"
    return value


def api_structs() -> Iterator[tuple[str, KStruct]]:
    """(test id, declaration) for every request and response version of every API."""
    for key in sorted(BY_KEY):
        api: ModuleType = BY_KEY[key]
        for direction in ("REQUEST", "RESPONSE"):
            for version, con in sorted(getattr(api, direction).items()):
                yield f"{api.NAME}-{direction.lower()}-v{version}", con


def data_structs() -> Iterator[tuple[str, KStruct]]:
    """Headers and the consumer-protocol data schemas."""
    for module in (request_header, response_header, consumer_protocol_subscription, consumer_protocol_assignment):
        for version, con in sorted(module.SCHEMA.items()):
            yield f"{module.__name__.rsplit('.', 1)[-1]}-v{version}", con
