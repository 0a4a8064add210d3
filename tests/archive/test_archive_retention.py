"""The archive's own retention (kbroker/archive/archiver.py, `expired`): the oldest archived
segments go once below the log start (DeleteRecords), while the whole log (archived, and local
segments not archived yet) is over retention.bytes, or once their newest record is older than
retention.ms; never one after a segment that stays."""

from __future__ import annotations

from pathlib import Path

from kbroker.archive.archiver import expired
from kbroker.archive.remote_log import COPY_FINISHED, COPY_STARTED, RemoteLog, RemoteSegment
from kbroker.storage.log import Log
from kbroker.storage.log_config import LogConfig
from tests.storage.batches import Rec, batch

ONE = len(batch([Rec(b"k", b"r" * 100)]))
T0 = 1_700_000_000_000
HOUR = 3_600_000


def tiered_log(directory: Path, **config: int) -> Log:
    """30 single-record batches, five a segment: local segments [0..4] ... [25..29]; record i
    written 30 - i hours before T0."""
    log = Log(directory, LogConfig(segment_bytes=ONE * 5, remote_storage_enable=True, **config), clock=lambda: T0,
              archiving=True)
    for offset in range(30):
        log.append_as_leader(batch([Rec(b"k", b"r" * 100, T0 + (offset - 30) * HOUR)]), 0, T0)
    log.high_watermark = log.log_end_offset
    return log


def archived(count: int, state: str = COPY_FINISHED) -> RemoteLog:
    """The first `count` local segments, archived: [0..4], [5..9], ..."""
    segments = [RemoteSegment(f"s{i}", i * 5, i * 5 + 4, state, 0, ONE * 5, T0 + (i * 5 + 4 - 30) * HOUR)
                for i in range(count)]
    return RemoteLog("t", 0, tuple(segments), 0, 1)


def bases(segments: list[RemoteSegment]) -> list[int]:
    return [s.base_offset for s in segments]


def test_nothing_expires_within_the_retention(tmp_path: Path) -> None:
    log = tiered_log(tmp_path / "t-0")
    try:
        assert expired(log, archived(4), T0) == []  # retention: 7 days, unlimited bytes
    finally:
        log.release()


def test_segments_below_the_log_start_expire(tmp_path: Path) -> None:
    """DeleteRecords moved the log start to 12: [0..4] and [5..9] go, [10..14] holds 12."""
    log = tiered_log(tmp_path / "t-0")
    try:
        log.delete_records_before(12)
        assert bases(expired(log, archived(4), T0)) == [0, 5]
    finally:
        log.release()


def test_retention_bytes_counts_the_archive_and_what_only_the_disk_holds(tmp_path: Path) -> None:
    # Archived [0..19], local only [20..29]: 30 batches. Over a limit of 22, [0..4] goes (25 are
    # left, still over) but not [5..9] (20 would be left): as Kafka, a segment goes only while the
    # log without it stays at or over the limit.
    log = tiered_log(tmp_path / "t-0", retention_bytes=ONE * 22)
    try:
        assert bases(expired(log, archived(4), T0)) == [0]
        log.config = LogConfig(segment_bytes=ONE * 5, remote_storage_enable=True, retention_bytes=ONE * 20)
        assert bases(expired(log, archived(4), T0)) == [0, 5]  # 10 over: two segments
    finally:
        log.release()


def test_retention_ms_expires_segments_whose_newest_record_is_older(tmp_path: Path) -> None:
    log = tiered_log(tmp_path / "t-0", retention_ms=18 * HOUR)
    try:
        # [0..4] (newest 26 h old) and [5..9] (21 h) are older than 18 h; [10..14] (16 h) is not.
        assert bases(expired(log, archived(4), T0)) == [0, 5]
    finally:
        log.release()


def test_only_finished_segments_expire(tmp_path: Path) -> None:
    log = tiered_log(tmp_path / "t-0")
    try:
        log.delete_records_before(12)
        assert expired(log, archived(4, COPY_STARTED), T0) == []
    finally:
        log.release()
