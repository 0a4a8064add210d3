"""Rate-limited logging: one line per kind of event per interval, with a count of the rest.

A client that sends the same bad request in a loop, or an accept loop out of descriptors, would
otherwise write a line (or a traceback) per event and fill the disk with them.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

DEFAULT_INTERVAL_S = 10.0


class RateLimitedLog:
    def __init__(self, logger: logging.Logger, interval_s: float = DEFAULT_INTERVAL_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.logger = logger
        self.interval_s = interval_s
        self.clock = clock
        self._next: dict[str, float] = {}  # kind -> when the next line may go out
        self._suppressed: dict[str, int] = {}

    def log(self, level: int, kind: str, message: str, *args: object, exc_info: bool = False) -> bool:
        """Log `message` unless a line of `kind` went out less than an interval ago; True if logged."""
        now = self.clock()
        if now < self._next.get(kind, 0.0):
            self._suppressed[kind] = self._suppressed.get(kind, 0) + 1
            return False
        if len(self._next) > 1000:  # kinds are few; never let an unexpected variety grow without bound
            self._next.clear()
        self._next[kind] = now + self.interval_s
        suppressed = self._suppressed.pop(kind, 0)
        if suppressed:
            message += f" ({suppressed} similar line(s) suppressed in the last {self.interval_s:g} s)"
        self.logger.log(level, message, *args, exc_info=exc_info)
        return True

    def warning(self, kind: str, message: str, *args: object) -> bool:
        return self.log(logging.WARNING, kind, message, *args)

    def info(self, kind: str, message: str, *args: object) -> bool:
        return self.log(logging.INFO, kind, message, *args)

    def exception(self, kind: str, message: str, *args: object) -> bool:
        return self.log(logging.ERROR, kind, message, *args, exc_info=True)
