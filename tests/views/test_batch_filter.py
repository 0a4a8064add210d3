"""What a filtered view's consumer receives for each batch of a read of the source log
(kbroker/views/batch_filter.py): whole batches, rebuilt ones, empty ones, markers untouched."""

from __future__ import annotations

import struct
from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kbroker.views.batch_filter import FilterStats, Keep, filter_batches
from protocol.record_batch import (
    Compression,
    ControlType,
    CorruptRecordError,
    Record,
    RecordBatch,
    TimestampType,
    decode_batch,
    decode_batches,
    encode_batch,
    encode_end_txn_batch,
)
from protocol.records import (
    CONTROL_BIT,
    DELETE_HORIZON_BIT,
    HEADER_SIZE,
    TIMESTAMP_TYPE_BIT,
    TRANSACTIONAL_BIT,
    crc_ok,
    read_header,
)

CODECS = list(Compression)
BASE_OFFSET = 1_000
T0 = 1_700_000_000_000
BROKER_TIME = T0 + 60_000
Headers = Sequence[tuple[str, bytes | None]]


def make_records(count: int = 10) -> list[Record]:
    """Records with every shape a predicate can see: null keys, null values, no headers, a
    header with a null value; tags red/blue alternate. Timestamps are not in offset order."""
    out = []
    for i in range(count):
        headers: list[tuple[str, bytes | None]] = [("tag", b"red" if i % 2 == 0 else b"blue")]
        if i % 3 == 0:
            headers.append(("trace", None))
        if i % 7 == 6:
            headers = []
        key = None if i % 5 == 4 else b"key-%d" % i
        value = None if i % 4 == 3 else b"value-%d-" % i * (i + 1)
        out.append(Record(i, T0 + (i * 37) % 11 * 1000, key, value, headers))
    return out


def tagged(tag: bytes) -> Keep:
    def keep(key: bytes | None, headers: Headers) -> bool:
        return ("tag", tag) in headers
    return keep


def keep_all(key: bytes | None, headers: Headers) -> bool:
    return True


def keep_none(key: bytes | None, headers: Headers) -> bool:
    return False


def keep_never_asked(key: bytes | None, headers: Headers) -> bool:
    raise AssertionError("the predicate was asked about a record it must not see")


def only(data: bytes) -> RecordBatch:
    """The one batch `data` holds, its CRC checked."""
    batches = decode_batches(data)
    assert len(batches) == 1
    assert crc_ok(data)
    return batches[0]


def seen(records: list[Record]) -> list[tuple]:
    """What a consumer sees of each record."""
    return [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in records]


# -- every record kept --------------------------------------------------------------------------


@pytest.mark.parametrize("codec", CODECS)
def test_a_batch_whose_records_are_all_kept_is_returned_byte_for_byte(codec: Compression) -> None:
    batch = encode_batch(make_records(), compression=codec, base_offset=BASE_OFFSET)
    stats = FilterStats()
    assert filter_batches(batch, keep_all, stats) == batch
    assert stats == FilterStats(batches_whole=1, records_in=10, records_kept=10, next_offset=BASE_OFFSET + 10,
                                last_given_offset=BASE_OFFSET + 9)


# -- some records kept --------------------------------------------------------------------------


@pytest.mark.parametrize("timestamp_type", list(TimestampType))
@pytest.mark.parametrize("codec", CODECS)
def test_a_rebuilt_batch_holds_exactly_the_kept_records_as_they_were(
    codec: Compression, timestamp_type: TimestampType
) -> None:
    source = encode_batch(
        make_records(), compression=codec, base_offset=BASE_OFFSET, timestamp_type=timestamp_type,
        partition_leader_epoch=7, max_timestamp=BROKER_TIME if timestamp_type else None,
    )
    original = only(source)
    rebuilt = only(filter_batches(source, tagged(b"red")))

    expected = [r for r in original.records if ("tag", b"red") in r.headers]
    assert [r.offset for r in expected] == [BASE_OFFSET + i for i in (0, 2, 4, 8)]  # 6 has no headers
    assert seen(rebuilt.records) == seen(expected)
    assert rebuilt.compression == codec
    assert rebuilt.attributes == original.attributes
    assert (rebuilt.base_offset, rebuilt.partition_leader_epoch) == (BASE_OFFSET, 7)
    # The consumer must move past the whole source batch, not to the last kept record.
    assert rebuilt.last_offset_delta == original.last_offset_delta == 9
    assert rebuilt.next_offset == BASE_OFFSET + 10


