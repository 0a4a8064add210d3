"""The compiled quick pass over a batch's records (kbroker/storage/record_scan.py).

It may only say "all plain" of a batch the validator's walk (aiokafka's record iterator) reads
as plain records: any other batch must reach the walk, which refuses or plans it. Checked
against that reader on batches the encoder writes and on the same batches with bytes changed.
"""

from __future__ import annotations

import struct

import pytest
from aiokafka.errors import CorruptRecordException
from aiokafka.record.default_records import DefaultRecordBatch
from hypothesis import given, settings
from hypothesis import strategies as st

from kbroker.storage import log_validator, record_scan
from kbroker.storage.log_config import LogConfig
from protocol.record_batch import Record, encode_batch, write_varint
from protocol.records import HEADER_SIZE, read_header
from tests.storage.conftest import T0

LOW, HIGH = T0 - 3_600_000, T0 + 3_600_000


@pytest.fixture(autouse=True)
def compiled() -> None:
    assert record_scan.load(), "numba is a dependency: the compiled pass must load"


def walk_says_plain(batch: bytes | bytearray, low: int, high: int, need_key: bool) -> bool:
    """The reference: aiokafka's iterator reads every record, and each is plain."""
    header = read_header(batch, 0)
    try:
        records = list(DefaultRecordBatch(bytes(batch)))
    except (CorruptRecordException, ValueError, IndexError, UnicodeDecodeError):
        return False
    return len(records) == header.record_count and all(
        record.offset == index and not record.headers and low <= record.timestamp <= high
        and (record.key is not None or not need_key)
        for index, record in enumerate(records))


def scan_says_plain(batch: bytes | bytearray, low: int = LOW, high: int = HIGH, need_key: bool = False) -> bool:
    return record_scan.all_plain(batch, read_header(batch, 0), low, high, need_key)


records = st.lists(
    st.builds(
        lambda delta, key, value, headers, offset_shift: (delta, key, value, headers, offset_shift),
        st.one_of(st.integers(-10, 10), st.integers(-(1 << 40), 1 << 40)),
        st.one_of(st.none(), st.binary(max_size=8)),
        st.one_of(st.none(), st.binary(max_size=300)),
        st.lists(st.tuples(st.text(max_size=4), st.one_of(st.none(), st.binary(max_size=4))), max_size=2),
        st.sampled_from([0, 0, 0, 0, 1, -1]),
    ),
    min_size=1, max_size=12,
)


def build(entries: list) -> bytes:
    return encode_batch([Record(index + shift, T0 + delta, key, value, headers)
                         for index, (delta, key, value, headers, shift) in enumerate(entries)],
                        base_timestamp=T0, last_offset_delta=len(entries) - 1)


@settings(max_examples=400, deadline=None)
@given(records, st.booleans())
def test_the_pass_agrees_with_the_walk_on_encoded_batches(entries: list, need_key: bool) -> None:
    batch = build(entries)
    assert scan_says_plain(batch, need_key=need_key) == walk_says_plain(batch, LOW, HIGH, need_key)


@settings(max_examples=600, deadline=None)
@given(records, st.data())
def test_a_batch_with_changed_bytes_is_plain_only_if_the_walk_reads_it_so(entries: list, data: st.DataObject) -> None:
    batch = bytearray(build(entries))
    for _ in range(data.draw(st.integers(1, 4))):
        position = data.draw(st.integers(HEADER_SIZE, len(batch) - 1))
        batch[position] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, 3))  # and sometimes bytes missing at the end
    if cut:
        batch = batch[:-cut] if len(batch) - cut > HEADER_SIZE else batch
    if scan_says_plain(batch):
        assert walk_says_plain(batch, LOW, HIGH, False)


def test_plain_records_of_every_size_pass_and_each_kind_of_record_is_left_to_the_walk() -> None:
    plain = [Record(i, T0 + i, b"k" if i % 2 else None, b"v" * (i * 50)) for i in range(40)]
    assert scan_says_plain(encode_batch(plain))
    cases = {
        "a header": [Record(0, T0, None, b"v", [("trace", b"1")])],
        "an offset delta out of order": [Record(0, T0, None, b"v"), Record(0, T0, None, b"w")],
        "a timestamp below the bound": [Record(0, LOW - 1, None, b"v")],
        "a timestamp above the bound": [Record(0, HIGH + 1, None, b"v")],
        "no timestamp": [Record(0, -1, None, b"v")],
    }
    for what, batch_records in cases.items():
        assert not scan_says_plain(encode_batch(batch_records, base_timestamp=T0)), what
    assert not scan_says_plain(encode_batch([Record(0, T0, None, b"v")]), need_key=True)
    assert scan_says_plain(encode_batch([Record(0, T0, b"", b"v")]), need_key=True)  # an empty key is a key


