"""`__share_group_state`'s records (Kafka's ShareSnapshot/ShareUpdate formats) and the share
coordinator's states rebuilt from them: merging, snapshots every N updates, epoch fencing."""

from __future__ import annotations

import uuid

import pytest

from kbroker.coordinator.share_coordinator import ShareStateShard, combine_batches
from kbroker.coordinator.share_state_records import (
    SNAPSHOT,
    UPDATE,
    PersistedBatch,
    ShareSnapshot,
    ShareStateKey,
    ShareUpdate,
    coordinator_key,
    decode_key,
    decode_snapshot,
    decode_update,
    encode_key,
    encode_snapshot,
    encode_update,
    parse_coordinator_key,
)
from protocol.errors import ErrorCode
from protocol.primitives import ProtocolError

TOPIC_ID = uuid.UUID("6ba7b810-9dad-11d1-80b4-00c04fd430c8")
KEY = ShareStateKey("workers", TOPIC_ID, 3)
AVAILABLE, ACKNOWLEDGED, ARCHIVED = 0, 2, 4


def batch(first: int, last: int, state: int, count: int) -> PersistedBatch:
    return PersistedBatch(first, last, state, count)


def test_a_snapshot_key_is_its_type_then_group_topic_id_and_partition() -> None:
    data = encode_key(SNAPSHOT, KEY)
    # int16 type 0, int16-length group, 16-byte topic id, int32 partition: Kafka's ShareSnapshotKey.
    assert data == b"\x00\x00" + b"\x00\x07workers" + TOPIC_ID.bytes + b"\x00\x00\x00\x03"
    assert decode_key(data) == (SNAPSHOT, KEY)
    assert encode_key(UPDATE, KEY)[:2] == b"\x00\x01"


def test_snapshot_and_update_values_round_trip() -> None:
    snapshot = ShareSnapshot(2, 1, 7, 100, 1_000, 2_000, (batch(100, 104, ACKNOWLEDGED, 1),
                                                            batch(105, 105, AVAILABLE, 3)))
    data = encode_snapshot(snapshot)
    assert data[:2] == b"\x00\x00"  # value version 0
    assert decode_snapshot(data) == snapshot
    update = ShareUpdate(2, 7, -1, (batch(106, 110, ARCHIVED, 5),))
    assert decode_update(encode_update(update)) == update


def test_a_value_of_an_unknown_version_and_a_key_of_an_unknown_type_are_refused() -> None:
    with pytest.raises(ProtocolError):
        decode_snapshot(b"\x00\x05" + encode_snapshot(ShareSnapshot(0, 0, 0, 0, 0, 0))[2:])
    with pytest.raises(ProtocolError):
        decode_key(b"\x00\x02" + encode_key(SNAPSHOT, KEY)[2:])


def test_the_coordinator_key_names_the_topic_id_as_kafka_prints_it() -> None:
    text = coordinator_key("a:b", TOPIC_ID, 3)
    assert text == "a:b:a6e4EJ2tEdGAtADAT9QwyA:3"
    assert parse_coordinator_key(text) == ("a:b", TOPIC_ID, 3)
    for bad in ("", "g:3", ":a6e4EJ2tEdGAtADAT9QwyA:3", "g:not-a-uuid:1", "g:a6e4EJ2tEdGAtADAT9QwyA:x"):
        with pytest.raises(ValueError):
            parse_coordinator_key(bad)


def test_newer_batches_win_and_nothing_below_the_start_offset_is_kept() -> None:
    current = (batch(10, 19, AVAILABLE, 1), batch(20, 29, ACKNOWLEDGED, 1))
    newer = (batch(15, 22, ARCHIVED, 2),)
    assert combine_batches(current, newer, 12) == (
        batch(12, 14, AVAILABLE, 1), batch(15, 22, ARCHIVED, 2), batch(23, 29, ACKNOWLEDGED, 1))
    # Adjacent batches of one state and count become one.
    assert combine_batches((batch(0, 4, AVAILABLE, 1),), (batch(5, 9, AVAILABLE, 1),), 0) == (
        batch(0, 9, AVAILABLE, 1),)
    # Among the newer ones, the later wins.
    assert combine_batches((), (batch(0, 9, AVAILABLE, 1), batch(3, 4, ACKNOWLEDGED, 1)), 0) == (
        batch(0, 2, AVAILABLE, 1), batch(3, 4, ACKNOWLEDGED, 1), batch(5, 9, AVAILABLE, 1))


def replayed(records: list[tuple[bytes, bytes | None]], updates_per_snapshot: int = 500) -> ShareStateShard:
    shard = ShareStateShard(updates_per_snapshot)
    for key, value in records:
        shard.replay(key, value)
    return shard


