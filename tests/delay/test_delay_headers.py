"""Delay headers: due times, the topic default, the limit, refused values, the batch pre-check."""

from __future__ import annotations

import pytest

from kbroker.delay.delay_headers import (
    DEFAULT_DELAY_MAX_MS,
    DELAY_MS_HEADER,
    DELIVER_AT_HEADER,
    DelayHeaderError,
    DelaySettings,
    batch_due_times,
    due_time,
    names_delay_header,
)
from protocol.errors import ErrorCode
from protocol.record_batch import Record

NOW = 1_700_000_000_000
TS = NOW - 20  # a CreateTime a little before the broker's now


def test_delay_ms_counts_from_the_record_timestamp() -> None:
    assert due_time([(DELAY_MS_HEADER, b"5000")], TS, NOW) == TS + 5000


def test_deliver_at_is_absolute() -> None:
    assert due_time([(DELIVER_AT_HEADER, str(NOW + 60_000).encode())], TS, NOW) == NOW + 60_000


def test_no_header_and_no_topic_default_is_not_delayed() -> None:
    assert due_time([("other", b"1")], TS, NOW) is None


def test_the_topic_default_delays_records_without_a_header() -> None:
    settings = DelaySettings(default_delay_ms=3000)
    assert due_time([], TS, NOW, settings) == TS + 3000
    # A header wins over the default, even one that asks for no delay.
    assert due_time([(DELAY_MS_HEADER, b"0")], TS, NOW, settings) is None
    assert due_time([(DELAY_MS_HEADER, b"100")], TS, NOW, settings) == TS + 100


def test_a_due_time_not_after_now_is_not_delayed() -> None:
    assert due_time([(DELAY_MS_HEADER, b"20")], TS, NOW) is None
    assert due_time([(DELIVER_AT_HEADER, str(NOW - 1).encode())], TS, NOW) is None


def test_a_record_without_timestamp_is_delayed_from_now() -> None:
    assert due_time([(DELAY_MS_HEADER, b"10")], -1, NOW) == NOW + 10


def test_both_headers_agreeing_are_accepted_disagreeing_refused() -> None:
    agreeing = [(DELAY_MS_HEADER, b"500"), (DELIVER_AT_HEADER, str(TS + 500).encode())]
    assert due_time(agreeing, TS, NOW) == TS + 500
    with pytest.raises(DelayHeaderError, match="give one of them"):
        due_time([(DELAY_MS_HEADER, b"500"), (DELIVER_AT_HEADER, str(TS + 501).encode())], TS, NOW)


def test_a_header_repeated_with_another_value_is_refused() -> None:
    assert due_time([(DELAY_MS_HEADER, b"500"), (DELAY_MS_HEADER, b"500")], TS, NOW) == TS + 500
    with pytest.raises(DelayHeaderError, match="twice"):
        due_time([(DELAY_MS_HEADER, b"500"), (DELAY_MS_HEADER, b"600")], TS, NOW)


@pytest.mark.parametrize("raw", [b"", b"abc", b"1.5", b" 5", b"5 ", b"+5", b"0x10", b"1e3",
                                 "١٢".encode(), b"99999999999999999999", b"9223372036854775808", None])
def test_malformed_values_are_invalid_record(raw: bytes | None) -> None:
    for name in (DELAY_MS_HEADER, DELIVER_AT_HEADER):
        with pytest.raises(DelayHeaderError) as caught:
            due_time([(name, raw)], TS, NOW)
        assert caught.value.code == ErrorCode.INVALID_RECORD
        assert name in str(caught.value)


def test_negative_values_say_so() -> None:
    with pytest.raises(DelayHeaderError, match="negative"):
        due_time([(DELAY_MS_HEADER, b"-5")], TS, NOW)


def test_delays_beyond_delay_max_ms_are_refused() -> None:
    assert due_time([(DELAY_MS_HEADER, str(DEFAULT_DELAY_MAX_MS).encode())], NOW, NOW) == NOW + DEFAULT_DELAY_MAX_MS
    with pytest.raises(DelayHeaderError, match=r"delay\.max\.ms"):
        due_time([(DELAY_MS_HEADER, str(DEFAULT_DELAY_MAX_MS + 1).encode())], NOW, NOW)
    with pytest.raises(DelayHeaderError, match=r"delay\.max\.ms 1000"):
        due_time([(DELIVER_AT_HEADER, str(NOW + 1001).encode())], TS, NOW, DelaySettings(max_delay_ms=1000))
    # A CreateTime far in the future cannot stretch the hold beyond the limit either.
    with pytest.raises(DelayHeaderError, match=r"delay\.max\.ms"):
        due_time([(DELAY_MS_HEADER, b"1000")], NOW + 5000, NOW, DelaySettings(max_delay_ms=2000))


def test_batch_due_times_names_the_refused_record() -> None:
    records = [Record(i, TS, None, b"v", [(DELAY_MS_HEADER, b"x" if i == 2 else b"100")]) for i in range(4)]
    with pytest.raises(DelayHeaderError) as caught:
        batch_due_times(records, NOW)
    assert caught.value.record_index == 2


def test_batch_due_times_is_none_for_a_batch_without_delays() -> None:
    records = [Record(0, TS, None, b"v", [(DELAY_MS_HEADER, b"0")]), Record(1, TS, None, b"v")]
    assert batch_due_times(records, NOW) is None
    records.append(Record(2, TS, None, b"v", [(DELAY_MS_HEADER, b"100")]))
    assert batch_due_times(records, NOW) == [None, None, TS + 100]


def test_the_pre_check_finds_delay_headers_and_misses_other_records() -> None:
    assert not names_delay_header([])
    assert not names_delay_header([("h", b"kbroker.delay.ms"), ("kbroker.x", b"1"), ("kbroker.attempt", b"1")])
    assert names_delay_header([("h", b"v"), (DELAY_MS_HEADER, b"5")])
    assert names_delay_header([(DELIVER_AT_HEADER, b"5")])
    assert names_delay_header([("kbroker.delayed.from", b"t-0@1")])