def test_encodings_the_readers_might_differ_on_are_left_to_the_walk() -> None:
    def with_record(body: bytes) -> bytes:
        batch = bytearray(encode_batch([Record(0, T0, None, b"v")]))
        return bytes(batch[:HEADER_SIZE]) + write_varint(len(body)) + body

    canonical = b"\x00" + write_varint(0) + write_varint(0) + write_varint(-1) + write_varint(1) + b"v" + write_varint(0)
    assert scan_says_plain(with_record(canonical))
    # Attributes of 0x80 and above: one byte to Kafka, the start of a varint to aiokafka.
    assert not scan_says_plain(with_record(b"\x80" + canonical[1:]))
    # An offset delta of 0 in five bytes (Kafka's limit for an int is five; the pass takes four).
    five_byte_delta = with_record(b"\x00\x00" + b"\x80\x80\x80\x80\x00" + canonical[3:])
    assert walk_says_plain(five_byte_delta, LOW, HIGH, False)
    assert not scan_says_plain(five_byte_delta)


def test_a_base_timestamp_near_the_64_bit_edge_is_left_to_the_walk() -> None:
    batch = bytearray(encode_batch([Record(0, T0, None, b"v")]))
    struct.pack_into(">q", batch, 27, (1 << 62) + 5)  # base timestamp
    assert not scan_says_plain(batch, low=-(1 << 63), high=(1 << 63) - 1)


def test_plain_batches_are_not_walked(monkeypatch: pytest.MonkeyPatch) -> None:
    """The point of the pass: a plain batch never reaches aiokafka's iterator."""
    def no_walk(*_: object) -> None:
        raise AssertionError("walked")

    monkeypatch.setattr(log_validator, "DefaultRecordBatch", no_walk)
    config = LogConfig()
    for compression in (0, 3):
        batch = encode_batch([Record(i, T0, None, b"v" * 100) for i in range(50)], compression=compression)
        headers = log_validator.validate_batches(batch, config, "topic-0", from_client=True)
        assert log_validator.validate_records(batch, headers, config, "topic-0", T0) == [None]
    with pytest.raises(AssertionError, match="walked"):  # and a batch with a header still is
        batch = encode_batch([Record(0, T0, None, b"v", [("h", b"")])])
        log_validator.validate_records(batch, log_validator.validate_batches(batch, config, "topic-0",
                                                                             from_client=True), config, "topic-0", T0)


def test_without_the_compiled_pass_every_batch_is_walked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(record_scan, "_first_unplain", None)
    assert not scan_says_plain(encode_batch([Record(0, T0, None, b"v")]))


def test_the_first_large_batch_starts_loading_the_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(record_scan, "_first_unplain", None)
    monkeypatch.setattr(record_scan, "_loader", None)
    small = encode_batch([Record(i, T0, None, b"v") for i in range(record_scan.LOAD_FROM_RECORDS - 1)])
    assert not scan_says_plain(small)
    assert record_scan._loader is None  # a few records: the walk is as cheap, nothing is loaded
    large = encode_batch([Record(i, T0, None, b"v") for i in range(record_scan.LOAD_FROM_RECORDS)])
    assert not scan_says_plain(large)  # walked, while the pass loads in its thread
    loader = record_scan._loader
    assert loader is not None
    loader.join(timeout=60)
    assert record_scan.loaded()
    assert scan_says_plain(large)


def test_the_environment_can_keep_the_pass_unloaded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(record_scan, "_first_unplain", None)
    monkeypatch.setenv(record_scan.DISABLE_ENV, "python")
    assert not record_scan.load()
    assert not record_scan.loaded()


def test_a_call_the_compiled_code_refuses_is_left_to_the_walk(monkeypatch: pytest.MonkeyPatch) -> None:
    """numba answers arguments it has no compiled signature for with a TypeError: the walk
    then takes the batch, instead of the produce request failing."""
    def no_matching_definition(*_: object) -> int:
        raise TypeError("No matching definition for argument type(s)")

    monkeypatch.setattr(record_scan, "_first_unplain", no_matching_definition)
    assert not scan_says_plain(encode_batch([Record(0, T0, None, b"v")]))
