"""Pending batches and delivery batches: round trips, producer fields, what clients make of them."""

from __future__ import annotations

import pytest
from kafka.record import MemoryRecords

from kbroker.delay.delay_headers import DELAYED_FROM_HEADER
from kbroker.delay.pending_batches import (
    DELAYED_CONTROL_TYPE,
    PendingRecord,
    control_type,
    decode_pending_batch,
    decode_pending_value,
    delayed_from,
    encode_delivery_batch,
    encode_pending_batch,
    is_pending_batch,
    parse_delayed_from,
    pending_entries,
    pending_values,
)
from protocol.record_batch import (
    GZIP,
    LZ4,
    NONE,
    SNAPPY,
    ZSTD,
    ControlType,
    CorruptRecordError,
    Record,
    decode_batch,
    decode_payload,
    encode_batch,
    encode_end_txn_batch,
)
from protocol.records import read_header

TS = 1_700_000_000_000


def client_records() -> list[Record]:
    return [
        Record(0, TS, b"key", b"value", [("kbroker.delay.ms", b"5000")]),
        Record(1, TS + 1, None, None),
        Record(2, TS + 2, b"", b"", [(f"h{i}", bytes([i]) * i) for i in range(40)]),
        Record(3, TS - 7, b"k" * 300, b"v" * 70_000, [("ключ-鍵-🔑", "значение".encode()), ("nil", None)]),
    ]


def pending_of(batch: bytes) -> list[PendingRecord]:
    return decode_pending_batch(batch, read_header(batch))


@pytest.mark.parametrize("codec", [NONE, GZIP, SNAPPY, LZ4, ZSTD])
def test_a_client_batch_round_trips_through_its_pending_batch(codec: int) -> None:
    # The records as the produce path has them: decoded from the client's (compressed) batch.
    originals = decode_batch(encode_batch(client_records(), compression=codec)).records
    dues = [TS + 5000, TS + 1, TS + 9_000_000, TS + 2]
    batch = encode_pending_batch(originals, dues, compression=codec, base_offset=100)
    pending = pending_of(batch)
    assert [p.offset for p in pending] == [100, 101, 102, 103]
    assert [p.due_ms for p in pending] == dues
    for original, p in zip(originals, pending, strict=True):
        assert (p.timestamp, p.key, p.value, p.headers) == (original.timestamp, original.key, original.value,
                                                            original.headers)


def test_a_pending_batch_keeps_the_producer_fields_and_offset_deltas() -> None:
    records = [Record(d, TS, None, b"v") for d in range(3)]
    batch = encode_pending_batch(records, [TS + 1] * 3, producer_id=77, producer_epoch=3, base_sequence=41,
                                 transactional=True, base_offset=500, partition_leader_epoch=9)
    header = read_header(batch)
    decoded = decode_batch(batch)  # checks the CRC
    assert header.is_control and header.is_transactional
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (77, 3, 41)
    assert (header.last_offset_delta, header.record_count, header.partition_leader_epoch) == (2, 3, 9)
    assert [r.offset_delta for r in decoded.records] == [0, 1, 2]
    assert all(r.key == b"\x00\x00\x4b\x42" for r in decoded.records)  # version 0, type 0x4B42
    assert [r.timestamp for r in decoded.records] == [TS] * 3


@pytest.mark.parametrize("codec", [NONE, ZSTD])
def test_the_control_type_tells_pending_batches_from_transaction_markers(codec: int) -> None:
    pending = encode_pending_batch([Record(0, TS, None, b"v")], [TS + 1], compression=codec)
    marker = encode_end_txn_batch(ControlType.COMMIT, producer_id=1, producer_epoch=0, coordinator_epoch=0,
                                  timestamp=TS)
    plain = encode_batch([Record(0, TS, None, b"v")])
    assert control_type(pending, read_header(pending)) == DELAYED_CONTROL_TYPE
    assert is_pending_batch(pending, read_header(pending))
    assert control_type(marker, read_header(marker)) == ControlType.COMMIT
    assert not is_pending_batch(marker, read_header(marker))
    assert control_type(plain, read_header(plain)) is None


