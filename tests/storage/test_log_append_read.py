from __future__ import annotations

import random

import pytest

from kbroker.storage.log_config import LogConfig
from protocol.errors import ErrorCode, KafkaError
from protocol.records import crc_ok, read_header
from tests.storage.batches import Rec, batch, header_fields, legacy_message, read_records
from tests.storage.conftest import T0, OpenLog, read_all


def test_offsets_are_assigned_across_many_batches(open_log: OpenLog) -> None:
    log = open_log()
    rng = random.Random(7)
    expected = []
    for i in range(300):
        values = [f"m{i}-{j}".encode() * rng.randint(1, 20) for j in range(rng.randint(1, 5))]
        info = log.append_as_leader(batch(values=values), leader_epoch=3, now_ms=T0)
        assert info.first_offset == len(expected)
        assert info.last_offset == len(expected) + len(values) - 1
        assert info.record_count == len(values) and info.log_append_time == -1
        expected.extend(values)
    assert log.log_end_offset == len(expected)
    records = read_all(log)
    assert [r.offset for r in records] == list(range(len(expected)))
    assert [r.value for r in records] == expected


def test_stored_batches_carry_offset_and_epoch_and_stay_valid(open_log: OpenLog) -> None:
    log = open_log()
    log.append_as_leader(batch(values=[b"a", b"b"]), leader_epoch=0, now_ms=T0)
    log.append_as_leader(batch(values=[b"c"]), leader_epoch=5, now_ms=T0)
    data = log.read(2, 1000).read_bytes()
    fields = header_fields(data)
    assert fields["base_offset"] == 2 and fields["partition_leader_epoch"] == 5
    assert crc_ok(data)


def test_several_batches_in_one_append(open_log: OpenLog) -> None:
    log = open_log()
    info = log.append_as_leader(batch(values=[b"a", b"b"]) + batch(values=[b"c"]), 0, T0)
    assert (info.first_offset, info.last_offset, info.record_count) == (0, 2, 3)
    assert [r.value for r in read_all(log)] == [b"a", b"b", b"c"]


def test_accepts_bytearray_and_memoryview_without_touching_the_caller_buffer(open_log: OpenLog) -> None:
    log = open_log()
    log.append_as_leader(batch(values=[b"x"]), 0, T0)
    original = bytearray(batch(values=[b"y"]))
    log.append_as_leader(memoryview(original), 0, T0)
    assert header_fields(bytes(original))["base_offset"] == 0
    assert [r.offset for r in read_all(log)] == [0, 1]


def test_in_place_patches_a_writable_buffer_and_copies_a_read_only_one(open_log: OpenLog) -> None:
    """A produce request's frame is given away (`in_place`): its offsets are assigned where the
    bytes are, with no copy; bytes, which cannot be patched, are still copied."""
    log = open_log()
    log.append_as_leader(batch(values=[b"x"]), 0, T0)
    frame = bytearray(batch(values=[b"y", b"z"]))
    log.start_append_as_leader(memoryview(frame), 0, T0, in_place=True)
    assert header_fields(bytes(frame))["base_offset"] == 1
    log.start_append_as_leader(memoryview(batch(values=[b"w"])), 0, T0, in_place=True)
    assert [r.value for r in read_all(log)] == [b"x", b"y", b"z", b"w"]
    assert [r.offset for r in read_all(log)] == [0, 1, 2, 3]


def test_read_from_the_middle_of_a_batch_returns_the_whole_batch(open_log: OpenLog) -> None:
    log = open_log()
    log.append_as_leader(batch(values=[b"a"] * 3), 0, T0)
    log.append_as_leader(batch(values=[b"b"] * 4), 0, T0)  # offsets 3..6
    result = log.read(5, 10_000)
    assert result.first_offset == 3
    assert [r.offset for r in read_records(result.read_bytes())] == [3, 4, 5, 6]


