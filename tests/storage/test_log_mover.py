"""Moving a partition's log to another log dir: the copy, the swap, and every crash point in between."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from kbroker.storage import log_mover
from kbroker.storage.log import Log
from kbroker.storage.log_config import LogConfig
from kbroker.storage.log_manager import LogManager
from kbroker.storage.log_mover import LogDirMover, finish_interrupted_swaps
from protocol.errors import ErrorCode, KafkaError
from tests.storage.batches import Rec, batch
from tests.storage.conftest import Clock, read_all

CONFIG = LogConfig(segment_bytes=4096)


@pytest.fixture
def dirs(tmp_path: Path) -> list[Path]:
    return [tmp_path / "d0", tmp_path / "d1"]


@pytest.fixture
def managers(dirs: list[Path], clock: Clock) -> Iterator[list[LogManager]]:
    """Every LogManager a test opens; released at the end (a test's "crash" just stops using one)."""
    opened: list[LogManager] = []
    yield opened
    for manager in opened:
        for each in [*manager.logs(), *manager.future_logs.values()]:
            each.release()


def open_manager(managers: list[LogManager], dirs: list[Path], clock: Clock) -> LogManager:
    manager = LogManager(dirs, lambda _topic: CONFIG, clock=clock)
    managers.append(manager)
    return manager


def fill(log_: Log, batches: int, start: int = 0) -> None:
    for i in range(start, start + batches):
        log_.append_as_leader(batch([Rec(f"k{i}".encode(), f"value-{i}".encode() * 20)]), 0, 1_000)
    log_.high_watermark = log_.log_end_offset


def segment_files(log_: Log) -> dict[str, bytes]:
    return {s.log_path.name: s.log_path.read_bytes() for s in log_.segments}


def other_dir(log_: Log, dirs: list[Path]) -> Path:
    return next(d for d in dirs if d != log_.directory.parent)


async def wait_moved(manager: LogManager, key: tuple[str, int], timeout_s: float = 10) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while key in manager.future_logs:
        assert loop.time() < deadline, "the move did not finish"
        await asyncio.sleep(0.01)


def test_a_move_copies_the_log_byte_for_byte_and_swaps(managers: list[LogManager], dirs: list[Path],
                                                        clock: Clock) -> None:
    async def scenario() -> None:
        manager = open_manager(managers, dirs, clock)
        source = manager.get_or_create_log("t", 0)
        fill(source, 200)
        source.delete_records_before(37)
        before = segment_files(source)
        records = read_all(source)
        replaced: list[Log] = []
        mover = LogDirMover(manager, on_replaced=replaced.append)
        mover.start()
        dest = other_dir(source, dirs)
        mover.move(("t", 0), dest)
        assert manager.future_logs[("t", 0)].is_future
        await wait_moved(manager, ("t", 0))
        moved = manager.get_log("t", 0)
        assert moved is not source and replaced == [moved]
        assert moved.directory == dest / "t-0" and not moved.is_future
        assert segment_files(moved) == {name: data for name, data in before.items()
                                        if int(name[:20]) >= moved.segments[0].base_offset}
        assert read_all(moved) == records
        assert (moved.log_start_offset, moved.high_watermark) == (37, source.high_watermark)
        assert not (source.directory.parent / "t-0").exists()
        fill(moved, 5, start=200)  # appends go on in the new place
        assert moved.log_end_offset == 205
        await mover.stop()

    asyncio.run(scenario())


def test_appends_during_the_move_are_all_in_the_copy(managers: list[LogManager], dirs: list[Path],
                                                      clock: Clock, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(log_mover, "COPY_CHUNK_BYTES", 2048)
    monkeypatch.setattr(log_mover, "FINAL_COPY_BYTES", 1024)

    async def scenario() -> None:
        manager = open_manager(managers, dirs, clock)
        source = manager.get_or_create_log("t", 0)
        fill(source, 100)
        mover = LogDirMover(manager)
        mover.start()
        mover.move(("t", 0), other_dir(source, dirs))
        written = 100
        while ("t", 0) in manager.future_logs:
            fill(manager.get_log("t", 0), 3, start=written)  # a producer keeps writing meanwhile
            written += 3
            await asyncio.sleep(0)
        moved = manager.get_log("t", 0)
        assert moved is not source
        assert [r.value for r in read_all(moved)] == [f"value-{i}".encode() * 20 for i in range(written)]
        await mover.stop()

    asyncio.run(scenario())


def test_a_truncated_source_makes_the_copy_start_over(managers: list[LogManager], dirs: list[Path],
                                                      clock: Clock, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(log_mover, "COPY_CHUNK_BYTES", 1024)
    monkeypatch.setattr(log_mover, "FINAL_COPY_BYTES", 512)

    async def scenario() -> None:
        manager = open_manager(managers, dirs, clock)
        source = manager.get_or_create_log("t", 0)
        fill(source, 100)
        mover = LogDirMover(manager, rate=lambda: 4096)  # slow: a few KB a second
        mover.start()
        mover.move(("t", 0), other_dir(source, dirs))
        while manager.future_logs[("t", 0)].log_end_offset < 20:
            await asyncio.sleep(0.01)
        source.truncate_to(10)  # as a follower does when the leader's log diverged
        fill(source, 30, start=1000)
        mover._rate = (log_mover.UNLIMITED_RATE, float("inf"))
        await wait_moved(manager, ("t", 0))
        moved = manager.get_log("t", 0)
        expected = [f"value-{i}".encode() * 20 for i in [*range(10), *range(1000, 1030)]]
        assert [r.value for r in read_all(moved)] == expected
        await mover.stop()

    asyncio.run(scenario())


def test_requests_are_checked_as_kafka_checks_them(managers: list[LogManager], dirs: list[Path],
                                                   clock: Clock) -> None:
    manager = open_manager(managers, dirs, clock)
    mover = LogDirMover(manager)
    with pytest.raises(KafkaError) as e:
        mover.log_dir_for("/no/such/dir", "t", 0)
    assert e.value.code == ErrorCode.LOG_DIR_NOT_FOUND
    with pytest.raises(KafkaError) as e:
        mover.log_dir_for("d0", "t", 0)  # a relative path is not a configured dir
    assert e.value.code == ErrorCode.LOG_DIR_NOT_FOUND
    with pytest.raises(KafkaError) as e:
        mover.log_dir_for(str(dirs[0].resolve()), "x" * 250, 0)
    assert e.value.code == ErrorCode.INVALID_TOPIC
    manager.health[dirs[1]].failed(OSError(5, "Input/output error"), "a test")
    with pytest.raises(KafkaError) as e:
        mover.log_dir_for(str(dirs[1].resolve()), "t", 0)
    assert e.value.code == ErrorCode.KAFKA_STORAGE_ERROR
    # Kafka's preferred dir: a partition not created yet is created in the dir asked for.
    mover.prefer(("later", 0), dirs[0])
    assert manager.get_or_create_log("later", 0).directory.parent == dirs[0]
    assert ("later", 0) not in manager.preferred_dirs


def test_a_crash_mid_copy_resumes_the_move_at_the_next_start(managers: list[LogManager], dirs: list[Path],
                                                             clock: Clock) -> None:
    manager = open_manager(managers, dirs, clock)
    source = manager.get_or_create_log("t", 0)
    fill(source, 150)
    records = read_all(source)
    mover = LogDirMover(manager)  # not started: nothing copies on its own
    mover.move(("t", 0), other_dir(source, dirs))
    move = mover._moves[("t", 0)]
    log_mover._copy(move, 3000)  # part of it, then the process dies
    future = manager.future_logs[("t", 0)]
    assert 0 < future.log_end_offset < source.log_end_offset

    async def restart() -> None:
        again = open_manager(managers, dirs, clock)
        assert again.get_log("t", 0).directory == source.directory  # the current log is still the one
        assert ("t", 0) in again.future_logs
        mover = LogDirMover(again)
        mover.start()
        await wait_moved(again, ("t", 0))
        assert again.get_log("t", 0).directory.parent == future.directory.parent
        assert read_all(again.get_log("t", 0)) == records
        await mover.stop()

    asyncio.run(restart())


@pytest.mark.parametrize("crash_after", ["set_aside", "committed"])
def test_a_crash_in_the_middle_of_the_swap_loses_nothing(managers: list[LogManager], dirs: list[Path], clock: Clock,
                                                         crash_after: str, monkeypatch: pytest.MonkeyPatch) -> None:
    manager = open_manager(managers, dirs, clock)
    source = manager.get_or_create_log("t", 0)
    fill(source, 150)
    records = read_all(source)
    source_dir, dest = source.directory, other_dir(source, dirs)
    real_replace = os.replace
    renames: list[Path] = []

    def crashing_replace(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> None:
        renames_a_dir = Path(src).is_dir()
        real_replace(src, dst)
        if not renames_a_dir:
            return  # checkpoint files
        renames.append(Path(dst))
        if (crash_after == "set_aside" and len(renames) == 1) or (crash_after == "committed" and len(renames) == 2):
            raise SystemExit("crash")

    mover = LogDirMover(manager)
    mover.move(("t", 0), dest)
    move = mover._moves[("t", 0)]
    monkeypatch.setattr(log_mover.os, "replace", crashing_replace)
    with pytest.raises(SystemExit):
        mover._swap(("t", 0), move)
    monkeypatch.setattr(log_mover.os, "replace", real_replace)
    assert renames[0].name.endswith("-replaced")

    async def restart() -> None:
        again = open_manager(managers, dirs, clock)
        current = again.get_log("t", 0)
        if crash_after == "set_aside":
            assert current.directory == source_dir  # renamed back: still the partition's log
            mover = LogDirMover(again)
            mover.start()  # and the move completes from the future replica
            await wait_moved(again, ("t", 0))
            await mover.stop()
        assert again.get_log("t", 0).directory == dest / "t-0"
        assert read_all(again.get_log("t", 0)) == records
        # Nothing half-done is left: only the old copy, deleted after file.delete.delay.ms.
        assert not [p for d in dirs for p in d.iterdir() if p.name.endswith(("-future", "-replaced"))]

    asyncio.run(restart())


def test_a_replaced_dir_with_no_current_copy_anywhere_is_restored(dirs: list[Path]) -> None:
    for d in dirs:
        d.mkdir()
    lone = dirs[0] / f"t-3.{'a' * 32}-replaced"
    lone.mkdir()
    (lone / "00000000000000000000.log").write_bytes(b"data")
    finish_interrupted_swaps(dirs)
    assert (dirs[0] / "t-3" / "00000000000000000000.log").read_bytes() == b"data"
