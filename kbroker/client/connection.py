"""One blocking socket to one broker, with the API versions both sides speak, and the
bootstrap list that names where to connect first."""

from __future__ import annotations

import socket
from types import ModuleType
from typing import Any

from construct import ConstructError, Container

from kbroker.client.errors import BrokerUnreachable, check
from kbroker.security.client_config import ClientSecurity
from kbroker.security.sasl_client import authenticate_sync
from protocol.connection import ClientProtocol
from protocol.errors import ErrorCode, KafkaError
from protocol.messages import BY_KEY
from protocol.primitives import ProtocolError

API_VERSIONS = 18


def parse_bootstrap(bootstrap: str) -> list[tuple[str, int]]:
    addresses = []
    for item in bootstrap.split(","):
        host, sep, port = item.strip().rpartition(":")
        if not sep or not host or not port.isdigit():
            raise ValueError(f"invalid bootstrap address {item.strip()!r} (expected host:port)")
        addresses.append((host.strip("[]"), int(port)))
    if not addresses:
        raise ValueError("no bootstrap address given")
    return addresses


class BrokerConnection:
    """One socket to one broker, with the API versions both sides speak."""

    def __init__(self, host: str, port: int, client_id: str, timeout: float,
                 security: ClientSecurity | None = None) -> None:
        self.address = f"{host}:{port}"
        try:
            self._sock = socket.create_connection((host, port), timeout=timeout)
            if security is not None:  # TLS (SSL, SASL_SSL): its handshake here
                self._sock = security.wrap(self._sock, host)
        except OSError as e:
            raise BrokerUnreachable(f"cannot connect to broker {self.address}: {_reason(e)}") from None
        self._sock.settimeout(timeout)
        self._conn = ClientProtocol(client_id)
        self.versions: dict[int, int] = self._negotiate()
        if security is not None and security.sasl is not None:  # SASL_PLAINTEXT, SASL_SSL
            authenticate_sync(self.send, security.sasl)

    def _negotiate(self) -> dict[int, int]:
        """The highest version of each API that this module and the broker both know."""
        response = self.send(API_VERSIONS, 3, {"client_software_name": "kbroker-client",
                                                "client_software_version": "0.1.0"})
        check(response.error_code, context="ApiVersions")
        versions = {}
        for entry in response.api_keys:
            api = BY_KEY.get(entry.api_key)
            if api is None:
                continue
            high = min(api.MAX_VERSION, entry.max_version)
            if high >= max(api.MIN_VERSION, entry.min_version):
                versions[entry.api_key] = high
        return versions

    def version_for(self, api: ModuleType) -> int:
        version = self.versions.get(api.API_KEY)
        if version is None:
            raise KafkaError(ErrorCode.UNSUPPORTED_VERSION,
                             f"broker {self.address} does not support {api.NAME}")
        return version

    def send(self, api_key: int, version: int, body: Any) -> Container:
        """Send one request and wait for its response."""
        return self._exchange(api_key, version, body, expect_response=True)

    def send_only(self, api_key: int, version: int, body: Any) -> None:
        """Send a request the broker does not answer (a produce with acks=0)."""
        self._exchange(api_key, version, body, expect_response=False)

    def _exchange(self, api_key: int, version: int, body: Any, expect_response: bool) -> Container:
        _, data = self._conn.encode_request(api_key, version, body)
        try:
            self._sock.sendall(data)
            return self._receive() if expect_response else Container()
        except TimeoutError:
            raise KafkaError(ErrorCode.REQUEST_TIMED_OUT,
                             f"no response from broker {self.address} in time") from None
        except OSError as e:
            raise BrokerUnreachable(f"connection to broker {self.address} failed: {_reason(e)}") from None
        except (ConstructError, ProtocolError) as e:
            raise BrokerUnreachable(f"unreadable response from broker {self.address}: {e}") from None

    def _receive(self) -> Container:
        while (response := self._conn.next_response()) is None:
            chunk = self._sock.recv(1 << 20)
            if not chunk:
                raise BrokerUnreachable(f"broker {self.address} closed the connection")
            self._conn.receive_data(chunk)
        return response[1]

    def close(self) -> None:
        self._sock.close()


def _reason(e: OSError) -> str:
    return e.strerror or str(e) or type(e).__name__