def test_a_rebuilt_create_time_batch_keeps_its_base_timestamp_and_takes_its_kept_records_max() -> None:
    source = encode_batch(make_records(), base_offset=BASE_OFFSET)
    original = only(source)
    rebuilt = only(filter_batches(source, tagged(b"blue")))
    kept_timestamps = [r.timestamp for r in original.records if ("tag", b"blue") in r.headers]
    assert rebuilt.base_timestamp == original.base_timestamp
    assert rebuilt.max_timestamp == max(kept_timestamps) != original.max_timestamp


def test_a_rebuilt_log_append_time_batch_keeps_the_brokers_time_for_every_record() -> None:
    source = encode_batch(make_records(), base_offset=BASE_OFFSET, timestamp_type=TimestampType.LOG_APPEND_TIME,
                          max_timestamp=BROKER_TIME)
    rebuilt = only(filter_batches(source, tagged(b"blue")))
    assert rebuilt.max_timestamp == BROKER_TIME
    assert rebuilt.attributes & TIMESTAMP_TYPE_BIT
    assert {r.timestamp for r in rebuilt.records} == {BROKER_TIME}


@pytest.mark.parametrize("codec", CODECS)
def test_a_transactional_idempotent_batch_keeps_its_producer_fields_when_rebuilt(codec: Compression) -> None:
    source = encode_batch(make_records(), compression=codec, base_offset=BASE_OFFSET, producer_id=77,
                          producer_epoch=3, base_sequence=500, transactional=True)
    rebuilt = read_header(filter_batches(source, tagged(b"red")))
    original = read_header(source)
    assert (rebuilt.producer_id, rebuilt.producer_epoch, rebuilt.base_sequence) == (77, 3, 500)
    assert rebuilt.last_sequence == original.last_sequence == 509
    assert rebuilt.is_transactional
    assert rebuilt.record_count == 4


def test_offset_gaps_of_a_compacted_source_stay_where_they_were() -> None:
    records = [Record(delta, T0 + delta, b"k%d" % delta, b"v", [("tag", b"red" if delta % 2 else b"blue")])
               for delta in (0, 3, 4, 9)]
    source = encode_batch(records, base_offset=BASE_OFFSET, last_offset_delta=12)
    rebuilt = only(filter_batches(source, tagged(b"red")))
    assert [r.offset for r in rebuilt.records] == [BASE_OFFSET + 3, BASE_OFFSET + 9]
    assert rebuilt.last_offset == BASE_OFFSET + 12


@pytest.mark.parametrize("codec", CODECS)
def test_long_fields_and_many_headers_are_read_right(codec: Compression) -> None:
    # Multi-byte varints everywhere: 20 KB values, 200-byte keys, 70 headers, big timestamp deltas.
    records = [
        Record(i, T0 + i * 10**9, bytes([65 + i]) * 200, bytes([i]) * 20_000,
               [("tag", b"red" if i % 2 else b"blue"), *((f"h{j}", b"x" * 300) for j in range(69))])
        for i in range(5)
    ]
    source = encode_batch(records, compression=codec, base_offset=BASE_OFFSET)
    rebuilt = only(filter_batches(source, tagged(b"red")))
    assert seen(rebuilt.records) == [(BASE_OFFSET + i, r.timestamp, r.key, r.value, r.headers)
                                     for i, r in enumerate(records) if i % 2]
    assert rebuilt.max_timestamp == T0 + 3 * 10**9


# -- no record kept -----------------------------------------------------------------------------


