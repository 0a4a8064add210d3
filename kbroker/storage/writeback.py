"""The writeback of a rolled segment in paced steps, before the fsync that makes it durable.

Why: a rolled segment of segment.bytes (1 GiB by default) is mostly dirty pages when it rolls,
and one fsync writes them back as fast as the disk allows. On a virtual machine the host does
that IO on the same physical CPUs: while 1 GiB went out in about a second, a third of the two
vCPUs went to steal time, and the broker's end-to-end p99 rose from about 4 ms to 75-190 ms
(docs/performance.md, "Pacing the writeback of a rolled segment"). Written back in 8 MiB steps
(`sync_file_range`, as RocksDB's bytes_per_sync), each followed by a rest, the same work keeps
the disk busy only part of the time.

The fsync still runs after the steps: `sync_file_range` makes neither the metadata nor the
disk's cache durable. A flush that falls behind (another roll came, other flushes wait, the
broker is shutting down) stops resting, and the fsync writes the rest at once.
"""

from __future__ import annotations

import ctypes
import os
import threading
import time
from collections.abc import Callable

STEP_BYTES = 8 << 20
# sync_file_range flags: wait for earlier writeback of the range, start it, wait for it.
_WAIT_BEFORE, _WRITE, _WAIT_AFTER = 1, 2, 4
_FLAGS = _WAIT_BEFORE | _WRITE | _WAIT_AFTER

SyncRange = Callable[[int, int, int], None]


def _load_sync_file_range() -> SyncRange | None:
    """Linux's sync_file_range(2) through libc (the os module has no binding); None elsewhere."""
    try:
        function = ctypes.CDLL(None, use_errno=True).sync_file_range
    except (OSError, AttributeError):
        return None
    function.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]
    function.restype = ctypes.c_int

    def sync_range(fd: int, offset: int, length: int) -> None:
        # A ctypes call releases the GIL: the event loop runs while the step is written.
        if function(fd, offset, length, _FLAGS) != 0:
            error = ctypes.get_errno()
            raise OSError(error, os.strerror(error))

    return sync_range


SYNC_FILE_RANGE = _load_sync_file_range()


class PacedWriteback:
    """Writes files back in steps, resting after each so the disk is busy `busy_percent` of the
    time (100: no steps, the fsync does it all, as Kafka)."""

    def __init__(self, busy_percent: int, *, step_bytes: int = STEP_BYTES,
                 sync_range: SyncRange | None = SYNC_FILE_RANGE,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if not 1 <= busy_percent <= 100:
            raise ValueError(f"busy_percent must be 1 to 100, got {busy_percent}")
        self.rest_per_busy_second = (100 - busy_percent) / busy_percent
        self.step_bytes = step_bytes
        self.sync_range = sync_range if busy_percent < 100 else None
        self.clock = clock
        # Set at shutdown: every flush stops resting. Its wait is also how a flush rests.
        self.hurry = threading.Event()
        self.rest: Callable[[float], object] = self.hurry.wait

    def write_back(self, fd: int, behind: Callable[[], bool]) -> int:
        """Write `fd`'s dirty pages back step by step (in the flusher thread) while `behind()`
        is false; returns the bytes stepped through. Errors end the pacing only: the fsync that
        follows reports what matters."""
        offset = 0
        if self.sync_range is None:
            return offset
        try:
            size = os.fstat(fd).st_size
            while offset < size and not self.hurry.is_set() and not behind():
                started = self.clock()
                self.sync_range(fd, offset, self.step_bytes)
                offset += self.step_bytes
                self.rest((self.clock() - started) * self.rest_per_busy_second)
        except OSError:
            return offset
        return min(offset, size)
