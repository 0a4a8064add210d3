"""The inter-broker client's answer reader: frames whole, in order, whatever the socket's chunks;
a large frame read into its own buffer; a hang-up or an oversized frame ends the wait."""

from __future__ import annotations

import asyncio
import random
import struct

import pytest

from kbroker.cluster.broker_client import SCRATCH_SIZE, AnswerReader, AsyncBrokerClient, BrokerUnavailable
from protocol.connection import ClientProtocol, FrameTooLarge
from protocol.messages import api_versions


def frame(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


def feed(reader: AnswerReader, data: bytes, chunk_sizes: random.Random) -> None:
    """What a transport does: ask for a buffer, fill some of it, report how much."""
    position = 0
    while position < len(data):
        buffer = reader.get_buffer(-1)
        size = min(len(buffer), len(data) - position, chunk_sizes.randint(1, 3 * SCRATCH_SIZE))
        buffer[:size] = data[position:position + size]
        reader.buffer_updated(size)
        position += size


async def frames(reader: AnswerReader, count: int) -> list[bytes]:
    return [bytes(await reader.next_frame()) for _ in range(count)]


@pytest.mark.parametrize("seed", range(5))
def test_frames_arrive_whole_and_in_order_whatever_the_chunks(seed: int) -> None:
    sizes = [4, 100, SCRATCH_SIZE - 4, SCRATCH_SIZE, 3 * SCRATCH_SIZE + 7, 10]
    payloads = [random.Random(seed + n).randbytes(n) for n in sizes]
    reader = AnswerReader(ClientProtocol(max_response_size=1 << 24).response_size)

    async def run() -> list[bytes]:
        feed(reader, b"".join(frame(p) for p in payloads), random.Random(seed))
        return await frames(reader, len(payloads))

    assert asyncio.run(run()) == payloads


def test_a_large_frame_is_the_buffer_the_socket_filled() -> None:
    reader = AnswerReader(ClientProtocol().response_size)
    payload = b"r" * (2 * SCRATCH_SIZE)
    data = frame(payload)
    head = reader.get_buffer(-1)
    head[:100] = data[:100]
    reader.buffer_updated(100)
    rest = reader.get_buffer(-1)
    assert len(rest) == len(payload) - 96  # the rest of this frame, straight into its own buffer
    rest[:] = data[100:]
    reader.buffer_updated(len(rest))

    async def run() -> bytes | bytearray:
        return await reader.next_frame()

    got = asyncio.run(run())
    assert isinstance(got, bytearray) and got == payload


def test_a_hang_up_mid_frame_ends_the_wait_with_eof() -> None:
    reader = AnswerReader(ClientProtocol().response_size)

    async def run() -> None:
        waiting = asyncio.ensure_future(reader.next_frame())
        await asyncio.sleep(0)
        feed(reader, frame(b"partial answer")[:9], random.Random(1))
        await asyncio.sleep(0)
        assert not waiting.done()
        reader.eof_received()
        with pytest.raises(EOFError):
            await waiting

    asyncio.run(run())


def test_an_oversized_frame_fails_the_wait() -> None:
    reader = AnswerReader(ClientProtocol(max_response_size=1000).response_size)

    async def run() -> None:
        feed(reader, struct.pack(">i", 5000) + b"x" * 20, random.Random(2))
        with pytest.raises(FrameTooLarge):
            await reader.next_frame()

    asyncio.run(run())


def test_a_request_to_a_server_that_hangs_up_is_broker_unavailable() -> None:
    async def run() -> None:
        async def hang_up(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await reader.read(4)
            writer.close()

        server = await asyncio.start_server(hang_up, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        client = AsyncBrokerClient("127.0.0.1", port, "test", timeout_s=10)
        try:
            with pytest.raises(BrokerUnavailable):
                await client.request(api_versions.API_KEY, 3, {"client_software_name": "t",
                                                               "client_software_version": "1"})
        finally:
            await client.close()
            server.close()
            await server.wait_closed()

    asyncio.run(run())
