"""Log compaction for `cleanup.policy=compact`, after Kafka's LogCleaner.

One pass over a log:
1. The cleanable range ends at the first uncleanable offset: the active segment, the high
   watermark, the first open transaction, and segments younger than `min.compaction.lag.ms`
   are left alone.
2. It runs when the dirty part (from the cleaner checkpoint on) is at least
   `min.cleanable.dirty.ratio` of the cleanable bytes, when `max.compaction.lag.ms` has passed
   for dirty data, or when retained tombstones reached their delete horizon.
3. A map key -> latest offset is built from the dirty segments.
4. Each group of consecutive cleanable segments (up to `segment.bytes`) is rewritten keeping a
   record only if no later offset has its key; tombstones go once their batch's delete horizon
   (KIP-534: stamped as the batch's base timestamp `delete.retention.ms` after the first
   cleaning that saw them) has passed. Records of aborted transactions go (they neither count
   as the latest value of a key nor survive). Offsets, timestamps, producer fields and
   compression are preserved; control batches are copied as they are.
5. The result is written to `<base>.log.cleaned`, fsynced, renamed `.swap`, then swapped in for
   the old segments (renamed `.deleted`), so a crash at any step recovers on open.

Records are decoded with `kbroker.storage.batch_records` (the storage layer's own minimal
record reader/writer). The key map is an in-memory dict, unlike Kafka's bounded dedupe buffer.
Encrypted batches are decrypted to be read and the survivors written sealed with the log's
current key (the cleaned segment holds one key, as every segment does).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from kbroker.delay.delay_headers import DELAYED_FROM_HEADER
from kbroker.delay.pending_batches import is_delivery_batch, parse_delayed_from
from kbroker.storage.batch_records import Record, rebuild_batch, records_of
from kbroker.storage.index import segment_file_name
from kbroker.storage.log import Log
from kbroker.storage.log_config import LONG_MAX
from kbroker.storage.log_loader import CLEANED_SUFFIX, SWAP_SUFFIX
from kbroker.storage.segment import LogSegment
from kbroker.storage.txn_index import AbortedTxn
from protocol.records import DELETE_HORIZON_BIT, BatchHeader

log = logging.getLogger("kbroker.storage")


@dataclass(frozen=True, slots=True)
class CleanablePart:
    segments: tuple[LogSegment, ...]  # everything the pass may rewrite
    dirty: tuple[LogSegment, ...]  # those at or after the cleaner checkpoint
    end_offset: int  # the first uncleanable offset

    @property
    def dirty_ratio(self) -> float:
        total = sum(s.size for s in self.segments)
        return sum(s.size for s in self.dirty) / total if total else 0.0


def compact(log_: Log, now_ms: int) -> bool:
    """One cleaning pass if the log is due for one; True if it ran."""
    if not log_.config.compact or log_.cleaning_paused:
        return False
    part = cleanable_part(log_, now_ms)
    if part is None or not _is_due(log_, part, now_ms):
        return False
    aborted = AbortedRanges(log_.aborted_transactions(part.segments[0].base_offset, part.end_offset))
    offset_map = build_offset_map(part.dirty, aborted)
    earliest_horizon = LONG_MAX
    for group in group_segments(part.segments, log_.config.segment_bytes):
        swap, horizon = write_cleaned_segment(log_, group, offset_map, now_ms, aborted)
        log_.replace_segments(group, swap, now_ms)
        earliest_horizon = min(earliest_horizon, horizon)
    log_.cleaner_checkpoint = max(log_.cleaner_checkpoint, part.end_offset)
    log_.earliest_delete_horizon = earliest_horizon
    log.info("%s: compacted offsets below %d (%d keys in the dirty part)", log_.name, part.end_offset, len(offset_map))
    return True


def cleanable_part(log_: Log, now_ms: int) -> CleanablePart | None:
    segments = log_.segments
    limit = min(log_.active_segment.base_offset, log_.last_stable_offset)
    lag = log_.config.min_compaction_lag_ms
    cleanable: list[LogSegment] = []
    for slot, segment in enumerate(segments[:-1]):
        upper = segments[slot + 1].base_offset
        if upper > limit or (lag > 0 and segment.largest_timestamp > now_ms - lag):
            break
        if segment.damage:  # compacting would quietly drop the damaged bytes and their evidence
            break
        cleanable.append(segment)
    if not cleanable:
        return None
    first_dirty = max(log_.cleaner_checkpoint, log_.log_start_offset)
    uppers = [s.base_offset for s in segments[1 : len(cleanable) + 1]]
    dirty = tuple(s for s, upper in zip(cleanable, uppers, strict=True) if upper > first_dirty)
    return CleanablePart(tuple(cleanable), dirty, uppers[-1])


def _is_due(log_: Log, part: CleanablePart, now_ms: int) -> bool:
    config = log_.config
    if now_ms >= log_.earliest_delete_horizon:
        return True
    if not part.dirty:
        return False
    if part.dirty_ratio >= config.min_cleanable_dirty_ratio:
        return True
    first = part.dirty[0].first_batch_timestamp()
    return config.max_compaction_lag_ms < LONG_MAX and 0 <= first < now_ms - config.max_compaction_lag_ms


class AbortedRanges:
    """Which transactional batches were aborted: by producer id, the offset ranges of its aborted transactions."""

    def __init__(self, txns: Sequence[AbortedTxn]) -> None:
        self._ranges: dict[int, list[tuple[int, int]]] = {}
        for txn in txns:
            self._ranges.setdefault(txn.producer_id, []).append((txn.first_offset, txn.last_offset))

    def __contains__(self, header: BatchHeader) -> bool:
        if not header.is_transactional or header.is_control:
            return False
        ranges = self._ranges.get(header.producer_id, ())
        return any(first <= header.base_offset <= last for first, last in ranges)


NO_ABORTED = AbortedRanges(())


def build_offset_map(segments: Sequence[LogSegment], aborted: AbortedRanges = NO_ABORTED) -> dict[bytes, int]:
    """key -> the latest offset holding it, over `segments` (control batches carry no keys)."""
    latest: dict[bytes, int] = {}
    for segment in segments:
        for position, header in segment.batches():
            if header.is_control or header in aborted:
                continue
            for record in records_of(*segment.read_batch(position, header)):
                if record.key is not None:
                    latest[record.key] = header.base_offset + record.offset_delta
    return latest


def group_segments(segments: Sequence[LogSegment], max_bytes: int) -> list[list[LogSegment]]:
    """Consecutive segments merged into one cleaned segment: within max_bytes and int32 offsets."""
    groups: list[list[LogSegment]] = []
    current: list[LogSegment] = []
    size = 0
    for segment in segments:
        fits = size + segment.size <= max_bytes and (not current or current[0].can_hold_offset(segment.next_offset - 1))
        if current and not fits:
            groups.append(current)
            current, size = [], 0
        current.append(segment)
        size += segment.size
    if current:
        groups.append(current)
    return groups


def write_cleaned_segment(
    log_: Log, group: Sequence[LogSegment], offset_map: dict[bytes, int], now_ms: int,
    aborted: AbortedRanges = NO_ABORTED,
) -> tuple[Path, int]:
    """Write the survivors of `group` to `<base>.log.cleaned`, fsync, rename to `.swap`.

    Returns the swap path and the earliest delete horizon of the tombstones kept.
    """
    base = group[0].base_offset
    cleaned = log_.directory / segment_file_name(base, ".log" + CLEANED_SUFFIX)
    earliest_horizon = LONG_MAX
    retention = log_.config.delete_retention_ms
    guard = DeliveryGuard(log_.name, log_.log_start_offset)
    with open(cleaned, "wb") as out:
        for segment in group:
            for position, header in segment.batches():
                if header in aborted:
                    continue
                batch, plain = segment.read_batch(position, header)
                kept, horizon = filter_batch(batch, plain, offset_map, now_ms, retention, guard)
                if kept is not None:
                    out.write(log_.seal(kept))
                    earliest_horizon = min(earliest_horizon, horizon)
        out.flush()
        os.fsync(out.fileno())
    swap = cleaned.with_name(segment_file_name(base, ".log" + SWAP_SUFFIX))
    os.replace(cleaned, swap)
    return swap, earliest_horizon


class DeliveryGuard:
    """Delayed delivery's rule for the cleaner: a delivery stays while its pending record is in
    the log. The log is the only record of what was delivered (docs/delayed-and-retry.md): were
    a delivery compacted away, a reload would find its pending record undelivered and deliver
    it again. Pending records are control batches, which compaction keeps, so on a compacted
    topic a delivery goes only once retention or DeleteRecords has taken its pending record."""

    def __init__(self, partition: str, log_start_offset: int) -> None:
        self._source = partition
        self._log_start_offset = log_start_offset

    def may_hold_deliveries(self, batch: bytes, header: BatchHeader) -> bool:
        return is_delivery_batch(header)

    def keeps(self, record: Record) -> bool:
        for name, value in record.headers:
            if name == DELAYED_FROM_HEADER and (parsed := parse_delayed_from(value)) is not None \
                    and parsed[0] == self._source and parsed[1] >= self._log_start_offset:
                return True
        return False


def filter_batch(
    batch: bytes, header: BatchHeader, offset_map: dict[bytes, int], now_ms: int, delete_retention_ms: int,
    guard: DeliveryGuard | None = None,
) -> tuple[bytes | None, int]:
    """The batch with superseded records (and expired tombstones) removed, or None if none is left.

    Also returns the delete horizon of tombstones it still holds (LONG_MAX if none).
    """
    if header.is_control:
        return batch, LONG_MAX
    records = records_of(batch, header)
    horizon = header.base_timestamp if header.attributes & DELETE_HORIZON_BIT else None
    if guard is not None and guard.may_hold_deliveries(batch, header):
        kept = [r for r in records if guard.keeps(r) or _survives(r, header, offset_map, horizon, now_ms)]
    else:
        kept = [r for r in records if _survives(r, header, offset_map, horizon, now_ms)]
    if not kept:
        return None, LONG_MAX
    has_tombstones = any(r.value is None for r in kept)
    if horizon is None and has_tombstones:
        horizon = now_ms + delete_retention_ms
        attributes = header.attributes | DELETE_HORIZON_BIT
        return rebuild_batch(header, kept, base_timestamp=horizon, attributes=attributes), horizon
    kept_horizon = horizon if horizon is not None and has_tombstones else LONG_MAX
    if len(kept) == len(records):
        return batch, kept_horizon
    return rebuild_batch(header, kept, base_timestamp=header.base_timestamp, attributes=header.attributes), kept_horizon


def _survives(
    record: Record, header: BatchHeader, offset_map: dict[bytes, int], horizon: int | None, now_ms: int
) -> bool:
    if record.key is None:  # not allowed in compacted topics; Kafka's cleaner drops them too
        return False
    latest = offset_map.get(record.key)
    if latest is not None and header.base_offset + record.offset_delta < latest:
        return False
    return record.value is not None or horizon is None or now_ms < horizon
