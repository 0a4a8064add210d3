"""A rolled segment is fsynced in the flusher thread, not on the event loop (Kafka flushes it on
its scheduler thread): an fsync of a whole segment takes as long as the disk needs, and every
client would wait for it. The recovery point passes the segment only once its fsync is done, and
not at all when the log was truncated meanwhile."""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from kbroker.storage import checkpoint
from kbroker.storage.log import Log
from kbroker.storage.log_config import LogConfig
from kbroker.storage.log_manager import LogManager
from tests.storage.batches import Rec, batch
from tests.storage.conftest import T0, Clock

ONE_BATCH = len(batch([Rec(b"k", b"r" * 100)]))


class HeldFsyncs:
    """os.fsync, recorded with the thread that called it and the file; the flusher thread's wait for
    `release` (the disk is slow), the others go through at once."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls: list[tuple[str, str]] = []  # (thread, file name)
        self.release = threading.Event()
        self.entered = threading.Event()
        real = os.fsync

        def fsync(fd: int) -> None:
            name = threading.current_thread().name
            self.calls.append((name, os.path.basename(os.readlink(f"/proc/self/fd/{fd}"))))
            if name.startswith("kbroker-flush"):
                self.entered.set()
                assert self.release.wait(10), "the test never released the flush"
            real(fd)

        monkeypatch.setattr(os, "fsync", fsync)


@pytest.fixture
def manager(tmp_path: Path, clock: Clock) -> Iterator[LogManager]:
    made = LogManager([tmp_path / "logs"], lambda _topic: LogConfig(segment_bytes=ONE_BATCH * 5), clock=clock,
                      initial_task_delay_ms=0)
    yield made
    made.shutdown()


def fill(log: Log, count: int) -> None:
    for _ in range(count):
        log.append_as_leader(batch([Rec(b"k", b"r" * 100, T0)]), 0, T0)


async def _flusher_idle(manager: LogManager) -> None:
    """Everything queued on the flusher thread before now has run (it runs one job at a time)."""
    await asyncio.get_running_loop().run_in_executor(manager._flusher, lambda: None)


async def _flush_done(log: Log, recovery_point: int) -> None:
    async with asyncio.timeout(10):
        while log.recovery_point != recovery_point:
            await asyncio.sleep(0.001)


def test_a_rolled_segment_is_fsynced_off_the_event_loop(manager: LogManager, monkeypatch: pytest.MonkeyPatch) -> None:
    log = manager.get_or_create_log("t", 0)
    fill(log, 7)  # a segment of five rolled, two in the active one
    rolled_end = log.active_segment.base_offset
    assert rolled_end == 5 and log.recovery_point == 0
    fsyncs = HeldFsyncs(monkeypatch)

    async def scenario() -> None:
        manager.tick(T0 + 1_000)
        # The tick returned while the fsync is held: it is not the loop's.
        await asyncio.to_thread(fsyncs.entered.wait, 10)
        assert log.recovery_point == 0, "the recovery point moved before the fsync was done"
        fill(log, 1)  # the loop serves appends meanwhile
        fsyncs.release.set()
        await _flush_done(log, rolled_end)

    asyncio.run(scenario())
    segments = [(thread, name) for thread, name in fsyncs.calls if name.endswith(".log")]
    assert segments == [("kbroker-flush_0", "00000000000000000000.log")], fsyncs.calls
    assert log.log_end_offset == 8


def test_a_truncation_during_the_flush_keeps_the_recovery_point(manager: LogManager,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    log = manager.get_or_create_log("t", 0)
    fill(log, 7)
    fsyncs = HeldFsyncs(monkeypatch)

    async def scenario() -> None:
        manager.tick(T0 + 1_000)
        await asyncio.to_thread(fsyncs.entered.wait, 10)
        log.truncate_to(3)  # a follower's divergent tail: offsets 3 and on will hold other data
        fill(log, 4)
        fsyncs.release.set()
        async with asyncio.timeout(10):
            while log._rolled_flush is not None:
                await asyncio.sleep(0.001)

    asyncio.run(scenario())
    assert log.recovery_point == 0, "a flush that ran across a truncation moved the recovery point"


def test_without_an_event_loop_the_tick_flushes_at_once(manager: LogManager, monkeypatch: pytest.MonkeyPatch) -> None:
    log = manager.get_or_create_log("t", 0)
    fill(log, 7)
    fsyncs = HeldFsyncs(monkeypatch)
    manager.tick(T0 + 1_000)
    assert log.recovery_point == 5
    assert ("MainThread", "00000000000000000000.log") in fsyncs.calls, fsyncs.calls


def test_a_rolls_producer_snapshot_is_fsynced_with_the_rolled_segment(manager: LogManager,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """The roll writes the producer state snapshot but leaves its fsync (and the directory's, for
    its rename) to the flusher thread, as Kafka does: on the loop it would wait for the journal."""
    log = manager.get_or_create_log("t", 0)
    fill(log, 1)  # the first append writes the leader epoch checkpoint (fsynced, where it happens)
    fsyncs = HeldFsyncs(monkeypatch)
    fill(log, 6)  # rolls at offset 5
    assert (log.directory / "00000000000000000005.snapshot").exists()
    assert fsyncs.calls == [], "the roll fsynced on the event loop"

    async def scenario() -> None:
        manager.tick(T0 + 1_000)
        await asyncio.to_thread(fsyncs.entered.wait, 10)
        assert log.recovery_point == 0
        fsyncs.release.set()
        await _flush_done(log, 5)

    asyncio.run(scenario())
    flushed = [name for thread, name in fsyncs.calls  # the checkpoints (*.tmp, the dir) aside
               if thread.startswith("kbroker-flush") and not name.endswith(".tmp") and name != "logs"]
    assert flushed == ["00000000000000000000.log", "00000000000000000005.snapshot", "t-0"], fsyncs.calls
    on_loop = [name for thread, name in fsyncs.calls if not thread.startswith("kbroker-flush")]
    assert not any(".snapshot" in name for name in on_loop), fsyncs.calls


def test_a_flush_without_an_event_loop_fsyncs_the_rolls_snapshot_too(manager: LogManager,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    log = manager.get_or_create_log("t", 0)
    fill(log, 7)
    fsyncs = HeldFsyncs(monkeypatch)
    log.flush()
    names = [name for _, name in fsyncs.calls]
    assert "00000000000000000005.snapshot" in names and "t-0" in names, fsyncs.calls
    assert names.index("00000000000000000005.snapshot") > names.index("00000000000000000000.log")


def test_the_periodic_checkpoints_are_written_by_the_flusher_thread(manager: LogManager,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """On the loop, a checkpoint's fsyncs wait for the file system's journal: Kafka writes them on
    its scheduler threads, kbroker in the flusher thread."""
    log = manager.get_or_create_log("t", 0)
    fill(log, 2)
    fsyncs = HeldFsyncs(monkeypatch)

    async def scenario() -> None:
        manager.tick(T0 + 1_000)
        await asyncio.to_thread(fsyncs.entered.wait, 10)  # the tick returned while they are held
        fsyncs.release.set()
        await _flusher_idle(manager)

    asyncio.run(scenario())
    written = {name for _, name in fsyncs.calls}
    assert {"recovery-point-offset-checkpoint.tmp", "replication-offset-checkpoint.tmp"} <= written, fsyncs.calls
    assert all(thread.startswith("kbroker-flush") for thread, _ in fsyncs.calls), fsyncs.calls
    assert checkpoint.read_offsets(log.directory.parent / checkpoint.REPLICATION_CHECKPOINT) == {("t", 0): 0}


def test_a_checkpoint_queued_behind_a_flush_never_replaces_a_newer_one(manager: LogManager,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    log = manager.get_or_create_log("t", 0)
    fill(log, 7)
    fsyncs = HeldFsyncs(monkeypatch)

    async def scenario() -> None:
        manager.tick(T0 + 1_000)  # the rolled flush (held), then the checkpoints, queued behind it
        await asyncio.to_thread(fsyncs.entered.wait, 10)
        log.high_watermark = 7
        log.delete_records_before(3)
        manager.write_checkpoints()  # at once, on this thread: the log start is 3
        assert checkpoint.read_offsets(log.directory.parent / checkpoint.LOG_START_CHECKPOINT) == {("t", 0): 3}
        fsyncs.release.set()
        await _flush_done(log, 5)
        await _flusher_idle(manager)

    asyncio.run(scenario())
    # The queued write read the log start before the deletion (0): it left the newer file alone.
    assert checkpoint.read_offsets(log.directory.parent / checkpoint.LOG_START_CHECKPOINT) == {("t", 0): 3}
