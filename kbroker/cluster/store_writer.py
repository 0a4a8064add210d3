"""Metadata store writes off the event loop.

A ZooKeeper call blocks until ZooKeeper answers; while ZooKeeper is slow or paused, a write made
on the event loop would stall every client of the broker. Request paths therefore hand their
store writes (CreateTopics, DeleteTopics, CreatePartitions, (Incremental)AlterConfigs,
ElectLeaders, AlterPartitionReassignments, ISR changes) to `StoreWriter.run`, which runs them on
one worker thread, one at a time in the order they were submitted, and resumes the request when
the write is done.

The embedded store's writes are a local file replaced atomically, as before: they run inline.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

T = TypeVar("T")


class StoreWriter:
    def __init__(self, threaded: bool) -> None:
        # One thread: writes stay in submission order, as a single ZooKeeper session serves them.
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="metadata-writes") if threaded else None

    @property
    def threaded(self) -> bool:
        return self._executor is not None

    async def run(self, call: Callable[..., T], *args: Any) -> T:
        """`call(*args)` on the writer's thread (inline for the embedded store)."""
        if self._executor is None:
            return call(*args)
        return await asyncio.get_running_loop().run_in_executor(self._executor, functools.partial(call, *args))

    def close(self) -> None:
        """Wait for the writes already submitted (a stopping broker's last ISR or leadership
        changes), then stop the thread."""
        if self._executor is not None:
            self._executor.shutdown(wait=True)
