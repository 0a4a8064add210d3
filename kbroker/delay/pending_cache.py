"""Values of pending records read from their batches, kept for the deliveries to come.

A delivery pass wants a few records of each of many pending batches: the records of one batch
fall due at different times (a producer's batch holds records delayed by 1 s and by 2 minutes).
Reading a batch for one record walks all of it, so when a leader reads a pending batch it keeps
the values of the batch's other records still pending here, and the next passes take them from
memory. Entries leave when taken (a delivery), when a truncation removes their offsets, or,
oldest first, when the cache is over its budget: a miss only costs reading the batch again,
since the log is the store.

One cache for the whole broker, so the budget bounds its memory however many partitions
deliver. Not thread-safe: the event loop's thread uses it, as it delivers.
"""

from __future__ import annotations

import itertools
from collections import OrderedDict
from collections.abc import Iterable

DEFAULT_BUDGET_BYTES = 32 << 20
ENTRY_OVERHEAD = 200  # a key tuple, a dict slot and a bytes object's header, roughly

_owners = itertools.count()


def new_owner() -> int:
    """A token naming one log's entries (a number is never reused, unlike an object's id)."""
    return next(_owners)


class PendingValueCache:
    def __init__(self, budget_bytes: int = DEFAULT_BUDGET_BYTES) -> None:
        self.budget_bytes = budget_bytes
        self._entries: OrderedDict[tuple[int, int], bytes] = OrderedDict()
        self._bytes = 0

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def size_bytes(self) -> int:
        return self._bytes

    def take(self, owner: int, offset: int) -> bytes | None:
        """The value of pending record `offset` of `owner`'s log, removed; None if not kept."""
        value = self._entries.pop((owner, offset), None)
        if value is not None:
            self._bytes -= len(value) + ENTRY_OVERHEAD
        return value

    def put_all(self, owner: int, values: Iterable[tuple[int, bytes]]) -> None:
        """Keep these (offset, value) pairs, evicting the oldest entries beyond the budget."""
        for offset, value in values:
            key = (owner, offset)
            old = self._entries.pop(key, None)
            if old is not None:
                self._bytes -= len(old) + ENTRY_OVERHEAD
            self._entries[key] = value
            self._bytes += len(value) + ENTRY_OVERHEAD
        while self._bytes > self.budget_bytes and self._entries:
            _, evicted = self._entries.popitem(last=False)
            self._bytes -= len(evicted) + ENTRY_OVERHEAD

    def drop(self, owner: int, from_offset: int = 0) -> None:
        """Forget `owner`'s entries at or above `from_offset` (a truncation; 0: the log is gone).
        A scan of the whole cache: truncations and closes are rare."""
        for key in [k for k in self._entries if k[0] == owner and k[1] >= from_offset]:
            self._bytes -= len(self._entries.pop(key)) + ENTRY_OVERHEAD


SHARED = PendingValueCache()
