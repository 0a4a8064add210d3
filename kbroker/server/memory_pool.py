"""The bytes of requests held at once, across all connections (`queued.max.request.bytes`).

Kafka's network layer allocates each request from a memory pool and stops reading from a
socket while the pool is exhausted, so however many clients send large requests at once the
broker holds at most the pool's size in request bytes. This is that pool: a connection asks
for a frame's size before reading its body and gives it back once the request is answered;
while it waits, its socket is not read (TCP pushes back on the client).
"""

from __future__ import annotations

import asyncio
from collections import deque


class MemoryPool:
    def __init__(self, capacity: int) -> None:
        """`capacity` bytes; 0 or less means no limit (Kafka's -1)."""
        self.capacity = capacity
        self.used = 0
        self._waiters: deque[tuple[int, asyncio.Future[None]]] = deque()

    @property
    def unlimited(self) -> bool:
        return self.capacity <= 0

    def try_acquire(self, size: int) -> bool:
        """Take `size` bytes now if they are free and nobody queued before."""
        if self.unlimited:
            self.used += size
            return True
        if self._waiters or not self._fits(size):
            return False
        self.used += size
        return True

    async def acquire(self, size: int) -> None:
        """Wait until `size` bytes are free (first come, first served)."""
        if self.try_acquire(size):
            return
        waiter = asyncio.get_running_loop().create_future()
        self._waiters.append((size, waiter))
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self.release(size)  # granted just as it was cancelled: give it back
            else:
                self._waiters.remove((size, waiter))
                self._wake()
            raise

    def release(self, size: int) -> None:
        self.used -= size
        self._wake()

    def _fits(self, size: int) -> bool:
        # A request larger than the whole pool still gets through alone (never a deadlock).
        return self.used + size <= self.capacity or self.used == 0

    def _wake(self) -> None:
        while self._waiters:
            size, waiter = self._waiters[0]
            if waiter.done():
                self._waiters.popleft()
                continue
            if not self._fits(size):
                return
            self._waiters.popleft()
            self.used += size
            waiter.set_result(None)
