"""A large append's bytes are written by the log dir's writer thread while the loop goes on; the
log shows nothing of it until its bytes are in the file, a change of the log waits for it, and a
failed write is taken back and fails the dir as an inline one does (write_behind.py)."""

from __future__ import annotations

import asyncio
import errno
import os
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from kbroker.storage import write_behind
from kbroker.storage.log import Log
from kbroker.storage.log_config import LogConfig
from kbroker.storage.log_dir_health import DirState, KafkaStorageError
from kbroker.storage.log_manager import LogManager
from tests.storage.batches import Rec, batch
from tests.storage.conftest import T0, Clock, read_all

THRESHOLD = 64 * 1024
BIG = Rec(b"k", b"b" * THRESHOLD, T0)  # one batch past the threshold
SMALL = Rec(b"k", b"s" * 100, T0)


@pytest.fixture(autouse=True)
def write_behind_on(monkeypatch: pytest.MonkeyPatch) -> None:
    """As KBROKER_WRITE_BEHIND_MIN_BYTES=65536 does (off by default)."""
    monkeypatch.setattr(write_behind, "WRITE_BEHIND_MIN_BYTES", THRESHOLD)


class HeldWrites:
    """os.pwrite, recorded with the thread that called it; the writer thread's waits for `release`
    (the disk is slow) and then fails with `failure` if one is set; the others go through."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.threads: list[str] = []
        self.release = threading.Event()
        self.entered = threading.Event()
        self.failure: OSError | None = None
        real = os.pwrite

        def pwrite(fd: int, data: bytes, position: int) -> int:
            name = threading.current_thread().name
            self.threads.append(name)
            if name.startswith("kbroker-write"):
                self.entered.set()
                assert self.release.wait(10), "the test never released the write"
                if self.failure is not None:
                    real(fd, bytes(data)[: len(data) // 2], position)  # part of it reached the file
                    raise self.failure
            return real(fd, data, position)

        monkeypatch.setattr(os, "pwrite", pwrite)

    def release_once_entered(self) -> threading.Thread:
        """Release the write from another thread once the writer is in it (for a blocking wait)."""
        thread = threading.Thread(target=lambda: (self.entered.wait(10), self.release.set()))
        thread.start()
        return thread


@pytest.fixture
def manager(tmp_path: Path, clock: Clock) -> Iterator[LogManager]:
    made = LogManager([tmp_path / "logs"], lambda _topic: LogConfig(), clock=clock, initial_task_delay_ms=0)
    yield made
    made.shutdown()


def test_a_large_append_is_published_once_written(manager: LogManager, monkeypatch: pytest.MonkeyPatch) -> None:
    log = manager.get_or_create_log("t", 0)
    log.append_as_leader(batch([SMALL]), 0, T0)
    writes = HeldWrites(monkeypatch)

    async def scenario() -> None:
        info, written = log.start_append_as_leader(batch([BIG]), 0, T0)
        assert written is not None and info.first_offset == 1
        await asyncio.to_thread(writes.entered.wait, 10)
        # Being written: readers, the log end and the segment see nothing of it yet.
        assert log.log_end_offset == 1 and not written.done()
        assert [r.offset for r in read_all(log)] == [0]
        writes.release.set()
        await written
        assert log.log_end_offset == 2

    asyncio.run(scenario())
    assert [(r.offset, r.value) for r in read_all(log)] == [(0, SMALL.value), (1, BIG.value)]
    assert any(t.startswith("kbroker-write") for t in writes.threads)


def assert_written_inline_on_the_loop(log: Log, record: Rec, monkeypatch: pytest.MonkeyPatch) -> None:
    """An append of `record` made on a running loop is in the log at once, written by the loop."""
    writes = HeldWrites(monkeypatch)

    async def scenario() -> None:
        _, written = log.start_append_as_leader(batch([record]), 0, T0)
        assert written is None and log.log_end_offset == 1

    asyncio.run(scenario())
    assert writes.threads == ["MainThread"]


def test_a_small_append_is_written_inline(manager: LogManager, monkeypatch: pytest.MonkeyPatch) -> None:
    assert_written_inline_on_the_loop(manager.get_or_create_log("t", 0), SMALL, monkeypatch)


def test_off_by_default(manager: LogManager, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(write_behind, "WRITE_BEHIND_MIN_BYTES", write_behind.threshold_from(None))
    assert_written_inline_on_the_loop(manager.get_or_create_log("t", 0), BIG, monkeypatch)
    assert write_behind.threshold_from("65536") == THRESHOLD


def test_without_an_event_loop_a_large_append_is_written_inline(manager: LogManager,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    log = manager.get_or_create_log("t", 0)
    writes = HeldWrites(monkeypatch)
    _, written = log.start_append_as_leader(batch([BIG]), 0, T0)
    assert written is None and log.log_end_offset == 1 and writes.threads == ["MainThread"]


@pytest.mark.parametrize("change", ["append", "roll", "truncate"])
def test_a_change_of_the_log_settles_the_write_first(manager: LogManager, monkeypatch: pytest.MonkeyPatch,
                                                     change: str) -> None:
    log = manager.get_or_create_log("t", 0)
    writes = HeldWrites(monkeypatch)

    async def scenario() -> None:
        _, written = log.start_append_as_leader(batch([BIG]), 0, T0)
        assert written is not None
        releaser = writes.release_once_entered()
        if change == "append":  # an inline append (a coordinator's) goes after it, never over it
            assert log.append_as_leader(batch([SMALL]), 0, T0).first_offset == 1
        elif change == "roll":
            assert log.roll().base_offset == 1
        else:
            log.truncate_to(1)  # a truncation below the write's end happens after it, not before
        releaser.join()
        assert written.done() and written.exception() is None
        await written

    asyncio.run(scenario())
    expected = {"append": [0, 1], "roll": [0], "truncate": [0]}[change]
    assert [r.offset for r in read_all(log)] == expected
    assert read_all(log)[0].value == BIG.value


def test_a_failed_write_is_taken_back_and_fails_the_dir(manager: LogManager, monkeypatch: pytest.MonkeyPatch) -> None:
    log = manager.get_or_create_log("t", 0)
    log.append_as_leader(batch([SMALL]), 0, T0)
    size = log.active_segment.size
    writes = HeldWrites(monkeypatch)
    writes.failure = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    async def scenario() -> None:
        _, written = log.start_append_as_leader(batch([BIG]), 0, T0)
        assert written is not None
        writes.release.set()
        with pytest.raises(KafkaStorageError):
            await written

    asyncio.run(scenario())
    assert log.log_end_offset == 1 and log.active_segment.size == size
    assert os.path.getsize(log.active_segment.log_path) == size  # the half that reached the file is gone
    assert log.health.state is DirState.FULL
    with pytest.raises(KafkaStorageError):
        log.append_as_leader(batch([SMALL]), 0, T0)
    assert [r.offset for r in read_all(log)] == [0]


def test_shutdown_publishes_the_write_in_flight(tmp_path: Path, clock: Clock, monkeypatch: pytest.MonkeyPatch) -> None:
    manager = LogManager([tmp_path / "logs"], lambda _topic: LogConfig(), clock=clock, initial_task_delay_ms=0)
    log = manager.get_or_create_log("t", 0)
    writes = HeldWrites(monkeypatch)

    async def scenario() -> None:
        _, written = log.start_append_as_leader(batch([BIG]), 0, T0)
        assert written is not None
        releaser = writes.release_once_entered()
        manager.shutdown()
        releaser.join()
        await written

    asyncio.run(scenario())
    reopened = Log(tmp_path / "logs" / "t-0", LogConfig(), clock=clock, had_clean_shutdown=True)
    try:
        assert [(r.offset, r.value) for r in read_all(reopened)] == [(0, BIG.value)]
    finally:
        reopened.release()
