"""What the group coordinator needs of time: the event loop's clock and timers.

The running event loop provides both; tests pass a manual clock instead, so session timeouts
and rebalance delays of minutes are checked without waiting for them.
"""

from __future__ import annotations

from typing import Any, Protocol


class Timer(Protocol):
    def cancel(self) -> None: ...

    def cancelled(self) -> bool: ...

    def when(self) -> float: ...


class Clock(Protocol):
    def time(self) -> float: ...

    def call_at(self, when: float, callback: Any, *args: Any) -> Timer: ...

    def call_later(self, delay: float, callback: Any, *args: Any) -> Timer: ...
