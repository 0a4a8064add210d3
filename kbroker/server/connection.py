"""One client connection: read frames, run handlers one request at a time, write responses.

Requests of one connection are handled in order and answered in order, as Kafka does
(it mutes a channel until its response is sent). Bytes keep being read while a request
is in progress, so a pipelining client never stalls on TCP.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from kbroker.handlers import RequestContext, dispatch
from protocol.connection import FrameTooLarge, MalformedRequest, Request, ServerConnection

if TYPE_CHECKING:
    from kbroker.broker import Broker

log = logging.getLogger("kbroker.server")

# Below this, reading a slice into memory and writing it beats a sendfile system call.
SENDFILE_THRESHOLD = 64 * 1024
READ_CHUNK = 256 * 1024
# Decoded requests waiting for their turn; when full, reading pauses (TCP backpressure) so a
# client pipelining without limit cannot make the broker buffer without limit.
MAX_QUEUED_REQUESTS = 64


class ClientConnection:
    def __init__(self, broker: Broker, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.broker = broker
        self.reader = reader
        self.writer = writer
        self.protocol = ServerConnection(broker.config.socket_request_max_bytes)
        peer = writer.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if peer else "?"
        self._requests: asyncio.Queue[Request | None] = asyncio.Queue(MAX_QUEUED_REQUESTS)

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
        while (request := await self._requests.get()) is not None:
            try:
                keep_open = await self._handle(request)
            except (ConnectionError, OSError):
                keep_open = False
            if not keep_open:
                self.reader.feed_eof()
                self.writer.transport.abort()
                return

    async def _handle(self, request: Request) -> bool:
        """Answer one request; False when the connection must close."""
        context = RequestContext(self.broker, request.header, self.peer)
        try:
            result = await dispatch(context, request)
        except Exception:  # a handler bug must cost one connection, not the broker
            log.exception("handler of api %s failed for %s", request.header.api_key, self.peer)
            return False
        if result.close:
            log.info("closing %s: %s", self.peer, result.reason)
            return False
        if result.body is None:
            return True  # e.g. Produce with acks=0
        parts = self.protocol.encode_response(request.header, result.body, result.version)
        await self._write(parts)
        return True

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
