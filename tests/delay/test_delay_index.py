"""The delay index: fed from log batches, due records, deliveries, transactions, truncation."""

from __future__ import annotations

import random
import tracemalloc

import pytest

from kbroker.delay.delay_index import DelayIndex, EntryState, TruncatedBelowHighWatermark
from kbroker.delay.delay_snapshot import decode_snapshot, encode_snapshot
from protocol.record_batch import ZSTD, Record, encode_batch
from protocol.records import read_header
from tests.delay.delay_log import PARTITION, TOPIC, MemoryLog, view

T = 1_700_000_000_000


def new_index(start: int = T) -> DelayIndex:
    return DelayIndex(TOPIC, PARTITION, clock=lambda: start, tick_ms=100, wheel_size=16)


def attached() -> tuple[MemoryLog, DelayIndex]:
    log = MemoryLog()
    index = new_index()
    log.followers.append(index)
    return log, index


def test_due_records_come_out_in_due_order_ties_in_produce_order() -> None:
    log, index = attached()
    log.plain(3)
    first = log.pending([T + 500, T + 100, T + 500])
    second = log.pending([T + 100, T + 50])
    assert index.pending_count == 5
    assert index.collect_due(T + 49) == []
    assert index.collect_due(T + 100) == [second[1], first[1], second[0]]
    assert index.collect_due(T + 1000) == [first[0], first[2]]
    assert index.state_of(first[0]) == EntryState.IN_FLIGHT


def test_a_delivery_in_the_log_ends_a_pending_record() -> None:
    log, index = attached()
    offsets = log.pending([T + 10, T + 20])
    sizes = index.pending_bytes
    assert sizes > 0
    due = index.collect_due(T + 10)
    assert due == [offsets[0]]
    log.deliver(due)
    assert index.state_of(offsets[0]) == EntryState.DELIVERED
    assert index.pending_count == 1 and 0 < index.pending_bytes < sizes
    assert not index.is_pending(offsets[0]) and index.is_pending(offsets[1])
    # A follower never asked for due records: the delivery takes the record out of its wheel too.
    assert index.collect_due(T + 10_000) == [offsets[1]]


def test_deliveries_naming_another_partition_or_written_by_a_producer_are_ignored() -> None:
    log, index = attached()
    (offset,) = log.pending([T + 10])
    log.deliver([offset], topic=TOPIC, partition=PARTITION + 1)
    log.deliver([offset], topic="other", partition=PARTITION)
    pending = log.record_at(offset)
    headers = [("kbroker.delayed.from", f"{TOPIC}-{PARTITION}@{offset}".encode())]
    log.append(encode_batch([Record(0, 0, pending.key, pending.value, headers)], compression=ZSTD))
    log.append(encode_batch([Record(0, 0, pending.key, pending.value, headers)], producer_id=9, producer_epoch=0,
                            base_sequence=0))
    assert index.is_pending(offset)
    log.deliver([offset])
    assert not index.is_pending(offset)


def test_a_partition_without_pending_records_does_not_look_for_deliveries() -> None:
    log, index = attached()
    log.append(encode_batch([Record(0, 0, None, b"v", [("kbroker.delayed.from", b"jobs-0@0")])]))
    assert len(index.state().offsets) == 0
    (offset,) = log.pending([T + 1])
    assert index.is_pending(offset)  # the earlier "delivery" named an offset before it


def test_an_open_transaction_waits_for_its_commit() -> None:
    log, index = attached()
    held = log.pending([T + 10, T + 20], producer_id=7, transactional=True)
    plain = log.pending([T + 30])
    assert index.state_of(held[0]) == EntryState.HELD
    assert index.collect_due(T + 100) == [plain[0]]
    assert index.pending_count == 3
    log.marker(7, commit=True)
    assert index.collect_due(T + 100) == held


def test_an_aborted_transaction_is_dropped() -> None:
    log, index = attached()
    held = log.pending([T + 10], producer_id=7, transactional=True)
    bytes_before = index.pending_bytes
    log.marker(7, commit=False)
    assert index.state_of(held[0]) == EntryState.ABORTED
    assert index.pending_count == 0 and index.pending_bytes == 0 < bytes_before
    assert index.collect_due(T + 100) == []


