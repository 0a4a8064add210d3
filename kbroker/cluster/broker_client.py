"""An asyncio connection from this broker to another one (followers fetching from leaders).

One request at a time per connection, as a Kafka replica fetcher has: the fetcher waits for
each answer before asking again, so no pipelining is needed. Versions are fixed by the caller:
both ends are kbroker, which serves every version it sends.

On a SASL inter-broker listener the connection authenticates first (SaslHandshake v1 and
SaslAuthenticate) and, when the other broker gives its session a lifetime
(`connections.max.reauth.ms`), re-authenticates on the same connection before the next request
once 85 % of it has passed, as the Java client does (KIP-368).
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import time
from typing import Any

from construct import ConstructError, Container

from kbroker.security.sasl_client import authenticate_async
from kbroker.security.sasl_config import SaslCredentials
from protocol.connection import ClientProtocol
from protocol.errors import KafkaError
from protocol.primitives import ProtocolError

# The reader buffers up to this much before pausing the socket: a fetch answer of a few MiB
# arrives without a pause and resume per 128 KiB (asyncio's default limit is 64 KiB).
READ_LIMIT = 8 << 20
REAUTH_FRACTION = 0.85  # of the session's lifetime, when the connection re-authenticates


class BrokerUnavailable(ConnectionError):
    """The other broker cannot be reached or answered nonsense; the caller backs off and retries."""


class AsyncBrokerClient:
    def __init__(self, host: str, port: int, client_id: str, timeout_s: float = 30.0,
                 ssl_context: ssl.SSLContext | None = None, sasl: SaslCredentials | None = None) -> None:
        self.host, self.port = host, port
        self.timeout_s = timeout_s
        self.ssl_context = ssl_context  # TLS when the inter-broker listener is SSL or SASL_SSL
        self.sasl = sasl  # the login when it is SASL_PLAINTEXT or SASL_SSL
        self._reauthenticate_at: float | None = None
        self._conn = ClientProtocol(client_id)
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    async def request(self, api_key: int, version: int, body: Any) -> Container:
        """Send one request and wait for its response; any failure closes the connection."""
        try:
            # asyncio.timeout, not wait_for: Python 3.11's wait_for can swallow a cancellation
            # that arrives as the answer does, and a stopped fetcher would then run on.
            async with asyncio.timeout(self.timeout_s):
                return await self._exchange(api_key, version, body)
        except (OSError, TimeoutError, ConstructError, ProtocolError, EOFError, KafkaError) as e:
            await self.close()
            raise BrokerUnavailable(f"broker {self.address}: {e or type(e).__name__}") from None

    async def _exchange(self, api_key: int, version: int, body: Any) -> Container:
        if self._writer is None:
            if self.ssl_context is None:
                self._reader, self._writer = await asyncio.open_connection(self.host, self.port, limit=READ_LIMIT)
            else:  # the handshake counts against the request's timeout
                self._reader, self._writer = await asyncio.open_connection(
                    self.host, self.port, ssl=self.ssl_context, server_hostname=self.host, limit=READ_LIMIT)
            self._conn = ClientProtocol(self._conn.client_id)
            if self.sasl is not None:
                await self._authenticate()
        elif self._reauthenticate_at is not None and time.monotonic() >= self._reauthenticate_at:
            await self._authenticate()
        return await self._round_trip(api_key, version, body)

    async def _authenticate(self) -> None:
        """SASL login (again); a refusal is a KafkaError, which closes the connection."""
        assert self.sasl is not None
        started = time.monotonic()
        lifetime_ms = await authenticate_async(self._round_trip, self.sasl)
        self._reauthenticate_at = started + lifetime_ms * REAUTH_FRACTION / 1000 if lifetime_ms > 0 else None

    async def _round_trip(self, api_key: int, version: int, body: Any) -> Container:
        assert self._reader is not None and self._writer is not None
        _, data = self._conn.encode_request(api_key, version, body)
        self._writer.write(data)
        await self._writer.drain()
        # The frame is taken whole from the reader's buffer and parsed in place: a fetch's
        # records reach the follower's log with no copy on the way (IncompleteReadError, an
        # EOFError, when the other broker hangs up).
        size = self._conn.response_size(await self._reader.readexactly(4))
        return self._conn.parse_response(await self._reader.readexactly(size))[1]

    async def close(self) -> None:
        writer, self._writer, self._reader = self._writer, None, None
        self._reauthenticate_at = None
        if writer is not None:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()
