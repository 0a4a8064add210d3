"""Opening a log after an unclean stop: verify, cut at the first bad byte, rebuild indexes."""

from __future__ import annotations

import logging

import pytest

from kbroker.storage.log import Log
from kbroker.storage.log_config import LogConfig
from protocol.errors import ErrorCode, KafkaError
from tests.storage.batches import batch
from tests.storage.conftest import T0, Clock, OpenLog, read_all

CONFIG = LogConfig(segment_bytes=3000, index_interval_bytes=200)


def fill(log: Log, count: int, epoch: int = 0) -> list[int]:
    """Append `count` batches of 3 records; returns the file size of each batch."""
    sizes = []
    for i in range(count):
        data = batch(values=[f"value-{i}-{j}".encode() * 4 for j in range(3)])
        log.append_as_leader(data, epoch, T0)
        sizes.append(len(data))
    log.high_watermark = log.log_end_offset
    return sizes


def crash(log: Log) -> None:
    """Stop without flushing, checkpoints or final index entries, as kill -9 would."""
    log.release()


def check_lookups(log: Log) -> None:
    for offset in range(log.log_start_offset, log.log_end_offset):
        result = log.read(offset, 1)
        assert result is not None and result.first_offset <= offset


def test_a_torn_last_batch_is_cut(open_log: OpenLog, caplog: pytest.LogCaptureFixture) -> None:
    log = open_log(CONFIG)
    sizes = fill(log, 40)
    segments = len(log.segments)
    crash(log)
    last = sorted(log.directory.glob("*.log"))[-1]
    with open(last, "r+b") as f:
        f.truncate(last.stat().st_size - 7)
    with caplog.at_level(logging.WARNING, logger="kbroker.storage"):
        reopened = open_log(CONFIG)
    assert reopened.log_end_offset == 39 * 3
    assert len(reopened.segments) == segments
    assert [r.offset for r in read_all(reopened)] == list(range(117))
    messages = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("topic-0" in m and last.name in m and f"cutting {sizes[-1] - 7} bytes" in m for m in messages), messages
    check_lookups(reopened)
    info = reopened.append_as_leader(batch(values=[b"next"]), 0, T0)
    assert info.first_offset == 117


def test_a_flipped_byte_costs_only_its_batch(open_log: OpenLog, caplog: pytest.LogCaptureFixture) -> None:
    # Before, recovery cut the segment at the damaged batch and deleted every later segment,
    # the active one included: everything after one flipped byte was gone.
    log = open_log(CONFIG)
    fill(log, 40)
    end = log.log_end_offset
    second = log.segments[1]
    first_in_second = second.base_offset
    segments = [s.base_offset for s in log.segments]
    crash(log)
    data = bytearray(second.log_path.read_bytes())
    batches_before_flip = 2
    position = 0
    for _ in range(batches_before_flip):  # walk two batches, then damage the third one's records
        position += int.from_bytes(data[position + 8 : position + 12], "big") + 12
    data[position + 70] ^= 0xFF
    second.log_path.write_bytes(bytes(data))
    with caplog.at_level(logging.WARNING, logger="kbroker.storage"):
        reopened = open_log(CONFIG)
    damaged = first_in_second + batches_before_flip * 3
    assert reopened.log_end_offset == end
    assert [s.base_offset for s in reopened.segments] == segments
    before = reopened.read(0, 1 << 20)
    assert before is not None and before.first_offset == 0
    assert [r.offset for r in read_all(reopened, 0, stop_before=damaged)] == list(range(damaged))
    for offset in range(damaged, damaged + 3):  # the damaged batch's offsets: an error, not bytes
        with pytest.raises(KafkaError) as refused:
            reopened.read(offset, 1 << 20)
        assert refused.value.code == ErrorCode.CORRUPT_MESSAGE
    assert [r.offset for r in read_all(reopened, damaged + 3)] == list(range(damaged + 3, end))
    text = "\n".join(r.getMessage() for r in caplog.records)
    assert f"at position {position}" in text and "CRC mismatch" in text
    assert "deleting segment" not in text
    assert reopened.append_as_leader(batch(values=[b"n"]), 0, T0).first_offset == end


