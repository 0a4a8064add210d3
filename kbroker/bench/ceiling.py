"""The same-machine write ceiling: what bare loops writing to kbroker's own log directories
reach, measured beside every produce result, so the ratio to what the disk and the page cache
allow is visible next to the ratio to the mock.

Each loop appends chunks of the producer's batch size to one new file with `os.pwrite`, as the
broker appends a produce request's batch to its segment, for as long as a produce run lasts; no
fsync (the broker does none on the produce path either). For one broker that is one loop in its
log directory. For a cluster whose topics are replicated to every broker, every byte produced is
written once per broker on this same machine, so the ceiling runs one loop per broker's log
directory at once (threads: `pwrite` releases the GIL) and reports what each copy reached — the
most a replicated produce could move. It runs in the benchmark's process while no broker is
being measured, alternated with the brokers' runs like a reference.

A replicated byte also crosses the machine's loopback twice more: the leader sends it to each
follower. `ReplicationCeiling` moves the bytes as Kafka's replication does, with nothing else:
a sender thread writes the producer's chunks to a leader thread over loopback TCP; the leader
(one thread, as kbroker's event loop) receives each whole and writes it into its log
directory; each follower thread asks for the next chunk once it has written the last, and the
leader answers it from its file with `sendfile`. What each copy reaches is the most the
machine's disk, page cache and loopback allow a produce replicated by fetching.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import socket
import struct
import threading
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from kbroker.bench.servers import Server

MB = 1_000_000
_CHUNK_INDEX = struct.Struct(">q")  # a follower's request in the replication ceiling: the chunk it wants


class WriteCeiling(Server):
    """Not a broker: a stand-in in the alternation of a produce case (`run` replaces a run)."""

    name = "ceiling"

    def __init__(self, directories: Sequence[Path], chunk_bytes: int) -> None:
        if not directories:
            raise ValueError("the write ceiling needs a log directory")
        self.directories = list(directories)
        self.chunk_bytes = chunk_bytes
        copies = len(self.directories)
        self.description = ("a bare os.pwrite loop into kbroker's log directory" if copies == 1 else
                            f"{copies} bare os.pwrite loops at once, one in each broker's log directory "
                            "(MB/s is each copy's)")

    @property
    def bootstrap(self) -> str:
        raise NotImplementedError("the write ceiling has no clients")

    def measure(self, seconds: float) -> tuple[float, float]:
        """(bytes each copy got, seconds taken)."""
        written, elapsed = write_copies_for(self.directories, self.chunk_bytes, seconds)
        return written / len(self.directories), elapsed

    def run(self, seconds: float, message_size: int) -> dict[str, Any]:
        per_copy, elapsed = self.measure(seconds)
        return {"messages": int(per_copy // message_size), "errors": 0, "elapsed_s": round(elapsed, 3),
                "msgs_per_s": round(per_copy / message_size / elapsed, 1),
                "mb_per_s": round(per_copy / elapsed / MB, 3), "server_cpu": None, "client_cpu": None}


def write_copies_for(directories: Sequence[Path], chunk_bytes: int, seconds: float) -> tuple[int, float]:
    """(bytes written by all loops together, seconds the slowest took): one `write_for` per
    directory, all at once."""
    if len(directories) == 1:
        return write_for(directories[0], chunk_bytes, seconds)
    outcomes: list[tuple[int, float] | BaseException] = [(0, 0.0)] * len(directories)
    start = threading.Barrier(len(directories))

    def loop(i: int, directory: Path) -> None:
        try:
            start.wait()
            outcomes[i] = write_for(directory, chunk_bytes, seconds)
        except BaseException as e:  # re-raised in the caller's thread
            start.abort()
            outcomes[i] = e

    threads = [threading.Thread(target=loop, args=(i, d), name=f"write-ceiling-{i}", daemon=True)
               for i, d in enumerate(directories)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for outcome in outcomes:
        if isinstance(outcome, BaseException):
            raise outcome
    done = [o for o in outcomes if not isinstance(o, BaseException)]
    return sum(w for w, _ in done), max(e for _, e in done)


def write_for(directory: Path, chunk_bytes: int, seconds: float) -> tuple[int, float]:
    """(bytes written, seconds taken) by appending `chunk_bytes` chunks to a new file in
    `directory` for `seconds`; the file is removed afterwards."""
    chunk = os.urandom(chunk_bytes)
    path = directory / f".write-ceiling-{uuid.uuid4().hex[:8]}"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    written = 0
    try:
        start = time.perf_counter()
        deadline = start + seconds
        while time.perf_counter() < deadline:
            written += os.pwrite(fd, chunk, written)
        elapsed = time.perf_counter() - start
    finally:
        os.close(fd)
        path.unlink(missing_ok=True)
    return written, elapsed


class ReplicationCeiling(WriteCeiling):
    """The bytes of a replicated produce moved as Kafka's replication moves them, by bare loops (above)."""

    name = "replication-ceiling"

    def __init__(self, directories: Sequence[Path], chunk_bytes: int) -> None:
        if len(directories) < 2:
            raise ValueError("the replication ceiling needs a leader's and a follower's log directory")
        super().__init__(directories, chunk_bytes)
        self.description = (f"bare loops replicating as Kafka does: a leader thread receives each chunk over "
                            f"loopback TCP and writes it; {len(directories) - 1} follower threads each ask for "
                            "the next chunk once they have written the last, and the leader answers with "
                            "sendfile from its file; each in its broker's log directory (MB/s is each copy's)")

    def measure(self, seconds: float) -> tuple[float, float]:
        return replicate_for(self.directories, self.chunk_bytes, seconds)


