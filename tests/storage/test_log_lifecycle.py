"""Retention, DeleteRecords, truncation, leader epochs and deferred file deletion."""

from __future__ import annotations

import pytest

from kbroker.storage.log import Log
from kbroker.storage.log_config import LogConfig
from protocol.errors import ErrorCode, KafkaError
from tests.storage.batches import Rec, batch
from tests.storage.conftest import T0, Clock, OpenLog, read_all

DAY = 86_400_000


def fill(log: Log, count: int, timestamp: int = T0, size: int = 100, epoch: int = 0) -> None:
    for _ in range(count):
        log.append_as_leader(batch([Rec(b"k", b"r" * size, timestamp)]), epoch, T0)
    log.high_watermark = log.log_end_offset


def small_segments(**changes: object) -> LogConfig:
    one = len(batch([Rec(b"k", b"r" * 100)]))
    return LogConfig(segment_bytes=one * 5, **changes)  # five single-record batches per segment


def test_retention_by_time_deletes_whole_old_segments(open_log: OpenLog, clock: Clock) -> None:
    log = open_log(small_segments(retention_ms=DAY))
    fill(log, 12, timestamp=T0 - 10 * DAY)  # segments [0..4] [5..9] [10, 11]
    fill(log, 8, timestamp=T0)  # the new data rolls at 12 (record time jumped by more than segment.ms)
    assert [s.base_offset for s in log.segments] == [0, 5, 10, 12, 17]
    assert log.delete_old_segments(T0) == 3
    assert log.log_start_offset == 12
    assert [s.base_offset for s in log.segments] == [12, 17]
    assert [r.offset for r in read_all(log)] == list(range(12, 20))
    with pytest.raises(KafkaError) as caught:
        log.read(3, 100)
    assert caught.value.code == ErrorCode.OFFSET_OUT_OF_RANGE


def test_expired_active_segment_is_rolled_then_deleted(open_log: OpenLog) -> None:
    log = open_log(small_segments(retention_ms=DAY))
    fill(log, 7, timestamp=T0)
    assert log.delete_old_segments(T0 + 2 * DAY) == 2
    assert log.log_start_offset == log.log_end_offset == 7
    assert len(log.segments) == 1 and log.active_segment.is_empty
    log.append_as_leader(batch(values=[b"new"]), 0, T0 + 2 * DAY)
    assert [r.offset for r in read_all(log)] == [7]


def test_retention_by_size_keeps_the_newest_segments(open_log: OpenLog) -> None:
    one = len(batch([Rec(b"k", b"r" * 100)]))
    log = open_log(small_segments(retention_bytes=one * 7))
    fill(log, 18)  # segments of 5, 5, 5, 3 batches
    assert log.delete_old_segments(T0) == 2  # 18 -> 13 fits? no; 8 fits: two segments go
    assert log.log_start_offset == 10
    assert log.size_in_bytes == one * 8


def test_only_data_below_the_high_watermark_is_deleted(open_log: OpenLog) -> None:
    log = open_log(small_segments(retention_ms=DAY))
    fill(log, 12, timestamp=T0 - 10 * DAY)
    log.high_watermark = 7
    assert log.delete_old_segments(T0) == 1  # [0..4] only: [5..9] reaches past the HW
    assert log.log_start_offset == 5


def test_infinite_retention_and_compact_only_policy_keep_everything(open_log: OpenLog) -> None:
    log = open_log(small_segments(retention_ms=-1))
    fill(log, 12, timestamp=T0 - 1000 * DAY)
    assert log.delete_old_segments(T0) == 0
    compact = open_log(small_segments(retention_ms=1, cleanup_policy=("compact",)), name="c-0")
    fill(compact, 12, timestamp=T0 - 1000 * DAY)
    assert compact.delete_old_segments(T0) == 0


def test_deleted_segments_stay_readable_until_the_delay_passes(open_log: OpenLog) -> None:
    log = open_log(small_segments(retention_ms=DAY, file_delete_delay_ms=60_000))
    fill(log, 12, timestamp=T0 - 10 * DAY)
    fill(log, 1, timestamp=T0)
    in_flight = log.read(0, 1 << 20)
    log.delete_old_segments(T0)
    assert sorted(p.name for p in log.directory.glob("*.deleted"))[:1] == ["00000000000000000000.index.deleted"]
    assert not (log.directory / "00000000000000000000.log").exists()
    assert len(in_flight.read_bytes()) == in_flight.size  # the renamed file still serves
    assert log.delete_expired_files(T0 + 59_999) == 0
    assert log.delete_expired_files(T0 + 60_000) == 3
    assert not list(log.directory.glob("*.deleted"))


