"""Waiting for a condition in tests: poll it until it holds or a deadline passes."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

# Short enough not to slow a test down, long enough that a condition asking a broker (a
# Metadata request, a new client) does not load the 2 cores the suite shares.
POLL_INTERVAL_S = 0.1


def wait_until(
    condition: Callable[[], T],
    timeout_s: float = 30.0,
    what: str = "the condition",
    *,
    interval_s: float = POLL_INTERVAL_S,
) -> T:
    """Poll `condition` until it returns a truthy value, and return that value.

    Polling, not sleeping a fixed time: the awaited state belongs to another process or thread
    that announces nothing to the test. Raises AssertionError naming `what` when `timeout_s`
    passes first.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(interval_s)
