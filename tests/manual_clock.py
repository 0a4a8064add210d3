"""A clock the test moves by hand, for the group coordinator's timers (kbroker.clock.LoopClock):
minutes of session timeouts and rebalance delays pass in an instant, in a fixed order."""

from __future__ import annotations

import heapq
import itertools
from typing import Any


class ManualTimer:
    def __init__(self, when: float, callback: Any, args: tuple[Any, ...]) -> None:
        self._when = when
        self.callback = callback
        self.args = args
        self._cancelled = False

    def cancel(self) -> None:
        self._cancelled = True

    def cancelled(self) -> bool:
        return self._cancelled

    def when(self) -> float:
        return self._when


class ManualClock:
    def __init__(self, start: float = 1000.0) -> None:
        self.now = start
        self._timers: list[tuple[float, int, ManualTimer]] = []
        self._order = itertools.count()  # timers due at the same time fire in the order they were set

    def time(self) -> float:
        return self.now

    def call_at(self, when: float, callback: Any, *args: Any) -> ManualTimer:
        timer = ManualTimer(when, callback, args)
        heapq.heappush(self._timers, (when, next(self._order), timer))
        return timer

    def call_later(self, delay: float, callback: Any, *args: Any) -> ManualTimer:
        return self.call_at(self.now + delay, callback, *args)

    def advance(self, seconds: float) -> None:
        """Move time forward, firing every timer that falls due on the way, at its own time."""
        target = self.now + seconds
        while self._timers and self._timers[0][0] <= target:
            when, _, timer = heapq.heappop(self._timers)
            self.now = max(self.now, when)
            if not timer.cancelled():
                timer.callback(*timer.args)
        self.now = target
