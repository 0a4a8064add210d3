"""RecordBatch v2 codec: round trips, agreement with kafka-python, and refusal of bad input.

Batches built "by hand" here use struct + crc32c directly so they do not depend on the codec
under test; kafka-python (3.0.12) is the independent implementation we agree with.
"""

from __future__ import annotations

import contextlib
import struct

import cramjam
import crc32c
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.codec import snappy_encode
from kafka.record import MemoryRecords
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder
from kafka.record.legacy_records import LegacyRecordBatchBuilder

from protocol.errors import ErrorCode, KafkaError
from protocol.record_batch import (
    Compression,
    ControlType,
    CorruptRecordError,
    EndTxnMarker,
    Record,
    RecordBatch,
    TimestampType,
    UnsupportedCompressionError,
    UnsupportedMagicError,
    decode_batch,
    decode_batches,
    decode_control_key,
    decode_end_txn_marker,
    encode_batch,
    encode_control_key,
    encode_end_txn_batch,
    encode_end_txn_marker,
    encode_records,
)
from protocol.records import crc_ok, read_header

T0 = 1_700_000_000_000
CODECS = list(Compression)
INT32 = st.integers(-(2**31), 2**31 - 1)

# -- strategies ---------------------------------------------------------------------------------

_headers = st.lists(st.tuples(st.text(max_size=8), st.none() | st.binary(max_size=8)), max_size=3)
_record_fields = st.tuples(
    st.none() | st.binary(max_size=24),  # key
    st.none() | st.binary(max_size=64),  # value
    _headers,
    st.integers(-(2**40), 2**40),  # timestamp delta from T0, negative ones included
    st.integers(0, 3),  # gap to the previous offset delta (compacted batches have gaps)
)


@st.composite
def record_lists(draw: st.DrawFn, min_size: int = 1) -> list[Record]:
    records = []
    offset_delta = -1
    for key, value, headers, ts_delta, gap in draw(st.lists(_record_fields, min_size=min_size, max_size=8)):
        offset_delta += 1 + gap
        records.append(Record(offset_delta, T0 + ts_delta, key, value, headers))
    return records


@st.composite
def producer_states(draw: st.DrawFn) -> dict[str, int | bool]:
    if not draw(st.booleans()):
        return {"producer_id": -1, "producer_epoch": -1, "base_sequence": -1, "transactional": False}
    return {
        "producer_id": draw(st.integers(0, 2**63 - 1)),
        "producer_epoch": draw(st.integers(0, 2**15 - 1)),
        "base_sequence": draw(st.integers(0, 2**31 - 1)),
        "transactional": draw(st.booleans()),
    }


def compressible(records: list[Record]) -> list[Record]:
    """The same records with values worth compressing, so kafka-python keeps the codec."""
    return [Record(r.offset_delta, r.timestamp, r.key, b"x" * 200 + (r.value or b""), r.headers) for r in records]


# -- independent helpers --------------------------------------------------------------------------


def resign(batch: bytes | bytearray) -> bytes:
    """`batch` with its length and CRC32C recomputed, as a valid (if odd) producer would send."""
    out = bytearray(batch)
    struct.pack_into(">i", out, 8, len(out) - 12)
    struct.pack_into(">I", out, 17, crc32c.crc32c(bytes(out[21:])))
    return bytes(out)


def with_payload(batch: bytes, payload: bytes, codec: int) -> bytes:
    """`batch`'s header with another record section and compression codec, re-signed."""
    out = bytearray(batch[:61]) + payload
    (attributes,) = struct.unpack_from(">h", out, 21)
    struct.pack_into(">h", out, 21, (attributes & ~0x07) | codec)
    return resign(out)


