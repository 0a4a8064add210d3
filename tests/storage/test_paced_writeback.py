"""A rolled segment is written back in steps with rests between them before its fsync
(`kbroker/storage/writeback.py`): one burst of a whole segment's writeback took a third of the
machine's CPUs as steal time. A flush that falls behind, or one running at shutdown, stops
resting."""

from __future__ import annotations

import asyncio
import errno
import os
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from kbroker.storage.log import Log
from kbroker.storage.log_config import LogConfig
from kbroker.storage.log_manager import LogManager
from kbroker.storage.writeback import SYNC_FILE_RANGE, PacedWriteback
from tests.storage.batches import Rec, batch
from tests.storage.conftest import T0, Clock

ONE_BATCH = len(batch([Rec(b"k", b"r" * 100)]))
MIB = 1 << 20


class FakeDisk:
    """A sync_range that records its calls (by file: descriptor numbers are reused) and takes
    `step_seconds` of a fake clock each."""

    def __init__(self, step_seconds: float = 0.004) -> None:
        self.now = 100.0
        self.step_seconds = step_seconds
        self.steps: list[tuple[int, int, int]] = []  # (inode, offset, length)
        self.rests: list[float] = []

    def sync_range(self, fd: int, offset: int, length: int) -> None:
        self.steps.append((os.fstat(fd).st_ino, offset, length))
        self.now += self.step_seconds

    def clock(self) -> float:
        return self.now

    def writeback(self, busy_percent: int, step_bytes: int = 8 * MIB) -> PacedWriteback:
        made = PacedWriteback(busy_percent, step_bytes=step_bytes, sync_range=self.sync_range, clock=self.clock)
        made.rest = self.rests.append
        return made


@pytest.fixture
def file_of_20_mib(tmp_path: Path) -> Iterator[int]:
    fd = os.open(tmp_path / "segment", os.O_RDWR | os.O_CREAT)
    os.ftruncate(fd, 20 * MIB)
    yield fd
    os.close(fd)


def test_a_file_goes_in_steps_each_followed_by_its_rest(file_of_20_mib: int) -> None:
    disk = FakeDisk()
    written = disk.writeback(10).write_back(file_of_20_mib, lambda: False)
    assert written == 20 * MIB
    inode = os.fstat(file_of_20_mib).st_ino
    assert disk.steps == [(inode, offset, 8 * MIB) for offset in (0, 8 * MIB, 16 * MIB)]
    # Busy 10 % of the time: nine times each step's duration at rest.
    assert disk.rests == pytest.approx([0.036] * 3)


def test_at_100_percent_the_fsync_does_it_all(file_of_20_mib: int) -> None:
    disk = FakeDisk()
    assert disk.writeback(100).write_back(file_of_20_mib, lambda: False) == 0
    assert disk.steps == [] and disk.rests == []


def test_a_flush_behind_stops_stepping(file_of_20_mib: int) -> None:
    disk = FakeDisk()
    assert disk.writeback(10).write_back(file_of_20_mib, lambda: len(disk.steps) == 1) == 8 * MIB
    assert len(disk.steps) == 1


def test_a_failing_step_ends_the_pacing_not_the_flush(file_of_20_mib: int) -> None:
    def failing(fd: int, offset: int, length: int) -> None:
        raise OSError(errno.EIO, "I/O error")

    writeback = PacedWriteback(10, sync_range=failing)
    assert writeback.write_back(file_of_20_mib, lambda: False) == 0  # the fsync then reports it


@pytest.mark.parametrize("busy_percent", [0, 101])
def test_a_share_outside_1_to_100_is_refused(busy_percent: int) -> None:
    with pytest.raises(ValueError):
        PacedWriteback(busy_percent)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="sync_file_range is Linux's")
def test_the_libc_binding_writes_a_real_file_and_reports_errors(tmp_path: Path) -> None:
    assert SYNC_FILE_RANGE is not None
    fd = os.open(tmp_path / "segment", os.O_RDWR | os.O_CREAT)
    try:
        os.write(fd, b"x" * (3 * MIB))
        rests: list[float] = []
        writeback = PacedWriteback(50, step_bytes=MIB)
        writeback.rest = rests.append
        assert writeback.write_back(fd, lambda: False) == 3 * MIB
        assert len(rests) == 3
    finally:
        os.close(fd)
    with pytest.raises(OSError) as failed:
        SYNC_FILE_RANGE(fd, 0, MIB)  # closed
    assert failed.value.errno == errno.EBADF


# -- the log manager's flushes ----------------------------------------------------------------------


