"""How long a coroutine itself runs on the event loop: the sum of its steps, not the time it
waits between them. What `request_percentage` quotas charge a client for a request (Kafka
charges its request handler threads' time): a long-poll fetch that waits 500 ms for data costs
the microseconds it runs, a request that walks thousands of partitions costs its walk."""

from __future__ import annotations

import time
from collections.abc import Coroutine, Generator
from typing import Any, Generic, TypeVar

T = TypeVar("T")


class LoopTime(Generic[T]):
    """Await it in place of `coroutine`: the same result, and `seconds` its steps took."""

    __slots__ = ("_coroutine", "seconds")

    def __init__(self, coroutine: Coroutine[Any, Any, T]) -> None:
        self._coroutine = coroutine
        self.seconds = 0.0

    def __await__(self) -> Generator[Any, Any, T]:
        coroutine = self._coroutine
        clock = time.perf_counter
        sent: Any = None
        thrown: BaseException | None = None
        while True:
            started = clock()
            try:
                waiting = coroutine.send(sent) if thrown is None else coroutine.throw(thrown)
            except StopIteration as done:
                self.seconds += clock() - started
                return done.value
            except BaseException:
                self.seconds += clock() - started
                raise
            self.seconds += clock() - started
            try:
                sent, thrown = (yield waiting), None
            except BaseException as e:  # a cancellation (or anything thrown in) goes on to the coroutine
                sent, thrown = None, e