def test_the_aborted_hook_drops_the_records_within_the_transaction() -> None:
    log, index = attached()
    first = log.pending([T + 10], producer_id=7, transactional=True)
    index.aborted(7, first[0], first[0] + 1)
    assert index.state_of(first[0]) == EntryState.ABORTED
    log.marker(7, commit=False)  # the marker itself, seen afterwards, changes nothing
    assert index.pending_count == 0


def test_truncation_drops_records_and_undoes_deliveries() -> None:
    log, index = attached()
    kept = log.pending([T + 10, T + 20, T + 25])
    assert index.collect_due(T + 25) == kept
    log.deliver([kept[1]])
    cut = log.deliver([kept[0]])
    dropped = log.pending([T + 30])
    log.truncate(cut)
    assert index.state_of(dropped[0]) is None
    assert index.end_offset == cut
    # kept[0]'s delivery was truncated: it is due again; kept[1] stays delivered, kept[2] in flight.
    assert index.state_of(kept[0]) == EntryState.SCHEDULED
    assert index.state_of(kept[1]) == EntryState.DELIVERED
    assert index.state_of(kept[2]) == EntryState.IN_FLIGHT
    assert index.pending_count == 2
    assert index.collect_due(T + 40) == [kept[0]]
    # The new leader writes other batches at the truncated offsets.
    again = log.pending([T + 15])
    assert again[0] == cut
    assert index.collect_due(T + 40) == [cut]


def test_truncating_a_commit_marker_holds_its_records_again() -> None:
    log, index = attached()
    held = log.pending([T + 10], producer_id=7, transactional=True)
    marker = log.marker(7, commit=True)
    log.truncate(marker)
    assert index.state_of(held[0]) == EntryState.HELD
    assert index.collect_due(T + 100) == []
    log.marker(7, commit=False)
    assert index.pending_count == 0


def test_truncating_an_abort_marker_holds_its_records_again() -> None:
    log, index = attached()
    held = log.pending([T + 10], producer_id=7, transactional=True)
    marker = log.marker(7, commit=False)
    log.truncate(marker)
    assert index.state_of(held[0]) == EntryState.HELD and index.pending_count == 1
    log.marker(7, commit=True)
    assert index.collect_due(T + 100) == held


def test_truncation_below_the_high_watermark_asks_for_a_rebuild() -> None:
    log, index = attached()
    log.pending([T + 10])
    log.plain()
    index.on_high_watermark(2)
    with pytest.raises(TruncatedBelowHighWatermark):
        index.truncate(1)
    index.truncate(2)  # at the high watermark: fine


def test_stale_wheel_entries_do_not_count_against_the_limit() -> None:
    log, index = attached()
    delivered = log.pending([T + 1] * 5)
    log.deliver(delivered)  # a follower: the five stay in its wheel, stale
    waiting = log.pending([T + 2] * 3)
    assert index.collect_due(T + 10, limit=2) == waiting[:2]
    assert index.collect_due(T + 10, limit=2) == waiting[2:]
    assert index.collect_due(T + 10, limit=2) == []


def test_release_in_flight_reschedules() -> None:
    log, index = attached()
    offsets = log.pending([T + 10, T + 20])
    assert index.collect_due(T + 100) == offsets
    index.release_in_flight([offsets[1]])
    assert index.collect_due(T + 100) == [offsets[1]]
    index.release_in_flight()
    assert index.collect_due(T + 100) == offsets


def test_the_high_watermark_lets_delivered_entries_go() -> None:
    log, index = attached()
    offsets = log.pending([T + i for i in range(5000)])
    due = index.collect_due(T + 10_000)
    for start in range(0, len(due), 500):
        log.deliver(due[start : start + 500])
    assert len(index.state().offsets) == 5000  # deliveries above the high watermark may be truncated
    index.on_high_watermark(log.end_offset)
    assert len(index.state().offsets) == 0 and len(index.state().deliveries_at) == 0
    assert index.state_of(offsets[0]) is None
    log.truncate(log.end_offset)  # nothing to undo
    assert index.pending_count == 0


def test_an_overlapping_batch_is_refused_an_applied_one_skipped() -> None:
    log, index = attached()
    log.pending([T + 1, T + 2])
    base, batch = log.batches[0]
    index.on_batch(base, batch)  # applied already: skipped
    assert index.pending_count == 2
    log.plain()
    fresh = new_index()
    fresh.on_batch(0, log.batches[0][1])
    with pytest.raises(ValueError, match="overlaps"):
        fresh.on_batch(1, log.batches[0][1])  # two records at 1..2: 1 was applied