def kafka_python_batch(records: list[Record], codec: int = 0, **producer: int | bool) -> bytes:
    builder = DefaultRecordBatchBuilder(
        magic=2, compression_type=codec, is_transactional=producer.get("transactional", False),
        producer_id=producer.get("producer_id", -1), producer_epoch=producer.get("producer_epoch", -1),
        base_sequence=producer.get("base_sequence", -1), batch_size=2**30,
    )
    for r in records:
        assert builder.append(r.offset_delta, r.timestamp, r.key, r.value, r.headers) is not None
    return bytes(builder.build())


def fields(records: list[Record]) -> list[tuple]:
    return [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in records]


def kafka_python_fields(batch: DefaultRecordBatch) -> list[tuple]:
    return [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in batch]


def kafka_python_decode(data: bytes) -> list[DefaultRecordBatch]:
    batches = []
    records = MemoryRecords(data)
    while (batch := records.next_batch()) is not None:
        assert batch.validate_crc()
        batches.append(batch)
    return batches


# -- round trips --------------------------------------------------------------------------------


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name)
@given(records=record_lists(), producer=producer_states(), base_offset=st.integers(0, 2**62),
       leader_epoch=INT32, log_append_time=st.booleans())
def test_round_trip(codec: Compression, records: list[Record], producer: dict, base_offset: int,
                    leader_epoch: int, log_append_time: bool) -> None:
    ts_type = TimestampType.LOG_APPEND_TIME if log_append_time else TimestampType.CREATE_TIME
    data = encode_batch(records, compression=codec, base_offset=base_offset, partition_leader_epoch=leader_epoch,
                        timestamp_type=ts_type, max_timestamp=T0 + 5 if log_append_time else None, **producer)
    batch = decode_batch(data)

    assert [r.offset for r in batch.records] == [base_offset + r.offset_delta for r in records]
    if log_append_time:  # Kafka reports the append time for every record of such a batch
        assert [r.timestamp for r in batch.records] == [T0 + 5] * len(records)
    else:
        assert batch.records == records
        assert batch.max_timestamp == max(r.timestamp for r in records)
    assert [(r.key, r.value, r.headers) for r in batch.records] == [(r.key, r.value, r.headers) for r in records]
    assert (batch.compression, batch.timestamp_type, batch.is_transactional, batch.is_control) == (
        codec, ts_type, producer["transactional"], False)
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (
        producer["producer_id"], producer["producer_epoch"], producer["base_sequence"])
    assert (batch.base_offset, batch.partition_leader_epoch, batch.magic, batch.size) == (
        base_offset, leader_epoch, 2, len(data))
    assert batch.base_timestamp == records[0].timestamp
    assert batch.last_offset == base_offset + records[-1].offset_delta
    # The header view used on the broker's hot path reads the same batch.
    header = read_header(data)
    assert crc_ok(data) and header.crc == batch.crc and header.record_count == len(records)


@given(batches=st.lists(st.tuples(record_lists(), st.sampled_from(CODECS)), min_size=1, max_size=4))
def test_concatenated_batches(batches: list[tuple[list[Record], Compression]]) -> None:
    data = b"".join(encode_batch(records, compression=codec, base_offset=10 * i)
                    for i, (records, codec) in enumerate(batches))
    decoded = decode_batches(data)
    assert [b.records for b in decoded] == [records for records, _ in batches]
    assert [b.compression for b in decoded] == [codec for _, codec in batches]
    assert sum(b.size for b in decoded) == len(data)


def test_explicit_base_timestamp_keeps_record_timestamps() -> None:
    records = [Record(0, T0, b"k", b"v"), Record(1, T0 - 7, b"k2", None)]
    batch = decode_batch(encode_batch(records, base_timestamp=T0 + 1_000, delete_horizon=True))
    assert batch.records == records
    assert batch.base_timestamp == T0 + 1_000 and batch.has_delete_horizon


def test_empty_batch_keeps_its_offset_span() -> None:
    batch = decode_batch(encode_batch([], base_offset=40, last_offset_delta=4))
    assert batch.records == [] and batch.last_offset == 44 and batch.next_offset == 45
    with pytest.raises(ValueError, match="last_offset_delta"):
        encode_batch([])


