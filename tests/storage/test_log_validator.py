"""Record-level validation of producers' batches (Kafka's LogValidator).

Each malformed batch below used to be appended as it came: the log end moved (by 2^31 for a
150-byte batch claiming 2^31-1 records) and every consumer stopped at bytes it could not read.
Now each is refused with the log untouched, and the log reads normally afterwards.
"""

from __future__ import annotations

import struct

import pytest

from kbroker.storage import record_scan
from kbroker.storage.log_config import LogConfig
from kbroker.storage.log_validator import RecordValidationError, validate_batches, validate_records
from protocol.errors import ErrorCode, KafkaError
from protocol.record_batch import Record, compress, decode_batch, encode_batch, encode_records
from protocol.records import ATTRIBUTES_OFFSET, CRC_OFFSET, HEADER_SIZE, compute_crc
from tests.storage.conftest import T0, read_all


@pytest.fixture(autouse=True, params=["compiled pass", "walk alone"])
def record_pass(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Every case twice: with the compiled quick pass in front of the walk (as a broker runs
    once it has loaded it), and with the walk alone (before that, or without numba)."""
    if request.param == "compiled pass":
        assert record_scan.load()
    else:
        monkeypatch.setattr(record_scan, "_first_unplain", None)
    return request.param


RECORDS = [Record(i, T0, b"k%d" % i, b"v" * 20) for i in range(3)]
GOOD = encode_batch(RECORDS)
PAYLOAD = encode_records(RECORDS, T0)


def resign(batch: bytes | bytearray) -> bytes:
    data = bytearray(batch)
    struct.pack_into(">I", data, CRC_OFFSET, compute_crc(data, 0, len(data)))
    return bytes(data)


def with_codec(batch: bytes, codec: int) -> bytes:
    data = bytearray(batch)
    attributes = struct.unpack_from(">h", data, ATTRIBUTES_OFFSET)[0]
    struct.pack_into(">h", data, ATTRIBUTES_OFFSET, (attributes & ~7) | codec)
    return resign(data)


def with_payload(batch: bytes, payload: bytes, count: int | None = None) -> bytes:
    """`batch`'s header over another payload, its length, count (and last offset delta) made to
    agree with `count`, and a valid CRC: only the records are wrong."""
    data = bytearray(batch[:HEADER_SIZE]) + payload
    struct.pack_into(">i", data, 8, len(data) - 12)
    if count is not None:
        struct.pack_into(">i", data, 57, count)
        struct.pack_into(">i", data, 23, count - 1)
    return resign(data)


UNREADABLE = {
    "codec 5": with_codec(GOOD, 5),
    "codec 6": with_codec(GOOD, 6),
    "codec 7": with_codec(GOOD, 7),
    "gzip flag on plain records": with_codec(GOOD, 1),
    "plain flag on lz4 records": with_payload(GOOD, encode_batch(RECORDS, compression=3)[HEADER_SIZE:]),
    "random bytes with a valid CRC": with_payload(GOOD, bytes(range(200, 250))),
    "one record more claimed": with_payload(GOOD, PAYLOAD, count=4),
    "one record fewer claimed": with_payload(GOOD, PAYLOAD, count=2),
    "2^31-1 records claimed": with_payload(GOOD, PAYLOAD, count=2**31 - 1),
    "offset deltas 0, 5, 2": encode_batch([Record(0, T0, b"a", b"x"), Record(5, T0, b"b", b"y"),
                                           Record(2, T0, b"c", b"z")], last_offset_delta=2),
    "corrupt records inside gzip": with_payload(with_codec(GOOD, 1), compress(1, PAYLOAD[:-5] + b"\xff" * 5)),
    "one record more claimed inside gzip": with_payload(with_codec(GOOD, 1), compress(1, PAYLOAD), count=4),
    "record length 0": with_payload(GOOD, b"\x00" + PAYLOAD[1:]),
    "record length -1": with_payload(GOOD, b"\x01" + PAYLOAD[1:]),
    "bytes after the last record": with_payload(GOOD, PAYLOAD + b"\x00\x00"),
    "key length past the record": with_payload(GOOD, PAYLOAD[:3] + b"\x7e" + PAYLOAD[4:]),
    "negative header count": with_payload(GOOD, PAYLOAD[:-1] + b"\x03"),
}


@pytest.mark.parametrize("batch", UNREADABLE.values(), ids=UNREADABLE.keys())
def test_unreadable_batches_are_refused_and_leave_the_log_untouched(open_log, batch: bytes) -> None:
    log = open_log()
    log.append_as_leader(GOOD, 0, T0)
    with pytest.raises(KafkaError) as refused:
        log.append_as_leader(batch, 0, T0)
    assert refused.value.code == ErrorCode.INVALID_RECORD
    assert log.log_end_offset == 3
    log.append_as_leader(GOOD, 0, T0)
    assert [r.offset for r in read_all(log)] == list(range(6))


@pytest.mark.parametrize("codec", [0, 1, 2, 3, 4])
def test_well_formed_batches_of_every_codec_are_stored_as_sent(open_log, codec: int) -> None:
    log = open_log()
    batch = encode_batch(RECORDS, compression=codec)
    log.append_as_leader(batch, 0, T0)
    stored = log.read(0, 1 << 20).read_bytes()
    assert stored[HEADER_SIZE:] == batch[HEADER_SIZE:]  # the records' bytes are not rewritten
    assert [(r.key, r.value) for r in decode_batch(stored).records] == [(r.key, r.value) for r in RECORDS]


def test_keyless_records_on_a_compacted_topic_are_named_one_by_one(open_log) -> None:
    log = open_log(LogConfig(cleanup_policy="compact"))
    batch = encode_batch([Record(0, T0, b"a", b"x"), Record(1, T0, None, b"y"), Record(2, T0, b"c", b"z"),
                          Record(3, T0, None, b"w")], compression=1)
    with pytest.raises(RecordValidationError) as refused:
        log.append_as_leader(batch, 0, T0)
    message = "Compacted topic cannot accept message without key in topic partition topic-0"
    assert refused.value.code == ErrorCode.INVALID_RECORD
    assert refused.value.record_errors == [(1, message), (3, message)]
    # Kafka's summary, word for word.
    assert refused.value.message == (
        "One or more records have been rejected due to 2 record errors in total, and only showing the first three "
        f"errors at most: [RecordError(batchIndex=1, message='{message}'), "
        f"RecordError(batchIndex=3, message='{message}')]")
    assert log.log_end_offset == 0


def test_every_record_timestamp_is_checked_not_only_the_batch_bounds(open_log) -> None:
    # The middle record is an hour old; the first and the largest timestamps are fine, so the
    # old check of base and max timestamps let the batch through.
    log = open_log(LogConfig(message_timestamp_before_max_ms=60_000))
    batch = encode_batch([Record(0, T0, b"a", b"x"), Record(1, T0 - 3_600_000, b"b", b"y"),
                          Record(2, T0, b"c", b"z")])
    with pytest.raises(RecordValidationError) as refused:
        log.append_as_leader(batch, 0, T0)
    assert refused.value.code == ErrorCode.INVALID_TIMESTAMP
    assert refused.value.message == "One or more records have been rejected due to invalid timestamp"
    assert refused.value.record_errors == [(1, (
        f"Timestamp {T0 - 3_600_000} of message with offset 1 is out of range. The timestamp should be within "
        f"[{T0 - 60_000}, {T0 + 3_600_000}]"))]


def test_timestamps_are_not_checked_on_log_append_time_topics(open_log) -> None:
    log = open_log(LogConfig(message_timestamp_type="LogAppendTime", message_timestamp_before_max_ms=60_000))
    log.append_as_leader(encode_batch([Record(0, T0 - 3_600_000, b"a", b"x")]), 0, T0)
    assert log.log_end_offset == 1


def test_replicas_append_without_walking_records(open_log) -> None:
    # A follower takes what its leader validated; only headers and CRCs are checked.
    log = open_log(LogConfig(cleanup_policy="compact"))
    log.append_as_follower(encode_batch([Record(0, T0, None, b"x")]))
    assert log.log_end_offset == 1


# Most batches pass a quick loop (no headers, offset deltas in order, timestamps in bounds); the
# first record it cannot pass hands the rest of the batch to the full walk. These check that
# what comes after the hand-over is still judged record by record.


def test_records_out_of_bounds_after_plain_ones_are_each_named(open_log) -> None:
    log = open_log()  # the default bound: an hour into the future
    late = T0 + 7_200_000
    batch = encode_batch([Record(0, T0, b"a", b"x"), Record(1, late, b"b", b"y"), Record(2, T0, b"c", b"z"),
                          Record(3, late, b"d", b"w")])
    with pytest.raises(RecordValidationError) as refused:
        log.append_as_leader(batch, 0, T0)
    assert refused.value.code == ErrorCode.INVALID_TIMESTAMP
    assert [index for index, _ in refused.value.record_errors] == [1, 3]
    assert log.log_end_offset == 0


def test_a_delay_header_after_plain_records_delays_its_record() -> None:
    batch = encode_batch([Record(0, T0, b"a", b"x"), Record(1, T0, b"b", b"y"),
                          Record(2, T0, b"c", b"z", [("kbroker.delay.ms", b"60000")])])
    config = LogConfig()
    headers = validate_batches(batch, config, "topic-0", from_client=True)
    [plan] = validate_records(batch, headers, config, "topic-0", T0)
    assert plan is not None
    assert plan.due_times == [None, None, T0 + 60_000]


def test_headers_without_a_delay_leave_the_batch_unplanned() -> None:
    batch = encode_batch([Record(0, T0, b"a", b"x", [("trace", b"1")]), Record(1, T0, b"b", b"y")])
    config = LogConfig()
    assert validate_records(batch, validate_batches(batch, config, "topic-0", from_client=True), config,
                            "topic-0", T0) == [None]
