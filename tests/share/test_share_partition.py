"""The share-partition state machine (kbroker/share/share_partition.py), with time passed in."""

from __future__ import annotations

import random

from kbroker.share.share_partition import (
    AcknowledgementBatch,
    AcknowledgeType,
    AcquiredRange,
    Archived,
    ArchiveReason,
    RecordState,
    ShareLimits,
    SharePartition,
    StateBatch,
)
from protocol.errors import ErrorCode

LOCK_MS = 30_000


def _partition(start: int = 0, **limits: int) -> SharePartition:
    return SharePartition(start, ShareLimits(**{"lock_duration_ms": LOCK_MS, **limits}))


def _ack(first: int, last: int, *types: AcknowledgeType) -> AcknowledgementBatch:
    return AcknowledgementBatch(first, last, tuple(int(t) for t in types))


def test_two_members_share_one_partition_without_overlap() -> None:
    partition = _partition()
    assert partition.acquire("a", 0, 9, max_records=5, now_ms=0) == [AcquiredRange(0, 4, 1)]
    # The second member's read starts where the first member's records end.
    assert partition.next_fetch_offset() == 5
    assert partition.acquire("b", 5, 9, max_records=5, now_ms=0) == [AcquiredRange(5, 9, 1)]
    assert partition.acquire("c", 0, 9, max_records=5, now_ms=0) == []
    assert partition.acquired_by("a") == [0, 1, 2, 3, 4]


def test_accept_moves_the_start_past_a_done_prefix_only() -> None:
    partition = _partition()
    partition.acquire("a", 0, 9, max_records=10, now_ms=0)
    assert partition.acknowledge("a", [_ack(2, 4, AcknowledgeType.ACCEPT)], now_ms=1) == (ErrorCode.NO_ERROR, [])
    assert partition.start_offset == 0  # 0 and 1 are still held
    assert partition.acknowledge("a", [_ack(0, 1, AcknowledgeType.ACCEPT)], now_ms=1) == (ErrorCode.NO_ERROR, [])
    assert partition.start_offset == 5
    assert partition.state_of(5) is RecordState.ACQUIRED


def test_release_redelivers_first_with_a_higher_delivery_count() -> None:
    partition = _partition()
    partition.acquire("a", 0, 4, max_records=10, now_ms=0)
    partition.acknowledge("a", [_ack(1, 2, AcknowledgeType.RELEASE)], now_ms=1)
    assert partition.next_fetch_offset() == 1
    assert partition.acquire("b", 1, 9, max_records=10, now_ms=2) == [AcquiredRange(1, 2, 2), AcquiredRange(5, 9, 1)]


def test_only_the_holder_may_acknowledge_and_a_bad_batch_changes_nothing() -> None:
    partition = _partition()
    partition.acquire("a", 0, 4, max_records=10, now_ms=0)
    partition.acquire("b", 5, 9, max_records=10, now_ms=0)
    # One offset of the batch is b's: nothing of it is applied, not even a's own offsets.
    assert partition.acknowledge("a", [_ack(3, 5, AcknowledgeType.ACCEPT)], now_ms=1) == (
        ErrorCode.INVALID_RECORD_STATE, [])
    assert [partition.state_of(o) for o in (3, 4, 5)] == [RecordState.ACQUIRED] * 3
    assert partition.acknowledge("a", [_ack(0, 0, AcknowledgeType.ACCEPT)], now_ms=1)[0] == ErrorCode.NO_ERROR
    assert partition.acknowledge("a", [_ack(0, 0, AcknowledgeType.ACCEPT)], now_ms=1)[0] == ErrorCode.INVALID_RECORD_STATE
    assert partition.acknowledge("a", [_ack(10, 12, AcknowledgeType.ACCEPT)], now_ms=1)[0] == ErrorCode.INVALID_RECORD_STATE
    # Types: one for the whole batch or one per offset; nothing else, and only known ones.
    assert partition.acknowledge("a", [_ack(1, 3, AcknowledgeType.ACCEPT, AcknowledgeType.ACCEPT)], 1)[0] == \
        ErrorCode.INVALID_REQUEST
    assert partition.acknowledge("a", [AcknowledgementBatch(1, 1, (9,))], 1)[0] == ErrorCode.INVALID_REQUEST
    assert partition.acknowledge("a", [AcknowledgementBatch(3, 1, (1,))], 1)[0] == ErrorCode.INVALID_REQUEST


def test_per_offset_types_and_rejects_are_archived_with_their_reason() -> None:
    partition = _partition()
    partition.acquire("a", 0, 3, max_records=10, now_ms=0)
    code, archived = partition.acknowledge("a", [_ack(0, 3, AcknowledgeType.ACCEPT, AcknowledgeType.REJECT,
                                                       AcknowledgeType.GAP, AcknowledgeType.RELEASE)], now_ms=1)
    assert code == ErrorCode.NO_ERROR
    # A GAP (an offset the log does not hold, such as a transaction marker) is no dead letter.
    assert archived == [Archived(1, 1, ArchiveReason.REJECTED)]
    assert partition.start_offset == 3
    assert partition.state_of(3) is RecordState.AVAILABLE


def test_an_expired_lock_redelivers_and_the_delivery_count_limit_archives() -> None:
    partition = _partition(delivery_count_limit=3)
    now = 0
    for delivery in (1, 2, 3):
        assert partition.acquire("a", 0, 0, max_records=1, now_ms=now) == [AcquiredRange(0, 0, delivery)]
        assert partition.next_lock_deadline_ms() == now + LOCK_MS
        assert partition.expire_locks(now + LOCK_MS - 1) == []  # not yet
        now += LOCK_MS
        archived = partition.expire_locks(now)
    assert archived == [Archived(0, 3, ArchiveReason.DELIVERY_COUNT_LIMIT)]
    assert partition.start_offset == 1
    assert partition.acquire("a", 0, 0, max_records=1, now_ms=now) == []


