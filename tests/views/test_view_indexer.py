"""Verdicts learnt as records arrive (kbroker/views/view_indexer.py): batches appended to a source
with views are filtered in the background, so a view's first read answers them from their
headers; only what is below the high watermark, a view that keeps most batches in part is left
alone, and an indexer far behind skips ahead. Real logs on disk."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from kbroker.storage.log import Log
from kbroker.storage.log_config import LogConfig
from kbroker.storage.read_results import Read
from kbroker.views import view_indexer
from kbroker.views.batch_filter import FilterStats, filter_batches
from kbroker.views.filter import parse_filter
from kbroker.views.verdict_memo import VerdictMemo
from kbroker.views.view import View
from kbroker.views.view_indexer import ViewIndexer
from protocol.record_batch import Compression, Record, encode_batch

T0 = 1_700_000_000_000
ALL = View("all", "src", parse_filter("tag exists"))
PAID = View("paid", "src", parse_filter("tag = 'paid'"))


def batch(tags: list[bytes]) -> bytes:
    return encode_batch([Record(i, 0, None, b"v" * 200, [("tag", tag)]) for i, tag in enumerate(tags)],
                        compression=Compression.LZ4, base_timestamp=T0)


@dataclass
class Source:
    """A leader's partition of the source: a real log, its high watermark moved by the test."""

    log: Log
    topic: str = "src"
    index: int = 0
    is_leader: bool = True
    waiters: set[asyncio.Future[None]] = field(default_factory=set)

    @property
    def high_watermark(self) -> int:
        return self.log.high_watermark

    @property
    def log_end_offset(self) -> int:
        return self.log.log_end_offset

    def read_committed_log(self, offset: int, max_bytes: int) -> Read | None:
        return self.log.read(offset, max_bytes, max_offset_exclusive=self.high_watermark)

    def add_waiter(self, waiter: asyncio.Future[None]) -> None:
        self.waiters.add(waiter)

    def commit(self) -> None:
        """The high watermark reaches the log end: the waiters wake, as a partition's do."""
        self.log.high_watermark = self.log.log_end_offset
        for waiter in self.waiters:
            waiter.set_result(None)
        self.waiters.clear()

    def append(self, indexer: ViewIndexer, data: bytes) -> None:
        info = self.log.append_as_leader(data, 0, T0)
        indexer.appended(self, info.first_offset, len(data))


@pytest.fixture
def source(tmp_path: Path) -> Iterator[Source]:
    log = Log(tmp_path / "src-0", LogConfig(), clock=lambda: T0)
    yield Source(log)
    log.release()


async def caught_up(indexer: ViewIndexer) -> None:
    """Once what the test did (appends, a high watermark moved) has reached the indexer, and it
    has nothing left to do."""
    await asyncio.sleep(0.001)
    while not indexer.caught_up:
        await asyncio.sleep(0.001)


def first_read(source: Source, view: View, memo: VerdictMemo) -> tuple[FilterStats, int]:
    """A consumer's first read of everything, with the memo: its stats, and how many records its
    filter was asked about."""
    asked = 0

    def keep(key: bytes | None, headers: list[tuple[str, bytes | None]]) -> bool:
        nonlocal asked
        asked += 1
        return view.filter.matches(key, headers)

    read = source.log.read(0, 1 << 30)
    assert read is not None
    stats = FilterStats()
    filter_batches(read.read_bytes(), keep, stats, known=memo.of(view, 0))
    return stats, asked


def test_appended_batches_are_known_before_their_first_read(source: Source) -> None:
    memo = VerdictMemo()
    indexer = ViewIndexer(memo, lambda topic: [ALL, PAID] if topic == "src" else [])

    async def run() -> None:
        for tags in ([b"paid"] * 5, [b"new"] * 5, [b"paid", b"new"], [b"paid"] * 3):
            source.append(indexer, batch(tags))
        await caught_up(indexer)
        assert len(memo) == 0  # nothing is committed yet: nothing indexed
        source.commit()
        await caught_up(indexer)
        await indexer.stop()

    asyncio.run(run())
    # `all` keeps the four batches whole; `paid` keeps two whole, empties one, rebuilds one.
    assert len(memo) == 4 + 3
    stats, asked = first_read(source, ALL, memo)
    assert (stats.batches_whole, asked) == (4, 0)
    stats, asked = first_read(source, PAID, memo)
    assert (stats.batches_whole, stats.batches_emptied, stats.batches_rebuilt, asked) == (2, 1, 1, 2)
    assert indexer.batches_indexed == 8


def test_a_view_keeping_batches_in_part_is_left_alone(source: Source) -> None:
    """Nothing of a mixed batch is remembered: after a chunk of mostly mixed batches, the
    indexer stops filtering for that view, and goes on for the others."""
    memo = VerdictMemo()
    indexer = ViewIndexer(memo, lambda topic: [ALL, PAID])

    async def run() -> None:
        for _ in range(4):
            source.append(indexer, batch([b"paid", b"new"]))
        source.commit()
        await caught_up(indexer)
        for _ in range(4):
            source.append(indexer, batch([b"paid", b"new"]))
        source.commit()
        await caught_up(indexer)
        await indexer.stop()

    asyncio.run(run())
    assert len(memo) == 8  # `all`'s, every batch
    assert indexer.batches_indexed == 8 + 4  # `paid` only in the first chunk


def test_an_indexer_far_behind_skips_ahead(source: Source, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(view_indexer, "MAX_LAG_BYTES", 3 * len(batch([b"paid"] * 5)))
    memo = VerdictMemo()
    indexer = ViewIndexer(memo, lambda topic: [ALL])

    async def run() -> None:
        for _ in range(10):  # no turn for the indexer meanwhile: it falls behind
            source.append(indexer, batch([b"paid"] * 5))
        source.commit()
        await caught_up(indexer)
        await indexer.stop()

    asyncio.run(run())
    assert indexer.bytes_skipped > 0
    known = len(memo)
    assert 0 < known < 10  # the newest batches, not the ones it skipped
    stats, asked = first_read(source, ALL, memo)
    assert stats.batches_whole == 10 and asked == 5 * (10 - known)