def test_delete_records(open_log: OpenLog) -> None:
    log = open_log(small_segments())
    fill(log, 12)
    assert log.delete_records_before(7) == 7
    assert log.log_start_offset == 7
    assert [s.base_offset for s in log.segments] == [5, 10]  # the segment holding 7 stays
    assert [r.offset for r in read_all(log)] == list(range(7, 12))
    assert log.delete_records_before(3) == 7  # never moves back
    log.high_watermark = 10
    with pytest.raises(KafkaError) as caught:
        log.delete_records_before(11)
    assert caught.value.code == ErrorCode.OFFSET_OUT_OF_RANGE
    assert log.delete_records_before(-1) == 10  # -1: up to the high watermark
    assert [s.base_offset for s in log.segments] == [10]


def test_truncate_to_drops_the_tail(open_log: OpenLog) -> None:
    log = open_log(small_segments())
    fill(log, 12)
    assert log.truncate_to(6)
    assert log.log_end_offset == 6 and log.high_watermark == 6
    assert [s.base_offset for s in log.segments] == [0, 5]
    assert [r.offset for r in read_all(log)] == list(range(6))
    log.append_as_leader(batch(values=[b"after"]), 0, T0)
    assert read_all(log)[-1].offset == 6 and read_all(log)[-1].value == b"after"
    assert not log.truncate_to(100)


def test_truncate_fully_and_start_at(open_log: OpenLog) -> None:
    log = open_log(small_segments())
    fill(log, 8)
    log.truncate_fully_and_start_at(50)
    assert (log.log_start_offset, log.log_end_offset, log.high_watermark) == (50, 50, 50)
    assert [s.base_offset for s in log.segments] == [50]
    info = log.append_as_leader(batch(values=[b"x"]), 0, T0)
    assert info.first_offset == 50


def test_leader_epoch_cache_and_end_offset_for_epoch(open_log: OpenLog, tmp_path) -> None:
    log = open_log()
    fill(log, 3, epoch=1)  # epoch 1 starts at 0
    fill(log, 2, epoch=3)  # epoch 3 starts at 3
    fill(log, 1, epoch=3)
    fill(log, 4, epoch=5)  # epoch 5 starts at 6
    assert log.latest_epoch == 5
    assert log.end_offset_for_epoch(5) == (5, 10)
    assert log.end_offset_for_epoch(3) == (3, 6)
    assert log.end_offset_for_epoch(2) == (1, 3)  # ends where the next higher epoch starts
    assert log.end_offset_for_epoch(0) == (0, 0)  # older than all: Kafka echoes the epoch
    assert log.end_offset_for_epoch(6) == (-1, -1)
    assert log.end_offset_for_epoch(-1) == (-1, -1)
    assert (log.directory / "leader-epoch-checkpoint").read_text() == "0\n3\n1 0\n3 3\n5 6\n"
    log.truncate_to(4)
    assert log.end_offset_for_epoch(3) == (3, 4) and log.latest_epoch == 3
    log.close()
    reopened = open_log(had_clean_shutdown=True)
    assert [tuple(e) for e in reopened.epochs.entries] == [(1, 0), (3, 3)]


def test_moving_the_log_start_trims_the_epoch_cache(open_log: OpenLog) -> None:
    log = open_log(small_segments())
    fill(log, 3, epoch=1)
    fill(log, 6, epoch=2)
    log.delete_records_before(5)
    assert [tuple(e) for e in log.epochs.entries] == [(2, 5)]


def test_clean_reopen_keeps_everything(open_log: OpenLog, tmp_path, clock: Clock) -> None:
    config = small_segments(index_interval_bytes=100)
    log = open_log(config)
    fill(log, 23, epoch=2)
    log.delete_records_before(3)
    before = read_all(log)
    log.flush()
    log.close()
    reopened = open_log(config, had_clean_shutdown=True, log_start_offset=3, high_watermark=23)
    assert (reopened.log_start_offset, reopened.log_end_offset, reopened.high_watermark) == (3, 23, 23)
    assert read_all(reopened) == before
    assert reopened.latest_epoch == 2
    info = reopened.append_as_leader(batch(values=[b"more"]), 2, T0)
    assert info.first_offset == 23


def test_missing_or_inconsistent_index_is_rebuilt_on_clean_open(open_log: OpenLog) -> None:
    config = small_segments(index_interval_bytes=100)
    log = open_log(config)
    fill(log, 12)
    entries = [s.offset_index.entries for s in log.segments]
    log.close()
    (log.directory / "00000000000000000000.index").unlink()
    with open(log.directory / "00000000000000000005.index", "r+b") as f:
        f.write(b"\x00\x00\x00\x09\x7f\x00\x00\x00")  # position far beyond the log
    reopened = open_log(config, had_clean_shutdown=True)
    assert [s.offset_index.entries for s in reopened.segments] == entries
    assert [r.offset for r in read_all(reopened)] == list(range(12))