def test_max_bytes_and_min_one_batch(open_log: OpenLog) -> None:
    log = open_log()
    sizes = []
    for i in range(4):
        data = batch(values=[bytes([65 + i]) * 100])
        sizes.append(len(data))
        log.append_as_leader(data, 0, T0)
    whole_first = log.read(0, 10)  # smaller than one batch: KIP-74 returns the first batch anyway
    assert whole_first.size == sizes[0]
    assert log.read(0, 10, min_one_batch=False) is None
    partial = log.read(0, sizes[0] + sizes[1] + 20)
    assert partial.size == sizes[0] + sizes[1] + 20  # Kafka's behaviour: the tail may cut a batch
    assert [r.offset for r in read_records(partial.read_bytes(), allow_partial_tail=True)] == [0, 1]
    assert log.read(0, 1 << 20).size == sum(sizes)


def test_high_watermark_bounds_reads(open_log: OpenLog) -> None:
    log = open_log()
    for _ in range(5):
        log.append_as_leader(batch(values=[b"x", b"y"]), 0, T0)  # batches at 0, 2, 4, 6, 8
    result = log.read(0, 1 << 20, max_offset_exclusive=6)
    assert [r.offset for r in read_records(result.read_bytes())] == [0, 1, 2, 3, 4, 5]
    mid_batch = log.read(0, 1 << 20, max_offset_exclusive=5)  # a batch starting below the bound is whole
    assert [r.offset for r in read_records(mid_batch.read_bytes())][-1] == 5
    assert log.read(6, 1 << 20, max_offset_exclusive=6) is None
    assert log.read(8, 1 << 20, max_offset_exclusive=6) is None  # between HW and LEO: empty, not an error


def test_out_of_range_reads(open_log: OpenLog) -> None:
    log = open_log()
    log.append_as_leader(batch(values=[b"x"]), 0, T0)
    assert log.read(1, 100) is None  # exactly the log end: empty
    with pytest.raises(KafkaError) as caught:
        log.read(2, 100)
    assert caught.value.code == ErrorCode.OFFSET_OUT_OF_RANGE
    with pytest.raises(KafkaError):
        log.read(-1, 100)


def test_roll_by_segment_bytes(open_log: OpenLog) -> None:
    one = batch(values=[b"z" * 200])
    log = open_log(LogConfig(segment_bytes=len(one) * 3))
    for _ in range(10):
        log.append_as_leader(one, 0, T0)
    assert [s.base_offset for s in log.segments] == [0, 3, 6, 9]
    assert all(s.size <= len(one) * 3 for s in log.segments)
    assert sorted(p.name for p in log.directory.glob("*.log")) == [
        f"{base:020d}.log" for base in (0, 3, 6, 9)
    ]
    assert [r.offset for r in read_all(log)] == list(range(10))


def test_roll_by_segment_ms_uses_record_time(open_log: OpenLog) -> None:
    log = open_log(LogConfig(segment_ms=1000))
    log.append_as_leader(batch(timestamp=T0), 0, T0)
    log.append_as_leader(batch(timestamp=T0 + 900), 0, T0 + 900)
    assert len(log.segments) == 1
    log.append_as_leader(batch(timestamp=T0 + 1500), 0, T0 + 1500)
    assert [s.base_offset for s in log.segments] == [0, 2]


def test_roll_by_time_without_timestamps_uses_segment_age(open_log: OpenLog, clock) -> None:
    log = open_log(LogConfig(segment_ms=1000))
    log.append_as_leader(batch(timestamp=-1), 0, T0)
    log.append_as_leader(batch(timestamp=-1), 0, clock.now + 2000)
    assert len(log.segments) == 2


def test_roll_when_the_offset_index_is_full(open_log: OpenLog) -> None:
    log = open_log(LogConfig(index_interval_bytes=0, segment_index_bytes=16))  # two entries
    for _ in range(6):
        log.append_as_leader(batch(values=[b"q"]), 0, T0)
    assert len(log.segments) > 1
    assert [r.offset for r in read_all(log)] == list(range(6))


