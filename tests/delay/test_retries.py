"""Retry topics' rules: attempts, due times, target partitions, forwarded records, forward batches."""

from __future__ import annotations

import pytest

from kbroker.delay.delay_headers import DelayHeaderError
from kbroker.delay.forward_batches import (
    ForwardRecord,
    decode_forward_batch,
    decode_forward_done,
    decode_forward_value,
    encode_forward_batch,
    encode_forward_done_batch,
    encode_forward_value,
    is_forward_batch,
)
from kbroker.delay.pending_batches import PendingRecord, is_pending_batch
from kbroker.delay.retries import (
    RetrySettings,
    Route,
    attempts_made,
    forwarded_record,
    retry_due_times,
    route_of,
    target_partition,
)
from kbroker.partitioner import partition_for_key
from protocol.record_batch import CorruptRecordError, Record
from protocol.records import read_header

NOW = 1_700_000_000_000
SETTINGS = RetrySettings((1000, 10_000, 60_000), has_dead_letter_topic=True)


def _record(*headers: tuple[str, bytes | None], key: bytes | None = b"k") -> Record:
    return Record(0, NOW - 5, key, b"v", list(headers))


def test_the_attempt_header_counts_attempts_made() -> None:
    assert attempts_made([]) == 0
    assert attempts_made([("kbroker.attempt", b"2"), ("other", b"x")]) == 2
    assert attempts_made([("kbroker.attempt", b"2"), ("kbroker.attempt", b"2")]) == 2
    for bad in ([("kbroker.attempt", b"two")], [("kbroker.attempt", None)], [("kbroker.attempt", b"-1")],
                [("kbroker.attempt", b"1"), ("kbroker.attempt", b"2")]):
        with pytest.raises(DelayHeaderError, match="kbroker.attempt"):
            attempts_made(bad)


def test_each_attempt_waits_its_backoff_and_the_last_goes_to_the_dead_letters_at_once() -> None:
    records = [_record(), _record(("kbroker.attempt", b"1")), _record(("kbroker.attempt", b"2")),
               _record(("kbroker.attempt", b"3")), _record(("kbroker.attempt", b"7"))]
    assert retry_due_times(records, NOW, SETTINGS) == [NOW + 1000, NOW + 10_000, NOW + 60_000, NOW, NOW]
    assert [route_of(r.headers, 3) for r in records] == [
        (Route.TARGET, 1), (Route.TARGET, 2), (Route.TARGET, 3), (Route.EXHAUSTED, 3), (Route.EXHAUSTED, 7)]


def test_delay_headers_do_not_change_a_retry_topics_backoff() -> None:
    record = _record(("kbroker.delay.ms", b"99999"), ("kbroker.deliver.at", b"1"))
    assert retry_due_times([record], NOW, SETTINGS) == [NOW + 1000]


def test_refused_records_name_their_index() -> None:
    with pytest.raises(DelayHeaderError) as caught:
        retry_due_times([_record(), _record(("kbroker.attempt", b"x"))], NOW, SETTINGS)
    assert caught.value.record_index == 1
    no_dead_letters = RetrySettings((1000,), has_dead_letter_topic=False)
    assert retry_due_times([_record()], NOW, no_dead_letters) == [NOW + 1000]
    with pytest.raises(DelayHeaderError, match="no retry.dead.letter.topic") as caught:
        retry_due_times([_record(), _record(("kbroker.attempt", b"1"))], NOW, no_dead_letters)
    assert caught.value.record_index == 1


def test_the_target_partition_follows_the_key_or_the_original_partition() -> None:
    keyed = PendingRecord(0, 0, b"order-17", b"v", [("kbroker.original.partition", b"5")], offset=3)
    assert target_partition(keyed, 1, 6) == partition_for_key(b"order-17", 6)
    keyless = PendingRecord(0, 0, None, b"v", [("kbroker.original.partition", b"5")], offset=3)
    assert target_partition(keyless, 1, 6) == 5
    assert target_partition(keyless, 7, 4) == 3  # partition 5 does not exist: the retry partition's, mod 4
    assert target_partition(PendingRecord(0, 0, None, b"v", [], offset=3), 2, 4) == 2


def test_a_forwarded_record_keeps_the_consumers_headers_and_gets_the_brokers() -> None:
    pending = PendingRecord(NOW, NOW - 5, b"k", b"v", [("trace", b"t"), ("kbroker.delay.ms", b"5"),
                                                       ("kbroker.attempt", b"1"), ("kbroker.delayed.from", b"x-0@1")],
                            offset=42)
    first = forwarded_record(pending, offset_delta=0, timestamp=NOW, route=Route.TARGET, attempt=2,
                             source_topic="orders.retry", source_partition=1)
    assert (first.key, first.value, first.timestamp) == (b"k", b"v", NOW)
    assert first.headers == [("trace", b"t"), ("kbroker.original.topic", b"orders.retry"),
                             ("kbroker.original.partition", b"1"), ("kbroker.original.offset", b"42"),
                             ("kbroker.attempt", b"2")]
    # Forwarded again (the consumer copied the headers): the original place stays.
    again = PendingRecord(NOW, NOW, b"k", b"v", first.headers, offset=99)
    dead = forwarded_record(again, offset_delta=3, timestamp=NOW, route=Route.EXHAUSTED, attempt=2,
                            source_topic="orders.retry", source_partition=0)
    headers = dict(dead.headers)
    assert headers["kbroker.original.offset"] == b"42" and headers["kbroker.attempt"] == b"2"
    assert b"retries exhausted: 2 attempts" in headers["kbroker.dead.reason"]
    assert [name for name, _ in dead.headers].count("kbroker.attempt") == 1
    orphan = forwarded_record(again, offset_delta=0, timestamp=NOW, route=Route.NO_TARGET, attempt=2,
                              source_topic="orders.retry", source_partition=0)
    assert b"does not exist" in dict(orphan.headers)["kbroker.dead.reason"]


def test_forward_records_round_trip_and_are_control_batches_of_their_own_type() -> None:
    forwards = [ForwardRecord(Route.TARGET, NOW, 77, 0, 12, "orders", 2, (5, 9, 6)),
                ForwardRecord(Route.EXHAUSTED, NOW, 77, 0, 0, "orders.dead", 0, (7,))]
    batch = encode_forward_batch(forwards)
    header = read_header(batch)
    assert header.is_control and header.producer_id < 0
    assert is_forward_batch(batch, header) and not is_pending_batch(batch, header)
    decoded = decode_forward_batch(batch, header)
    assert [(f.route, f.target_topic, f.target_partition, f.pending_offsets, f.base_sequence, f.offset)
            for f in decoded] == [(Route.TARGET, "orders", 2, (5, 9, 6), 12, 0),
                                  (Route.EXHAUSTED, "orders.dead", 0, (7,), 0, 1)]
    done = encode_forward_done_batch(1234, NOW)
    assert decode_forward_done(done, read_header(done)) == 1234
    assert not is_forward_batch(done, read_header(done))


def test_a_damaged_forward_record_is_refused() -> None:
    value = encode_forward_value(ForwardRecord(Route.TARGET, NOW, 77, 0, 12, "orders", 2, (5, 9)))
    for damaged in (None, value[:-1], value + b"x", b"\x01" + value[1:], value[:20]):
        with pytest.raises(CorruptRecordError):
            decode_forward_value(damaged, 3)