def test_renew_extends_the_lock() -> None:
    partition = _partition()
    partition.acquire("a", 0, 0, max_records=1, now_ms=0)
    partition.acknowledge("a", [_ack(0, 0, AcknowledgeType.RENEW)], now_ms=20_000)
    assert partition.expire_locks(LOCK_MS) == []
    assert partition.state_of(0) is RecordState.ACQUIRED
    assert partition.next_lock_deadline_ms() == 20_000 + LOCK_MS


def test_a_member_that_leaves_gives_its_records_back() -> None:
    partition = _partition()
    partition.acquire("a", 0, 4, max_records=10, now_ms=0)
    partition.acquire("b", 5, 6, max_records=10, now_ms=0)
    assert partition.release_member("a") == []
    assert partition.next_fetch_offset() == 0
    assert partition.acquired_by("b") == [5, 6]


def test_the_in_flight_limit_holds_back_new_records_not_redeliveries() -> None:
    partition = _partition(max_in_flight=4)
    assert partition.acquire("a", 0, 9, max_records=10, now_ms=0) == [AcquiredRange(0, 3, 1)]
    assert partition.acquire("b", 4, 9, max_records=10, now_ms=0) == []
    partition.acknowledge("a", [_ack(0, 0, AcknowledgeType.ACCEPT), _ack(2, 2, AcknowledgeType.RELEASE)], now_ms=1)
    # One slot freed at the start, one record released: both go to the next reader.
    assert partition.acquire("b", 2, 9, max_records=10, now_ms=1) == [AcquiredRange(2, 2, 2), AcquiredRange(4, 4, 1)]


def test_snapshot_and_restore_keep_progress_and_drop_locks() -> None:
    partition = _partition(start=100)
    partition.acquire("a", 100, 109, max_records=10, now_ms=0)
    partition.acknowledge("a", [_ack(100, 101, AcknowledgeType.ACCEPT), _ack(104, 105, AcknowledgeType.ACCEPT),
                                _ack(106, 106, AcknowledgeType.REJECT)], now_ms=1)
    snapshot = partition.snapshot()
    assert snapshot == [StateBatch(102, 103, RecordState.AVAILABLE, 1), StateBatch(104, 105, RecordState.ACKNOWLEDGED, 1),
                        StateBatch(106, 106, RecordState.ARCHIVED, 1), StateBatch(107, 109, RecordState.AVAILABLE, 1)]
    restored = SharePartition.restore(partition.start_offset, snapshot, partition.limits)
    assert (restored.start_offset, restored.end_offset) == (102, 110)
    # Only what was not acknowledged comes again, with its delivery counted.
    assert restored.acquire("b", 102, 120, max_records=20, now_ms=5) == [
        AcquiredRange(102, 103, 2), AcquiredRange(107, 109, 2), AcquiredRange(110, 120, 1)]


def test_moving_the_start_forgets_what_is_before_it() -> None:
    partition = _partition()
    partition.acquire("a", 0, 9, max_records=10, now_ms=0)
    partition.move_start(6)
    assert partition.start_offset == 6
    assert partition.acquired_by("a") == [6, 7, 8, 9]
    partition.move_start(50)
    assert (partition.start_offset, partition.end_offset, partition.next_fetch_offset()) == (50, 50, 50)


def test_random_operations_deliver_every_record_until_accepted_and_never_twice_at_once() -> None:
    """Members acquire, accept, release and let locks expire at random: no offset is ever held by
    two members, every accepted offset stays accepted, and in the end every offset is accepted
    or archived at the delivery-count limit."""
    rng = random.Random(932)
    partition = _partition(delivery_count_limit=4, max_in_flight=50)
    members, now, total = ["a", "b", "c"], 0, 400
    accepted: set[int] = set()
    for _ in range(5000):
        member = rng.choice(members)
        now += rng.randint(0, 5000)
        for archived in partition.expire_locks(now):
            assert archived.delivery_count == 4
        start = partition.next_fetch_offset()
        for taken in partition.acquire(member, start, min(total - 1, start + 20), rng.randint(1, 8), now):
            for offset in range(taken.first_offset, taken.last_offset + 1):
                assert offset not in accepted
        held = partition.acquired_by(member)
        if held:
            chosen = rng.sample(held, rng.randint(1, len(held)))
            kind = rng.choice([AcknowledgeType.ACCEPT, AcknowledgeType.ACCEPT, AcknowledgeType.RELEASE])
            code, _ = partition.acknowledge(member, [_ack(o, o, kind) for o in chosen], now)
            assert code == ErrorCode.NO_ERROR
            if kind is AcknowledgeType.ACCEPT:
                accepted.update(chosen)
        holders: dict[int, str] = {}
        for m in members:
            for offset in partition.acquired_by(m):
                assert offset not in holders
                holders[offset] = m
    now += LOCK_MS
    partition.expire_locks(now)
    for _ in range(total):  # bounded: each round accepts at least one record
        if partition.start_offset >= total:
            break
        start = partition.next_fetch_offset()
        taken = partition.acquire("a", start, total - 1, 50, now)
        offsets = [o for t in taken for o in range(t.first_offset, t.last_offset + 1)]
        partition.acknowledge("a", [_ack(o, o, AcknowledgeType.ACCEPT) for o in offsets], now)
        accepted.update(offsets)
    assert partition.start_offset == total
