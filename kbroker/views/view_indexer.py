"""Verdicts learnt as records arrive: the batches appended to a source partition with views are
filtered once, in the background, for each of its views, and what each view keeps whole or
empties goes to the view reader's memo (`VerdictMemo`). A consumer's first read of those batches
then answers them from their headers, as a read again does, instead of decoding them on its
fetch: the work moves from the consumer's wait to the producer's side, as the design we follow
builds its tag index when a message is dispatched, not when it is consumed.

It indexes what the source's leader appends from the moment a partition first has views (not
the history before: a view created over existing data decodes it on its first read), up to the
high watermark (what a consumer can read, and what no truncation takes back). It works a chunk
at a time and yields between chunks; when appends come faster than it can filter, it falls
behind by at most `MAX_LAG_BYTES` and then skips ahead: the batches it skipped are decoded on
their first read, as without it. It keeps no data of its own: the memo bounds what it learns.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from kbroker.pacing import Pacer
from kbroker.storage.read_results import Read
from kbroker.tasks import cancel_and_wait
from kbroker.views.batch_filter import Learnt, learn_verdicts
from kbroker.views.verdict_memo import VerdictMemo
from kbroker.views.view import View
from protocol.errors import KafkaError

log = logging.getLogger("kbroker.views")

# What one step reads of a partition's log: small enough not to hold the event loop's clients.
CHUNK_BYTES = 1 << 20
# How far behind the appends the indexer may be before it skips ahead to the newest.
MAX_LAG_BYTES = 64 << 20
# A view that keeps most batches in part learns nothing from them (only whole and emptied
# batches are remembered): its partition is filtered again only every this many chunks.
RETRY_UNHELPFUL_CHUNKS = 64


class Source(Protocol):
    """What the indexer needs of a source partition (kbroker/cluster/partition.py)."""

    topic: str
    index: int

    @property
    def high_watermark(self) -> int: ...

    @property
    def log_end_offset(self) -> int: ...

    @property
    def is_leader(self) -> bool: ...

    def read_committed_log(self, offset: int, max_bytes: int) -> Read | None: ...

    def add_waiter(self, waiter: asyncio.Future[None]) -> None: ...


@dataclass(slots=True)
class _Progress:
    partition: Source
    next_offset: int  # the first offset not indexed yet
    lag_bytes: int = 0  # appended since it was indexed, as far as the appends said
    waiting: bool = False  # for the high watermark to pass what is appended


class ViewIndexer:
    def __init__(self, memo: VerdictMemo, views_of: Callable[[str], list[View]]) -> None:
        self.memo = memo
        self.views_of = views_of
        self._progress: dict[tuple[str, int], _Progress] = {}
        self._due: set[tuple[str, int]] = set()
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._busy = False  # a partition's chunk is being indexed
        # (view, partition) -> chunks to leave out before trying it again (see RETRY_UNHELPFUL_CHUNKS).
        self._unhelpful: dict[tuple[View, int], int] = {}
        self.batches_indexed = 0  # batches filtered here, for every view (the metrics)
        self.bytes_skipped = 0  # appended bytes left to first reads because it fell behind

    def appended(self, partition: Source, first_offset: int, size: int) -> None:
        """The leader appended `size` bytes at `first_offset` to `partition`, a source of views."""
        key = (partition.topic, partition.index)
        progress = self._progress.get(key)
        if progress is None or progress.partition is not partition:  # new views, or a new leadership
            progress = self._progress[key] = _Progress(partition, first_offset)
        progress.lag_bytes += size
        if progress.lag_bytes > MAX_LAG_BYTES:
            self.bytes_skipped += progress.lag_bytes
            progress.next_offset, progress.lag_bytes = first_offset, size
        self._due.add(key)
        self._wake.set()
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="view-indexer")

    async def stop(self) -> None:
        await cancel_and_wait(self._task)
        self._task = None

    async def _run(self) -> None:
        pacer = Pacer()
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self._due:
                key = self._due.pop()
                progress = self._progress.get(key)
                if progress is None:
                    continue
                self._busy = True
                try:
                    if await self._index(progress, pacer):
                        self._due.add(key)  # more to do: after the other partitions' turn
                except KafkaError as e:  # retention passed it, the log went offline...: left to first reads
                    log.debug("indexing %s-%d for its views stopped: %s", *key, e)
                    self._progress.pop(key, None)
                except Exception:
                    log.exception("indexing %s-%d for its views failed", *key)
                    self._progress.pop(key, None)
                finally:
                    self._busy = False

    async def _index(self, progress: _Progress, pacer: Pacer) -> bool:
        """One chunk of the partition for each of its views; True when more is readable."""
        partition = progress.partition
        views = self.views_of(partition.topic)
        if not views or not partition.is_leader:
            self._progress.pop((partition.topic, partition.index), None)
            return False
        if progress.next_offset >= partition.high_watermark:
            if progress.next_offset < partition.log_end_offset:
                self._await_high_watermark(progress)
            return False
        read = partition.read_committed_log(progress.next_offset, CHUNK_BYTES)
        if read is None or read.size == 0:
            return False
        start = progress.next_offset
        data = read.read_bytes()
        learnt = self._learn(views, partition.index, data)
        await pacer.tick()
        if progress.next_offset != start:
            return True  # it skipped ahead meanwhile (see `appended`): from there
        next_offset = learnt.next_offset
        if next_offset <= start:
            return False  # not one complete batch below the high watermark yet
        progress.lag_bytes = max(0, progress.lag_bytes - len(data))
        progress.next_offset = next_offset
        return True

    def _await_high_watermark(self, progress: _Progress) -> None:
        """Index the partition again once its high watermark moves (or its leadership changes)."""
        if progress.waiting:
            return
        progress.waiting = True
        key = (progress.partition.topic, progress.partition.index)
        waiter = asyncio.get_running_loop().create_future()

        def moved(_: asyncio.Future[None]) -> None:
            progress.waiting = False
            self._due.add(key)
            self._wake.set()

        waiter.add_done_callback(moved)
        progress.partition.add_waiter(waiter)

    def _learn(self, views: list[View], index: int, data: bytes) -> Learnt:
        """The verdicts of `views` on `data`, each batch decoded once for all of them; a view that
        has lately kept most batches in part is left out for a while (nothing of those can be
        remembered)."""
        asked = []
        for view in views:
            left_out = self._unhelpful.get((view, index), 0)
            if left_out:
                self._unhelpful[(view, index)] = left_out - 1
            else:
                asked.append(view)
        learnt = learn_verdicts(data, [(view.filter.matches, self.memo.of(view, index)) for view in asked])
        for view, remembered, mixed in zip(asked, learnt.remembered, learnt.mixed, strict=True):
            self.batches_indexed += remembered + mixed
            if mixed > remembered:
                self._unhelpful[(view, index)] = RETRY_UNHELPFUL_CHUNKS
        return learnt

    def forget(self, topic: str) -> None:
        """A deleted topic: a source's partitions are not indexed any more, a view's state goes."""
        for key in [k for k in self._progress if k[0] == topic]:
            del self._progress[key]
            self._due.discard(key)
        for unhelpful in [k for k in self._unhelpful if k[0].name == topic]:
            del self._unhelpful[unhelpful]

    @property
    def caught_up(self) -> bool:
        """Every partition indexed up to its high watermark (or as far as its complete batches go)."""
        return not self._due and not self._busy


