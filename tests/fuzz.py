"""A seeded, structure-aware generator of hostile request frames.

Each frame starts as a valid request of some API and version the broker advertises: its body is
built from the version's own declaration with values drawn from a small pool (the fuzz topic's
name, edge numbers, nulls where allowed, empty and long strings), then mutated as attackers and
broken clients do: bits flipped, lengths and varints replaced by huge or negative ones, null
markers planted, bytes cut off or appended, tagged fields added. The header stays readable, so
the frame reaches the API's decoder and handler rather than stopping at the framing.
"""

from __future__ import annotations

import random
import struct
import uuid
from collections.abc import Iterator
from typing import Any

from construct import Construct

from protocol.connection import ClientProtocol
from protocol.messages import BY_KEY
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
    UInt16,
    UInt32,
    Uuid,
    UVarInt,
    VarInt,
)

_EDGES = {
    id(Int8): (-128, -1, 0, 1, 127),
    id(Int16): (-32768, -1, 0, 1, 3, 32767),
    id(Int32): (-2147483648, -1, 0, 1, 2, 1000, 2147483647),
    id(Int64): (-(1 << 63), -2, -1, 0, 1, 1 << 40, (1 << 63) - 1),
    id(UInt16): (0, 1, 65535),
    id(UInt32): (0, 1, 0xFFFFFFFF),
    id(VarInt): (-1, 0, 1, 2147483647),
    id(UVarInt): (0, 1, 0xFFFFFFFF),
}


class FrameGenerator:
    def __init__(self, seed: int, topic: str, apis: list[tuple[int, int, int]]) -> None:
        """`apis`: (api key, min version, max version) as ApiVersions advertises them."""
        self.rng = random.Random(seed)
        self.topic = topic
        self.targets = [(key, version) for key, low, high in apis for version in range(low, high + 1)
                        if version in BY_KEY[key].REQUEST]
        self.client = ClientProtocol("fuzz")

    def frames(self, count: int) -> Iterator[tuple[int, int, bytes]]:
        """(api key, version, frame with its size prefix), `count` of them, every target in turn."""
        for i in range(count):
            key, version = self.targets[i % len(self.targets)]
            yield key, version, self.frame(key, version)

    def frame(self, key: int, version: int) -> bytes:
        schema = BY_KEY[key].REQUEST[version]
        _, data = self.client.encode_request(key, version, self.value(schema))
        header_end = self._header_end(data)
        body = bytearray(data[header_end:])
        for _ in range(self.rng.choice((0, 1, 1, 1, 2, 3))):
            body = self._mutate(body)
        frame = data[4:header_end] + bytes(body)
        return struct.pack(">i", len(frame)) + frame

    @staticmethod
    def _header_end(data: bytes) -> int:
        # size, api key, version, correlation id, client id ("fuzz", int16 length), and for
        # flexible versions the header's empty tag section; the body follows.
        end = 4 + 2 + 2 + 4 + 2 + len(b"fuzz")
        api_key, version = struct.unpack_from(">hh", data, 4)
        api = BY_KEY[api_key]
        flexible = api.FLEXIBLE_FROM is not None and version >= api.FLEXIBLE_FROM and not (
            api_key == 7 and version == 0)
        return end + (1 if flexible else 0)

    # -- values -------------------------------------------------------------------------------

    def value(self, con: Construct, depth: int = 0) -> Any:
        rng = self.rng
        if getattr(con, "nullable", False) and rng.random() < 0.1:
            return None
        edges = _EDGES.get(id(con))
        if edges is not None:
            return rng.choice(edges) if rng.random() < 0.6 else _random_int(rng, con)
        if con is Bool:
            return rng.random() < 0.5
        if con is Float64:
            return rng.choice((0.0, 1.5, -1.0))
        if con is Uuid:
            return rng.choice((uuid.UUID(int=0), uuid.uuid4()))
        if isinstance(con, KStruct):
            out = {f.name: self.value(f.con, depth + 1) for f in con.fields}
            for tagged in con.tagged.values():
                if rng.random() < 0.3:
                    out[tagged.name] = self.value(tagged.con, depth + 1)
            return out
        if isinstance(con, KArray):
            size = 0 if depth > 4 else rng.choice((0, 1, 1, 2, 3))
            return [self.value(con.element, depth + 1) for _ in range(size)]
        if isinstance(con, KString):
            return rng.choice((self.topic, self.topic, "", "fuzz-group", "x" * rng.randint(1, 300), "ünïcødé"))
        if isinstance(con, KBytes):
            return bytes(rng.getrandbits(8) for _ in range(rng.choice((0, 1, 8, 70))))
        raise TypeError(f"no values for {con!r}")

    # -- mutations ----------------------------------------------------------------------------

    def _mutate(self, body: bytearray) -> bytearray:
        rng = self.rng
        if not body:
            return bytearray(rng.randbytes(rng.randint(1, 16)))
        choice = rng.randrange(8)
        at = rng.randrange(len(body))
        if choice == 0:  # flip bits
            body[at] ^= 1 << rng.randrange(8)
        elif choice == 1:  # a huge or negative int32 length
            body[at : at + 4] = struct.pack(">i", rng.choice((-2, -1, 0x7FFFFFFF, 0x00FFFFFF, 0x10000)))
        elif choice == 2:  # a huge or negative int16 length
            body[at : at + 2] = struct.pack(">h", rng.choice((-2, -1, 0x7FFF)))
        elif choice == 3:  # a long unsigned varint (compact lengths, tag counts)
            body[at : at + 1] = rng.choice((b"\xff\xff\xff\xff\x0f", b"\x80\x80\x80\x80\x80\x01", b"\x00"))
        elif choice == 4:  # cut
            del body[at:]
        elif choice == 5:  # append junk (or a trailing tag section with an unknown tag)
            body += rng.choice((rng.randbytes(rng.randint(1, 32)), b"\x01\x7f\x03abc"))
        elif choice == 6:  # a null marker where a value was
            body[at : at + 2] = b"\xff\xff"
        else:  # bytes swapped around
            other = rng.randrange(len(body))
            body[at], body[other] = body[other], body[at]
        return body


def _random_int(rng: random.Random, con: Construct) -> int:
    if con in (UInt16, UInt32, UVarInt):
        return rng.randrange(0, 1 << (16 if con is UInt16 else 32))
    bits = {id(Int8): 8, id(Int16): 16, id(Int32): 32, id(Int64): 64, id(VarInt): 32}[id(con)]
    return rng.randrange(-(1 << (bits - 1)), 1 << (bits - 1))
