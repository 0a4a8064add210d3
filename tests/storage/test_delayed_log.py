"""Delayed delivery in the log: producers' batches become pending batches, the log keeps each
partition's delay index (appends, truncation, restarts) and retention keeps pending records."""

from __future__ import annotations

import pytest

from kbroker.delay.delay_index import EntryState
from kbroker.delay.pending_batches import DELIVERY_ATTRIBUTE, encode_delivery_batch, is_pending_batch
from kbroker.delay.pending_cache import PendingValueCache
from kbroker.storage.log import Log
from kbroker.storage.log_config import LogConfig
from kbroker.storage.log_validator import RecordValidationError
from kbroker.storage.producer_state import AppendOrigin
from protocol.errors import ErrorCode, KafkaError
from protocol.record_batch import GZIP, Record, encode_batch
from protocol.records import read_header
from tests.storage.conftest import T0, Clock, OpenLog

DELAY = "kbroker.delay.ms"


def _batch(*records: tuple[bytes, list[tuple[str, bytes | None]]], producer_id: int = -1, base_sequence: int = -1,
           compression: int = 0, timestamp: int = T0) -> bytes:
    return encode_batch([Record(i, timestamp, b"k%d" % i, value, headers) for i, (value, headers) in
                         enumerate(records)], producer_id=producer_id, producer_epoch=0 if producer_id >= 0 else -1,
                        base_sequence=base_sequence, compression=compression)


def _stored_batches(log: Log) -> list[tuple[int, bytes]]:
    out = []
    for segment in log.segments:
        for position, header in segment.batches():
            batch, plain = segment.read_batch(position, header)
            out.append((plain.base_offset, batch))
    return out


def test_a_delayed_batch_is_stored_pending_and_others_as_they_came(open_log: OpenLog) -> None:
    log = open_log()
    plain = _batch((b"now", []))
    log.append_as_leader(plain, 0, T0)
    info = log.append_as_leader(_batch((b"later", [(DELAY, b"5000")]), (b"with-it", [])), 0, T0)
    assert (info.first_offset, info.last_offset) == (1, 2)
    (_, first), (_, second) = _stored_batches(log)
    assert first[16:] == plain[16:]  # untouched but for its offset and leader epoch
    assert is_pending_batch(second, read_header(second))
    index = log.delay_index
    assert index.pending_count == 2
    # The record without a header in a delayed batch is due at once: the batch goes whole, in order.
    assert (index.due_time(1), index.due_time(2)) == (T0 + 5000, T0)
    [held] = log.pending_records([1])
    assert (held.key, held.value, held.headers, held.timestamp) == (b"k0", b"later", [(DELAY, b"5000")], T0)


def test_the_topic_default_delays_records_without_headers_and_a_zero_header_opts_out(open_log: OpenLog) -> None:
    log = open_log(LogConfig(delivery_delay_ms=2000))
    log.append_as_leader(_batch((b"a", []), compression=GZIP), 0, T0)
    log.append_as_leader(_batch((b"b", [(DELAY, b"0")])), 0, T0)
    assert log.delay_index.due_time(0) == T0 + 2000
    assert log.delay_index.pending_count == 1
    [held] = log.pending_records([0])
    assert held.value == b"a"


@pytest.mark.parametrize(("headers", "message"), [
    ([(DELAY, b"-5")], "is negative"),
    ([(DELAY, b"soon")], "not a decimal number"),
    ([(DELAY, None)], "null value"),
    ([(DELAY, b"4000000000")], "beyond the topic's delay.max.ms 3456000000"),
    ([("kbroker.deliver.at", b"%d" % (T0 + 10**11))], "beyond the topic's delay.max.ms"),
])
def test_bad_delay_headers_are_invalid_record_naming_the_record(open_log: OpenLog, headers: list,
                                                                 message: str) -> None:
    log = open_log()
    with pytest.raises(RecordValidationError) as caught:
        log.append_as_leader(_batch((b"fine", []), (b"bad", headers)), 0, T0)
    assert caught.value.code == ErrorCode.INVALID_RECORD
    assert caught.value.record_errors[0][0] == 1 and message in caught.value.record_errors[0][1]
    assert message in (caught.value.message or "")
    assert log.log_end_offset == 0