def test_a_malformed_pending_value_is_corrupt() -> None:
    with pytest.raises(CorruptRecordError):
        decode_pending_value(None)
    with pytest.raises(CorruptRecordError):
        decode_pending_value(b"\x00" * 5)
    with pytest.raises(CorruptRecordError, match="version 7"):
        decode_pending_value(b"\x07" + b"\x00" * 16 + b"\x02\x00")


def test_a_delivery_holds_the_originals_and_names_their_pending_records() -> None:
    originals = client_records()
    pending = pending_of(encode_pending_batch(originals, [TS + 1] * 4, base_offset=1000))
    due = [pending[2], pending[0]]
    batch = decode_batch(encode_delivery_batch("orders-eu", 3, due, base_offset=2000))
    assert not batch.is_control and batch.producer_id == -1 and batch.compression == NONE
    assert batch.timestamp_type == 0  # CreateTime: the original timestamps
    assert [r.offset for r in batch.records] == [2000, 2001]
    for record, p in zip(batch.records, due, strict=True):
        assert (record.timestamp, record.key, record.value) == (p.timestamp, p.key, p.value)
        assert record.headers == [*p.headers, (DELAYED_FROM_HEADER, f"orders-eu-3@{p.offset}".encode())]


def test_delayed_from_values_parse_back_with_dashes_in_the_topic() -> None:
    assert parse_delayed_from(delayed_from("a-b-c", 12, 345)) == ("a-b-c-12", 345)
    for bad in (None, b"", b"t-0", b"t-0@", b"t-0@x1", b"t-0@-1", b"\xff-0@1"):
        assert parse_delayed_from(bad) is None


def test_kafka_python_reads_a_pending_batch_as_a_control_batch_it_skips() -> None:
    """kafka-python's fetcher skips control batches; its reader must parse ours without error."""
    originals = client_records()
    data = encode_pending_batch(originals, [TS + 1] * 4, producer_id=5, producer_epoch=0, base_sequence=0,
                                base_offset=10) + encode_delivery_batch("t", 0, pending_of(
                                    encode_pending_batch(originals[:1], [TS + 1], base_offset=10)), base_offset=14)
    records = MemoryRecords(data)
    pending = records.next_batch()
    assert pending.is_control_batch and pending.validate_crc()
    controls = list(pending)
    assert [c.type for c in controls] == [DELAYED_CONTROL_TYPE] * 4
    assert not any(c.abort or c.commit for c in controls)
    delivery = records.next_batch()
    assert not delivery.is_control_batch and delivery.validate_crc()
    (record,) = list(delivery)
    assert (record.offset, record.key, record.value) == (14, b"key", b"value")
    assert record.headers[-1] == (DELAYED_FROM_HEADER, b"t-0@10")


@pytest.mark.parametrize("codec", [NONE, ZSTD])
def test_wanted_records_and_index_entries_read_without_decoding_the_batch(codec: int) -> None:
    records = [Record(i, 1000 + i, b"k%d" % i if i % 3 else None, b"v" * (i * 37 % 300),
                      [("h", b"x")] if i % 2 else []) for i in range(40)]
    dues = [5000 + (i * 7919) % 1000 for i in range(40)]
    batch = bytearray(encode_pending_batch(records, dues, compression=codec))
    batch[:8] = (700).to_bytes(8, "big")  # stored at offset 700
    header = read_header(bytes(batch))
    everything = decode_pending_batch(bytes(batch), header)
    wanted = {700, 713, 739, 9999}
    picked = [decode_pending_value(v, o) for o, v in pending_values(bytes(batch), header) if o in wanted]
    assert picked == [r for r in everything if r.offset in wanted]
    assert [r.offset for r in picked] == [700, 713, 739]
    entries = list(pending_entries(bytes(batch), header))
    assert [(o, due) for o, due, _ in entries] == [(700 + i, dues[i]) for i in range(40)]
    values = {r.offset: r for r in decode_payload(bytes(batch), header)}
    assert all(size == len(values[o].value or b"") for o, _, size in entries)
