"""One client connection: read frames, run handlers one request at a time, write answers.

Requests of one connection are handled in order and answered in order, as Kafka does. Bytes
keep being read while a request is in progress, so a pipelining client never stalls on TCP,
up to MAX_QUEUED_REQUESTS waiting requests; then reading pauses. One exception to
one-at-a-time: an acks=all Produce whose batches are appended and only wait for the ISR (a
`Deferred` answer) lets the next request start, so a producer with several requests in flight
gets them replicated in one round instead of one round each; the answers still leave in request
order (at most MAX_DEFERRED outstanding).

Reading costs one copy per frame. Small frames arrive in a scratch buffer and are cut out of
it; a frame too large for it gets a buffer of exactly its size, which the socket then fills
directly. Every frame's size is taken from the broker's memory pool (`queued.max.request.bytes`)
before its body is read and given back once it is answered: while the pool is exhausted the
socket is not read. A frame above DECODE_INLINE_LIMIT whose arrays hold more than
DECODE_INLINE_ENTRIES entries is decoded in a worker thread, so one huge request does not stall
every other client while its thousands of entries are parsed; a large frame of few entries (a
produce request of big batches) is decoded on the loop, where it costs tens of microseconds
against a hundred for the trip through a thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import struct
import time
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, cast

from kbroker.handlers import HandlerResult, RequestContext, dispatch, failed, handlers
from kbroker.log_limiter import RateLimitedLog
from kbroker.metrics.stats import error_codes
from kbroker.security.principal import ANONYMOUS, SslPrincipalMapper, certificate_principal
from kbroker.security.sasl_server import Admission, SaslSession
from kbroker.server.loop_time import LoopTime
from kbroker.server.socket_writes import send_file_slice, sendfile_worth, write_joined
from protocol.connection import (
    MalformedRequest,
    Request,
    TooManyEntriesRequest,
    decode_request,
    encode_response,
)
from protocol.errors import ErrorCode

if TYPE_CHECKING:
    from kbroker.server.server import Server

log = logging.getLogger("kbroker.server")
limited_log = RateLimitedLog(log)

# Small frames are cut out of this per-connection buffer (allocated on first use: an idle
# connection costs no buffer); larger ones get their own.
SCRATCH_SIZE = 16 * 1024
# Decoded requests waiting for their turn; when full, reading pauses (TCP backpressure) so a
# client pipelining without limit cannot make the broker buffer without limit.
MAX_QUEUED_REQUESTS = 64
# How long a connection closed after an error answer waits for the client to hang up first.
ANSWER_LINGER_S = 0.5
# Answers not yet sent behind a deferred one (producers keep at most 5 requests in flight).
MAX_DEFERRED = 16
# Frames larger than this with more array entries than DECODE_INLINE_ENTRIES are decoded off
# the event loop, and their answers encoded off it.
DECODE_INLINE_LIMIT = 256 * 1024
DECODE_INLINE_ENTRIES = 256
# Answers with more entries than this are encoded off the event loop.
ENCODE_INLINE_ENTRIES = 2000
_SIZE = struct.Struct(">i")
SASL_HANDSHAKE_KEY = 17


@dataclass(frozen=True, slots=True)
class ConnectionLimits:
    max_request_size: int  # socket.request.max.bytes
    max_request_entries: int  # socket.request.max.entries: array entries of one request in all
    idle_ms: int  # connections.max.idle.ms: no bytes either way for this long closes the connection
    read_timeout_ms: int  # socket.request.read.timeout.ms: a started frame must arrive within this
    failed_authentication_delay_ms: int = 100  # connection.failed.authentication.delay.ms


@dataclass(slots=True)
class _Frame:
    data: bytes | bytearray
    reserved: int  # bytes taken from the memory pool, given back when answered
    received: float  # time.monotonic() when its last byte arrived (or, about, when read from the scratch buffer)


class ServedConnection(asyncio.BufferedProtocol):
    """The broker's handling of one accepted client connection (see the module docstring)."""

    def __init__(self, server: Server, ip: str, listener: str = "PLAINTEXT",
                 principal_mapper: SslPrincipalMapper | None = None, sasl: SaslSession | None = None) -> None:
        self.server = server
        self.broker = server.broker
        self.stats = server.stats
        self.limits = server.limits
        self.ip = ip
        self.peer = ip
        self.listener = listener  # the name of the listener it came in on
        # Who the client is: on a SASL listener the user it authenticated as (User:<name>); else
        # its TLS certificate's subject, mapped by ssl.principal.mapping.rules, or User:ANONYMOUS
        # (plaintext, or no client certificate). Kept for authorization.
        self.principal = ANONYMOUS
        self._principal_mapper = principal_mapper
        self.tls = principal_mapper is not None
        self.sasl = sasl  # the SASL exchange and session, on a SASL listener
        self.transport: asyncio.Transport | None = None
        now = time.monotonic()
        self.last_activity = now
        # Reading.
        self._scratch: bytearray | None = None
        self._scratch_len = 0
        self._big: bytearray | None = None  # the body of a frame too large for the scratch buffer
        self._big_filled = 0
        self._reserved = 0  # pool bytes taken for the frame being read
        self._frame_started: float | None = None  # when the first byte of an incomplete frame came
        self._waiting_for_memory: asyncio.Task[None] | None = None
        self._paused = False
        self._muted_until = 0.0  # monotonic time a throttled client's muting ends (0: not muted)
        # Processing.
        self._frames: deque[_Frame] = deque()
        self._wakeup = asyncio.Event()
        self._closing = False
        self._eof = False
        self._handling = False
        self.current_api: tuple[int, int] | None = None  # (api key, version) being handled, for stall reports
        self._processor: asyncio.Task[None] | None = None
        self._done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        # Answers behind a deferred one, in request order: each resolves to the parts to send,
        # or None to send nothing (acks=0); an exception closes the connection.
        self._answers: asyncio.Queue[asyncio.Future[list | None]] = asyncio.Queue(MAX_DEFERRED)
        self._sender: asyncio.Task[None] | None = None
        # Writing.
        self._write_paused = False
        self._drain_waiter: asyncio.Future[None] | None = None

    # -- transport callbacks --------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # A stream transport (asyncio's, or uvloop's, which does not subclass asyncio.Transport).
        self.transport = cast(asyncio.Transport, transport)
        peer = transport.get_extra_info("peername")
        if peer:
            self.peer = f"{peer[0]}:{peer[1]}"
        if self.tls and self.sasl is None and not self._authenticate(transport):
            return
        self._processor = asyncio.get_running_loop().create_task(self._process())

    def _authenticate(self, transport: asyncio.Transport) -> bool:
        """The principal of a TLS client from its certificate; a name no mapping rule applies
        to fails authentication and closes the connection, as in Kafka."""
        ssl_object = transport.get_extra_info("ssl_object")
        assert self._principal_mapper is not None
        try:
            der = ssl_object.getpeercert(binary_form=True) if ssl_object is not None else None
            self.principal = certificate_principal(der, self._principal_mapper)
        except Exception as e:  # no rule maps the name, or a certificate its parser refuses
            self.stats.authentication_failed(self.listener)
            limited_log.info("principal", "closing %s: authentication failed: %s", self.peer, e)
            self._closing = True
            transport.abort()
            return False
        log.debug("%s authenticated as %s on listener %s", self.peer, self.principal, self.listener)
        return True

    def never_started(self) -> None:
        """The connection closed before it was set up (a failed TLS handshake)."""
        self._closing = True
        if not self._done.done():
            self._done.set_result(None)

    def get_buffer(self, sizehint: int) -> memoryview:
        if self._big is not None:
            return memoryview(self._big)[self._big_filled :]
        if self._scratch is None:
            self._scratch = bytearray(SCRATCH_SIZE)
        return memoryview(self._scratch)[self._scratch_len :]

    def buffer_updated(self, nbytes: int) -> None:
        self.last_activity = time.monotonic()
        if self._closing:  # awaiting the client's hang-up: what it still sends is dropped
            self._big, self._scratch_len = None, 0
            return
        if self._big is not None:
            self._big_filled += nbytes
            if self._big_filled == len(self._big):
                self._deliver(self._big, self._reserved)
                self._big = None
                self._reserved = 0
                self._frame_started = None
            return
        self._scratch_len += nbytes
        self._cut_frames()

    def eof_received(self) -> bool:
        self._eof = True
        self._wakeup.set()
        # Keep the write side open: answers still owed go out. TLS has no half-close (the
        # client's close_notify ends the session), so there the transport closes.
        return not self.tls

    def connection_lost(self, exc: Exception | None) -> None:
        self._closing = True
        self._eof = True
        self._wakeup.set()
        if self._drain_waiter is not None and not self._drain_waiter.done():
            self._drain_waiter.set_exception(ConnectionError("connection lost"))
        if self._waiting_for_memory is not None:
            self._waiting_for_memory.cancel()
        self._release_reading_memory()
        self.server.connection_closed(self)
        if self._processor is None and not self._done.done():
            self._done.set_result(None)

    def pause_writing(self) -> None:
        self._write_paused = True

    def resume_writing(self) -> None:
        self._write_paused = False
        if self._drain_waiter is not None and not self._drain_waiter.done():
            self._drain_waiter.set_result(None)

    # -- framing ----------------------------------------------------------------------------------

    def _cut_frames(self) -> None:
        """Hand over every complete frame in the scratch buffer; start a dedicated buffer for
        one that does not fit; keep a partial one at the front."""
        scratch = self._scratch
        assert scratch is not None
        position = 0
        while not self._closing:
            available = self._scratch_len - position
            if available < 4:
                break
            (size,) = _SIZE.unpack_from(scratch, position)
            if size < 0 or size > self.limits.max_request_size:
                limited_log.warning("frame-size", "closing %s: frame of %d bytes exceeds socket.request.max.bytes=%d",
                                    self.peer, size, self.limits.max_request_size)
                self.abort("frame too large")
                return
            if self.sasl is not None and not self.sasl.authenticated and size > self.sasl.settings.max_receive_size:
                # As Kafka: an unauthenticated client gets no more than sasl.server.max.receive.size.
                limited_log.info("sasl-frame-size", "closing %s: a frame of %d bytes before SASL authentication "
                                 "exceeds sasl.server.max.receive.size=%d", self.peer, size,
                                 self.sasl.settings.max_receive_size)
                self.abort("SASL frame too large")
                return
            if self._reserved == 0 and size and not self._reserve(size):
                break  # wait for memory with the header still in the scratch buffer
            if available - 4 >= size:
                self._deliver(bytes(scratch[position + 4 : position + 4 + size]), self._reserved)
                self._reserved = 0
                self._frame_started = None  # the next frame's clock starts with its first bytes
                position += 4 + size
                continue
            if 4 + size > SCRATCH_SIZE:
                big = bytearray(size)  # the socket fills the rest of it directly
                partial = available - 4
                big[:partial] = scratch[position + 4 : self._scratch_len]
                self._big, self._big_filled = big, partial
                position = self._scratch_len
            break
        if position:
            remaining = self._scratch_len - position
            scratch[:remaining] = scratch[position : self._scratch_len]
            self._scratch_len = remaining
        # The read timeout runs while a frame is incomplete.
        if self._scratch_len or self._big is not None:
            self._frame_started = self._frame_started or time.monotonic()
        else:
            self._frame_started = None

    def _reserve(self, size: int) -> bool:
        """Take `size` bytes from the memory pool now, or pause reading until they are free."""
        pool = self.server.memory
        if pool.try_acquire(size):
            self._reserved = size
            return True
        self._pause_reading()
        self._waiting_for_memory = asyncio.get_running_loop().create_task(self._wait_for_memory(size))
        return False

    async def _wait_for_memory(self, size: int) -> None:
        await self.server.memory.acquire(size)
        self._waiting_for_memory = None
        if self._closing:
            self.server.memory.release(size)
            return
        self._reserved = size
        self._resume_reading()
        self._cut_frames()

    def _release_reading_memory(self) -> None:
        if self._reserved:
            self.server.memory.release(self._reserved)
            self._reserved = 0
        self._big = None

    def _deliver(self, data: bytes | bytearray, reserved: int) -> None:
        # last_activity was set by buffer_updated as these bytes came: the time, for no clock read.
        self._frames.append(_Frame(data, reserved, self.last_activity))
        self._wakeup.set()
        if len(self._frames) >= MAX_QUEUED_REQUESTS:
            self._pause_reading()

    def _pause_reading(self) -> None:
        if not self._paused and self.transport is not None and not self._closing:
            self._paused = True
            self.transport.pause_reading()

    def _resume_reading(self) -> None:
        if self._paused and self.transport is not None and not self._closing and self._waiting_for_memory is None \
                and len(self._frames) < MAX_QUEUED_REQUESTS and not self._muted_until:
            self._paused = False
            if self._frame_started is not None:  # the wait was the broker's, not the client's
                self._frame_started = time.monotonic()
            self.transport.resume_reading()

    # -- timeouts -----------------------------------------------------------------------------

    def check_timeouts(self, now: float) -> None:
        """Called by the server's sweeper: close a connection idle for connections.max.idle.ms, or
        one that started a frame and has not finished it within socket.request.read.timeout.ms
        (a client trickling bytes must not hold a connection and its buffers forever)."""
        if self._closing:
            return
        started = self._frame_started
        if started is not None and not self._paused and now - started > self.limits.read_timeout_ms / 1000:
            limited_log.info("read-timeout", "closing %s: a request did not arrive within "
                             "socket.request.read.timeout.ms=%d", self.peer, self.limits.read_timeout_ms)
            self.abort("request read timeout")
        elif now - self.last_activity > self.limits.idle_ms / 1000 and not self._busy():
            limited_log.info("idle", "closing %s: idle for connections.max.idle.ms=%d", self.peer, self.limits.idle_ms)
            self.abort("idle")

    def _busy(self) -> bool:
        """A request is being handled (a long-poll fetch, an acks=all wait) and has not been answered."""
        return bool(self._frames) or self._handling or self._sender is not None

    def abort(self, reason: str) -> None:
        if self._closing:
            return
        self._closing = True
        log.debug("closing %s: %s", self.peer, reason)
        if self.transport is not None:
            self.transport.abort()  # connection_lost follows

    async def finished(self) -> None:
        await asyncio.shield(self._done)

    def shutdown(self) -> None:
        """The broker is stopping: close now, abandoning a request in progress (a long poll, an
        acks=all wait)."""
        self.abort("the broker is stopping")
        if self._processor is not None:
            self._processor.cancel()

    # -- processing ---------------------------------------------------------------------------

    async def _process(self) -> None:
        try:
            await self._process_frames()
        except Exception:
            limited_log.exception("process", "connection %s failed", self.peer)
        finally:
            if self._sender is not None and not self._sender.done():
                if self._closing:
                    self._sender.cancel()
                else:
                    with contextlib.suppress(Exception):
                        await self._sender  # the client hung up its side: still send what it waits for
            while self._frames:
                self.server.memory.release(self._frames.popleft().reserved)
            if not self._closing:
                self._closing = True
                if self.transport is not None:
                    self.transport.close()
            if not self._done.done():
                self._done.set_result(None)

    def _mute(self, throttle_ms: int) -> None:
        """Kafka's throttling of a client over its quota (KIP-219): after this answer, nothing
        more is read from the socket, and no request already read is handled, for `throttle_ms`."""
        self._muted_until = time.monotonic() + throttle_ms / 1000
        self._pause_reading()

    async def _process_frames(self) -> None:
        while True:
            if self._muted_until:
                delay = self._muted_until - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)
                self._muted_until = 0.0
                self._resume_reading()
            if not self._frames:
                if self._eof or self._closing:
                    return
                self._wakeup.clear()
                await self._wakeup.wait()
                continue
            frame = self._frames.popleft()
            self._resume_reading()
            self._handling = True
            try:
                keep_open = await self._handle_frame(frame.data, frame.received)
            finally:
                self._handling = False
                self.server.memory.release(frame.reserved)
            if not keep_open or self._closing:
                self.abort("closed after a request")
                return

    async def _handle_frame(self, data: bytes | bytearray, received: float) -> bool:
        if self.sasl is not None and self.sasl.expects_raw_token:
            return await self._sasl_raw_token(bytes(data))
        entries = self.limits.max_request_entries
        large = False
        try:
            if len(data) > DECODE_INLINE_LIMIT:
                try:
                    # Bytes alone make no slow request (a produce's records stay opaque): first
                    # on the loop, with a budget of entries the parser checks at each array's
                    # length, before building any of them.
                    request = decode_request(memoryview(data), min(entries, DECODE_INLINE_ENTRIES))
                except TooManyEntriesRequest:
                    if entries <= DECODE_INLINE_ENTRIES:
                        raise
                    large = True  # thousands of entries: decoded, and answered, off the loop
                    request = await asyncio.to_thread(decode_request, memoryview(data), entries)
            else:
                request = decode_request(memoryview(data), entries)
        except MalformedRequest as e:
            limited_log.info("malformed", "closing %s: %s", self.peer, e)
            return False
        try:
            if self.sasl is not None:
                admission, reason = self.sasl.admit(request.header.api_key, request.header.api_version,
                                                    time.monotonic())
                if admission is not Admission.SERVE:
                    return await self._sasl_request(request, admission, reason)
            return await self._handle(request, received, large, len(data))
        except (ConnectionError, OSError):
            return False

    # -- SASL ---------------------------------------------------------------------------------

    async def _sasl_request(self, request: Request, admission: Admission, reason: str) -> bool:
        """A request the SASL session decides on (see kbroker.security.sasl_server); False when
        the connection must close."""
        sasl = self.sasl
        assert sasl is not None
        if admission is Admission.CLOSE:
            log.debug("closing %s: %s", self.peer, reason)
            limited_log.info("sasl-close", "closing %s: %s", self.peer, reason)
            if not sasl.authenticated:  # an expired session closes at once, a failed exchange later
                await self._delay_failed_authentication()
            return False
        header = request.header
        if admission is Admission.ILLEGAL_STATE:
            body = failed(request, handlers().get(header.api_key), ErrorCode.ILLEGAL_SASL_STATE, reason).body
            close = True
        elif request.body is None:  # a version of SaslHandshake / SaslAuthenticate unknown here
            limited_log.info("sasl-version", "closing %s: unsupported version %d of api %d during SASL "
                             "authentication", self.peer, header.api_version, header.api_key)
            return False
        elif header.api_key == SASL_HANDSHAKE_KEY:
            body, close = sasl.handshake(header.api_version, request.body.mechanism)
        else:
            body, close = sasl.authenticate(header.api_version, bytes(request.body.auth_bytes), time.monotonic())
        if close:
            await self._delay_failed_authentication()
        if body is not None:
            parts = self._encode(request, body, None)
            if parts is None:
                return False
            await self._send_answer(parts)
        self._take_sasl_principal()
        if close:
            await self._close_after_answers(f"SASL {'re-' if sasl.reauthenticating else ''}authentication failed")
        return not close

    async def _sasl_raw_token(self, token: bytes) -> bool:
        """A bare token after a v0 SaslHandshake: answered with a bare size-prefixed token."""
        sasl = self.sasl
        assert sasl is not None
        answer = sasl.raw_token(token, time.monotonic())
        if answer is None:
            limited_log.info("sasl-failed", "closing %s: SASL authentication failed", self.peer)
            await self._delay_failed_authentication()
            return False
        await self._send_answer([_SIZE.pack(len(answer)) + answer])
        self._take_sasl_principal()
        return True

    async def _delay_failed_authentication(self) -> None:
        """As Kafka (KIP-306): a failed authentication is answered, and its connection closed, only
        after connection.failed.authentication.delay.ms, so guessing passwords is slow. Nothing
        else of this connection is read meanwhile; other connections are served. Every failed
        authentication of a SASL listener passes here, so it is where they are counted."""
        self.stats.authentication_failed(self.listener)
        self._pause_reading()
        await asyncio.sleep(self.limits.failed_authentication_delay_ms / 1000)

    def _take_sasl_principal(self) -> None:
        sasl = self.sasl
        assert sasl is not None
        if sasl.authenticated and sasl.principal is not None:
            if self.principal != sasl.principal:
                log.debug("%s authenticated as %s on listener %s", self.peer, sasl.principal, self.listener)
            self.principal = sasl.principal

    async def _send_answer(self, parts: list) -> None:
        """Send an answer behind those still owed, in request order."""
        if self._sender is None:
            await self._write(parts)
        else:
            ready: asyncio.Future[list | None] = asyncio.get_running_loop().create_future()
            ready.set_result(parts)
            await self._queue_answer(ready)

    async def _close_after_answers(self, reason: str) -> None:
        """Close once every answer owed has left (Kafka sends its SASL error answer, then closes)."""
        if self._sender is not None:
            with contextlib.suppress(Exception):
                await self._sender
        if not self._closing and self.transport is not None:
            self._closing = True
            log.debug("closing %s: %s", self.peer, reason)
            await self._await_hang_up()
            self.transport.close()  # unlike abort(), sends what is buffered first

    async def _await_hang_up(self) -> None:
        """Give the client a moment to read the error answer and hang up first: a client that
        reads the answer and the connection's end in one go may drop the answer (kafka-python 3
        then reports "socket disconnected", not the failed authentication). Whatever the client
        still sends is dropped; the wait is bounded, so a client that never hangs up costs a
        connection for ANSWER_LINGER_S only."""
        transport = self.transport
        if transport is None or self._eof:
            return
        self._release_reading_memory()
        self._scratch_len = 0
        if self._paused:
            self._paused = False
            transport.resume_reading()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(ANSWER_LINGER_S):
                while not self._eof:
                    self._wakeup.clear()
                    await self._wakeup.wait()

    async def _handle(self, request: Request, received: float, large: bool = False, size: int = 0) -> bool:
        """Answer one request; False when the connection must close."""
        context = RequestContext(self.broker, request.header, self.peer, self.listener, self.principal, self.ip, size)
        api_key = request.header.api_key
        self.current_api = (api_key, request.header.api_version)
        api = self.stats.api(api_key)
        api.requests += 1
        api.queue_time.observe(time.monotonic() - received)
        request_quota = self.broker.quotas.request
        try:
            if request_quota.enabled:  # request_percentage quotas: what the handler's steps take
                timed = LoopTime(dispatch(context, request))
                result = await timed
                request_throttle_ms = self._charge_request_time(context, timed.seconds)
            else:
                result = await dispatch(context, request)
                request_throttle_ms = 0
        except Exception:  # a dispatch bug must cost one connection, not the broker
            limited_log.exception("dispatch", "handling api %s failed for %s", api_key, self.peer)
            return False
        finally:
            self.current_api = None
        if result.close:
            limited_log.info(f"close-{api_key}", "closing %s: %s", self.peer, result.reason)
            return False
        if request_throttle_ms > context.throttle_ms:
            context.throttle_ms = request_throttle_ms
            _answer_throttle(result.body, request_throttle_ms)
        if context.throttle_ms > 0:
            self._mute(context.throttle_ms)
        if self._sender is not None and self._sender.done():
            return False  # sending a deferred answer failed: the connection is closing
        if result.pending is not None:
            await self._queue_answer(asyncio.ensure_future(
                self._finish(request, result, received, request_throttle_ms)))
            return True
        if result.body is None:
            api.total_time.observe(time.monotonic() - received)
            return True  # e.g. Produce with acks=0
        if large or _entries(result.body) > ENCODE_INLINE_ENTRIES:
            # A walk of thousands of entries for their error codes goes off the loop with the encoding.
            parts, codes = await asyncio.to_thread(self._encode_and_scan, request, result.body, result.version)
        else:
            parts, codes = self._encode(request, result.body, result.version), error_codes(result.body)
        self.stats.count_errors(api_key, codes)
        if parts is None:
            return False
        if self._sender is not None:  # behind deferred answers: the sender writes it, untimed
            await self._send_answer(parts)
            api.total_time.observe(time.monotonic() - received)
            return True
        sending = time.monotonic()
        await self._write(parts)  # nothing ahead of it: straight out
        # _write stamped last_activity once the transport took the answer: no clock read.
        api.send_time.observe(self.last_activity - sending)
        api.total_time.observe(self.last_activity - received)
        return True

    async def _finish(self, request: Request, result: HandlerResult, received: float,
                      request_throttle_ms: int = 0) -> list | None:
        assert result.pending is not None
        try:
            body = await result.pending
        except Exception:
            limited_log.exception("deferred", "a deferred answer to api %s failed for %s",
                                  request.header.api_key, self.peer)
            body = self._error_body(request)
            if body is None:
                raise ConnectionError("no answer could be built") from None
        if request_throttle_ms:
            _answer_throttle(body, request_throttle_ms)
        self.stats.record_errors(request.header.api_key, body)
        parts = self._encode(request, body, result.version)
        if parts is None:
            raise ConnectionError("no answer could be encoded")
        # Its answer leaves in request order, behind earlier ones: its time ends when it is ready.
        self.stats.api(request.header.api_key).total_time.observe(time.monotonic() - received)
        return parts

    def _charge_request_time(self, context: RequestContext, seconds: float) -> int:
        """Kafka's request quota: the handler's time as a percentage of one second, charged to
        the client's quota entity; the throttle time it earns (0 within the quota)."""
        if context.exempt_from_request_quota:
            return 0
        quota = self.broker.quotas.request
        client_id = context.header.client_id or ""
        throttle_ms = quota.record(context.principal, client_id, seconds * 100, self.broker.quotas.now_ms())
        if throttle_ms:
            self.stats.record_throttle(*quota.throttle_entity(context.principal, client_id), throttle_ms)
        return throttle_ms

    def _encode_and_scan(self, request: Request, body: object, version: int | None) -> tuple[list | None, set[int]]:
        """The answer's wire parts and its error codes (for the metrics), in a worker thread."""
        return self._encode(request, body, version), error_codes(body)

    def _encode(self, request: Request, body: object, version: int | None) -> list | None:
        """The answer's wire parts; when the body cannot be encoded (a handler bug), Kafka's
        UNKNOWN_SERVER_ERROR answer instead; None when not even that can be built."""
        try:
            return encode_response(request.header, body, version)
        except Exception:
            limited_log.exception(f"encode-{request.header.api_key}", "encoding the answer to api %s v%s for %s failed",
                                  request.header.api_key, request.header.api_version, self.peer)
        fallback = self._error_body(request)
        if fallback is None:
            return None
        try:
            return encode_response(request.header, fallback)
        except Exception:
            limited_log.exception(f"encode-error-{request.header.api_key}", "encoding an error answer to api %s failed",
                                  request.header.api_key)
            return None

    @staticmethod
    def _error_body(request: Request) -> object | None:
        result = failed(request, handlers().get(request.header.api_key), ErrorCode.UNKNOWN_SERVER_ERROR, None)
        return None if result.close else result.body

    async def _queue_answer(self, answer: asyncio.Future[list | None]) -> None:
        if self._sender is None:
            self._sender = asyncio.create_task(self._send_in_order())
        if not self._answers.full():
            self._answers.put_nowait(answer)  # before the sender's first look: it never finds the queue empty
            return
        # More answers waiting than producers keep in flight: wait for room, unless sending fails.
        put = asyncio.ensure_future(self._answers.put(answer))
        await asyncio.wait({put, self._sender}, return_when=asyncio.FIRST_COMPLETED)
        if not put.done():
            put.cancel()
            raise ConnectionError("answering failed: the connection is closing")

    async def _send_in_order(self) -> None:
        """Send queued answers as each completes, in order; once none is left, answers go
        straight out again. A failure closes the connection.

        Answers already complete behind the one awaited leave in the same write: one high
        watermark step releases many acks=all answers of a producer at once, and each write is a
        system call and a wake-up of the client."""
        try:
            held: asyncio.Future[list | None] | None = None  # taken from the queue, not complete yet
            while True:
                answer = held if held is not None else self._answers.get_nowait()  # see _queue_answer
                held = None
                parts = await answer
                out = [] if parts is None else list(parts)
                while not self._answers.empty():
                    following = self._answers.get_nowait()
                    # Not ready, or failed: awaited in its turn, after what is ready before it.
                    if not following.done() or following.cancelled() or following.exception() is not None:
                        held = following
                        break
                    more = following.result()
                    if more is not None:
                        out += more
                if out:
                    await self._write(out)
                if held is None and self._answers.empty():
                    self._sender = None  # the processor writes directly again
                    return
        except (ConnectionError, OSError):
            self.abort("sending failed")
        except Exception:
            limited_log.exception("answering", "answering %s failed", self.peer)
            self.abort("answering failed")

    # -- writing ------------------------------------------------------------------------------

    async def _write(self, parts: list) -> None:
        transport = self.transport
        if transport is None or self._closing:
            raise ConnectionError("connection closed")
        loop = asyncio.get_running_loop()
        # Bytes between file slices sent are written at once: each write to an idle socket is a
        # send system call and, with TCP_NODELAY, a segment the client wakes up for.
        pending: list[bytes | bytearray | memoryview] = []
        for part in parts:
            if isinstance(part, bytes | bytearray | memoryview):
                pending.append(part)
            elif sendfile_worth(part, self.tls):
                write_joined(transport, pending)
                pending = []
                await self._drain()
                await send_file_slice(loop, transport, part.file, part.position, part.size)
            else:
                # Over TLS the bytes must pass through the encryption, so no sendfile: one read
                # from the file into memory, which the TLS transport encrypts as it writes
                # (asyncio's own sendfile fallback would read in 16 KiB steps in a thread).
                pending.append(part.read_bytes())
        write_joined(transport, pending)
        self.last_activity = time.monotonic()
        await self._drain()

    async def _drain(self) -> None:
        if self._closing:
            raise ConnectionError("connection closed")
        if not self._write_paused:
            return
        self._drain_waiter = asyncio.get_running_loop().create_future()
        try:
            await self._drain_waiter
        finally:
            self._drain_waiter = None
        self.last_activity = time.monotonic()


def _answer_throttle(body: object, throttle_ms: int) -> None:
    """Tell the client of a throttle in the answer's throttle_time_ms (the longest one applies);
    answers without the field (none of a version that has it lacks it) tell nothing."""
    if isinstance(body, dict) and "throttle_time_ms" in body:
        body["throttle_time_ms"] = max(body["throttle_time_ms"] or 0, throttle_ms)


def _entries(body: object) -> int:
    """About how many entries an answer holds: its arrays and their entries' arrays."""
    if not isinstance(body, dict):
        return 0
    total = 0
    for value in body.values():
        if isinstance(value, list):
            total += len(value)
            for entry in value[:ENCODE_INLINE_ENTRIES]:
                if isinstance(entry, dict):
                    total += sum(len(v) for v in entry.values() if isinstance(v, list))
            if total > ENCODE_INLINE_ENTRIES:
                break
    return total
