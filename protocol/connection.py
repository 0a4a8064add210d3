"""Sans-io Kafka connections: bytes in, events out; objects in, bytes out.

`ClientProtocol` is a client's side of one connection (the CLI tools, the inter-broker client
and tests); `ServerProtocol` is its mirror, a broker's side, for tests (the broker's own
`kbroker.server.connection.ServedConnection` calls `decode_request`/`encode_response`
directly). Neither touches a socket: the caller feeds received bytes with `receive_data` and
sends what `encode_*` returns.
"""

from __future__ import annotations

import io
import struct
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from construct import ConstructError, Container

from protocol.messages import BY_KEY, request_header, response_header
from protocol.primitives import (
    ProtocolError,
    SegmentedWriter,
    TooManyEntries,
    UnknownFieldError,
    ViewStream,
    build_into,
    parse_all,
    parse_context,
)
from protocol.struct_compiler import parser

_SIZE = struct.Struct(">i")
PRODUCE_KEY = 0
API_VERSIONS_KEY = 18
CONTROLLED_SHUTDOWN_KEY = 7


class FrameTooLarge(ProtocolError):
    """A frame larger than socket.request.max.bytes: the connection must close."""


def request_header_version(api: ModuleType, version: int) -> int:
    if api.API_KEY == CONTROLLED_SHUTDOWN_KEY and version == 0:
        return 0
    flexible = api.FLEXIBLE_FROM is not None and version >= api.FLEXIBLE_FROM
    return 2 if flexible else 1


def response_header_version(api: ModuleType, version: int) -> int:
    # ApiVersions answers with header v0 at every version, so a client that sent a version
    # the broker does not know can still read the answer.
    if api.API_KEY == API_VERSIONS_KEY:
        return 0
    flexible = api.FLEXIBLE_FROM is not None and version >= api.FLEXIBLE_FROM
    return 1 if flexible else 0


@dataclass(slots=True)
class RequestHeader:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None


@dataclass(slots=True)
class Request:
    """One decoded request. `body` is None when the API or version is unknown here."""

    header: RequestHeader
    api: ModuleType | None
    body: Container | None
    size: int

    @property
    def known(self) -> bool:
        return self.body is not None


class MalformedRequest(ProtocolError):
    """The frame could not be decoded; carries the header when it was readable."""

    def __init__(self, message: str, header: RequestHeader | None = None) -> None:
        super().__init__(message)
        self.header = header


class TooManyEntriesRequest(MalformedRequest):
    """A request whose arrays hold more entries than the decoding allowed."""


class _FrameReader:
    def __init__(self, max_frame_size: int) -> None:
        self.max_frame_size = max_frame_size
        self._buffer = bytearray()

    def receive_data(self, data: bytes) -> None:
        self._buffer += data

    def next_frame(self) -> memoryview | None:
        buffer = self._buffer
        if len(buffer) < 4:
            return None
        (size,) = _SIZE.unpack_from(buffer, 0)
        if size < 0 or size > self.max_frame_size:
            raise FrameTooLarge(f"frame of {size} bytes exceeds {self.max_frame_size}")
        if len(buffer) < 4 + size:
            return None
        frame = bytes(buffer[4 : 4 + size])
        del buffer[: 4 + size]
        return memoryview(frame)

    @property
    def buffered(self) -> int:
        return len(self._buffer)


class ServerProtocol:
    """The broker's side of one connection."""

    def __init__(self, max_request_size: int = 104857600) -> None:
        self._frames = _FrameReader(max_request_size)

    def receive_data(self, data: bytes) -> None:
        self._frames.receive_data(data)

    def next_request(self) -> Request | None:
        """The next complete request, or None until more bytes arrive.

        Raises FrameTooLarge or MalformedRequest; the caller answers or closes.
        """
        frame = self._frames.next_frame()
        if frame is None:
            return None
        return decode_request(frame)

    def encode_response(self, header: RequestHeader, body: Any, version: int | None = None) -> list:
        return encode_response(header, body, version)


def encode_response(header: RequestHeader, body: Any, version: int | None = None) -> list:
    """Wire parts (bytes and external slices) of a response, size prefix included."""
    api = BY_KEY[header.api_key]
    version = header.api_version if version is None else version
    writer = SegmentedWriter()
    writer.write(b"\0\0\0\0")  # size, patched below
    build_into(response_header.SCHEMA[response_header_version(api, version)],
               {"correlation_id": header.correlation_id}, writer)
    build_message(api.RESPONSE[version], body, writer, f"{api.NAME}Response v{version}")
    writer.getbuffer()[0:4] = _SIZE.pack(writer.total_size - 4)
    return writer.parts()


def build_message(con: Any, body: Any, writer: io.BytesIO, message: str) -> None:
    """Build a message body; an UnknownFieldError names the message and version it was for."""
    try:
        build_into(con, body, writer)
    except UnknownFieldError as e:
        e.message = message
        raise


