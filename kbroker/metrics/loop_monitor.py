"""How busy the event loop is: Kafka's network-processor idle ratio, for kbroker's one loop.

Every client is served by one asyncio event loop, so the share of time it spends running
callbacks (not waiting for sockets) says how close the broker is to saturation, as Kafka's
NetworkProcessorAvgIdlePercent does for its processor threads. It is measured directly: the
loop's selector is wrapped so the time spent blocked in `select()` (idle) is added up; two
clock reads per loop iteration. Busy = 1 - idle / elapsed, over the last WINDOW_S seconds.

A sampler task also wakes every SAMPLE_INTERVAL_S and records how late it woke (the loop lag):
the delay a ready callback waited behind others, which shows a held loop even where the
selector cannot be wrapped (uvloop has none in Python; there only the lag is exported).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from typing import Any

from kbroker.metrics.stats import Histogram

SAMPLE_INTERVAL_S = 1.0
WINDOW_S = 10.0
# Lag bounds in seconds: a healthy loop wakes within a millisecond; a held one, far later.
LAG_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


class LoopMonitor:
    def __init__(self) -> None:
        self.idle_seconds = 0.0  # time spent blocked in select(), added up since install
        self.measures_idle = False
        self.lag = Histogram(LAG_BUCKETS)
        # (monotonic time, idle_seconds) taken by the sampler, the last WINDOW_S of them.
        self._samples: deque[tuple[float, float]] = deque(maxlen=int(WINDOW_S / SAMPLE_INTERVAL_S) + 1)
        self._sampler: asyncio.Task[None] | None = None

    def install(self, loop: asyncio.AbstractEventLoop) -> None:
        """Wrap the loop's selector (asyncio's selector loops) and start the sampler."""
        selector: Any = getattr(loop, "_selector", None)
        if selector is not None and hasattr(selector, "select"):
            self._wrap(selector)
        self._samples.append((time.monotonic(), self.idle_seconds))
        self._sampler = loop.create_task(self._sample_forever())

    def _wrap(self, selector: Any) -> None:
        select = selector.select
        monotonic = time.monotonic

        def timed_select(timeout: float | None = None) -> Any:
            start = monotonic()
            try:
                return select(timeout)
            finally:
                self.idle_seconds += monotonic() - start

        selector.select = timed_select
        self.measures_idle = True

    async def _sample_forever(self) -> None:
        while True:
            expected = time.monotonic() + SAMPLE_INTERVAL_S
            await asyncio.sleep(SAMPLE_INTERVAL_S)
            now = time.monotonic()
            self.lag.observe(max(now - expected, 0.0))
            self._samples.append((now, self.idle_seconds))

    def busy_ratio(self) -> float | None:
        """The share of the last WINDOW_S the loop spent running callbacks; None until two
        samples exist or where idle time is not measured. Read from the scraper's thread: the
        deque is copied first."""
        samples = list(self._samples)
        if not self.measures_idle or len(samples) < 2:
            return None
        (start, idle_start), (end, idle_end) = samples[0], samples[-1]
        elapsed = end - start
        if elapsed <= 0:
            return None
        return min(max(1.0 - (idle_end - idle_start) / elapsed, 0.0), 1.0)

    async def stop(self) -> None:
        if self._sampler is not None:
            self._sampler.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sampler