def test_index_lookups_after_many_appends_and_after_reopen(open_log: OpenLog) -> None:
    config = LogConfig(index_interval_bytes=256, segment_bytes=20_000)
    log = open_log(config)
    rng = random.Random(3)
    for i in range(400):
        log.append_as_leader(batch(values=[f"{i}".encode() * rng.randint(1, 40)] * rng.randint(1, 3)), 0, T0)
    assert all(s.offset_index.entries > 5 for s in log.segments[:-1])

    def check(log_) -> None:
        for offset in range(0, log_.log_end_offset, 7):
            result = log_.read(offset, 1)
            first = read_records(result.read_bytes())
            assert first[0].offset <= offset <= first[-1].offset

    check(log)
    entries = [s.offset_index.entries for s in log.segments]
    end = log.log_end_offset
    log.close()
    reopened = open_log(config, had_clean_shutdown=True)
    assert reopened.log_end_offset == end
    assert [s.offset_index.entries for s in reopened.segments] == entries
    check(reopened)


def test_offset_for_timestamp_finds_the_exact_record(open_log: OpenLog) -> None:
    log = open_log(LogConfig(index_interval_bytes=50, segment_bytes=2000))
    for b in range(30):  # 30 batches of 4 records, one second apart
        records = [Rec(None, b"v" * 30, T0 + (b * 4 + i) * 1000) for i in range(4)]
        log.append_as_leader(batch(records), 0, T0)
    assert len(log.segments) > 2
    assert log.offset_for_timestamp(T0) == (0, T0)
    assert log.offset_for_timestamp(T0 + 5500) == (6, T0 + 6000)  # inside the second batch
    assert log.offset_for_timestamp(T0 + 77_000) == (77, T0 + 77_000)
    assert log.offset_for_timestamp(T0 + 119_000) == (119, T0 + 119_000)
    assert log.offset_for_timestamp(T0 + 119_001) is None
    assert log.offset_for_timestamp(0) == (0, T0)


def test_max_timestamp_offset_is_the_exact_record(open_log: OpenLog) -> None:
    log = open_log()
    log.append_as_leader(batch([Rec(None, b"a", T0), Rec(None, b"b", T0 + 50)]), 0, T0)
    log.append_as_leader(batch([Rec(None, b"c", T0 + 10), Rec(None, b"d", T0 + 90), Rec(None, b"e", T0 + 20)]), 0, T0)
    log.append_as_leader(batch([Rec(None, b"f", T0 + 30)]), 0, T0)
    assert log.max_timestamp_offset() == (3, T0 + 90)


def test_log_append_time(open_log: OpenLog) -> None:
    log = open_log(LogConfig(message_timestamp_type="LogAppendTime"))
    info = log.append_as_leader(batch([Rec(None, b"a", 5), Rec(None, b"b", 6)]), 0, T0 + 42)
    assert info.log_append_time == T0 + 42 and info.max_timestamp == T0 + 42
    data = log.read(0, 1000).read_bytes()
    assert read_header(data).log_append_time and crc_ok(data)
    assert [r.timestamp for r in read_records(data)] == [T0 + 42, T0 + 42]
    assert log.offset_for_timestamp(T0 + 42) == (0, T0 + 42)


def _code(log, data: bytes, now: int = T0) -> ErrorCode:
    with pytest.raises(KafkaError) as caught:
        log.append_as_leader(data, 0, now)
    return caught.value.code


