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
"""

from __future__ import annotations

import os
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

    def run(self, seconds: float, message_size: int) -> dict[str, Any]:
        written, elapsed = write_copies_for(self.directories, self.chunk_bytes, seconds)
        per_copy = written / len(self.directories)
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
