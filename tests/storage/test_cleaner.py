"""Compaction: latest value per key, tombstone horizons, preserved metadata, crash-safe swaps."""

from __future__ import annotations

import os

from kbroker.storage.cleaner import cleanable_part, compact, group_segments, write_cleaned_segment
from kbroker.storage.log import Log
from kbroker.storage.log_config import LogConfig
from protocol.records import read_header
from tests.storage.batches import GZIP, Rec, batch, header_fields, read_records
from tests.storage.conftest import T0, Clock, OpenLog, read_all

CONFIG = LogConfig(cleanup_policy=("compact",), segment_bytes=1200, min_cleanable_dirty_ratio=0.01,
                   delete_retention_ms=1000)


def produce(log: Log, records: list[Rec], per_batch: int = 5, **batch_args: object) -> None:
    for start in range(0, len(records), per_batch):
        args = dict(batch_args)
        if "base_sequence" in args:  # an idempotent producer's sequences run on from batch to batch
            args["base_sequence"] = int(args["base_sequence"]) + start  # type: ignore[call-overload]
        log.append_as_leader(batch(records[start : start + per_batch], **args), 0, T0)
    log.high_watermark = log.log_end_offset


def keyed(count: int, keys: int = 10) -> list[Rec]:
    return [Rec(f"k{i % keys}".encode(), f"v{i}".encode(), T0 + i) for i in range(count)]


def latest_per_key(records: list[Rec]) -> dict[bytes | None, tuple[int, bytes | None]]:
    return {r.key: (offset, r.value) for offset, r in enumerate(records)}


def check_compacted(log: Log, written: list[Rec]) -> None:
    """Below the active segment one record per key survives, the latest one there."""
    active_base = log.active_segment.base_offset
    seen = read_all(log)
    offsets = [r.offset for r in seen]
    assert offsets == sorted(set(offsets))
    cleaned = [r for r in seen if r.offset < active_base]
    expected = latest_per_key(written[:active_base])
    assert {r.key: (r.offset, r.value) for r in cleaned} == expected
    assert len(cleaned) == len(expected)
    for r in seen:  # every survivor is the record written at its offset
        assert (r.key, r.value, r.timestamp) == written[r.offset]
    assert [r.offset for r in seen if r.offset >= active_base] == list(range(active_base, len(written)))


def test_compaction_keeps_the_latest_value_per_key(open_log: OpenLog) -> None:
    log = open_log(CONFIG)
    written = keyed(300)
    produce(log, written)
    size_before = log.size_in_bytes
    assert compact(log, T0)
    check_compacted(log, written)
    assert log.size_in_bytes < size_before / 3
    assert not list(log.directory.glob("*.swap")) and not list(log.directory.glob("*.cleaned"))
    assert log.cleaner_checkpoint == log.active_segment.base_offset
    assert not compact(log, T0)  # nothing dirty any more


def test_small_cleaned_segments_are_merged(open_log: OpenLog) -> None:
    log = open_log(CONFIG)
    written = keyed(300)
    produce(log, written)
    compact(log, T0)  # groups are formed from sizes before cleaning, as Kafka does
    segments_before = len(log.segments)
    more = keyed(30)
    produce(log, more)
    written += more
    assert compact(log, T0)
    check_compacted(log, written)
    assert len(log.segments) < segments_before


def test_new_dirty_data_supersedes_cleaned_records(open_log: OpenLog) -> None:
    log = open_log(CONFIG)
    written = keyed(100)
    produce(log, written)
    compact(log, T0)
    more = [Rec(b"k3", f"new{i}".encode(), T0 + 1000 + i) for i in range(80)] + keyed(40, keys=40)
    produce(log, more)
    written += more
    assert compact(log, T0)
    check_compacted(log, written)


def test_dirty_ratio_threshold(open_log: OpenLog) -> None:
    log = open_log(LogConfig(cleanup_policy=("compact",), segment_bytes=1200, min_cleanable_dirty_ratio=0.9))
    produce(log, keyed(200))
    assert compact(log, T0)  # all dirty: ratio 1.0
    produce(log, keyed(60))
    part = cleanable_part(log, T0)
    assert part is not None and part.dirty_ratio < 0.9
    assert not compact(log, T0)


