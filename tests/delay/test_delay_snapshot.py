"""Delay index snapshots: files, damage, choosing the snapshot to load, memory per entry."""

from __future__ import annotations

import struct
import tracemalloc
from array import array
from pathlib import Path

import crc32c
import pytest

from kbroker.delay.delay_index import DelayIndex, EntryState, IndexState
from kbroker.delay.delay_snapshot import (
    CorruptSnapshotError,
    decode_snapshot,
    delete_snapshots_above,
    encode_snapshot,
    latest_snapshot,
    load_index,
    read_snapshot,
    snapshot_offsets,
    snapshot_path,
    write_snapshot,
)
from tests.delay.delay_log import PARTITION, TOPIC, MemoryLog, view

T = 1_700_000_000_000


def busy_log() -> tuple[MemoryLog, DelayIndex]:
    log = MemoryLog()
    index = DelayIndex(TOPIC, PARTITION, clock=lambda: T)
    log.followers.append(index)
    log.pending([T + 10, T + 20, T + 30])
    log.pending([T + 5], producer_id=4, transactional=True)
    log.pending([T + 6], producer_id=5, transactional=True)
    log.marker(5, commit=False)
    log.deliver(index.collect_due(T + 10))
    return log, index


def test_a_snapshot_round_trips_every_part_of_the_state(tmp_path: Path) -> None:
    log, index = busy_log()
    path = write_snapshot(tmp_path, index.state())
    assert path == snapshot_path(tmp_path, log.end_offset) and path.name == f"{log.end_offset:020d}.delayed"
    state = read_snapshot(path)
    original = index.state()
    assert (state.end_offset, state.floor) == (original.end_offset, original.floor)
    assert (state.offsets, state.dues, state.sizes, state.states) == (original.offsets, original.dues,
                                                                      original.sizes, original.states)
    assert (state.deliveries_at, state.delivered) == (original.deliveries_at, original.delivered)
    assert state.open_txns == original.open_txns and state.resolutions == original.resolutions
    restored = DelayIndex(TOPIC, PARTITION, clock=lambda: T, state=state)
    assert view(restored) == view(index)
    assert (restored.pending_count, restored.pending_bytes) == (index.pending_count, index.pending_bytes)


def test_in_flight_records_are_scheduled_again_after_a_restart() -> None:
    log = MemoryLog()
    index = log.replay(DelayIndex(TOPIC, PARTITION, clock=lambda: T))
    log.followers.append(index)
    offsets = log.pending([T + 1, T + 2])
    assert index.collect_due(T + 5) == offsets
    restored = DelayIndex(TOPIC, PARTITION, clock=lambda: T, state=decode_snapshot(encode_snapshot(index.state())))
    assert restored.state_of(offsets[0]) == EntryState.SCHEDULED
    assert restored.collect_due(T + 5) == offsets


def test_gone_entries_are_left_out_of_a_snapshot() -> None:
    state = IndexState(10, 10, array("q", [1, 2]), array("q", [T, T]), array("i", [5, 6]),
                       bytearray([EntryState.GONE, EntryState.SCHEDULED]))
    decoded = decode_snapshot(encode_snapshot(state))
    assert list(decoded.offsets) == [2] and list(decoded.sizes) == [6]


def test_damaged_snapshots_are_refused() -> None:
    _, index = busy_log()
    data = encode_snapshot(index.state())
    for damaged in (data[:-1], data[:10], b"", bytes([data[0] ^ 1]) + data[1:],
                    data[:40] + bytes([data[40] ^ 0x10]) + data[41:]):
        with pytest.raises(CorruptSnapshotError):
            decode_snapshot(damaged)


def test_load_index_takes_the_newest_readable_snapshot_at_or_below_the_log_end(tmp_path: Path) -> None:
    log, index = busy_log()
    older = DelayIndex(TOPIC, PARTITION, clock=lambda: T)
    older.on_batch(*log.batches[0])
    write_snapshot(tmp_path, older.state(), durable=False)
    write_snapshot(tmp_path, index.state(), durable=False)
    (tmp_path / "junk.delayed").write_bytes(b"x")
    assert snapshot_offsets(tmp_path) == [3, log.end_offset]
    assert latest_snapshot(tmp_path, log.end_offset - 1) == snapshot_path(tmp_path, 3)

    loaded = load_index(tmp_path, TOPIC, PARTITION, log_end_offset=log.end_offset, clock=lambda: T)
    assert loaded.end_offset == log.end_offset and view(loaded) == view(index)

    # A damaged newest snapshot is deleted; the older one is used and the log after it rescanned.
    snapshot_path(tmp_path, log.end_offset).write_bytes(b"broken")
    loaded = load_index(tmp_path, TOPIC, PARTITION, log_end_offset=log.end_offset, clock=lambda: T)
    assert loaded.end_offset == 3
    assert not snapshot_path(tmp_path, log.end_offset).exists()
    for base, batch in log.batches:
        loaded.on_batch(base, batch)
    assert view(loaded) == view(index)


def test_a_truncation_deletes_the_snapshots_past_it(tmp_path: Path) -> None:
    for end in (5, 10, 15):
        write_snapshot(tmp_path, IndexState(end_offset=end), durable=False)
    delete_snapshots_above(tmp_path, 10)
    assert snapshot_offsets(tmp_path) == [5, 10]
    assert load_index(tmp_path, TOPIC, PARTITION, log_end_offset=0, clock=lambda: T).end_offset == 0


def test_pending_records_cost_at_most_100_bytes_each() -> None:
    """The memory budget of the index and its wheel: 100 bytes a pending record.

    A fifth of the million of the budget keeps the test short under tracemalloc; the cost per
    record does not depend on the count (columns and wheel buckets are arrays).
    scripts/bench_delay_index.py builds the full million from pending batches and reports it
    (38 bytes a record). Entries are loaded as a snapshot gives them; tracemalloc counts the
    columns, the wheel's buckets and its heap.
    """
    count = 200_000
    state = IndexState(end_offset=count, offsets=array("q", range(count)),
                       dues=array("q", (T + (i * 7919) % (40 * 86_400_000) for i in range(count))),
                       sizes=array("i", [100]) * count, states=bytearray([EntryState.SCHEDULED]) * count)
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        state = decode_snapshot(encode_snapshot(state))
        index = DelayIndex(TOPIC, PARTITION, clock=lambda: T, state=state)
        used = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert index.pending_count == count
    assert used / count <= 100, f"{used / count:.1f} bytes per pending record"


def test_a_version_1_snapshot_is_read_as_having_no_forward_batches() -> None:
    """Written before retry topics: the same layout without the forward batches at its end."""
    _, index = busy_log()
    data = encode_snapshot(index.state())
    body = bytearray(data[:-4])
    tail = 8 + 8 + 4  # unconfirmed forward, its low offset, no forward events
    del body[-tail:]
    struct.pack_into("<h", body, 4, 1)
    old = bytes(body) + struct.pack("<I", crc32c.crc32c(bytes(body)))
    state = decode_snapshot(old)
    assert state.unconfirmed_forward == -1 and len(state.forward_events_at) == 0
    restored = DelayIndex(TOPIC, PARTITION, clock=lambda: T, state=state)
    assert view(restored) == view(index) and restored.unconfirmed_forward_batch() is None