def test_record_attributes_survive() -> None:
    batch = decode_batch(encode_batch([Record(0, T0, b"k", b"v", attributes=0x5A)]))
    assert batch.records[0].attributes == 0x5A


# -- kafka-python agreement ---------------------------------------------------------------------


@given(records=record_lists(), producer=producer_states())
def test_uncompressed_bytes_match_kafka_python(records: list[Record], producer: dict) -> None:
    # kafka-python's builder writes leader epoch 0 where the broker fills it in.
    ours = encode_batch(records, partition_leader_epoch=0, **producer)
    assert ours == kafka_python_batch(records, **producer)


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name)
@given(records=record_lists(), producer=producer_states())
def test_we_decode_kafka_python_batches(codec: Compression, records: list[Record], producer: dict) -> None:
    records = compressible(records)
    data = kafka_python_batch(records, codec, **producer)
    (batch,) = decode_batches(data)
    assert batch.compression == codec  # compressible values: kafka-python kept the codec
    assert batch.records == records
    assert fields(batch.records) == kafka_python_fields(kafka_python_decode(data)[0])


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name)
@given(records=record_lists(), producer=producer_states(), base_offset=st.integers(0, 2**40))
def test_kafka_python_decodes_our_batches(codec: Compression, records: list[Record], producer: dict,
                                          base_offset: int) -> None:
    data = encode_batch(records, compression=codec, base_offset=base_offset, **producer)
    (theirs,) = kafka_python_decode(data)
    assert kafka_python_fields(theirs) == fields(decode_batch(data).records)
    assert (theirs.compression_type, theirs.producer_id, theirs.producer_epoch, theirs.base_sequence) == (
        codec, producer["producer_id"], producer["producer_epoch"], producer["base_sequence"])
    assert theirs.is_transactional == producer["transactional"]
    assert theirs.last_offset == base_offset + records[-1].offset_delta


def test_kafka_python_reads_log_append_time() -> None:
    data = encode_batch([Record(0, T0, None, b"a"), Record(1, T0 + 3, None, b"b")],
                        timestamp_type=TimestampType.LOG_APPEND_TIME, max_timestamp=T0 + 99)
    (theirs,) = kafka_python_decode(data)
    assert [r.timestamp for r in theirs] == [r.timestamp for r in decode_batch(data).records] == [T0 + 99] * 2


# -- snappy framings ----------------------------------------------------------------------------


def _records_and_payload() -> tuple[list[Record], bytes, bytes]:
    records = [Record(i, T0 + i, b"key-%d" % i, b"value " * 20 + b"%d" % i, [("h", b"%d" % i)]) for i in range(30)]
    plain = kafka_python_batch(records)
    return records, plain, plain[61:]


def test_xerial_snappy_built_by_hand() -> None:
    records, plain, payload = _records_and_payload()
    xerial = b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1)
    for start in range(0, len(payload), 100):  # many small blocks, as a long Java stream has
        block = bytes(cramjam.snappy.compress_raw(payload[start : start + 100]))
        xerial += struct.pack(">i", len(block)) + block
    (batch,) = decode_batches(with_payload(plain, xerial, Compression.SNAPPY))
    assert batch.records == records and batch.compression == Compression.SNAPPY


def test_xerial_snappy_from_kafka_python_codec() -> None:
    records, plain, payload = _records_and_payload()
    framed = snappy_encode(payload, xerial_compatible=True, xerial_blocksize=256)
    assert framed.startswith(b"\x82SNAPPY\x00")
    assert decode_batch(with_payload(plain, framed, Compression.SNAPPY)).records == records


def test_raw_snappy() -> None:
    records, plain, payload = _records_and_payload()
    raw = bytes(cramjam.snappy.compress_raw(payload))
    assert decode_batch(with_payload(plain, raw, Compression.SNAPPY)).records == records