def test_a_forward_batch_ends_its_records_and_stays_unconfirmed_until_a_done_marker() -> None:
    log, index = attached()
    first = log.pending([T + 10, T + 20, T + 30])
    due = index.collect_due(T + 20)
    assert due == first[:2]
    forward_at = log.forward(due)
    assert [index.state_of(o) for o in first] == [EntryState.DELIVERED, EntryState.DELIVERED, EntryState.SCHEDULED]
    assert index.pending_count == 1
    assert index.unconfirmed_forward_batch() == forward_at
    # Retention keeps the forwarded records while their batch may have to be appended again.
    assert index.lowest_pending_offset() == first[0]
    log.forward_done(forward_at - 1)  # naming another batch: confirms nothing
    assert index.unconfirmed_forward_batch() == forward_at
    done_at = log.forward_done(forward_at)
    assert index.unconfirmed_forward_batch() is None
    assert index.lowest_pending_offset() == first[2]
    # Truncating the done marker makes the batch unconfirmed again; truncating the batch, its records pending.
    log.truncate(done_at)
    assert index.unconfirmed_forward_batch() == forward_at
    log.truncate(forward_at)
    assert index.unconfirmed_forward_batch() is None
    assert index.pending_count == 3 and index.collect_due(T + 30) == first


def test_the_unconfirmed_forward_batch_survives_the_high_watermark_passing_it() -> None:
    log, index = attached()
    first = log.pending([T + 10])
    forward_at = log.forward(index.collect_due(T + 10))
    later = log.pending([T + 50])
    index.on_high_watermark(log.end_offset)
    assert index.unconfirmed_forward_batch() == forward_at
    assert index.lowest_pending_offset() == first[0]
    second = log.forward(index.collect_due(T + 50))
    assert index.unconfirmed_forward_batch() == second
    assert index.lowest_pending_offset() == later[0]
    index.on_high_watermark(log.end_offset)
    done_at = log.forward_done(second)
    log.truncate(done_at)  # above the high watermark: allowed, and undone
    assert index.unconfirmed_forward_batch() == second
    log.forward_done(second)
    index.on_high_watermark(log.end_offset)
    assert index.unconfirmed_forward_batch() is None and index.lowest_pending_offset() is None
    restored = DelayIndex(TOPIC, PARTITION, clock=lambda: T, state=decode_snapshot(encode_snapshot(index.state())))
    assert restored.unconfirmed_forward_batch() is None
def test_earliest_due_is_exact_where_the_wheel_only_bounds_it() -> None:
    log, index = attached()
    assert index.earliest_due() is None
    far = T + 12_345  # beyond level 0 (16 ticks of 100 ms): the wheel knows its bucket's start only
    log.pending([far])
    assert index.earliest_due() == far
    assert index.next_due() is not None and index.next_due() < far
    log.pending([far + 1, far - 7])
    assert index.earliest_due() == far - 7


def test_earliest_due_skips_held_delivered_and_in_flight_records() -> None:
    log, index = attached()
    held = log.pending([T + 5], producer_id=7, transactional=True)
    scheduled = log.pending([T + 40, T + 900])
    assert index.earliest_due() == T + 40  # the held record has no due time until its commit
    log.deliver([scheduled[0]])  # as on a follower: the wheel keeps a stale entry at T + 40
    assert index.next_due() is not None and index.next_due() <= T + 40
    assert index.earliest_due() == T + 900
    log.marker(7, commit=True)
    assert index.earliest_due() == T + 5
    assert index.collect_due(T + 5) == held  # in flight now: being delivered, not waiting
    assert index.earliest_due() == T + 900
    index.release_in_flight()
    assert index.earliest_due() == T + 5


@pytest.mark.parametrize("seed", range(6))
def test_earliest_due_is_the_smallest_due_time_of_the_scheduled_records(seed: int) -> None:
    _, index = build_random_log(seed)
    scheduled = [index.due_time(o) for o in index.pending_offsets() if index.state_of(o) == EntryState.SCHEDULED]
    assert index.earliest_due() == min(scheduled, default=None)


