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
import collections
import contextlib
import ssl
import time
from collections.abc import Callable
from typing import Any

from construct import ConstructError, Container

from kbroker.security.sasl_client import authenticate_async
from kbroker.security.sasl_config import SaslCredentials
from protocol.connection import ClientProtocol
from protocol.errors import KafkaError
from protocol.primitives import ProtocolError

# Answers up to this size are read into one buffer and copied out; a larger one (a fetch answer
# with records) is read by the socket straight into a buffer of its own, and parsed there.
SCRATCH_SIZE = 64 << 10
REAUTH_FRACTION = 0.85  # of the session's lifetime, when the connection re-authenticates


class BrokerUnavailable(ConnectionError):
    """The other broker cannot be reached or answered nonsense; the caller backs off and retries."""


class AnswerReader(asyncio.BufferedProtocol):
    """The client's side of one connection: answer frames read with at most one copy.

    Small frames arrive in a scratch buffer and are copied out whole; for a frame larger than it,
    the socket fills a buffer of the frame's size directly (`get_buffer`), so a follower's fetch
    answer reaches its log without a copy. `next_frame` waits for the next whole frame (without
    its size prefix); a hang-up or error raises EOFError or the error.
    """

    def __init__(self, response_size: Callable[[bytes], int]) -> None:
        self._response_size = response_size  # the checked size a 4-byte prefix announces
        self._scratch = bytearray(SCRATCH_SIZE)
        self._filled = 0
        self._big: bytearray | None = None
        self._big_filled = 0
        self._frames: collections.deque[bytes | bytearray] = collections.deque()
        self._waiter: asyncio.Future[None] | None = None
        self._error: BaseException | None = None
        self._write_paused = False
        self._drain_waiter: asyncio.Future[None] | None = None
        self.transport: asyncio.Transport | None = None
        self._closed: asyncio.Future[None] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self._closed = asyncio.get_running_loop().create_future()

    def get_buffer(self, sizehint: int) -> memoryview:
        if self._big is not None:
            return memoryview(self._big)[self._big_filled:]
        return memoryview(self._scratch)[self._filled:]

    def buffer_updated(self, nbytes: int) -> None:
        if self._big is not None:
            self._big_filled += nbytes
            if self._big_filled == len(self._big):
                self._frames.append(self._big)
                self._big = None
                self._wake()
            return
        self._filled += nbytes
        try:
            self._cut_frames()
        except Exception as e:  # a frame size over the limit: nothing after it can be read
            self._fail(e)
            if self.transport is not None:
                self.transport.abort()

    def _cut_frames(self) -> None:
        scratch, position = self._scratch, 0
        while self._filled - position >= 4:
            size = self._response_size(bytes(scratch[position:position + 4]))
            available = self._filled - position - 4
            if available >= size:
                self._frames.append(bytes(scratch[position + 4:position + 4 + size]))
                position += 4 + size
                continue
            if 4 + size > len(scratch):
                self._big = bytearray(size)
                self._big[:available] = scratch[position + 4:self._filled]
                self._big_filled = available
                position = self._filled
            break
        if position:
            remaining = self._filled - position
            scratch[:remaining] = scratch[position:self._filled]
            self._filled = remaining
        if self._frames:
            self._wake()

    def eof_received(self) -> bool:
        self._fail(EOFError("the other broker closed the connection"))
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self._fail(exc or EOFError("connection lost"))
        if self._closed is not None and not self._closed.done():
            self._closed.set_result(None)
        if self._drain_waiter is not None and not self._drain_waiter.done():
            self._drain_waiter.set_exception(ConnectionError("connection lost"))

    def pause_writing(self) -> None:
        self._write_paused = True

    def resume_writing(self) -> None:
        self._write_paused = False
        if self._drain_waiter is not None and not self._drain_waiter.done():
            self._drain_waiter.set_result(None)

    def _fail(self, error: BaseException) -> None:
        if self._error is None:
            self._error = error
        self._wake()

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    async def drain(self) -> None:
        if self._error is not None:
            raise ConnectionError(str(self._error))
        if self._write_paused:
            self._drain_waiter = asyncio.get_running_loop().create_future()
            try:
                await self._drain_waiter
            finally:
                self._drain_waiter = None

    async def closed(self) -> None:
        """Wait until the transport has closed."""
        if self._closed is not None:
            await self._closed

    async def next_frame(self) -> bytes | bytearray:
        while not self._frames:
            if self._error is not None:
                raise self._error
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
        return self._frames.popleft()


class AsyncBrokerClient:
    def __init__(self, host: str, port: int, client_id: str, timeout_s: float = 30.0,
                 ssl_context: ssl.SSLContext | None = None, sasl: SaslCredentials | None = None) -> None:
        self.host, self.port = host, port
        self.timeout_s = timeout_s
        self.ssl_context = ssl_context  # TLS when the inter-broker listener is SSL or SASL_SSL
        self.sasl = sasl  # the login when it is SASL_PLAINTEXT or SASL_SSL
        self._reauthenticate_at: float | None = None
        self._conn = ClientProtocol(client_id)
        self._answers: AnswerReader | None = None

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
        if self._answers is None:
            conn = ClientProtocol(self._conn.client_id)
            answers = AnswerReader(conn.response_size)
            loop = asyncio.get_running_loop()
            if self.ssl_context is None:
                await loop.create_connection(lambda: answers, self.host, self.port)
            else:  # the handshake counts against the request's timeout
                await loop.create_connection(lambda: answers, self.host, self.port, ssl=self.ssl_context,
                                             server_hostname=self.host)
            self._conn, self._answers = conn, answers
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
        answers = self._answers
        assert answers is not None and answers.transport is not None
        _, data = self._conn.encode_request(api_key, version, body)
        answers.transport.write(data)
        await answers.drain()
        # Parsed in place: a fetch's record sets are views into the frame the socket filled.
        return self._conn.parse_response(await answers.next_frame())[1]

    async def close(self) -> None:
        answers, self._answers = self._answers, None
        self._reauthenticate_at = None
        if answers is not None and answers.transport is not None:
            answers.transport.close()
            with contextlib.suppress(OSError, EOFError, ConnectionError):
                await answers.closed()
