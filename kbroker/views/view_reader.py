"""A consumer's read of a view: its source partition's log, read and filtered.

Each read of the source (a file slice, or decrypted batches) is read into memory once and its
batches pass through `filter_batches`: whole when every record matches, rebuilt with the
matching ones, or emptied. Offsets, the high watermark, the LSO and the aborted transactions
are the source's (the partition's read sets them).

When nothing was filtered out of a read, the answer is the log's own slice, sent with sendfile
like the source's. An answer always ends with a record the consumer is given: its last kept record, or a *gap
marker* after it (see `filter_batches`' `seal`), so every client's position reaches the end of
what was read. Reads that match nothing are the hard case. A consumer must not get a partition answer made
of empty batches only: librdkafka takes an answer without a single message for a size limit
that was too small, doubles its fetch size and, after ten of them, reports MSG_SIZE_TOO_LARGE
to the application (rd_kafka_msgset_reader_run). So a read that matched nothing reads on
through the source, up to `MAX_SCAN_BYTES`, and if it still has nothing to give, its answer is
one *gap marker*: a control batch spanning every offset it skipped, holding a COMMIT marker of
no producer (producer id -1). Every client moves its position past a control batch without
showing it to the application (librdkafka always ignores COMMIT markers; the Java client and
kafka-python skip control batches, and a batch without a producer id takes no part in
read_committed's bookkeeping), so a consumer's position reaches the high watermark even when
the last records do not match: lag reaches 0 and a batch reader (Spark) finds the end.

Batches a view keeps whole or empties are remembered (`VerdictMemo`): read again, they are
answered from their headers, without decompressing or decoding them. A file slice of a few
batches all known to be kept whole is not even read: their headers are, and the slice goes out
with sendfile.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, Protocol

from kbroker.pacing import Pacer
from kbroker.storage.batch_scan import pread_exact
from kbroker.storage.read_results import BatchBytes, Read, ReadResult
from kbroker.views.batch_filter import FilterStats, KnownVerdicts, filter_batches, from_header, gap_marker
from kbroker.views.verdict_memo import VerdictMemo
from kbroker.views.view import View
from protocol.records import CURRENT_MAGIC, HEADER_SIZE, read_header

# How many bytes of the source one fetch of one view partition filters before it answers with a
# gap marker: a fetch must not hold the event loop's other clients, nor the consumer's answer,
# for long. About 30-80 ms of filtering.
MAX_SCAN_BYTES = 16 << 20
# A file slice whose batches are all known to be kept whole is answered from their headers, one
# 61-byte pread each, up to this many batches; a slice of more, smaller batches is cheaper to
# read whole (one pread) and filter with the verdicts.
MAX_HEADER_READS = 16


class SourceRead(Protocol):
    """What a partition's read returns (the replica manager's LogReadResult)."""

    error: int
    records: Any


ReadAt = Callable[[int], SourceRead]  # a read of the source from an offset, with the fetch's other terms


class ViewReader:
    def __init__(self, max_scan_bytes: int = MAX_SCAN_BYTES) -> None:
        self.max_scan_bytes = max_scan_bytes
        self.stats: dict[str, FilterStats] = {}  # every read's, added up per view (the metrics)
        self.verdicts = VerdictMemo()

    async def read(self, view: View, partition: int, fetch_offset: int, read_at: ReadAt, pacer: Pacer) -> SourceRead:
        """The view's answer for one partition from `fetch_offset`."""
        known = self.verdicts.of(view, partition)
        offset = fetch_offset
        scanned = 0
        first: SourceRead | None = None
        while True:
            result = read_at(offset)
            if first is None:
                first = result
            if result.error or result.records is None or result.records.size == 0:
                if offset == fetch_offset:
                    return result  # nothing to read: the consumer waits for news
                # Read to the end (or the source failed meanwhile): the skipped offsets are answered.
                first.records = BatchBytes(gap_marker(fetch_offset, offset), fetch_offset)
                return first
            whole = _known_whole(result.records, known)
            if whole is not None:
                size, stats = whole
                self._count(view.name, stats)
                result.records = dataclasses.replace(result.records, size=size)
                return result
            stats = FilterStats()
            data = filter_batches(result.records.read_bytes(), view.filter.matches, stats, seal=True, known=known)
            self._count(view.name, stats)
            if stats.records_kept or stats.control_batches:
                result.records = _answer(result.records, data, stats)
                return result
            if stats.next_offset <= offset:
                # Not one complete batch within the byte limit: none of the source's bytes go out.
                result.records = BatchBytes(gap_marker(fetch_offset, offset), fetch_offset) \
                    if offset > fetch_offset else None
                return result
            scanned += result.records.size
            offset = stats.next_offset
            if scanned >= self.max_scan_bytes:
                result.records = BatchBytes(gap_marker(fetch_offset, offset), fetch_offset)
                return result
            await pacer.tick()

    def forget(self, view: str) -> None:
        """A deleted view's counters and verdicts go with it."""
        self.stats.pop(view, None)
        self.verdicts.forget(view)

    def _count(self, view: str, stats: FilterStats) -> None:
        self.stats.setdefault(view, FilterStats()).add(stats)


def _known_whole(read: Read, known: KnownVerdicts) -> tuple[int, FilterStats] | None:
    """When a file slice's complete batches are all ones the view kept whole before (or control
    batches), the size of those batches and the stats filtering them would give, read from their
    headers alone; None as soon as one is not, or past `MAX_HEADER_READS` batches."""
    if not isinstance(read, ReadResult):
        return None
    fd = read.file.fileno()
    stats = FilterStats()
    pos = 0
    for _ in range(MAX_HEADER_READS):
        if read.size - pos < HEADER_SIZE:
            break
        raw = pread_exact(fd, HEADER_SIZE, read.position + pos)
        if len(raw) < HEADER_SIZE:
            return None
        header = read_header(raw)
        if header.magic != CURRENT_MAGIC or header.size < HEADER_SIZE:
            return None  # the decoding path says what is wrong with it
        if pos + header.size > read.size:
            break  # the partial batch a read ends with
        if from_header(header, stats, known) is not None:
            return None  # to decode, or emptied: not the slice as it is
        pos += header.size
    else:
        if read.size - pos >= HEADER_SIZE:
            return None  # more batches than worth a pread each
    if pos == 0 or not (stats.records_kept or stats.control_batches) or not _unchanged(stats):
        return None
    return pos, stats


def _unchanged(stats: FilterStats) -> bool:
    """Every batch went as it was and the answer needed no gap marker after its last one."""
    return not (stats.batches_rebuilt or stats.batches_emptied) and stats.last_given_offset + 1 >= stats.next_offset


def _answer(read: Read, data: bytes, stats: FilterStats) -> Read:
    """What the consumer is sent: when every batch went as it was and the answer needed no gap
    marker, `data` is the read's own bytes (less a partial batch at the end), so the log's slice
    of them is sent instead, with sendfile, as for the source: no second copy through the event
    loop's write buffer."""
    if _unchanged(stats) and isinstance(read, ReadResult):
        return dataclasses.replace(read, size=len(data))
    return BatchBytes(data, read.first_offset)
