"""Long loops that give the event loop back: one request's thousands of entries cost its own
time, not every other client's.

Every request runs on the one event loop; a handler working through 100,000 partitions in one
go would hold up every other connection for the whole time. `Pacer.tick()` per entry yields to
the loop once a slice of SLICE_S has been used, so other clients wait at most about one slice,
whatever an entry costs (a lookup, or creating a partition's log).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Iterable
from typing import Any, TypeVar

T = TypeVar("T")
# Entries of a request handled between two turns of the event loop (see `each`).
ENTRIES_PER_TURN = 256


async def each(items: Iterable[T]) -> AsyncIterator[T]:
    """`items`, with a turn of the event loop for every other client after each ENTRIES_PER_TURN:
    a request naming thousands of partitions costs its own time, not everyone's."""
    for count, item in enumerate(items, 1):
        yield item
        if count % ENTRIES_PER_TURN == 0:
            await asyncio.sleep(0)


SLICE_S = 0.005
_CLOCK_EVERY = 8  # entries between two looks at the clock


class Pacer:
    """Gives the event loop a turn whenever the entries worked through since the last one took
    SLICE_S, across nested loops (`await pacer.tick()` per entry)."""

    __slots__ = ("count", "_since")

    def __init__(self) -> None:
        self.count = 0
        self._since = time.monotonic()

    async def tick(self) -> None:
        if self.due():
            await self.pause()

    def due(self) -> bool:
        """Counts an entry; True when the loop is owed a turn. `if pacer.due(): await
        pacer.pause()` is `await pacer.tick()` without a coroutine per entry, for the loops
        every fetch runs."""
        self.count += 1
        return self.count % _CLOCK_EVERY == 0 and time.monotonic() - self._since >= SLICE_S

    async def pause(self) -> None:
        await asyncio.sleep(0)
        self._since = time.monotonic()

    async def map(self, items: Iterable[T], work: Callable[[T], Any]) -> list[Any]:
        """[work(item) for item in items], ticking once per item."""
        out = []
        for item in items:
            out.append(work(item))
            await self.tick()
        return out