class HeldDisk(FakeDisk):
    """A FakeDisk whose first step waits for `release`, so the test can act during a flush."""

    def __init__(self) -> None:
        super().__init__()
        self.entered = threading.Event()
        self.release = threading.Event()

    def sync_range(self, fd: int, offset: int, length: int) -> None:
        super().sync_range(fd, offset, length)
        if len(self.steps) == 1:
            self.entered.set()
            assert self.release.wait(10), "the test never released the step"


@pytest.fixture
def manager(tmp_path: Path, clock: Clock) -> Iterator[LogManager]:
    made = LogManager([tmp_path / "logs"], lambda _topic: LogConfig(segment_bytes=ONE_BATCH * 5), clock=clock,
                      initial_task_delay_ms=0, rolled_flush_busy_percent=10)
    yield made
    made.shutdown()


def fill(log: Log, count: int) -> None:
    for _ in range(count):
        log.append_as_leader(batch([Rec(b"k", b"r" * 100, T0)]), 0, T0)


async def _flush_done(log: Log, recovery_point: int) -> None:
    async with asyncio.timeout(10):
        while log.recovery_point != recovery_point:
            await asyncio.sleep(0.001)


def test_a_rolled_flush_steps_through_the_segment_then_fsyncs(manager: LogManager) -> None:
    disk = FakeDisk()
    manager.writeback = disk.writeback(10, step_bytes=ONE_BATCH)
    log = manager.get_or_create_log("t", 0)
    fill(log, 7)  # a segment of five batches rolled

    async def scenario() -> None:
        manager.tick(T0 + 1_000)
        await _flush_done(log, 5)

    asyncio.run(scenario())
    assert [offset for _, offset, _ in disk.steps] == [ONE_BATCH * i for i in range(5)]
    assert len(disk.rests) == 5


def test_a_second_roll_during_the_flush_stops_its_rests(manager: LogManager) -> None:
    disk = HeldDisk()
    manager.writeback = disk.writeback(10, step_bytes=ONE_BATCH)
    log = manager.get_or_create_log("t", 0)
    fill(log, 7)

    async def scenario() -> None:
        manager.tick(T0 + 1_000)
        await asyncio.to_thread(disk.entered.wait, 10)
        fill(log, 5)  # rolls again at offset 10 while the first flush writes its first step
        manager.tick(T0 + 2_000)
        disk.release.set()
        await _flush_done(log, 5)  # the first flush, done after one step
        manager.tick(T0 + 3_000)
        await _flush_done(log, 10)

    asyncio.run(scenario())
    first_segment = disk.steps[0][0]
    assert [step for step in disk.steps if step[0] == first_segment] == [disk.steps[0]]


def test_a_flush_waited_for_by_another_logs_stops_its_rests(manager: LogManager) -> None:
    disk = HeldDisk()
    manager.writeback = disk.writeback(10, step_bytes=ONE_BATCH)
    first, second = manager.get_or_create_log("t", 0), manager.get_or_create_log("t", 1)
    fill(first, 7)

    async def scenario() -> None:
        manager.tick(T0 + 1_000)
        await asyncio.to_thread(disk.entered.wait, 10)
        fill(second, 7)
        manager.tick(T0 + 2_000)  # the second log's flush queues behind the first
        disk.release.set()
        await _flush_done(first, 5)
        await _flush_done(second, 5)

    asyncio.run(scenario())
    by_file: dict[int, int] = {}
    for inode, _, _ in disk.steps:
        by_file[inode] = by_file.get(inode, 0) + 1
    assert sorted(by_file.values()) == [1, 5], disk.steps  # the first stopped; the second rested


def test_shutdown_cuts_a_flush_short_of_its_rests(tmp_path: Path, clock: Clock) -> None:
    """A rest of hours (a slow fake disk at 1 %) ends when the broker shuts down."""
    manager = LogManager([tmp_path / "logs"], lambda _topic: LogConfig(segment_bytes=ONE_BATCH * 5), clock=clock,
                         initial_task_delay_ms=0)
    disk = FakeDisk(step_seconds=100.0)
    resting = threading.Event()
    manager.writeback = PacedWriteback(1, step_bytes=ONE_BATCH, sync_range=disk.sync_range, clock=disk.clock)
    real_rest = manager.writeback.rest

    def rest(seconds: float) -> object:
        resting.set()
        return real_rest(seconds)

    manager.writeback.rest = rest
    log = manager.get_or_create_log("t", 0)
    fill(log, 7)

    async def scenario() -> None:
        manager.tick(T0 + 1_000)
        await asyncio.to_thread(resting.wait, 10)

    asyncio.run(scenario())
    stopped = threading.Thread(target=manager.shutdown)
    stopped.start()
    stopped.join(10)
    waited = stopped.is_alive()
    manager.writeback.hurry.set()  # frees a rest the shutdown did not end
    stopped.join()
    assert not waited, "shutdown waited out the flush's rest"
    assert len(disk.steps) == 1