def test_an_idempotent_retry_of_a_delayed_batch_is_a_duplicate(open_log: OpenLog) -> None:
    log = open_log()
    batch = _batch((b"x", [(DELAY, b"1000")]), (b"y", [(DELAY, b"1000")]), producer_id=7, base_sequence=0)
    first = log.append_as_leader(batch, 0, T0)
    retry = log.append_as_leader(batch, 0, T0 + 10)
    assert retry.duplicate and (retry.first_offset, retry.last_offset) == (first.first_offset, first.last_offset)
    assert log.log_end_offset == 2
    # The next batch must follow the pending batch's sequences, as it would the original's.
    with pytest.raises(KafkaError) as caught:
        log.append_as_leader(_batch((b"z", []), producer_id=7, base_sequence=5), 0, T0)
    assert caught.value.code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    log.append_as_leader(_batch((b"z", []), producer_id=7, base_sequence=2), 0, T0)


def test_producer_state_rebuilt_from_the_log_counts_pending_batches(open_log: OpenLog, clock: Clock) -> None:
    log = open_log()
    batch = _batch((b"x", [(DELAY, b"1000")]), producer_id=7, base_sequence=0)
    log.append_as_leader(batch, 0, T0)
    log.release()  # no snapshot: the restart replays the log
    for path in log.directory.glob("*.snapshot"):
        path.unlink()
    reopened = open_log()
    assert reopened.append_as_leader(batch, 0, T0).duplicate


def test_only_a_batch_marked_as_a_delivery_delivers(open_log: OpenLog) -> None:
    log = open_log()
    log.append_as_leader(_batch((b"x", [(DELAY, b"1000")])), 0, T0)
    # A client's record naming the pending record is only a header: it delivers nothing.
    log.append_as_leader(_batch((b"forged", [("kbroker.delayed.from", b"topic-0@0")])), 0, T0)
    assert log.delay_index.is_pending(0)
    # Nor may a client mark its batch as a delivery.
    marked = encode_batch([Record(0, T0, b"k", b"forged", [("kbroker.delayed.from", b"topic-0@0")])],
                          extra_attributes=DELIVERY_ATTRIBUTE)
    with pytest.raises(KafkaError) as caught:
        log.append_as_leader(marked, 0, T0)
    assert caught.value.code == ErrorCode.INVALID_RECORD and "the broker's own" in (caught.value.message or "")
    assert log.delay_index.is_pending(0)


def _deliver(log: Log, offsets: list[int], now: int) -> None:
    due = log.delay_index.collect_due(now)
    assert due == offsets
    batch = encode_delivery_batch(log.topic, log.partition, log.pending_records(due))
    log.append_as_leader(batch, 0, now, origin=AppendOrigin.COORDINATOR)


def test_the_index_survives_a_clean_restart_and_a_crash(open_log: OpenLog, clock: Clock) -> None:
    log = open_log()
    log.append_as_leader(_batch((b"a", [(DELAY, b"1000")]), (b"b", [(DELAY, b"3000")])), 0, T0)
    log.high_watermark = log.log_end_offset
    _deliver(log, [0], T0 + 1000)
    log.high_watermark = log.log_end_offset
    log.close()
    assert sorted(p.name for p in log.directory.glob("*.delayed")) == ["00000000000000000003.delayed"]
    clean = open_log(had_clean_shutdown=True)
    assert clean.delay_index.pending_offsets() == [1]
    assert clean.delay_index.due_time(1) == T0 + 3000
    clean.release()
    for path in log.directory.glob("*.delayed"):
        path.unlink()  # a crash before any snapshot: the log alone rebuilds it
    crashed = open_log()
    assert crashed.delay_index.pending_offsets() == [1]
    assert crashed.delay_index.state_of(0) in (EntryState.DELIVERED, EntryState.GONE)


def test_truncating_a_delivery_makes_its_record_pending_again(open_log: OpenLog) -> None:
    log = open_log()
    log.append_as_leader(_batch((b"a", [(DELAY, b"1000")])), 0, T0)
    log.high_watermark = 1
    _deliver(log, [0], T0 + 1000)
    assert log.delay_index.pending_count == 0
    log.truncate_to(1)
    assert log.delay_index.pending_offsets() == [0]
    assert log.delay_index.collect_due(T0 + 1000) == [0]