@pytest.mark.parametrize("codec", CODECS)
def test_a_batch_with_nothing_kept_becomes_kafkas_empty_batch(codec: Compression) -> None:
    # Kafka's DefaultRecordBatch.writeEmptyHeader: no codec, base timestamp -1, the original max
    # timestamp, offsets, producer fields, leader epoch and transactional/timestamp-type bits.
    source = encode_batch(
        make_records(), compression=codec, base_offset=BASE_OFFSET, producer_id=77, producer_epoch=3,
        base_sequence=500, transactional=True, timestamp_type=TimestampType.LOG_APPEND_TIME,
        max_timestamp=BROKER_TIME, partition_leader_epoch=7, delete_horizon=True, extra_attributes=0x4000,
    )
    stats = FilterStats()
    empty = filter_batches(source, keep_none, stats)
    expected = struct.pack(
        ">qiibIhiqqqhii", BASE_OFFSET, HEADER_SIZE - 12, 7, 2, read_header(empty).crc,
        TIMESTAMP_TYPE_BIT | TRANSACTIONAL_BIT, 9, -1, BROKER_TIME, 77, 3, 500, 0,
    )
    assert empty == expected
    assert crc_ok(empty)
    assert stats == FilterStats(batches_emptied=1, records_in=10, records_kept=0, next_offset=BASE_OFFSET + 10)


def test_an_empty_batch_decodes_to_no_records_and_moves_the_consumer_past_the_source_batch() -> None:
    source = encode_batch(make_records(), base_offset=BASE_OFFSET)
    empty = only(filter_batches(source, keep_none))
    assert empty.records == []
    assert empty.compression == Compression.NONE
    assert not empty.attributes & (DELETE_HORIZON_BIT | CONTROL_BIT)
    assert (empty.base_offset, empty.next_offset) == (BASE_OFFSET, BASE_OFFSET + 10)
    assert (empty.producer_id, empty.producer_epoch, empty.base_sequence) == (-1, -1, -1)
    assert (empty.base_timestamp, empty.max_timestamp) == (-1, read_header(source).max_timestamp)


def test_an_already_empty_source_batch_is_passed_on_unchanged() -> None:
    source = encode_batch([], base_offset=BASE_OFFSET, last_offset_delta=4, producer_id=5, producer_epoch=1,
                          base_sequence=0)
    stats = FilterStats()
    assert filter_batches(source, keep_never_asked, stats) == source
    assert stats == FilterStats(batches_whole=1, next_offset=BASE_OFFSET + 5)


# -- control batches, partial batches, order ----------------------------------------------------


@pytest.mark.parametrize("control_type", list(ControlType))
def test_a_control_batch_is_passed_on_unchanged_and_its_records_are_not_filtered(control_type: ControlType) -> None:
    marker = encode_end_txn_batch(control_type, producer_id=77, producer_epoch=3, coordinator_epoch=9,
                                  timestamp=T0, base_offset=BASE_OFFSET)
    stats = FilterStats()
    assert filter_batches(marker, keep_never_asked, stats) == marker
    assert stats == FilterStats(batches_whole=1, control_batches=1, next_offset=BASE_OFFSET + 1,
                                last_given_offset=BASE_OFFSET)


def two_batches() -> tuple[bytes, bytes]:
    first = encode_batch(make_records(), base_offset=BASE_OFFSET)
    second = encode_batch(make_records(), compression=Compression.LZ4, base_offset=BASE_OFFSET + 10)
    return first, second


@pytest.mark.parametrize("cut", [1, 11, 12, 60, 61, 62, -1])
def test_a_partial_batch_at_the_end_of_the_read_is_dropped(cut: int) -> None:
    first, second = two_batches()
    partial = second[:cut]
    assert filter_batches(first + partial, tagged(b"red")) == filter_batches(first, tagged(b"red"))
    assert filter_batches(first + partial, keep_all) == first
    assert filter_batches(partial, keep_all) == b""


