"""Time in kbroker: one wall clock, and the clock types that components take as a parameter.

`wall_clock_ms` is the wall-clock time in milliseconds, the time Kafka stamps on records,
segments, groups and transactions. Components whose behaviour depends on time take a clock
instead of reading it themselves, so tests can move time by hand:

- `WallClock`, a function returning the time in milliseconds (the log and the log manager);
- `LoopClock`, the event loop's clock and timers (the group coordinator): the running event
  loop provides both, tests pass tests/manual_clock.py, so session timeouts and rebalance
  delays of minutes are checked without waiting for them.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Protocol

WallClock = Callable[[], int]


def wall_clock_ms() -> int:
    return int(time.time() * 1000)


def monotonic_ms() -> int:
    """Milliseconds of a clock that never steps back (rates and throttles measure with it)."""
    return int(time.monotonic() * 1000)


class Timer(Protocol):
    def cancel(self) -> None: ...

    def cancelled(self) -> bool: ...

    def when(self) -> float: ...


class LoopClock(Protocol):
    def time(self) -> float: ...

    def call_at(self, when: float, callback: Any, *args: Any) -> Timer: ...

    def call_later(self, delay: float, callback: Any, *args: Any) -> Timer: ...