def test_retention_and_delete_records_stop_at_the_oldest_pending_record(open_log: OpenLog, clock: Clock) -> None:
    log = open_log(LogConfig(segment_bytes=200, retention_ms=1000))
    for i in range(3):
        log.append_as_leader(_batch((b"old-%d" % i, [])), 0, T0)
    log.append_as_leader(_batch((b"held", [(DELAY, b"100000")])), 0, T0)
    for i in range(3):
        log.append_as_leader(_batch((b"new-%d" % i, [])), 0, T0)
    log.high_watermark = log.log_end_offset
    assert len(log.segments) > 2
    clock.now = T0 + 50_000
    log.delete_old_segments(clock.now)
    assert log.log_start_offset == 3  # the segment holding pending offset 3 stays
    assert log.delete_records_before(6) == 3
    log.roll()
    _deliver(log, [3], T0 + 100_000)
    log.high_watermark = log.log_end_offset
    assert log.delete_records_before(6) == 6


def test_an_encrypted_log_rebuilds_its_index_from_sealed_batches(open_log: OpenLog) -> None:
    from tests.storage.test_encryption import ring
    log = open_log(keyring=ring(1))
    log.append_as_leader(_batch((b"secret", [(DELAY, b"1000")])), 0, T0)
    log.high_watermark = 1
    assert b"secret" not in log.active_segment.log_path.read_bytes()
    log.release()
    for path in log.directory.glob("*.delayed"):
        path.unlink()
    reopened = open_log(keyring=ring(1))
    assert reopened.delay_index.pending_offsets() == [0]
    [held] = reopened.pending_records([0])
    assert held.value == b"secret"


def test_compaction_keeps_a_delivery_while_its_pending_record_is_in_the_log(open_log: OpenLog) -> None:
    from kbroker.storage.cleaner import compact
    config = LogConfig(cleanup_policy=("compact",), segment_bytes=400, min_cleanable_dirty_ratio=0.01)
    log = open_log(config)
    log.append_as_leader(_batch((b"delayed", [(DELAY, b"1000")])), 0, T0)  # key k0, offset 0
    log.high_watermark = 1
    _deliver(log, [0], T0 + 1000)  # its delivery, key k0, offset 1
    for i in range(12):  # later values of k0 supersede the delivery
        log.append_as_leader(_batch((b"newer-%d" % i, [])), 0, T0 + 1000)
    log.high_watermark = log.log_end_offset
    assert len(log.segments) > 2
    assert compact(log, T0 + 2000)
    log.close()
    reopened = open_log(config, had_clean_shutdown=True)
    for path in reopened.directory.glob("*.delayed"):
        path.unlink()
    reopened.release()
    rebuilt = open_log(config)  # the index from the compacted log alone
    assert rebuilt.delay_index.pending_count == 0, "the delivery was compacted away: it would be delivered again"
    assert rebuilt.delay_index.collect_due(T0 + 10_000) == []


def test_a_batch_read_for_one_record_keeps_the_others_until_a_truncation(open_log: OpenLog) -> None:
    cache = PendingValueCache()
    log = open_log(pending_cache=cache)
    log.append_as_leader(_batch((b"a", [(DELAY, b"1000")])), 0, T0)
    log.append_as_leader(_batch((b"b", [(DELAY, b"2000")]), (b"c", [(DELAY, b"3000")]),
                                (b"d", [(DELAY, b"4000")])), 0, T0)
    log.high_watermark = 1
    [second] = log.pending_records([1])
    assert second.value == b"b" and len(cache) == 2  # c and d kept for later passes
    [third] = log.pending_records([2])
    assert third.value == b"c" and len(cache) == 1
    # Truncated (a follower's divergent tail) and written again with other records: the value
    # kept for offset 3 must not come back.
    log.truncate_to(1)
    assert len(cache) == 0
    log.append_as_leader(_batch((b"x", [(DELAY, b"500")]), (b"y", [(DELAY, b"500")]),
                                (b"z", [(DELAY, b"500")])), 0, T0)
    assert [r.value for r in log.pending_records([3])] == [b"z"]