def build_random_log(seed: int) -> tuple[MemoryLog, DelayIndex]:
    """A log made by a leader whose index delivers, with transactions and truncations: the
    index that watched it all must equal one rebuilt from the final log."""
    rng = random.Random(seed)
    log, leader = attached()
    now = T
    open_txns: set[int] = set()
    high_watermark = 0
    for _ in range(300):
        op = rng.random()
        if op < 0.35:
            producer = rng.choice([-1, 1, 2, 3])
            txn = producer > 0 and rng.random() < 0.7
            if txn:
                open_txns.add(producer)
            log.pending([now + rng.randrange(-50, 5000) for _ in range(rng.randint(1, 4))],
                        producer_id=producer, transactional=txn)
        elif op < 0.45 and open_txns:
            producer = rng.choice(sorted(open_txns))
            open_txns.discard(producer)
            log.marker(producer, commit=rng.random() < 0.6)
        elif op < 0.75:
            now += rng.randrange(1000)
            due = leader.collect_due(now, limit=rng.choice([None, 3]))
            if due and rng.random() < 0.3:  # a retry topic forwards instead of delivering
                log.forward(due, sequence=rng.randrange(100))
            elif due:
                log.deliver(due)
        elif op < 0.77 and (unconfirmed := leader.unconfirmed_forward_batch()) is not None:
            log.forward_done(unconfirmed)
        elif op < 0.8:
            log.plain()
        elif op < 0.9 and (bases := [b for b, _ in log.batches[-6:] if b >= high_watermark]):
            log.truncate(rng.choice(bases))  # a truncation removes whole batches
            leader.release_in_flight()
            open_txns = {1, 2, 3}  # after truncation, any producer may have an open transaction
        else:
            high_watermark = max(high_watermark, log.end_offset - rng.randrange(10))
            leader.on_high_watermark(high_watermark)
    return log, leader


@pytest.mark.parametrize("seed", range(12))
def test_the_index_is_a_function_of_the_log(seed: int) -> None:
    log, leader = build_random_log(seed)
    rebuilt = log.replay(new_index())
    assert view(leader) == view(rebuilt)
    assert leader.unconfirmed_forward_batch() == rebuilt.unconfirmed_forward_batch()
    assert leader.lowest_pending_offset() == rebuilt.lowest_pending_offset()
    assert (leader.pending_count, leader.pending_bytes) == (rebuilt.pending_count, rebuilt.pending_bytes)
    far = T + 10**9
    assert leader.collect_due(far) == rebuilt.collect_due(far)


@pytest.mark.parametrize("seed", range(6))
def test_a_snapshot_and_the_log_after_it_rebuild_the_index(seed: int) -> None:
    log, leader = build_random_log(seed)
    cut = len(log.batches) // 2
    partial = new_index()
    for base, batch in log.batches[:cut]:
        partial.on_batch(base, batch)
    restored = DelayIndex(TOPIC, PARTITION, clock=lambda: T, tick_ms=100, wheel_size=16,
                          state=decode_snapshot(encode_snapshot(partial.state())))
    for base, batch in log.batches[max(0, cut - 2):]:  # starting a little early is fine
        restored.on_batch(base, batch)
    assert view(restored) == view(leader)
    assert restored.unconfirmed_forward_batch() == leader.unconfirmed_forward_batch()
    assert restored.lowest_pending_offset() == leader.lowest_pending_offset()
    assert restored.pending_count == leader.pending_count
    assert restored.collect_due(T + 10**9) == leader.collect_due(T + 10**9)


def test_an_unmarked_batch_naming_a_pending_record_is_not_its_delivery() -> None:
    log, index = attached()
    (offset,) = log.pending([T + 10])
    pending = log.record_at(offset)
    headers = [("kbroker.delayed.from", f"{TOPIC}-{PARTITION}@{offset}".encode())]
    # The shape of a delivery in every way but the broker's mark.
    log.append(encode_batch([Record(0, 0, pending.key, pending.value, headers)]))
    assert index.is_pending(offset)
    assert not index.needs_batch(read_header(encode_batch([Record(0, 0, None, b"v", headers)])))
    log.deliver([offset])
    assert not index.is_pending(offset)


def test_an_idle_partitions_index_costs_little_memory() -> None:
    """Every partition has a delay index and nearly all stay empty: an empty one must not cost
    the wheel's 256 buckets (some 24 KiB a partition when each was an array of its own)."""
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        indexes = [DelayIndex(TOPIC, number, clock=lambda: T) for number in range(200)]
        per_index = (tracemalloc.get_traced_memory()[0] - before) / len(indexes)
    finally:
        tracemalloc.stop()
    assert per_index < 4096, f"an empty delay index takes {per_index:.0f} bytes"