def test_trailing_zeros_are_cut(open_log: OpenLog) -> None:
    log = open_log(CONFIG)
    sizes = fill(log, 3)
    crash(log)
    with open(log.active_segment.log_path, "ab") as f:
        f.write(b"\x00" * 500)  # e.g. blocks allocated but never written before a power cut
    reopened = open_log(CONFIG)
    assert reopened.log_end_offset == 9
    assert reopened.active_segment.size == sum(sizes)
    assert reopened.active_segment.log_path.stat().st_size == sum(sizes)


def test_recovery_starts_at_the_recovery_point(open_log: OpenLog) -> None:
    log = open_log(CONFIG)
    fill(log, 40)
    log.flush(log.segments[2].base_offset)
    recovery_point = log.recovery_point
    crash(log)
    # Damage inside a flushed segment goes unnoticed, as in Kafka; the unflushed tail is verified.
    first = log.segments[0].log_path
    data = bytearray(first.read_bytes())
    data[100] ^= 0xFF
    first.write_bytes(bytes(data))
    last = log.segments[-1].log_path
    with open(last, "r+b") as f:
        f.truncate(last.stat().st_size - 1)
    reopened = open_log(CONFIG, recovery_point=recovery_point)
    assert reopened.log_end_offset == 39 * 3
    assert reopened.segments[0].size == len(data)


def test_unclean_open_truncates_the_epoch_cache(open_log: OpenLog) -> None:
    log = open_log(CONFIG)
    fill(log, 3, epoch=1)
    fill(log, 1, epoch=2)
    crash(log)
    with open(log.active_segment.log_path, "r+b") as f:
        f.truncate(log.active_segment.size - 1)
    reopened = open_log(CONFIG)
    assert reopened.log_end_offset == 9
    assert reopened.latest_epoch == 1


def test_leftover_files_are_cleaned_up(open_log: OpenLog) -> None:
    log = open_log(CONFIG)
    fill(log, 2)
    log.close()
    for name in ("00000000000000000000.log.deleted", "00000000000000000006.log.cleaned",
                 "00000000000000000777.index", "00000000000000000777.txnindex", "leader-epoch-checkpoint.tmp",
                 "00000000000000000006.snapshot.tmp"):
        (log.directory / name).write_bytes(b"junk")
    reopened = open_log(CONFIG, had_clean_shutdown=True)
    names = sorted(p.name for p in reopened.directory.iterdir())
    # A clean close leaves a producer-state snapshot at the log end, as Kafka's does, and one of
    # the delay index (docs/delayed-and-retry.md), so a restart scans nothing.
    assert names == ["00000000000000000000.index", "00000000000000000000.log",
                     "00000000000000000000.timeindex", "00000000000000000006.delayed",
                     "00000000000000000006.snapshot", "leader-epoch-checkpoint"]
    assert reopened.log_end_offset == 6


def test_a_log_start_past_the_log_end_restarts_the_log_empty_there(open_log: OpenLog, clock: Clock) -> None:
    # DeleteRecords checkpointed a log start, then a crash came before its segments went.
    log = open_log(LogConfig(segment_bytes=3000, index_interval_bytes=200, file_delete_delay_ms=1000))
    fill(log, 20)
    log.append_as_leader(batch(values=[b"idempotent"], producer_id=7, producer_epoch=0, base_sequence=0), 0, T0)
    log.roll(T0)  # a producer-state snapshot holding producer 7
    old_segments = [segment.log_path for segment in log.segments]
    assert len(old_segments) > 1 and log.producer_state.snapshot_offsets()
    end = log.log_end_offset
    crash(log)
    reopened = open_log(LogConfig(segment_bytes=3000, index_interval_bytes=200, file_delete_delay_ms=1000),
                        log_start_offset=end + 40, high_watermark=end)
    start = end + 40
    assert (reopened.log_start_offset, reopened.log_end_offset, reopened.high_watermark) == (start, start, start)
    assert [s.base_offset for s in reopened.segments] == [start]
    assert reopened.recovery_point == reopened.cleaner_checkpoint == start
    assert not reopened.epochs.entries and not reopened.producer_state.producers
    assert reopened.producer_state.snapshot_offsets() == []
    assert not any(path.exists() for path in old_segments)  # renamed .deleted, removed after the delay
    clock.now += 1000
    assert reopened.delete_expired_files(clock.now) == len(old_segments)
    assert list(reopened.directory.glob("*.deleted")) == []
    info = reopened.append_as_leader(batch(values=[b"after"]), 3, T0)
    assert info.first_offset == start