def test_our_snappy_is_xerial_framed() -> None:
    records, _, _ = _records_and_payload()
    data = encode_batch(records, compression=Compression.SNAPPY)
    assert data[61:].startswith(b"\x82SNAPPY\x00\x00\x00\x00\x01\x00\x00\x00\x01")


def test_truncated_xerial_block_is_corrupt() -> None:
    _, plain, payload = _records_and_payload()
    block = bytes(cramjam.snappy.compress_raw(payload))
    framed = b"\x82SNAPPY\x00" + struct.pack(">iii", 1, 1, len(block) + 10) + block
    with pytest.raises(CorruptRecordError, match="SNAPPY"):
        decode_batch(with_payload(plain, framed, Compression.SNAPPY))


# -- refusals -----------------------------------------------------------------------------------


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name)
def test_crc_mismatch_is_corrupt_message(codec: Compression) -> None:
    data = bytearray(encode_batch(compressible([Record(0, T0, b"k", b"v")]), compression=codec))
    for position in (17, 21, 30, 60, len(data) - 1):  # the CRC itself, header fields, records
        bad = bytearray(data)
        bad[position] ^= 0x01
        with pytest.raises(CorruptRecordError, match="CRC mismatch") as info:
            decode_batches(bad)
        assert info.value.code == ErrorCode.CORRUPT_MESSAGE


def test_base_offset_and_leader_epoch_are_outside_the_crc() -> None:
    data = bytearray(encode_batch([Record(0, T0, b"k", b"v")]))
    struct.pack_into(">qii", data, 0, 77, len(data) - 12, 9)
    batch = decode_batch(data)
    assert (batch.base_offset, batch.partition_leader_epoch, batch.records[0].offset) == (77, 9, 77)


@pytest.mark.parametrize("magic", [0, 1])
def test_legacy_message_format_is_refused(magic: int) -> None:
    builder = LegacyRecordBatchBuilder(magic=magic, compression_type=0, batch_size=2**20)
    builder.append(0, timestamp=T0 if magic else None, key=b"k", value=b"v")
    legacy = bytes(builder.build())
    good = encode_batch([Record(0, T0, b"k", b"v")])
    for data in (legacy, good + legacy):
        with pytest.raises(UnsupportedMagicError, match=f"magic {magic}") as info:
            decode_batches(data)
        assert info.value.code == ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT


def test_unknown_magic_is_corrupt() -> None:
    data = bytearray(encode_batch([Record(0, T0, b"k", b"v")]))
    data[16] = 3
    with pytest.raises(CorruptRecordError, match="unknown magic 3"):
        decode_batch(data)


def test_truncated_trailing_batch_is_ignored() -> None:
    first = encode_batch([Record(0, T0, b"a", b"1")])
    second = encode_batch([Record(0, T0, b"b", b"2" * 50)], base_offset=1, compression=Compression.GZIP)
    for cut in range(len(second)):
        batches = decode_batches(first + second[:cut])
        assert [b.records[0].key for b in batches] == [b"a"]
    assert len(decode_batches(first + second)) == 2
    assert decode_batches(b"") == []


def test_decode_batch_refuses_a_truncated_batch() -> None:
    data = encode_batch([Record(0, T0, b"a", b"1")])
    with pytest.raises(CorruptRecordError, match="truncated"):
        decode_batch(data[:-1])
    assert decode_batch(data + data, pos=len(data)).records[0].key == b"a"


def test_impossible_batch_length_is_corrupt_not_partial() -> None:
    data = bytearray(encode_batch([Record(0, T0, b"a", b"1")]))
    struct.pack_into(">i", data, 8, 5)
    with pytest.raises(CorruptRecordError, match="below the minimum"):
        decode_batches(data)


def test_unknown_compression_codec() -> None:
    plain = encode_batch([Record(0, T0, b"a", b"1")])
    data = with_payload(plain, plain[61:], 5)
    with pytest.raises(UnsupportedCompressionError) as info:
        decode_batch(data)
    assert info.value.code == ErrorCode.UNSUPPORTED_COMPRESSION_TYPE
    with pytest.raises(UnsupportedCompressionError):
        encode_batch([Record(0, T0, b"a", b"1")], compression=7)


