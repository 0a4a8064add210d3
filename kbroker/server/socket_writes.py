"""Writing an answer's parts to a client's socket: bytes joined into one send, file slices of
the log with sendfile(2)."""

from __future__ import annotations

import asyncio
import errno
import os
from typing import Any, BinaryIO

# Below this, reading a slice into memory and writing it beats a sendfile system call
# (KBROKER_SENDFILE_MIN_BYTES changes it, for measuring; docs/performance.md).
SENDFILE_THRESHOLD = int(os.environ.get("KBROKER_SENDFILE_MIN_BYTES", 64 * 1024))
# asyncio's own loop sends files with sendfile(2); an alternative event loop (uvloop, measured
# in docs/performance.md) may not: then a file part is read and written like any other.
NATIVE_SENDFILE = os.environ.get("KBROKER_EVENT_LOOP", "asyncio") == "asyncio"


def sendfile_worth(part: Any, tls: bool) -> bool:
    """A file slice to send with sendfile: large enough, and not through TLS (whose bytes must
    pass through the encryption)."""
    return part.size >= SENDFILE_THRESHOLD and hasattr(part, "file") and not tls and NATIVE_SENDFILE


async def send_file_slice(loop: asyncio.AbstractEventLoop, transport: asyncio.Transport, file: BinaryIO,
                          position: int, size: int) -> None:
    """`size` bytes of `file` from `position`, with sendfile(2) straight on the socket while the
    transport holds nothing unsent (so nothing can overtake them). asyncio's `loop.sendfile`
    pauses reading, registers the socket for writing and takes two turns of the loop even when
    the kernel takes the whole slice in one call: four epoll changes and an fstat per answer.
    What the socket does not take at once goes through `loop.sendfile`, which waits for it."""
    if transport.get_write_buffer_size() == 0:
        sock, source = transport.get_extra_info("socket").fileno(), file.fileno()
        try:
            while size:
                sent = os.sendfile(sock, source, position, size)
                if not sent:  # as FileSlice.read_bytes: a frame cut short would garble the stream
                    raise OSError(errno.EIO, f"segment shrank under a send ({size} bytes missing)")
                position += sent
                size -= sent
        except (BlockingIOError, InterruptedError):
            pass  # the socket is full: the rest waits for it below
    if size:
        await loop.sendfile(transport, file, position, size)


def write_joined(transport: asyncio.Transport, chunks: list[bytes | bytearray | memoryview]) -> None:
    if len(chunks) == 1:
        transport.write(chunks[0])
    elif chunks:
        transport.write(b"".join(chunks))
