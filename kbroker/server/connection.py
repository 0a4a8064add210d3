"""One client connection: read frames, run handlers one request at a time, write responses.

Requests of one connection are handled in order and answered in order, as Kafka does.
Bytes keep being read while a request is in progress, so a pipelining client never stalls
on TCP. One exception to one-at-a-time: an acks=all Produce whose batches are appended and
only wait for the ISR (a `Deferred` answer) lets the next request start, so a producer with
several requests in flight gets them replicated in one round instead of one round each; the
answers still leave in request order (at most MAX_DEFERRED outstanding).
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from kbroker.handlers import HandlerResult, RequestContext, dispatch, failed, handlers
from kbroker.log_limiter import RateLimitedLog
from protocol.connection import FrameTooLarge, MalformedRequest, Request, ServerConnection
from protocol.errors import ErrorCode

if TYPE_CHECKING:
    from kbroker.broker import Broker

log = logging.getLogger("kbroker.server")
limited_log = RateLimitedLog(log)

# Below this, reading a slice into memory and writing it beats a sendfile system call.
SENDFILE_THRESHOLD = 64 * 1024
READ_CHUNK = 256 * 1024
# Decoded requests waiting for their turn; when full, reading pauses (TCP backpressure) so a
# client pipelining without limit cannot make the broker buffer without limit.
MAX_QUEUED_REQUESTS = 64
# Answers not yet sent behind a deferred one (producers keep at most 5 requests in flight).
MAX_DEFERRED = 16


class ClientConnection:
    def __init__(self, broker: Broker, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.broker = broker
        self.reader = reader
        self.writer = writer
        self.protocol = ServerConnection(broker.config.socket_request_max_bytes)
        peer = writer.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if peer else "?"
        self._requests: asyncio.Queue[Request | None] = asyncio.Queue(MAX_QUEUED_REQUESTS)
        # Answers behind a deferred one, in request order: each resolves to the parts to send,
        # or None to send nothing (acks=0); an exception closes the connection.
        self._answers: asyncio.Queue[asyncio.Future[list | None]] = asyncio.Queue(MAX_DEFERRED)
        self._sender: asyncio.Task[None] | None = None

    async def run(self) -> None:
        processor = asyncio.create_task(self._process())
        try:
            await self._read_loop(processor)
        finally:
            await self._enqueue(None, processor)
            try:
                await processor
            finally:
                self.writer.close()

    async def _read_loop(self, processor: asyncio.Task[None]) -> None:
        while True:
            data = await self.reader.read(READ_CHUNK)
            if not data:
                return
            self.protocol.receive_data(data)
            try:
                while (request := self.protocol.next_request()) is not None:
                    if not await self._enqueue(request, processor):
                        return
            except FrameTooLarge as e:
                log.warning("closing %s: %s", self.peer, e)
                return
            except MalformedRequest as e:
                log.info("closing %s: %s", self.peer, e)
                return

    async def _enqueue(self, request: Request | None, processor: asyncio.Task[None]) -> bool:
        """Queue for the processor; False if it has stopped (the connection is closing)."""
        if processor.done():
            return False
        try:
            self._requests.put_nowait(request)
            return True
        except asyncio.QueueFull:
            pass
        put = asyncio.ensure_future(self._requests.put(request))
        await asyncio.wait({put, processor}, return_when=asyncio.FIRST_COMPLETED)
        if not put.done():
            put.cancel()
            return False
        return True

    async def _process(self) -> None:
        try:
            while (request := await self._requests.get()) is not None:
                try:
                    keep_open = await self._handle(request)
                except (ConnectionError, OSError):
                    keep_open = False
                if not keep_open:
                    break
            else:
                if self._sender is not None:  # the client hung up: still send what it waits for
                    await self._sender  # it stops once the queue is empty
                return
        finally:
            if self._sender is not None and not self._sender.done():
                self._sender.cancel()
        self._close_now()

    def _close_now(self) -> None:
        self.reader.feed_eof()
        self.writer.transport.abort()

    async def _handle(self, request: Request) -> bool:
        """Answer one request; False when the connection must close."""
        context = RequestContext(self.broker, request.header, self.peer)
        try:
            result = await dispatch(context, request)
        except Exception:  # a dispatch bug must cost one connection, not the broker
            limited_log.exception("dispatch", "handling api %s failed for %s", request.header.api_key, self.peer)
            return False
        if result.close:
            log.info("closing %s: %s", self.peer, result.reason)
            return False
        if self._sender is not None and self._sender.done():
            return False  # sending a deferred answer failed: the connection is closing
        if result.pending is not None:
            await self._queue_answer(asyncio.ensure_future(self._finish(request, result)))
            return True
        if result.body is None:
            return True  # e.g. Produce with acks=0
        parts = self._encode(request, result.body, result.version)
        if parts is None:
            return False
        if self._sender is None:
            await self._write(parts)  # nothing ahead of it: straight out
        else:
            ready: asyncio.Future[list | None] = asyncio.get_running_loop().create_future()
            ready.set_result(parts)
            await self._queue_answer(ready)
        return True

    async def _finish(self, request: Request, result: HandlerResult) -> list | None:
        assert result.pending is not None
        try:
            body = await result.pending
        except Exception:
            limited_log.exception("deferred", "a deferred answer to api %s failed for %s",
                                  request.header.api_key, self.peer)
            body = self._error_body(request)
            if body is None:
                raise ConnectionError("no answer could be built") from None
        parts = self._encode(request, body, result.version)
        if parts is None:
            raise ConnectionError("no answer could be encoded")
        return parts

    def _encode(self, request: Request, body: object, version: int | None) -> list | None:
        """The answer's wire parts; when the body cannot be encoded (a handler bug), Kafka's
        UNKNOWN_SERVER_ERROR answer instead; None when not even that can be built."""
        try:
            return self.protocol.encode_response(request.header, body, version)
        except Exception:
            limited_log.exception(f"encode-{request.header.api_key}", "encoding the answer to api %s v%s for %s failed",
                                  request.header.api_key, request.header.api_version, self.peer)
        fallback = self._error_body(request)
        if fallback is None:
            return None
        try:
            return self.protocol.encode_response(request.header, fallback)
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
        straight out again. A failure closes the connection."""
        try:
            while True:
                answer = self._answers.get_nowait()  # never empty here: see _queue_answer
                parts = await answer
                if parts is not None:
                    await self._write(parts)
                if self._answers.empty():
                    self._sender = None  # the processor writes directly again
                    return
        except (ConnectionError, OSError):
            self._close_now()
        except Exception:
            log.exception("answering %s failed", self.peer)
            self._close_now()

    async def _write(self, parts: list) -> None:
        writer = self.writer
        loop = asyncio.get_running_loop()
        for part in parts:
            if isinstance(part, bytes | bytearray | memoryview):
                writer.write(part)
            elif part.size >= SENDFILE_THRESHOLD and hasattr(part, "file"):
                await writer.drain()
                await loop.sendfile(writer.transport, part.file, part.position, part.size)
            else:
                writer.write(part.read_bytes())
        await writer.drain()
