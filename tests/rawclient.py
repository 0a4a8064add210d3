"""A raw protocol client for tests that need exact control of the bytes on the wire."""

from __future__ import annotations

import socket
import struct
from typing import Any

from construct import Container

from protocol.connection import ClientProtocol


class RawClient:
    def __init__(self, bootstrap: str, timeout: float = 10.0, client_id: str = "raw-test") -> None:
        host, port = bootstrap.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=timeout)
        self.conn = ClientProtocol(client_id)

    def request(self, api_key: int, version: int, body: dict[str, Any]) -> Container:
        _, data = self.conn.encode_request(api_key, version, body)
        self.sock.sendall(data)
        return self.read_response()

    def read_response(self) -> Container:
        while (response := self.conn.next_response()) is None:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("closed by broker")
            self.conn.receive_data(chunk)
        return response[1]

    def send_raw(self, frame: bytes) -> None:
        self.sock.sendall(struct.pack(">i", len(frame)) + frame)

    def read_frame(self) -> bytes | None:
        """One raw response frame, or None when the broker closed the connection."""
        header = self._read_exact(4)
        if header is None:
            return None
        (size,) = struct.unpack(">i", header)
        return self._read_exact(size)

    def _read_exact(self, size: int) -> bytes | None:
        data = b""
        while len(data) < size:
            try:
                chunk = self.sock.recv(size - len(data))
            except ConnectionResetError:
                return None
            if not chunk:
                return None
            data += chunk
        return data

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> RawClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