def test_batches_keep_their_order_and_the_stats_add_up() -> None:
    marker = encode_end_txn_batch(ControlType.COMMIT, producer_id=77, producer_epoch=3, coordinator_epoch=9,
                                  timestamp=T0, base_offset=BASE_OFFSET + 40)
    plain = [encode_batch(make_records(), compression=codec, base_offset=BASE_OFFSET + 10 * i, producer_id=77,
                          producer_epoch=3, base_sequence=10 * i, transactional=True)
             for i, codec in enumerate((Compression.NONE, Compression.ZSTD, Compression.GZIP, Compression.SNAPPY))]
    only_red = encode_batch([r for r in make_records() if ("tag", b"red") in r.headers],
                            base_offset=BASE_OFFSET + 41, last_offset_delta=9)
    only_blue = encode_batch([r for r in make_records() if ("tag", b"blue") in r.headers],
                             base_offset=BASE_OFFSET + 51, last_offset_delta=9)
    source = b"".join([*plain, marker, only_red, only_blue])
    stats = FilterStats()
    out = decode_batches(filter_batches(source, tagged(b"red"), stats))

    assert [b.base_offset for b in out] == [BASE_OFFSET + o for o in (0, 10, 20, 30, 40, 41, 51)]
    assert [b.next_offset for b in out] == [BASE_OFFSET + o for o in (10, 20, 30, 40, 41, 51, 61)]
    assert [len(b.records) for b in out] == [4, 4, 4, 4, 1, 4, 0]
    assert out[4].is_control
    assert decode_batch(only_red).records == out[5].records
    assert stats == FilterStats(batches_whole=2, batches_rebuilt=4, batches_emptied=1, records_in=4 * 10 + 4 + 5,
                                records_kept=4 * 4 + 4, control_batches=1, next_offset=BASE_OFFSET + 61,
                                last_given_offset=BASE_OFFSET + 49)


def test_a_memoryview_of_the_read_is_filtered_like_its_bytes() -> None:
    first, second = two_batches()
    data = first + second + second[:30]
    assert filter_batches(memoryview(data), tagged(b"blue")) == filter_batches(data, tagged(b"blue"))
    assert filter_batches(memoryview(data), keep_all) == first + second


def test_the_predicate_sees_each_records_key_and_headers_in_order() -> None:
    records = make_records()
    asked: list[tuple[bytes | None, list]] = []

    def keep(key: bytes | None, headers: Headers) -> bool:
        asked.append((key, list(headers)))
        return True

    filter_batches(encode_batch(records, compression=Compression.ZSTD), keep)
    assert asked == [(r.key, r.headers) for r in records]
    # The shapes the records were made to have: a null key, no headers, a null header value.
    assert asked[4][0] is None
    assert asked[6][1] == []
    assert asked[3][1] == [("tag", b"blue"), ("trace", None)]


# -- corrupt input ------------------------------------------------------------------------------


def test_a_batch_whose_record_count_disagrees_with_its_records_is_refused() -> None:
    batch = bytearray(encode_batch(make_records(3)))
    struct.pack_into(">i", batch, HEADER_SIZE - 4, 2)  # says 2 records; 3 follow
    with pytest.raises(CorruptRecordError):
        filter_batches(bytes(batch), keep_all)
    struct.pack_into(">i", batch, HEADER_SIZE - 4, 4)  # says 4 records; the 4th runs past the end
    with pytest.raises(CorruptRecordError):
        filter_batches(bytes(batch), keep_all)


def test_a_batch_that_is_not_v2_is_refused() -> None:
    batch = bytearray(encode_batch(make_records(3)))
    batch[16] = 0x6B  # an encrypted batch's magic: the read should have decrypted it
    with pytest.raises(CorruptRecordError):
        filter_batches(bytes(batch), keep_all)


def test_a_length_below_the_header_is_refused() -> None:
    batch = bytearray(encode_batch(make_records(3)))
    struct.pack_into(">i", batch, 8, 20)
    with pytest.raises(CorruptRecordError):
        filter_batches(bytes(batch), keep_all)


# -- any batch, any choice ----------------------------------------------------------------------

record_shapes = st.tuples(
    st.one_of(st.none(), st.binary(max_size=300)),
    st.one_of(st.none(), st.binary(max_size=3000)),
    st.lists(st.tuples(st.text(max_size=20), st.one_of(st.none(), st.binary(max_size=200))), max_size=4),
    st.integers(min_value=0, max_value=10**7),
    st.booleans(),
)


@settings(max_examples=60, deadline=None)
@given(shapes=st.lists(record_shapes, min_size=1, max_size=30), codec=st.sampled_from(CODECS),
       gap=st.integers(min_value=0, max_value=3))