def write(shard: ShareStateShard, records: list[tuple[bytes, bytes | None]], start: int,
          batches: tuple[PersistedBatch, ...], leader_epoch: int = 1, state_epoch: int = 0) -> int:
    code, record = shard.write(KEY, state_epoch, leader_epoch, start, batches, 5_000)
    if record is not None:
        shard.replay(*record)
        records.append(record)
    return code


def test_replaying_the_records_written_rebuilds_the_state() -> None:
    shard = ShareStateShard(updates_per_snapshot=2)
    records: list[tuple[bytes, bytes | None]] = []
    code, record = shard.initialize(KEY, 0, 100, 1_000)
    assert code == ErrorCode.NO_ERROR and record is not None
    shard.replay(*record)
    records.append(record)
    assert write(shard, records, 100, (batch(100, 104, ACKNOWLEDGED, 1), batch(105, 109, AVAILABLE, 1))) == 0
    assert write(shard, records, 105, (batch(105, 106, ACKNOWLEDGED, 1),)) == 0
    assert write(shard, records, 107, (batch(107, 107, ARCHIVED, 2),)) == 0
    assert write(shard, records, 107, (batch(108, 108, AVAILABLE, 2),)) == 0
    types = [decode_key(k)[0] for k, _ in records]
    # The initial snapshot, two updates, then a snapshot again (2 updates per snapshot), an update.
    assert types == [SNAPSHOT, UPDATE, UPDATE, SNAPSHOT, UPDATE]
    expected = (batch(107, 107, ARCHIVED, 2), batch(108, 108, AVAILABLE, 2), batch(109, 109, AVAILABLE, 1))
    read, _ = shard.read(KEY, 1, 6_000)
    assert (read.error, read.start_offset, read.batches) == (ErrorCode.NO_ERROR, 107, expected)
    # A new coordinator replays them all; replaying only from the last snapshot gives the same.
    for tail in (records, records[3:]):
        again, _ = replayed(tail, 2).read(KEY, 1, 6_000)
        assert (again.start_offset, again.batches) == (107, expected)


def test_a_share_partition_never_initialized_reads_as_uninitialized() -> None:
    read, record = ShareStateShard().read(KEY, -1, 0)
    assert (read.error, read.start_offset, read.state_epoch, read.batches, record) == (ErrorCode.NO_ERROR, -1, 0, (),
                                                                                      None)


def test_a_read_by_a_newer_leader_fences_the_older_leaders_writes() -> None:
    shard = ShareStateShard()
    records: list[tuple[bytes, bytes | None]] = []
    _, record = shard.initialize(KEY, 0, 0, 0)
    assert record is not None
    shard.replay(*record)
    assert write(shard, records, 0, (batch(0, 0, ACKNOWLEDGED, 1),), leader_epoch=4) == 0
    read, remembered = shard.read(KEY, 5, 0)
    assert read.error == ErrorCode.NO_ERROR and remembered is not None  # the new epoch is written down
    shard.replay(*remembered)
    assert write(shard, records, 1, (batch(1, 1, ACKNOWLEDGED, 1),), leader_epoch=4) == ErrorCode.FENCED_LEADER_EPOCH
    assert shard.read(KEY, 4, 0)[0].error == ErrorCode.FENCED_LEADER_EPOCH
    assert write(shard, records, 1, (batch(1, 1, ACKNOWLEDGED, 1),), leader_epoch=5) == ErrorCode.NO_ERROR
    # ... and it survives a replay: a new coordinator fences the old leader too.
    assert replayed([record, remembered, *records]).leader_epochs[KEY] == 5


def test_a_write_of_an_older_state_epoch_is_fenced() -> None:
    shard = ShareStateShard()
    _, record = shard.initialize(KEY, 3, 50, 0)
    assert record is not None
    shard.replay(*record)
    assert write(shard, [], 50, (), state_epoch=2) == ErrorCode.FENCED_STATE_EPOCH
    assert shard.initialize(KEY, 2, 0, 0)[0] == ErrorCode.FENCED_STATE_EPOCH
    assert write(shard, [], 50, (batch(50, 50, ACKNOWLEDGED, 1),), state_epoch=3) == ErrorCode.NO_ERROR


def test_a_tombstone_deletes_the_state() -> None:
    shard = ShareStateShard()
    _, record = shard.initialize(KEY, 0, 10, 0)
    assert record is not None
    shard.replay(*record)
    shard.replay(record[0], None)
    assert shard.read(KEY, -1, 0)[0].start_offset == -1