def test_rejected_appends_leave_the_log_unchanged(open_log: OpenLog) -> None:
    log = open_log(LogConfig(max_message_bytes=500, segment_bytes=5000))
    log.append_as_leader(batch(values=[b"ok"]), 0, T0)
    corrupt = bytearray(batch(values=[b"hello"]))
    corrupt[-2] ^= 0x01
    wrong_count = bytearray(batch(values=[b"a", b"b"]))
    wrong_count[57:61] = (3).to_bytes(4, "big")  # record count (CRC is not recomputed: fix it)
    from protocol.records import compute_crc
    wrong_count[17:21] = compute_crc(wrong_count, 0, len(wrong_count)).to_bytes(4, "big")
    cases = {
        ErrorCode.MESSAGE_TOO_LARGE: batch(values=[b"x" * 600]),
        ErrorCode.RECORD_LIST_TOO_LARGE: batch(values=[b"y" * 100]) * 60,
        ErrorCode.CORRUPT_MESSAGE: bytes(corrupt),
        ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT: legacy_message(magic=1),
        ErrorCode.INVALID_RECORD: bytes(wrong_count),
    }
    for expected, data in cases.items():
        assert _code(log, data) == expected, expected
    assert _code(log, legacy_message(magic=0)) == ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT
    assert _code(log, batch(values=[b"cut"])[:-3]) == ErrorCode.CORRUPT_MESSAGE
    assert _code(log, batch(values=[b"a"]) + b"\x00" * 20) == ErrorCode.CORRUPT_MESSAGE
    assert _code(log, batch(values=[b"a"], base_offset=5)) == ErrorCode.INVALID_RECORD
    assert _code(log, batch(values=[b"a"], attributes=0x20)) == ErrorCode.INVALID_RECORD  # control batch
    assert _code(log, b"") == ErrorCode.INVALID_RECORD
    assert _code(log, batch(timestamp=T0 + 3_600_001)) == ErrorCode.INVALID_TIMESTAMP
    assert log.log_end_offset == 1
    assert [r.value for r in read_all(log)] == [b"ok"]


def test_compacted_topics_need_keys(open_log: OpenLog) -> None:
    log = open_log(LogConfig(cleanup_policy=("compact",)))
    assert _code(log, batch([Rec(b"k", b"v"), Rec(None, b"v")])) == ErrorCode.INVALID_RECORD
    log.append_as_leader(batch([Rec(b"k", b"v"), Rec(b"k2", None)]), 0, T0)
    assert log.log_end_offset == 2


def test_flush_messages_moves_the_recovery_point(open_log: OpenLog) -> None:
    log = open_log(LogConfig(flush_messages=3))
    log.append_as_leader(batch(values=[b"a", b"b"]), 0, T0)
    assert log.recovery_point == 0
    log.append_as_leader(batch(values=[b"c"]), 0, T0)
    assert log.recovery_point == 3


def test_flush_ms_and_rolled_segments_are_flushed_by_the_periodic_task(open_log: OpenLog, clock) -> None:
    log = open_log(LogConfig(flush_ms=5000, segment_bytes=300))
    for _ in range(3):
        log.append_as_leader(batch(values=[b"x" * 150]), 0, T0)
    log.flush_if_due(clock.now + 10)
    assert log.recovery_point == log.active_segment.base_offset > 0
    log.flush_if_due(clock.now + 6000)
    assert log.recovery_point == log.log_end_offset


def test_append_as_follower_keeps_offsets_and_learns_epochs(open_log: OpenLog) -> None:
    log = open_log()
    log.append_as_follower(batch(values=[b"a", b"b"], base_offset=0, partition_leader_epoch=1))
    log.append_as_follower(batch(values=[b"c"], base_offset=2, partition_leader_epoch=4))
    log.append_as_follower(batch(values=[b"d"], base_offset=10, partition_leader_epoch=4))  # a compaction gap
    assert log.log_end_offset == 11
    assert [r.offset for r in read_all(log)] == [0, 1, 2, 10]
    assert [tuple(e) for e in log.epochs.entries] == [(1, 0), (4, 2)]
    with pytest.raises(KafkaError):
        log.append_as_follower(batch(values=[b"e"], base_offset=10))
