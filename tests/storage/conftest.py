"""Fixtures for storage tests: a controllable clock and logs that are closed afterwards."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from kbroker.storage.log import Log
from kbroker.storage.log_config import LogConfig
from tests.storage.batches import ReadRec, read_records

T0 = 1_700_000_000_000


class Clock:
    def __init__(self, now: int = T0) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


OpenLog = Callable[..., Log]


@pytest.fixture
def open_log(tmp_path: Path, clock: Clock) -> Iterator[OpenLog]:
    opened: list[Log] = []

    def make(config: LogConfig | None = None, *, name: str = "topic-0", **kwargs: Any) -> Log:
        log = Log(tmp_path / name, config or LogConfig(), clock=clock, **kwargs)
        opened.append(log)
        return log

    yield make
    for log in opened:
        log.release()


def read_all(log: Log, start: int | None = None, max_bytes: int = 1 << 20,
             stop_before: int | None = None) -> list[ReadRec]:
    """Every record from `start` (default: log start) to the log end (or `stop_before`), following segments."""
    offset = log.log_start_offset if start is None else start
    stop = log.log_end_offset if stop_before is None else stop_before
    out: list[ReadRec] = []
    while offset < stop:
        result = log.read(offset, max_bytes)
        if result is None:
            break
        records = [r for r in read_records(result.read_bytes(), allow_partial_tail=True) if r.offset >= offset]
        assert records, f"no progress reading at {offset}"
        out.extend(records)
        offset = records[-1].offset + 1
    return out