def test_any_batch_keeps_exactly_the_chosen_records(shapes: list, codec: Compression, gap: int) -> None:
    records = [Record(i * (gap + 1), T0 + ts, key, value, headers)
               for i, (key, value, headers, ts, _) in enumerate(shapes)]
    choice = iter([chosen for *_, chosen in shapes])
    source = encode_batch(records, compression=codec, base_offset=BASE_OFFSET, last_offset_delta=len(records) * 5)
    out = filter_batches(source, lambda key, headers: next(choice))

    wanted = [r for r, (*_, chosen) in zip(records, shapes, strict=True) if chosen]
    if len(wanted) == len(records):
        assert out == source
        return
    batch = only(out)
    assert seen(batch.records) == [(BASE_OFFSET + r.offset_delta, r.timestamp, r.key, r.value, r.headers)
                                   for r in wanted]
    assert batch.last_offset_delta == len(records) * 5
    assert batch.compression == (codec if wanted else Compression.NONE)
    assert batch.max_timestamp == max((r.timestamp for r in wanted), default=read_header(source).max_timestamp)


# -- sealed answers: every client's position reaches the end of the read -----------------------


def marker_span(batch: RecordBatch) -> tuple[int, int]:
    assert batch.is_control and batch.is_transactional
    assert (batch.producer_id, batch.producer_epoch) == (-1, -1)
    assert len(batch.records) == 1 and batch.records[0].offset == batch.last_offset
    assert batch.records[0].key == b"\x00\x00\x00\x01"  # version 0, COMMIT
    return batch.base_offset, batch.last_offset


def test_a_sealed_answer_ends_at_its_last_kept_record_and_a_marker_covers_the_rest() -> None:
    first = encode_batch(make_records(), base_offset=BASE_OFFSET)
    second = encode_batch(make_records(), compression=Compression.LZ4, base_offset=BASE_OFFSET + 10)
    out = decode_batches(filter_batches(first + second, tagged(b"red"), seal=True))
    # The last red record of the second batch is its offset 8 (record 9 is blue): the rebuilt
    # batch ends there and the marker covers offset 9. The first batch keeps its last offset.
    assert [(b.base_offset, b.last_offset) for b in out[:2]] == [(BASE_OFFSET, BASE_OFFSET + 9),
                                                              (BASE_OFFSET + 10, BASE_OFFSET + 18)]
    assert [r.offset for r in out[1].records][-1] == BASE_OFFSET + 18
    assert crc_ok(filter_batches(second, tagged(b"red"), seal=True))
    assert marker_span(out[2]) == (BASE_OFFSET + 19, BASE_OFFSET + 19)
    assert len(out) == 3


def test_a_sealed_answer_drops_trailing_empty_batches_for_one_marker() -> None:
    kept = encode_batch(make_records(), base_offset=BASE_OFFSET)
    emptied = [encode_batch([r for r in make_records() if ("tag", b"blue") in r.headers],
                            base_offset=BASE_OFFSET + 10 * i, last_offset_delta=9) for i in (1, 2)]
    out = decode_batches(filter_batches(kept + b"".join(emptied), tagged(b"red"), seal=True))
    assert out[0].last_offset == BASE_OFFSET + 8  # its last red record
    assert marker_span(out[1]) == (BASE_OFFSET + 9, BASE_OFFSET + 29)
    assert len(out) == 2


def test_a_sealed_answer_without_a_kept_record_is_one_marker() -> None:
    batches = b"".join(encode_batch(make_records(), base_offset=BASE_OFFSET + 10 * i) for i in range(3))
    stats = FilterStats()
    out = decode_batches(filter_batches(batches, keep_none, stats, seal=True))
    assert [marker_span(b) for b in out] == [(BASE_OFFSET, BASE_OFFSET + 29)]
    assert (stats.records_kept, stats.last_given_offset, stats.next_offset) == (0, -1, BASE_OFFSET + 30)


def test_a_sealed_answer_that_ends_with_a_kept_record_or_a_control_batch_is_not_changed() -> None:
    whole = encode_batch(make_records(), base_offset=BASE_OFFSET)
    assert filter_batches(whole, keep_all, seal=True) == whole
    marker = encode_end_txn_batch(ControlType.COMMIT, producer_id=77, producer_epoch=3, coordinator_epoch=9,
                                  timestamp=T0, base_offset=BASE_OFFSET + 10)
    out = decode_batches(filter_batches(whole + marker, keep_none, seal=True))
    assert [(b.base_offset, b.record_count if hasattr(b, "record_count") else len(b.records)) for b in out] == \
        [(BASE_OFFSET, 0), (BASE_OFFSET + 10, 1)]
    assert out[1].producer_id == 77
