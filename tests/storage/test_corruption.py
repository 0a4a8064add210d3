"""Corruption found anywhere but a torn tail costs only the damaged bytes.

Reproduction of the loss: a partition of several segments, a clean shutdown, then one flipped
byte in the length of a closed segment's last batch (where loading reads). On restart the broker
cut that segment at the batch and deleted every later segment, the active one included. Now the
damaged batch is kept, recorded in `<base>.damaged`, and refused to readers with CORRUPT_MESSAGE;
every other batch stays readable, across restarts.
"""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from kbroker.storage.log import Log
from kbroker.storage.log_config import LogConfig
from protocol.errors import ErrorCode, KafkaError
from tests.fsyncs import record_syncs
from tests.storage.batches import Rec, batch
from tests.storage.conftest import T0, OpenLog, read_all

CONFIG = LogConfig(segment_bytes=3000, index_interval_bytes=200)


def fill(log: Log, count: int) -> None:
    for i in range(count):
        records = [Rec(f"key-{j}".encode(), f"value-{i}-{j}".encode() * 4) for j in range(3)]
        log.append_as_leader(batch(records), 0, T0)
    log.high_watermark = log.log_end_offset


def batch_positions(path: Path) -> list[tuple[int, int]]:
    """(position, size) of each batch of a segment file."""
    data = path.read_bytes()
    out, position = [], 0
    while position < len(data):
        size = struct.unpack_from(">i", data, position + 8)[0] + 12
        out.append((position, size))
        position += size
    return out


def damage(path: Path, at: int, value: int | None = None) -> None:
    data = bytearray(path.read_bytes())
    data[at] = value if value is not None else data[at] ^ 0xFF
    path.write_bytes(bytes(data))


def assert_refused(log: Log, offset: int) -> None:
    with pytest.raises(KafkaError) as refused:
        log.read(offset, 1 << 20)
    assert refused.value.code == ErrorCode.CORRUPT_MESSAGE


@pytest.mark.parametrize("clean", [True, False])
def test_a_broken_batch_length_in_a_closed_segment_loses_nothing_else(open_log: OpenLog, clean: bool) -> None:
    log = open_log(CONFIG)
    fill(log, 60)
    end = log.log_end_offset
    closed = log.segments[1]
    bases = [s.base_offset for s in log.segments]
    assert len(bases) >= 4
    following = bases[2]
    if clean:
        log.close()
    else:
        log.release()
    position, _ = batch_positions(closed.log_path)[-1]
    damage(closed.log_path, position + 9, 0x7F)  # its length now runs far past the file
    reopened = open_log(CONFIG, recovery_point=end if clean else 0, had_clean_shutdown=clean)
    assert reopened.log_end_offset == end
    assert [s.base_offset for s in reopened.segments] == bases
    first_damaged = reopened.segments[1].damage[0].first_offset
    assert bases[1] < first_damaged < following
    assert [r.offset for r in read_all(reopened, 0, stop_before=first_damaged)] == list(range(first_damaged))
    for offset in range(first_damaged, following):
        assert_refused(reopened, offset)
    assert [r.offset for r in read_all(reopened, following)] == list(range(following, end))
    assert closed.damage_path.exists()


def test_recorded_damage_is_still_refused_after_a_clean_restart(open_log: OpenLog) -> None:
    log = open_log(CONFIG)
    fill(log, 60)
    end = log.log_end_offset
    closed = log.segments[1]
    log.release()
    position, _ = batch_positions(closed.log_path)[1]
    damage(closed.log_path, position + 70)  # inside the records: only the CRC can tell
    first = open_log(CONFIG, name="topic-0")  # unclean: recovery finds it
    damaged = first.segments[1].damage[0]
    assert (damaged.start, damaged.reason) == (position, "CRC mismatch")
    first.close()
    second = open_log(CONFIG, name="topic-0", recovery_point=end, had_clean_shutdown=True)
    assert second.segments[1].damage == [damaged]
    assert_refused(second, damaged.first_offset)
    assert second.log_end_offset == end


def test_damage_notes_are_durable_when_recovery_ends(open_log: OpenLog, monkeypatch: pytest.MonkeyPatch) -> None:
    # Once recovery is done the recovery point moves past the segment, so no later start scans
    # it again: the notes (file and directory entry) must be on disk, not in the page cache.
    log = open_log(CONFIG)
    fill(log, 60)
    closed = log.segments[1]
    log.release()
    damage(closed.log_path, batch_positions(closed.log_path)[1][0] + 70)
    syncs = record_syncs(monkeypatch)
    open_log(CONFIG)
    notes = closed.damage_path.resolve()
    assert syncs.index("fsync", notes.parent) > syncs.index("replace", notes)
    assert syncs.index("fsync", notes.with_name(notes.name + ".tmp")) < syncs.index("replace", notes)


def test_a_damaged_batch_in_the_active_segment_is_kept_when_sound_batches_follow(open_log: OpenLog) -> None:
    log = open_log(LogConfig(segment_bytes=1 << 20, index_interval_bytes=200))
    fill(log, 10)
    end = log.log_end_offset
    path = log.active_segment.log_path
    log.release()
    position, _ = batch_positions(path)[4]
    damage(path, position + 70)
    reopened = open_log(LogConfig(segment_bytes=1 << 20, index_interval_bytes=200))
    assert reopened.log_end_offset == end  # not cut at the damage: sound batches follow it
    assert_refused(reopened, 12)
    assert [r.offset for r in read_all(reopened, 15)] == list(range(15, end))
    # A read from before the damage stops at it, never carrying damaged bytes.
    first = reopened.read(0, 1 << 20)
    assert first is not None and first.position + first.size <= position


def test_the_cleaner_leaves_a_damaged_segment_alone(open_log: OpenLog) -> None:
    from kbroker.storage.cleaner import cleanable_part

    config = LogConfig(segment_bytes=3000, index_interval_bytes=200, cleanup_policy=("compact",))
    log = open_log(config)
    fill(log, 60)
    log.release()
    path = log.segments[0].log_path
    damage(path, batch_positions(path)[1][0] + 70)
    reopened = open_log(config)
    reopened.high_watermark = reopened.log_end_offset
    assert reopened.segments[0].damage
    assert cleanable_part(reopened, T0) is None


def test_deleting_a_damaged_segment_removes_its_damage_notes(open_log: OpenLog) -> None:
    log = open_log(CONFIG)
    fill(log, 60)
    log.release()
    first = log.segments[0]
    damage(first.log_path, batch_positions(first.log_path)[1][0] + 70)
    reopened = open_log(CONFIG)
    reopened.high_watermark = reopened.log_end_offset
    notes = reopened.segments[0].damage_path
    assert notes.exists()
    reopened.delete_records_before(reopened.segments[1].base_offset, now_ms=T0)
    reopened.delete_expired_files(T0 + 10**9)
    assert not notes.exists() and not notes.with_name(notes.name + ".deleted").exists()
