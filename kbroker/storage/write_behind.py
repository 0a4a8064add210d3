"""Appends whose bytes are written off the event loop, by one writer thread per log directory
(off unless KBROKER_WRITE_BEHIND_MIN_BYTES is set: see WRITE_BEHIND_MIN_BYTES).

A large produce request spends most of its time on the loop in the kernel's copy of its bytes
into the page cache (`pwrite`). `os.pwrite` releases the GIL, so a writer thread can do that
copy while the loop reads, decodes and validates the next request. The split keeps the log's
state simple:

- everything that decides *what* is written (validation, offsets, producer checks, the roll)
  runs on the loop before the write starts;
- while the write runs, the log's visible state (log end, segment size, indexes, producer
  state) is exactly what it was before it: readers (consumers, followers, the high watermark)
  see nothing of it yet;
- once the bytes are in the page cache, the loop publishes the append, as an inline append
  would have, and only then is the producer answered.

At most one write per log is in flight. An async caller waits for it (`Log.wait_idle`); any
other change of the log (an inline append, a roll, truncation, retention, close) settles it
first, blocking the loop for at most that one write, which is what the loop did itself before.
A write that fails is taken back from the file and fails the log dir, as an inline one does.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import os
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from protocol.records import BatchHeader

if TYPE_CHECKING:
    from kbroker.storage.producer_state import ProducerAppend
    from kbroker.storage.segment import LogSegment

# Off unless set: measured on the two-core machine of docs/performance.md, a writer thread moved
# 0.91-1.03x the bytes of the loop writing itself, for 10-13 % more CPU per MB (under the GIL the
# thread's return from each write waits for the busy loop, so the two rarely overlap). Set, an
# append of at least this many bytes is written by the thread (`kbroker bench --compare-env
# KBROKER_WRITE_BEHIND_MIN_BYTES=65536` measures it again, e.g. on a machine with more cores):
# below 64 KiB the hop to the thread and back costs about what the copy it moves does.
def threshold_from(setting: str | None) -> int | None:
    return int(setting) if setting else None


WRITE_BEHIND_MIN_BYTES = threshold_from(os.environ.get("KBROKER_WRITE_BEHIND_MIN_BYTES"))


class DirWriter:
    """The writer thread of one log directory (started on first use). One thread per directory:
    writes to one disk gain nothing from running side by side, and appends of a log are written
    in the order they were made."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._executor: concurrent.futures.ThreadPoolExecutor | None = None
        self._closed = False
        self._lock = threading.Lock()

    def submit(self, fd: int, data: bytes | bytearray | memoryview,
               position: int) -> concurrent.futures.Future[None] | None:
        """Write `data` at `position` of `fd` in the thread; None once shut down (write inline)."""
        with self._lock:
            if self._closed:
                return None
            if self._executor is None:
                self._executor = concurrent.futures.ThreadPoolExecutor(
                    max_workers=1, thread_name_prefix=f"kbroker-write-{self.name}")
            return self._executor.submit(pwrite_all, fd, data, position)

    def shutdown(self) -> None:
        """Wait for the writes in progress; later appends are written inline."""
        with self._lock:
            self._closed = True
            executor, self._executor = self._executor, None
        if executor is not None:
            executor.shutdown(wait=True)


def pwrite_all(fd: int, data: bytes | bytearray | memoryview, position: int) -> None:
    view = memoryview(data)
    while view:
        written = os.pwrite(fd, view, position)
        view = view[written:]
        position += written


@dataclass(slots=True, eq=False)
class PendingWrite:
    """An append whose bytes a writer thread is putting into `segment` at `position`: what the
    log publishes once they are there."""

    segment: LogSegment
    position: int
    data: bytes | bytearray | memoryview  # as written (sealed, with encryption at rest)
    headers: Sequence[BatchHeader]
    plain: bytes | bytearray | memoryview  # as appended (what the delay index reads)
    plain_headers: Sequence[BatchHeader]
    producers: ProducerAppend | None
    future: concurrent.futures.Future[None]
    # Set once the append is published (or has failed): what a produce answer waits for.
    published: asyncio.Future[None]


def start(writer: DirWriter | None, segment: LogSegment, data: bytes | bytearray | memoryview,
          headers: Sequence[BatchHeader], plain: bytes | bytearray | memoryview,
          plain_headers: Sequence[BatchHeader], producers: ProducerAppend | None,
          on_done: Callable[[PendingWrite], None]) -> PendingWrite | None:
    """Hand the write of an append to `writer`; None when it is to be written inline (small, no
    writer, no running event loop, or the writer shut down). `on_done` runs on the loop."""
    if writer is None or WRITE_BEHIND_MIN_BYTES is None or len(data) < WRITE_BEHIND_MIN_BYTES:
        return None
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        return None
    future = writer.submit(segment.fd, data, segment.size)
    if future is None:
        return None
    pending = PendingWrite(segment, segment.size, data, headers, plain, plain_headers, producers, future,
                           loop.create_future())

    def done(_: concurrent.futures.Future[None]) -> None:
        # In the writer thread: publishing is the loop's. A closed loop means the broker is
        # gone; the next start recovers the segment from its file.
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(on_done, pending)

    future.add_done_callback(done)
    return pending


F = TypeVar("F", bound=Callable[..., Any])


def settled(method: F) -> F:
    """For a method of Log that changes it: first settle an append being written."""

    @functools.wraps(method)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        if self._inflight is not None:
            self.settle()
        return method(self, *args, **kwargs)

    return wrapper  # type: ignore[return-value]