def _read_header(frame: memoryview) -> tuple[RequestHeader, ModuleType | None, ViewStream]:
    if len(frame) < 8:
        raise MalformedRequest("frame shorter than a request header")
    api_key, api_version, correlation_id = struct.unpack_from(">hhi", frame, 0)
    api = BY_KEY.get(api_key)
    # Produce requests keep their record sets as views into the frame the socket filled (the log
    # makes the one copy it patches); every other request's fields are copies.
    stream = ViewStream(memoryview(frame), copy=api_key != PRODUCE_KEY)
    partial = RequestHeader(api_key, api_version, correlation_id, None)
    header_version = request_header_version(api, api_version) if api else 1
    try:
        raw = parse_all_stream(request_header.SCHEMA[header_version], stream)
    except ConstructError as e:
        if not (api_key == API_VERSIONS_KEY and header_version == 2):
            raise MalformedRequest(f"bad request header: {e}", partial) from None
        # A client probing with an ApiVersions version unknown here may not have written the
        # flexible header's tagged fields; it still deserves the unsupported-version answer.
        stream.seek(0)
        try:
            raw = parse_all_stream(request_header.SCHEMA[1], stream)
        except ConstructError:
            raise MalformedRequest(f"bad request header: {e}", partial) from None
    return RequestHeader(api_key, api_version, correlation_id, raw.client_id), api, stream


def parse_all_stream(con, stream: io.BytesIO | ViewStream, max_entries: int | None = None) -> Container:
    context = parse_context(max_entries)
    if isinstance(stream, ViewStream):  # the compiled parser reads the buffer in place
        value, stream.position = parser(con)(stream.view, stream.position, context, not stream.copy)
        return value
    return con._parsereport(stream, context, "")


def decode_request(frame: memoryview, max_entries: int | None = None) -> Request:
    """The request in `frame`; with `max_entries`, a request whose arrays hold more entries in
    all is refused (TooManyEntriesRequest, a MalformedRequest) as soon as an array's length
    says so, before its entries are built."""
    header, api, stream = _read_header(frame)
    if api is None or header.api_version not in api.REQUEST:
        return Request(header, api, None, len(frame))
    try:
        body = parse_all_stream(api.REQUEST[header.api_version], stream, max_entries)
    except TooManyEntries as e:
        raise TooManyEntriesRequest(f"bad {api.NAME} v{header.api_version} request: {e}", header) from None
    except ConstructError as e:
        raise MalformedRequest(f"bad {api.NAME} v{header.api_version} request: {e}", header) from None
    return Request(header, api, body, len(frame))


class ClientProtocol:
    """A client's side: numbers requests and matches responses to them."""

    def __init__(self, client_id: str | None = "kbroker", max_response_size: int = 1 << 30) -> None:
        self.client_id = client_id
        self._frames = _FrameReader(max_response_size)
        self._next_correlation_id = 0
        self._pending: dict[int, tuple[ModuleType, int]] = {}

    def encode_request(self, api_key: int, version: int, body: Any) -> tuple[int, bytes]:
        api = BY_KEY[api_key]
        correlation_id = self._next_correlation_id
        self._next_correlation_id += 1
        writer = io.BytesIO()
        writer.write(b"\0\0\0\0")
        header = {
            "request_api_key": api_key,
            "request_api_version": version,
            "correlation_id": correlation_id,
            "client_id": self.client_id,
        }
        build_into(request_header.SCHEMA[request_header_version(api, version)], header, writer)
        build_message(api.REQUEST[version], body, writer, f"{api.NAME}Request v{version}")
        data = bytearray(writer.getvalue())
        data[0:4] = _SIZE.pack(len(data) - 4)
        self._pending[correlation_id] = (api, version)
        return correlation_id, bytes(data)

    def receive_data(self, data: bytes) -> None:
        self._frames.receive_data(data)

    def response_size(self, prefix: bytes) -> int:
        """The size a response's 4-byte prefix announces, for a caller that reads each frame
        itself (then `parse_response`); FrameTooLarge beyond the limit."""
        (size,) = _SIZE.unpack(prefix)
        if size < 4 or size > self._frames.max_frame_size:
            raise FrameTooLarge(f"response frame of {size} bytes (limit {self._frames.max_frame_size})")
        return size

    def parse_response(self, frame: bytes | bytearray) -> tuple[int, Container]:
        """A whole response frame (without its size prefix), parsed in place: large fields (a
        fetch's record sets) are views into `frame`, not copies."""
        return self._parse_response(frame, ViewStream(memoryview(frame)))

    def next_response(self) -> tuple[int, Container] | None:
        frame = self._frames.next_frame()
        if frame is None:
            return None
        return self._parse_response(frame, ViewStream(memoryview(frame), copy=True))

    def _parse_response(self, frame: bytes | bytearray | memoryview,
                        stream: ViewStream) -> tuple[int, Container]:
        (correlation_id,) = struct.unpack_from(">i", frame, 0)
        api, version = self._pending.pop(correlation_id)
        parse_all_stream(response_header.SCHEMA[response_header_version(api, version)], stream)
        return correlation_id, parse_all_stream(api.RESPONSE[version], stream)


__all__ = [
    "ClientProtocol",
    "FrameTooLarge",
    "MalformedRequest",
    "Request",
    "RequestHeader",
    "ServerProtocol",
    "UnknownFieldError",
    "decode_request",
    "encode_response",
    "parse_all",
]
