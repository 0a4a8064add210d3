"""A hierarchical timing wheel of (due time, pending offset) entries, after Kafka's `TimingWheel`.

Why a wheel and not a heap: a partition may hold a million pending records; a heap of tuples
costs ~120 bytes an entry and O(log n) an insert, while a wheel bucket is an `array('q')` of
interleaved (due, offset) pairs — 16 bytes an entry — and an insert appends to one bucket.

The shape is Kafka's (server-common `util/timer/TimingWheel`, `TimerTaskList`, `SystemTimer`):

- level 0 has `wheel_size` buckets of `tick_ms` each; level k+1 has buckets as wide as the
  whole of level k, and is created only when an entry does not fit the levels below;
- a bucket's expiration is the start of the time range it holds; the buckets whose expiration
  was set are kept in a small heap (Kafka's DelayQueue of TimerTaskLists), so advancing the
  clock over an idle hour or a restart costs one heap pop per non-empty bucket, not one step
  per tick;
- an expired bucket is flushed: its entries are placed again, which moves them down a level,
  or — when they fall within the current tick — into the `ready` list.

Unlike Kafka's timer, which runs a task as soon as its bucket (the start of its tick) expires,
`advance(now)` returns exactly the entries whose due time is <= now: an entry of the current
tick that is not due yet waits in `ready`. A delayed record is never delivered early. The
entries come out sorted by (due, offset): due-time order, ties in log (produce) order.

Removal is lazy: `remove` records the offset, and the entry is dropped when its bucket is
flushed. Not thread-safe: one owner (the partition's delay index) calls it.
"""

from __future__ import annotations

import heapq
from array import array
from bisect import bisect_right

DEFAULT_TICK_MS = 100
# 256 buckets: level 0 spans 25.6 s, level 1 1.8 h, level 2 19 days, level 3 13.6 years at 100 ms.
DEFAULT_WHEEL_SIZE = 256
_NO_EXPIRATION = -1
_AFTER_ANY_OFFSET = 1 << 63


class _Level:
    """One wheel: `size` buckets of `tick_ms`, whose current time moves in steps of `tick_ms`."""

    __slots__ = ("tick_ms", "size", "interval_ms", "current_ms", "buckets", "expirations")

    def __init__(self, tick_ms: int, size: int, start_ms: int) -> None:
        self.tick_ms = tick_ms
        self.size = size
        self.interval_ms = tick_ms * size
        self.current_ms = start_ms - start_ms % tick_ms
        # Only buckets holding entries exist: every partition has a wheel, nearly all of them
        # empty, and 256 empty arrays cost a partition some 24 KiB (docs/performance.md).
        self.buckets: dict[int, array] = {}
        # The start of the range each bucket holds this round; absent for an empty, flushed bucket.
        self.expirations: dict[int, int] = {}

    def advance(self, time_ms: int) -> None:
        if time_ms >= self.current_ms + self.tick_ms:
            self.current_ms = time_ms - time_ms % self.tick_ms