def test_record_count_must_match_the_records() -> None:
    data = bytearray(encode_batch([Record(0, T0, b"a", b"1"), Record(1, T0, b"b", b"2")]))
    struct.pack_into(">i", data, 57, 1)
    with pytest.raises(CorruptRecordError, match="left after"):
        decode_batch(resign(data))
    struct.pack_into(">i", data, 57, 3)
    with pytest.raises(CorruptRecordError, match="varint"):
        decode_batch(resign(data))


def test_bad_record_fields_are_corrupt() -> None:
    plain = encode_batch([Record(0, T0, b"k", b"v")])
    null_header_key = b"\x00\x00\x00\x02k\x02v\x02\x01\x00"  # header count 1, key length -1, value null
    bad_utf8 = b"\x00\x00\x00\x02k\x02v\x02\x02\xff\x01"
    for body, message in ((null_header_key, "null record header key"), (bad_utf8, "UTF-8")):
        record = bytes([len(body) * 2]) + body
        with pytest.raises(CorruptRecordError, match=message):
            decode_batch(with_payload(plain, record, 0))


@given(records=record_lists(), edits=st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), min_size=1))
def test_mangled_records_raise_only_kafka_errors(records: list[Record], edits: list[tuple[int, int]]) -> None:
    """Records altered behind a valid CRC (a buggy producer) decode or fail cleanly."""
    plain = encode_batch(records)
    payload = bytearray(encode_records(records, records[0].timestamp))
    for index, byte in edits:
        payload[index % len(payload)] = byte
    try:
        decode_batches(with_payload(plain, bytes(payload), 0))
    except KafkaError as e:
        assert e.code == ErrorCode.CORRUPT_MESSAGE


@settings(max_examples=300)
@given(data=st.binary(max_size=200))
def test_arbitrary_bytes_raise_only_kafka_errors(data: bytes) -> None:
    with contextlib.suppress(KafkaError):
        assert isinstance(decode_batches(data), list)


# -- control records ----------------------------------------------------------------------------


@pytest.mark.parametrize("control_type", list(ControlType), ids=lambda c: c.name)
def test_end_txn_marker_batch(control_type: ControlType) -> None:
    data = encode_end_txn_batch(control_type, producer_id=4_000, producer_epoch=3, coordinator_epoch=7,
                                timestamp=T0, base_offset=12, partition_leader_epoch=2)
    batch: RecordBatch = decode_batch(data)
    assert batch.is_control and batch.is_transactional and batch.base_sequence == -1
    (record,) = batch.records
    assert (record.offset, record.timestamp) == (12, T0)
    assert decode_control_key(record.key) == (0, control_type)
    assert decode_end_txn_marker(record.value) == EndTxnMarker(0, 7)
    (theirs,) = kafka_python_decode(data)  # kafka-python's ControlRecord reads the same key
    (control,) = list(theirs)
    assert (control.version, control.type, control.commit) == (0, control_type, control_type == ControlType.COMMIT)


def test_control_key_and_marker_layouts() -> None:
    assert encode_control_key(ControlType.COMMIT) == b"\x00\x00\x00\x01"
    assert encode_end_txn_marker(coordinator_epoch=258) == b"\x00\x00\x00\x00\x01\x02"
    assert decode_control_key(b"\x00\x00\x00\x02") == (0, 2)  # KRaft types pass through
    assert decode_end_txn_marker(b"\x00\x01\x00\x00\x00\x05extra") == (1, 5)  # later versions append fields
    for bad in (None, b"\x00\x00\x00", b"\xff\xff\x00\x00"):
        with pytest.raises(CorruptRecordError):
            decode_control_key(bad)
    with pytest.raises(CorruptRecordError):
        decode_end_txn_marker(b"\x00\x00\x00\x00\x01")
