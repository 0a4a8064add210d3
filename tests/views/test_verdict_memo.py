"""Verdicts a view remembers about whole batches (kbroker/views/verdict_memo.py): a batch kept
whole or emptied is answered again from its header alone, exactly as decoding it would answer;
batches kept in part, and batches that changed, are decoded again."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from kbroker.views.batch_filter import FilterStats, filter_batches
from kbroker.views.filter import parse_filter
from kbroker.views.verdict_memo import VerdictMemo
from kbroker.views.view import View
from protocol.record_batch import Compression, Record, encode_batch

Headers = Sequence[tuple[str, bytes | None]]
T0 = 1_700_000_000_000


def batch(base: int, tags: list[bytes], codec: Compression = Compression.LZ4, value: bytes = b"v") -> bytes:
    return encode_batch([Record(i, T0 + i, None, value * 50, [("tag", tag)]) for i, tag in enumerate(tags)],
                        base_offset=base, compression=codec)


class Counting:
    """A predicate that keeps tag 'a' and counts the records it is asked about."""

    def __init__(self) -> None:
        self.asked = 0

    def __call__(self, key: bytes | None, headers: Headers) -> bool:
        self.asked += 1
        return ("tag", b"a") in headers


def stats_of(stats: FilterStats) -> tuple:
    return (stats.batches_whole, stats.batches_rebuilt, stats.batches_emptied, stats.records_in,
            stats.records_kept, stats.next_offset, stats.last_given_offset)


VIEW = View("v", "src", parse_filter("tag = 'a'"))


@pytest.mark.parametrize("codec", list(Compression))
def test_a_read_again_answers_whole_and_emptied_batches_without_decoding_them(codec: Compression) -> None:
    log = batch(0, [b"a"] * 5, codec) + batch(5, [b"b"] * 5, codec) + batch(10, [b"a", b"b"], codec) \
        + batch(12, [b"a"] * 3, codec)
    memo = VerdictMemo()
    keep = Counting()
    first_stats, again_stats = FilterStats(), FilterStats()
    first = filter_batches(log, keep, first_stats, seal=True, known=memo.of(VIEW, 0))
    assert keep.asked == 15
    assert len(memo) == 3  # the mixed batch at 10 is not remembered
    again = filter_batches(log, keep, again_stats, seal=True, known=memo.of(VIEW, 0))
    assert again == first
    assert stats_of(again_stats) == stats_of(first_stats)
    assert keep.asked == 15 + 2  # only the mixed batch was decoded again


def test_a_whole_batch_ending_before_its_last_offset_answers_its_last_record() -> None:
    """A batch the cleaner shortened keeps its last offset delta past its last record: the
    remembered verdict gives the consumer's position the last record's offset, as decoding does."""
    records = [Record(0, T0, None, b"x", [("tag", b"a")]), Record(1, T0, None, b"y", [("tag", b"a")])]
    data = encode_batch(records, base_offset=100, last_offset_delta=4)
    memo = VerdictMemo()
    stats = [FilterStats(), FilterStats()]
    out = [filter_batches(data, Counting(), s, known=memo.of(VIEW, 0)) for s in stats]
    assert out[0] == out[1] == data
    assert stats[0].last_given_offset == stats[1].last_given_offset == 101


def test_a_batch_rewritten_at_the_same_offset_is_decoded_again() -> None:
    memo = VerdictMemo()
    keep = Counting()
    filter_batches(batch(0, [b"a"] * 4), keep, known=memo.of(VIEW, 0))
    rewritten = batch(0, [b"b"] * 4)  # same offsets and length, other records: another CRC
    stats = FilterStats()
    filter_batches(rewritten, keep, stats, known=memo.of(VIEW, 0))
    assert keep.asked == 8
    assert (stats.batches_emptied, stats.records_kept) == (1, 0)


def test_verdicts_are_per_view_and_partition() -> None:
    memo = VerdictMemo()
    data = batch(0, [b"a"] * 4)
    filter_batches(data, Counting(), known=memo.of(VIEW, 0))
    other_view = View("w", "src", parse_filter("tag = 'b'"))
    for view, partition in ((VIEW, 1), (other_view, 0)):
        keep = Counting()
        filter_batches(data, keep, known=memo.of(view, partition))
        assert keep.asked == 4


def test_a_changed_filter_starts_over_and_forget_drops_a_view() -> None:
    memo = VerdictMemo()
    filter_batches(batch(0, [b"a"] * 4), Counting(), known=memo.of(VIEW, 0))
    filter_batches(batch(4, [b"a"] * 4), Counting(), known=memo.of(VIEW, 1))
    assert len(memo) == 2
    changed = View("v", "src", parse_filter("tag = 'b'"))
    keep = Counting()
    filter_batches(batch(0, [b"a"] * 4), keep, known=memo.of(changed, 0))
    assert keep.asked == 4
    assert len(memo) == 1  # the old filter's verdicts went
    memo.forget("v")
    assert len(memo) == 0


def test_a_full_memo_starts_over() -> None:
    memo = VerdictMemo(max_entries=3)
    known = memo.of(VIEW, 0)
    for base in range(0, 12, 4):
        filter_batches(batch(base, [b"a"] * 4), Counting(), known=known)
    assert len(memo) == 3
    filter_batches(batch(12, [b"a"] * 4), Counting(), known=memo.of(VIEW, 0))
    assert len(memo) == 0
    filter_batches(batch(16, [b"a"] * 4), Counting(), known=known)  # a read begun before: not counted
    assert len(memo) == 0
    keep = Counting()
    filter_batches(batch(0, [b"a"] * 4), keep, known=memo.of(VIEW, 0))
    assert (keep.asked, len(memo)) == (4, 1)
