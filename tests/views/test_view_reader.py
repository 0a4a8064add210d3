"""A view partition's read of its source (kbroker/views/view_reader.py), over a log of batches in
memory: it answers with the filtered batches, reads on past reads that keep nothing, and
answers a run of offsets without a match with one gap marker, bounded by its scan limit."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kbroker.pacing import Pacer
from kbroker.storage.read_results import BatchBytes, ReadResult
from kbroker.views.filter import parse_filter
from kbroker.views.view import View
from kbroker.views.view_reader import ViewReader
from protocol.record_batch import ControlType, Record, decode_batches, encode_batch, encode_end_txn_batch
from protocol.records import read_header

BATCH = 10  # records per batch


@dataclass
class Read:
    error: int = 0
    records: Any = None


def batch(base: int, tags: list[str]) -> bytes:
    return encode_batch([Record(i, 1_700_000_000_000, None, b"v%d" % (base + i), [("tag", t.encode())])
                         for i, t in enumerate(tags)], base_offset=base)


class Log:
    """Batches by base offset; a read returns whole batches from the one holding the offset,
    up to `max_bytes` (at least one), as a partition's read does."""

    def __init__(self, batches: list[bytes], max_bytes: int = 1 << 20) -> None:
        self.batches = batches
        self.max_bytes = max_bytes
        self.reads: list[int] = []

    def read_at(self, offset: int) -> Read:
        self.reads.append(offset)
        out = b""
        for data in self.batches:
            header = read_header(data)
            if header.base_offset + header.last_offset_delta < offset:
                continue
            if out and len(out) + len(data) > self.max_bytes:
                break
            out += data
        return Read(records=BatchBytes(out, offset) if out else None)


def view(flt: str) -> View:
    return View("v", "src", parse_filter(flt))


def read(reader: ViewReader, log: Log, flt: str, offset: int) -> Read:
    return asyncio.run(reader.read(view(flt), 0, offset, log.read_at, Pacer()))


def offsets(result: Read) -> list[tuple[str, int, int, list[int]]]:
    """Each batch of the answer: kind, base offset, last offset, record offsets."""
    return [("marker" if b.is_control else "data", b.base_offset, b.last_offset, [r.offset for r in b.records])
            for b in decode_batches(result.records.read_bytes())]


def test_a_read_that_keeps_records_is_answered_at_once() -> None:
    log = Log([batch(0, ["a"] * 5 + ["b"] * 5), batch(10, ["b"] * 10)])
    result = read(ViewReader(), log, "tag = 'a'", 0)
    assert offsets(result) == [("data", 0, 4, [0, 1, 2, 3, 4]), ("marker", 5, 19, [19])]
    assert log.reads == [0]


def test_a_read_that_keeps_nothing_reads_on_to_the_next_match() -> None:
    log = Log([batch(0, ["b"] * 10), batch(10, ["b"] * 10), batch(20, ["b"] * 9 + ["a"])], max_bytes=1)
    result = read(ViewReader(), log, "tag = 'a'", 3)
    # One read per batch (the byte limit), on from where the last one ended.
    assert log.reads == [3, 10, 20]
    assert offsets(result) == [("data", 20, 29, [29])]


def test_no_match_to_the_end_is_one_gap_marker_from_the_fetch_offset() -> None:
    log = Log([batch(0, ["b"] * 10), batch(10, ["b"] * 10)], max_bytes=1)
    result = read(ViewReader(), log, "tag = 'a'", 4)
    assert offsets(result) == [("marker", 4, 19, [19])]
    assert log.reads == [4, 10, 20]


def test_the_scan_limit_ends_a_read_with_a_gap_marker_over_what_was_read() -> None:
    batches = [batch(BATCH * i, ["b"] * BATCH) for i in range(10)]
    log = Log(batches, max_bytes=1)
    result = read(ViewReader(max_scan_bytes=3 * len(batches[0])), log, "tag = 'a'", 0)
    assert offsets(result) == [("marker", 0, 29, [29])]
    assert log.reads == [0, 10, 20]


def test_nothing_to_read_is_answered_without_records() -> None:
    result = read(ViewReader(), Log([]), "tag = 'a'", 7)
    assert result.records is None


def test_a_source_error_is_the_answer() -> None:
    def failing(offset: int) -> Read:
        return Read(error=6)  # NOT_LEADER_OR_FOLLOWER

    result = asyncio.run(ViewReader().read(view("tag = 'a'"), 0, 0, failing, Pacer()))
    assert (result.error, result.records) == (6, None)


