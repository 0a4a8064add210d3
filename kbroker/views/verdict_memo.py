"""What a view's filter decided about whole batches of its source, remembered.

A batch's records decide the same way every time they are read, so a batch a view keeps whole
or empties entirely need not be decompressed and decoded again: a later read (another group, a
consumer replaying, a batch job reading a range again) sends it whole, or as an empty batch,
from its header alone. Batches the view keeps in part are not remembered: they are rebuilt each
time.

A batch is known by its partition, base offset, length and CRC. The CRC covers everything that
decides (the records, their keys and headers), so a batch rewritten at the same offset (the
cleaner's compaction) is a different batch unless its CRC collides as well.

The memo is bounded: when it holds `max_entries` verdicts it starts over, and later reads
decode again and fill it.
"""

from __future__ import annotations

from kbroker.views.view import View
from protocol.records import BatchHeader

# About 90 bytes each: 262,144 verdicts are about 24 MB for every view together, and with
# batches of librdkafka's usual sizes stand for tens of millions of records.
MAX_ENTRIES = 1 << 18


class VerdictMemo:
    def __init__(self, max_entries: int = MAX_ENTRIES) -> None:
        self.max_entries = max_entries
        self._views: dict[View, dict[int, dict[int, int]]] = {}  # view -> partition -> batch -> verdict
        self._entries = 0
        self._generation = 0  # which start-over a PartitionVerdicts belongs to

    def of(self, view: View, partition: int) -> PartitionVerdicts:
        """The verdicts of `view` on one partition of its source."""
        partitions = self._views.get(view)
        if partitions is None:
            self.forget(view.name)  # those of its filter before a change
            partitions = self._views[view] = {}
        return PartitionVerdicts(self, partitions.setdefault(partition, {}), self._generation)

    def forget(self, view_name: str) -> None:
        """A deleted or changed view's verdicts go."""
        for view in [view for view in self._views if view.name == view_name]:
            self._entries -= sum(len(batches) for batches in self._views.pop(view).values())

    def __len__(self) -> int:
        return self._entries

    def _added(self) -> None:
        self._entries += 1
        if self._entries > self.max_entries:
            self._views.clear()
            self._entries = 0
            self._generation += 1


class PartitionVerdicts:
    """One view's verdicts on one source partition: for a batch it keeps whole, the offset delta
    of its last record; -1 for a batch it empties."""

    __slots__ = ("_memo", "_batches", "_generation")

    def __init__(self, memo: VerdictMemo, batches: dict[int, int], generation: int) -> None:
        self._memo = memo
        self._batches = batches
        self._generation = generation

    def get(self, header: BatchHeader) -> int | None:
        return self._batches.get(_key(header))

    def put(self, header: BatchHeader, last_kept_delta: int) -> None:
        key = _key(header)
        if self._generation == self._memo._generation and key not in self._batches:
            self._batches[key] = last_kept_delta
            self._memo._added()


def _key(header: BatchHeader) -> int:
    return (header.base_offset << 64) | (header.crc << 32) | header.batch_length
