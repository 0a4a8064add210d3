"""LoopTime: a coroutine's own steps are timed, not the waits between them (what request
quotas charge), and its result, exceptions and cancellation pass through unchanged."""

from __future__ import annotations

import asyncio
import time

import pytest

from kbroker.server.loop_time import LoopTime


def busy(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


async def works_and_waits() -> str:
    busy(0.02)
    await asyncio.sleep(0.2)  # waiting: not charged
    busy(0.02)
    return "done"


def test_only_the_steps_are_counted() -> None:
    async def main() -> tuple[str, float]:
        timed = LoopTime(works_and_waits())
        return await timed, timed.seconds

    result, seconds = asyncio.run(main())
    assert result == "done"
    assert 0.04 <= seconds < 0.15, seconds  # the 0.2 s wait is not in it


def test_exceptions_and_cancellation_pass_through() -> None:
    async def fails() -> None:
        await asyncio.sleep(0)
        raise ValueError("bad")

    async def main() -> None:
        with pytest.raises(ValueError, match="bad"):
            await LoopTime(fails())
        task = asyncio.ensure_future(LoopTime(asyncio.sleep(10)))
        await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