class TimingWheel:
    """Pending offsets by due time. `add` is O(levels), `advance` O(expired entries)."""

    def __init__(self, *, tick_ms: int = DEFAULT_TICK_MS, wheel_size: int = DEFAULT_WHEEL_SIZE,
                 start_ms: int = 0) -> None:
        if tick_ms < 1 or wheel_size < 2:
            raise ValueError(f"tick_ms must be >= 1 and wheel_size >= 2, not {tick_ms} and {wheel_size}")
        self._levels = [_Level(tick_ms, wheel_size, start_ms)]
        # (expiration, level, bucket): buckets that hold entries, by when they expire. An entry
        # is stale when the bucket's expiration has changed since (it was flushed and reused).
        self._bucket_queue: list[tuple[int, int, int]] = []
        # Entries of the current tick or overdue: kept until their due time, then returned.
        self._ready: list[tuple[int, int]] = []
        self._removed: set[int] = set()
        self._count = 0

    def __len__(self) -> int:
        """Entries added and neither returned by `advance` nor removed."""
        return self._count

    @property
    def tick_ms(self) -> int:
        return self._levels[0].tick_ms

    @property
    def current_ms(self) -> int:
        """The start of the current tick: the time the wheel was last advanced to, rounded down."""
        return self._levels[0].current_ms

    @property
    def level_count(self) -> int:
        """Wheels created so far (overflow wheels are made on demand)."""
        return len(self._levels)

    def add(self, due_ms: int, offset: int) -> None:
        """Schedule `offset` for `due_ms`. An offset must be in the wheel at most once."""
        self._count += 1
        self._place(due_ms, offset)

    def remove(self, offset: int) -> None:
        """Take `offset`, which is in the wheel, out of it: it will not be returned by `advance`.

        Lazy: the entry stays in its bucket and is dropped when the bucket is flushed.
        """
        if offset not in self._removed:
            self._removed.add(offset)
            self._count -= 1

    def advance(self, now_ms: int, limit: int | None = None) -> list[int]:
        """The offsets due at `now_ms` (due <= now), sorted by (due, offset), at most `limit`.

        Entries left over by `limit` are returned first by the next call.
        """
        return [offset for _, offset in self.advance_entries(now_ms, limit)]

    def advance_entries(self, now_ms: int, limit: int | None = None) -> list[tuple[int, int]]:
        """Like `advance`, as (due, offset) pairs: for owners that check an entry is still current."""
        queue = self._bucket_queue
        while queue and queue[0][0] <= now_ms:
            expiration, level_no, bucket_no = heapq.heappop(queue)
            level = self._levels[level_no]
            if level.expirations.get(bucket_no, _NO_EXPIRATION) != expiration:
                continue  # stale: the bucket was flushed already
            self._advance_clock(expiration)
            self._flush(level, bucket_no)
        self._advance_clock(now_ms)
        return self._take_ready(now_ms, limit)

    def next_due_ms(self) -> int | None:
        """When `advance` should next be called: never later than the earliest entry's due time.

        It may be earlier (the start of a bucket, or a higher wheel's bucket that only moves its
        entries down), so a call at that time may return nothing. None when the wheel is empty.
        """
        if self._ready:
            return min(self._ready)[0]
        queue = self._bucket_queue
        while queue:
            expiration, level_no, bucket_no = queue[0]
            if self._levels[level_no].expirations.get(bucket_no, _NO_EXPIRATION) == expiration:
                return expiration
            heapq.heappop(queue)  # stale
        return None

    # -- internals ---------------------------------------------------------------------------

    def _place(self, due_ms: int, offset: int) -> None:
        """Put an entry into the lowest wheel whose span covers it (Kafka's TimingWheel.add)."""
        levels = self._levels
        level_no = 0
        while True:
            level = levels[level_no]
            if due_ms < level.current_ms + level.tick_ms:
                # Within the current tick (only possible on level 0, as in Kafka): no bucket.
                self._ready.append((due_ms, offset))
                return
            if due_ms < level.current_ms + level.interval_ms:
                virtual_id = due_ms // level.tick_ms
                bucket_no = virtual_id % level.size
                bucket = level.buckets.get(bucket_no)
                if bucket is None:
                    bucket = level.buckets[bucket_no] = array("q")
                bucket.extend((due_ms, offset))
                expiration = virtual_id * level.tick_ms
                if level.expirations.get(bucket_no, _NO_EXPIRATION) != expiration:
                    level.expirations[bucket_no] = expiration
                    heapq.heappush(self._bucket_queue, (expiration, level_no, bucket_no))
                return
            level_no += 1
            if level_no == len(levels):
                levels.append(_Level(level.interval_ms, level.size, level.current_ms))

    def _advance_clock(self, time_ms: int) -> None:
        for level in self._levels:
            level.advance(time_ms)

    def _flush(self, level: _Level, bucket_no: int) -> None:
        entries = level.buckets.pop(bucket_no, ())
        level.expirations.pop(bucket_no, None)
        removed = self._removed
        pairs = iter(entries)
        for due_ms, offset in zip(pairs, pairs, strict=True):
            if removed and offset in removed:
                removed.discard(offset)
                continue
            self._place(due_ms, offset)

    def _take_ready(self, now_ms: int, limit: int | None) -> list[tuple[int, int]]:
        ready = self._ready
        if not ready:
            return []
        ready.sort()
        end = bisect_right(ready, (now_ms, _AFTER_ANY_OFFSET))
        removed = self._removed
        if not removed:
            if limit is not None:
                end = min(end, limit)
            taken = ready[:end]
            del ready[:end]
            self._count -= len(taken)
            return taken
        # Removed entries do not count against `limit`: they are dropped as they are passed.
        taken = []
        consumed = 0
        for entry in ready[:end]:
            if limit is not None and len(taken) == limit:
                break
            consumed += 1
            if entry[1] in removed:
                removed.discard(entry[1])
            else:
                taken.append(entry)
        del ready[:consumed]
        self._count -= len(taken)
        return taken