def test_tombstones_go_after_delete_retention(open_log: OpenLog, clock: Clock) -> None:
    log = open_log(CONFIG)
    written = keyed(50) + [Rec(b"k0", None, T0 + 50)] + keyed(60, keys=60)[10:]
    produce(log, written)
    assert compact(log, T0)
    tombstones = [r for r in read_all(log) if r.value is None]
    assert [(r.key, r.offset, r.timestamp) for r in tombstones] == [(b"k0", 50, T0 + 50)]
    horizon_batch = log.read(50, 1).read_bytes()
    assert header_fields(horizon_batch)["attributes"] & 0x40  # KIP-534 delete horizon set
    assert header_fields(horizon_batch)["base_timestamp"] == T0 + 1000
    assert not compact(log, T0 + 999)  # nothing dirty, horizon not reached
    assert compact(log, T0 + 1000)
    assert all(r.key != b"k0" for r in read_all(log))


def test_compressed_batches_stay_compressed_with_their_metadata(open_log: OpenLog) -> None:
    log = open_log(CONFIG)
    written = keyed(200)
    produce(log, written, per_batch=10, compression=GZIP, producer_id=77, producer_epoch=3, base_sequence=0)
    assert compact(log, T0)
    check_compacted(log, written)
    data = log.read(0, 1 << 20).read_bytes()
    header = read_header(data)
    assert header.compression == GZIP
    assert (header.producer_id, header.producer_epoch) == (77, 3)


def test_control_batches_are_kept(open_log: OpenLog) -> None:
    log = open_log(CONFIG)
    produce(log, keyed(20))
    control = batch([Rec(b"\x00\x00\x00\x00", b"\x00\x00\x00\x00\x00\x00", T0)], attributes=0x30,
                    base_offset=20, producer_id=5, producer_epoch=0)
    log.append_as_follower(control)  # markers are written by the broker, not by clients
    produce(log, keyed(60))
    compact(log, T0)
    assert any(r.offset == 20 for r in read_records(log.read(20, 1).read_bytes()))


def test_min_compaction_lag_protects_recent_segments(open_log: OpenLog) -> None:
    log = open_log(LogConfig(cleanup_policy=("compact",), segment_bytes=1200, min_cleanable_dirty_ratio=0.01,
                             min_compaction_lag_ms=10_000))
    produce(log, keyed(200))
    assert not compact(log, T0 + 5000)  # records are stamped T0.., younger than the lag
    assert compact(log, T0 + 20_000)


def test_segment_groups_respect_segment_bytes(open_log: OpenLog) -> None:
    log = open_log(CONFIG)
    produce(log, keyed(300))
    groups = group_segments(log.segments[:-1], 2500)
    assert all(sum(s.size for s in g) <= 2500 for g in groups)
    assert [s for g in groups for s in g] == list(log.segments[:-1])


def test_a_crash_after_the_swap_file_is_written_completes_on_open(open_log: OpenLog) -> None:
    log = open_log(CONFIG)
    written = keyed(300)
    produce(log, written)
    part = cleanable_part(log, T0)
    offset_map = {r.key: offset for offset, r in enumerate(written[: part.end_offset])}
    group = group_segments(part.segments, CONFIG.segment_bytes)[0]
    swap, _ = write_cleaned_segment(log, group, offset_map, T0)
    covered = [s.base_offset for s in group]
    log.release()  # crash before the swap
    os.replace(group[0].log_path, group[0].log_path.with_name(group[0].log_path.name + ".deleted"))  # half-renamed
    reopened = open_log(CONFIG)
    assert not list(reopened.directory.glob("*.swap"))
    bases = [s.base_offset for s in reopened.segments]
    assert covered[0] in bases and not set(covered[1:]) & set(bases)
    group_end = part.segments[len(group)].base_offset if len(group) < len(part.segments) else part.end_offset
    survivors = [r for r in read_all(reopened) if r.offset < group_end]
    assert {r.key for r in survivors} <= set(offset_map)
    assert all(offset_map[r.key] == r.offset for r in survivors)
    assert [r.offset for r in read_all(reopened) if r.offset >= group_end] == list(range(group_end, len(written)))


def test_an_unfinished_cleaned_file_is_discarded(open_log: OpenLog) -> None:
    log = open_log(CONFIG)
    written = keyed(100)
    produce(log, written)
    part = cleanable_part(log, T0)
    group = group_segments(part.segments, CONFIG.segment_bytes)[0]
    swap, _ = write_cleaned_segment(log, group, {}, T0)
    os.replace(swap, swap.with_name(swap.name.replace(".swap", ".cleaned")))  # crash before the rename
    log.release()
    reopened = open_log(CONFIG)
    assert [(r.key, r.value) for r in read_all(reopened)] == [(r.key, r.value) for r in written]
    assert not list(reopened.directory.glob("*.cleaned"))
