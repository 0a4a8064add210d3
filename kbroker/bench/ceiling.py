"""The same-machine write ceiling: what a bare loop writing to kbroker's own log directory
reaches, measured beside every single-broker produce result, so the ratio to what the disk and
the page cache allow is visible next to the ratio to the mock.

The loop appends chunks of the producer's batch size to one new file with `os.pwrite`, as the
broker appends a produce request's batch to its segment, for as long as a produce run lasts; no
fsync (the broker does none on the produce path either). It runs in the benchmark's process
while no broker is being measured, alternated with the brokers' runs like a reference.
"""

from __future__ import annotations

import os
import time
import uuid
from pathlib import Path
from typing import Any

from kbroker.bench.servers import Server

MB = 1_000_000


class WriteCeiling(Server):
    """Not a broker: a stand-in in the alternation of a produce case (`run` replaces a run)."""

    name = "ceiling"
    description = "a bare os.pwrite loop into kbroker's log directory"

    def __init__(self, directory: Path, chunk_bytes: int) -> None:
        self.directory = directory
        self.chunk_bytes = chunk_bytes

    @property
    def bootstrap(self) -> str:
        raise NotImplementedError("the write ceiling has no clients")

    def run(self, seconds: float, message_size: int) -> dict[str, Any]:
        written, elapsed = write_for(self.directory, self.chunk_bytes, seconds)
        return {"messages": written // message_size, "errors": 0, "elapsed_s": round(elapsed, 3),
                "msgs_per_s": round(written / message_size / elapsed, 1),
                "mb_per_s": round(written / elapsed / MB, 3), "server_cpu": None, "client_cpu": None}


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
