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
follower. `ReplicationCeiling` moves the bytes as a replicated produce does, with nothing else:
a sender thread writes the producer's chunks to a leader thread over loopback TCP; the leader
receives each whole, writes it into its log directory and sends it from that file with
`sendfile` to each follower thread, which receives it whole and writes it into its own. What
each copy reaches is the most the machine's disk, page cache and loopback allow a replicated
produce, one leader thread in the broker's place.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from kbroker.bench.servers import Server

MB = 1_000_000


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
    """The bytes of a replicated produce moved as replication moves them, by bare loops (above)."""

    name = "replication-ceiling"

    def __init__(self, directories: Sequence[Path], chunk_bytes: int) -> None:
        if len(directories) < 2:
            raise ValueError("the replication ceiling needs a leader's and a follower's log directory")
        super().__init__(directories, chunk_bytes)
        self.description = (f"bare loops moving the bytes as replication does: a leader thread receives each chunk "
                            f"over loopback TCP, writes it and sends it with sendfile to {len(directories) - 1} "
                            "follower threads, which receive and write it, each in its broker's log directory "
                            "(MB/s is each copy's)")

    def measure(self, seconds: float) -> tuple[float, float]:
        return replicate_for(self.directories, self.chunk_bytes, seconds)


def replicate_for(directories: Sequence[Path], chunk_bytes: int, seconds: float) -> tuple[int, float]:
    """(bytes every follower had written when `seconds` were up, those seconds): the leader
    writes in directories[0], a follower in each of the others; the files are removed after."""
    paths = [directory / f".replication-ceiling-{uuid.uuid4().hex[:8]}" for directory in directories]
    fds = [os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600) for path in paths]
    sender, leader_in = _loopback_pair()
    links = [_loopback_pair() for _ in directories[1:]]
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

    def lead() -> None:
        buffer = bytearray(chunk_bytes)
        position = 0
        while _receive_whole(leader_in, buffer):
            _pwrite_whole(fds[0], buffer, position)
            for out, _ in links:
                sent = position
                while sent < position + chunk_bytes:
                    sent += os.sendfile(out.fileno(), fds[0], sent, position + chunk_bytes - sent)
            position += chunk_bytes

    def follow(index: int) -> None:
        buffer = bytearray(chunk_bytes)
        while _receive_whole(links[index][1], buffer):
            _pwrite_whole(fds[index + 1], buffer, copied[index])
            copied[index] += chunk_bytes

    threads = [threading.Thread(target=guarded, args=(body, *args), name=f"replication-ceiling-{i}", daemon=True)
               for i, (body, args) in enumerate([(send, ()), (lead, ()), *((follow, (i,)) for i in range(len(links)))])]
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