def replicate_for(directories: Sequence[Path], chunk_bytes: int, seconds: float,
                  fetched: bool = True) -> tuple[int, float]:
    """(bytes every follower had written when `seconds` were up, those seconds): the leader
    writes in directories[0], a follower in each of the others; the files are removed after.

    `fetched`: as Kafka replicates, each follower asks for the next chunk once it has written the
    last, and the leader, one thread as kbroker's event loop, answers whoever asks for a chunk it
    has written. Otherwise the leader sends each chunk to every follower as soon as it is written
    (more than the protocol allows: a follower then receives while it writes)."""
    paths = [directory / f".replication-ceiling-{uuid.uuid4().hex[:8]}" for directory in directories]
    fds = [os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600) for path in paths]
    sender, leader_in = _loopback_pair()
    links = [_loopback_pair() for _ in directories[1:]]  # (the leader's end, the follower's end)
    copied = [0] * len(links)  # bytes each follower has written
    errors: list[BaseException] = []
    stop = threading.Event()

    def guarded(body: Any, *args: Any) -> None:
        try:
            body(*args)
        except OSError as e:  # the sockets closing at the end; anything else is re-raised
            if not stop.is_set():
                errors.append(e)
        except BaseException as e:
            errors.append(e)
        finally:
            stop.set()

    def send() -> None:
        chunk = os.urandom(chunk_bytes)
        while not stop.is_set():
            sender.sendall(chunk)

    def send_chunk(follower: int, chunk: int) -> None:
        start, end = chunk * chunk_bytes, (chunk + 1) * chunk_bytes
        while start < end:
            start += os.sendfile(links[follower][0].fileno(), fds[0], start, end - start)

    def lead_pushing() -> None:
        buffer = bytearray(chunk_bytes)
        chunk = 0
        while _receive_whole(leader_in, buffer):
            _pwrite_whole(fds[0], buffer, chunk * chunk_bytes)
            for follower in range(len(links)):
                send_chunk(follower, chunk)
            chunk += 1

    def lead_answering() -> None:
        buffer, request = bytearray(chunk_bytes), bytearray(_CHUNK_INDEX.size)
        written = 0  # chunks in the leader's file
        waiting: dict[int, int] = {}  # follower -> the chunk it asked for before it was written
        with selectors.DefaultSelector() as selector:
            selector.register(leader_in, selectors.EVENT_READ, -1)
            for follower, (leader_end, _) in enumerate(links):
                selector.register(leader_end, selectors.EVENT_READ, follower)
            while not stop.is_set():
                for key, _ in selector.select(0.1):
                    if key.data < 0:
                        if not _receive_whole(leader_in, buffer):
                            return
                        _pwrite_whole(fds[0], buffer, written * chunk_bytes)
                        written += 1
                        for follower in [f for f, chunk in waiting.items() if chunk < written]:
                            send_chunk(follower, waiting.pop(follower))
                        continue
                    if not _receive_whole(links[key.data][0], request):
                        return
                    (chunk,) = _CHUNK_INDEX.unpack(request)
                    if chunk < written:
                        send_chunk(key.data, chunk)
                    else:
                        waiting[key.data] = chunk

    def follow(follower: int) -> None:
        end = links[follower][1]
        buffer = bytearray(chunk_bytes)
        while not stop.is_set():
            if fetched:
                end.sendall(_CHUNK_INDEX.pack(copied[follower] // chunk_bytes))
            if not _receive_whole(end, buffer):
                return
            _pwrite_whole(fds[follower + 1], buffer, copied[follower])
            copied[follower] += chunk_bytes

    bodies = [(send, ()), (lead_answering if fetched else lead_pushing, ()),
              *((follow, (follower,)) for follower in range(len(links)))]
    threads = [threading.Thread(target=guarded, args=(body, *args), name=f"replication-ceiling-{i}", daemon=True)
               for i, (body, args) in enumerate(bodies)]
    try:
        start = time.perf_counter()
        for thread in threads:
            thread.start()
        stop.wait(seconds)
        elapsed = time.perf_counter() - start
        per_copy = min(copied)
    finally:
        stop.set()
        for sock in (sender, leader_in, *(s for link in links for s in link)):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        for thread in threads:
            thread.join()
        for sock in (sender, leader_in, *(s for link in links for s in link)):
            sock.close()
        for fd, path in zip(fds, paths, strict=True):
            os.close(fd)
            path.unlink(missing_ok=True)
    if errors:
        raise errors[0]
    return per_copy, elapsed


def _loopback_pair() -> tuple[socket.socket, socket.socket]:
    """Two ends of a loopback TCP connection, with TCP_NODELAY as the broker and its clients set it."""
    with socket.create_server(("127.0.0.1", 0)) as listener:
        client = socket.create_connection(listener.getsockname()[:2])
        served, _ = listener.accept()
    for end in (client, served):
        end.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return client, served


def _receive_whole(sock: socket.socket, buffer: bytearray) -> bool:
    """Fill `buffer` from the socket; False when it closed first."""
    view = memoryview(buffer)
    got = 0
    while got < len(buffer):
        n = sock.recv_into(view[got:])
        if not n:
            return False
        got += n
    return True


def _pwrite_whole(fd: int, data: bytearray, position: int) -> None:
    view = memoryview(data)
    done = 0
    while done < len(data):
        done += os.pwrite(fd, view[done:], position + done)