def test_counters_add_up_per_view_and_go_with_a_deleted_view() -> None:
    reader = ViewReader()
    log = Log([batch(0, ["a"] * 4 + ["b"] * 6), batch(10, ["b"] * 10), batch(20, ["a"] * 10)])
    read(reader, log, "tag = 'a'", 0)
    counted = reader.stats["v"]
    assert (counted.records_in, counted.records_kept) == (30, 14)
    assert (counted.batches_whole, counted.batches_rebuilt, counted.batches_emptied) == (1, 1, 1)
    reader.forget("v")
    assert reader.stats == {}


def test_a_read_kept_whole_is_sent_as_the_logs_own_slice(tmp_path: Path) -> None:
    """Nothing filtered out: the answer is the file slice (sendfile), less a partial batch at its
    end; a read with something filtered out is sent from memory."""
    whole, partial = batch(0, ["a"] * 5 + ["b"] * 5), batch(10, ["a"] * 10)
    path = tmp_path / "segment"
    path.write_bytes(whole + partial)
    with path.open("rb") as file:
        def read_at(offset: int) -> Read:
            return Read(records=ReadResult(file, 0, len(whole) + len(partial) // 2, offset))

        kept = asyncio.run(ViewReader().read(view("tag in ('a', 'b')"), 0, 0, read_at, Pacer()))
        assert isinstance(kept.records, ReadResult)
        assert (kept.records.position, kept.records.size) == (0, len(whole))
        filtered = asyncio.run(ViewReader().read(view("tag = 'a'"), 0, 0, read_at, Pacer()))
        assert isinstance(filtered.records, BatchBytes)
        assert offsets(filtered) == [("data", 0, 4, [0, 1, 2, 3, 4]), ("marker", 5, 9, [9])]


def test_a_read_without_one_complete_batch_sends_none_of_the_sources_bytes() -> None:
    data = batch(0, ["b"] * 10)
    result = asyncio.run(ViewReader().read(view("tag = 'a'"), 0, 0, lambda offset: Read(
        records=BatchBytes(data[: len(data) // 2], offset)), Pacer()))
    assert result.records is None


READS: list[int] = []


@dataclass(frozen=True, slots=True)
class CountedRead(ReadResult):
    """A file slice that records each time its bytes are read into memory."""

    def read_bytes(self) -> bytes:
        READS.append(self.size)
        return ReadResult.read_bytes(self)


class CountingKeep:
    def __init__(self, tag: bytes) -> None:
        self.tag = tag
        self.asked = 0

    def __call__(self, key: bytes | None, headers: Any) -> bool:
        self.asked += 1
        return ("tag", self.tag) in headers


def test_a_slice_read_again_is_answered_from_its_headers(tmp_path: Path) -> None:
    """Batches kept whole before: the second read asks the filter nothing and answers the same
    file slice; a slice with a batch the view rebuilds is filtered again (and only that batch
    asks the filter)."""
    whole, control = batch(0, ["a"] * 10), encode_end_txn_batch(
        ControlType.COMMIT, producer_id=7, producer_epoch=0, coordinator_epoch=0, timestamp=1, base_offset=10)
    mixed = batch(11, ["a"] * 5 + ["b"] * 5)
    path = tmp_path / "segment"
    path.write_bytes(whole + control + mixed)
    keep = CountingKeep(b"a")
    counted = View("v", "src", dataclasses.replace(parse_filter("tag = 'a'"), matches=keep))
    reader = ViewReader()
    with path.open("rb") as file:
        def slice_of(size: int) -> Callable[[int], Read]:
            return lambda offset: Read(records=CountedRead(file, 0, size, offset))

        READS.clear()
        first = asyncio.run(reader.read(counted, 0, 0, slice_of(len(whole) + len(control) + 30), Pacer()))
        assert len(READS) == 1
        again = asyncio.run(reader.read(counted, 0, 0, slice_of(len(whole) + len(control) + 30), Pacer()))
        assert len(READS) == 1  # the second read read the headers only
        assert keep.asked == 10
        for answer in (first, again):
            assert isinstance(answer.records, ReadResult)
            assert (answer.records.position, answer.records.size) == (0, len(whole) + len(control))
        assert reader.stats["v"].records_kept == 20 and reader.stats["v"].control_batches == 2
        with_mixed = asyncio.run(reader.read(counted, 0, 0, slice_of(len(whole) + len(control) + len(mixed)),
                                             Pacer()))
        assert keep.asked == 20  # the whole batch was not decoded again; the mixed one was
        assert isinstance(with_mixed.records, BatchBytes)
        assert offsets(with_mixed)[-2:] == [("data", 11, 15, [11, 12, 13, 14, 15]), ("marker", 16, 20, [20])]
