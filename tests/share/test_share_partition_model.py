"""The run-length `SharePartition` against the per-offset model it replaced
(tests/share/per_offset_model.py): the same random operations, valid and invalid, give the same
answers and leave the same state, offset by offset."""

from __future__ import annotations

import random
from typing import Any

import pytest

from kbroker.share.share_partition import AcknowledgementBatch, AcknowledgeType, ShareLimits, SharePartition
from tests.share.per_offset_model import PerOffsetSharePartition

MEMBERS = ["a", "b", "c"]


def _random_acknowledgements(rng: random.Random, partition: Any, member: str) -> list[AcknowledgementBatch]:
    """Mostly batches over what the member holds, sometimes over anything near the window, with
    one type or one per offset, sometimes an unknown type or a malformed batch."""
    held = partition.acquired_by(member)
    batches = []
    for _ in range(rng.randint(1, 3)):
        if held and rng.random() < 0.8:
            first = rng.choice(held)
            last = min(first + rng.randint(0, 6), held[-1])
        else:
            first = rng.randint(max(0, partition.start_offset - 3), partition.end_offset + 3)
            last = first + rng.randint(-1, 4)
        count = last - first + 1
        kinds = [AcknowledgeType.ACCEPT, AcknowledgeType.ACCEPT, AcknowledgeType.RELEASE, AcknowledgeType.REJECT,
                 AcknowledgeType.GAP, AcknowledgeType.RENEW]
        if count > 1 and rng.random() < 0.3:
            types = tuple(int(rng.choice(kinds)) for _ in range(count))
        else:
            types = (int(rng.choice(kinds)) if rng.random() < 0.97 else 9,)
        if rng.random() < 0.02:
            types = (1, 1) if count != 2 else (1, 1, 1)  # neither one type nor one per offset
        batches.append(AcknowledgementBatch(first, last, types))
    return batches


def _state(partition: Any) -> dict[str, Any]:
    window = range(partition.start_offset - 2, partition.end_offset + 2)
    return {
        "start": partition.start_offset, "end": partition.end_offset,
        "next_fetch": partition.next_fetch_offset(), "in_flight": partition.in_flight(),
        "states": [partition.state_of(o) for o in window],
        "held": {m: partition.acquired_by(m) for m in MEMBERS},
        "next_deadline": partition.next_lock_deadline_ms(), "snapshot": partition.snapshot(),
    }


@pytest.mark.parametrize("seed", range(6))
def test_runs_behave_as_the_per_offset_model(seed: int) -> None:
    rng = random.Random(seed)
    limits = ShareLimits(delivery_count_limit=rng.randint(2, 5), max_in_flight=rng.choice([7, 30, 200]),
                         lock_duration_ms=1000)
    ours, model = SharePartition(10, limits), PerOffsetSharePartition(10, limits)
    now, log_end = 0, 10
    for step in range(3000):
        now += rng.choice([0, 0, 10, 400, 1200])
        log_end += rng.randint(0, 5)
        member = rng.choice(MEMBERS)
        roll = rng.random()
        if roll < 0.4:
            first = ours.next_fetch_offset() if rng.random() < 0.8 else rng.randint(0, log_end)
            last = min(log_end - 1, first + rng.randint(0, 40))
            call = ("acquire", member, first, last, rng.randint(1, 25), now)
        elif roll < 0.8:
            call = ("acknowledge", member, _random_acknowledgements(rng, ours, member), now)
        elif roll < 0.88:
            call = ("expire_locks", now)
        elif roll < 0.94:
            call = ("release_member", member)
        elif roll < 0.97:
            call = ("move_start", min(log_end, ours.start_offset + rng.randint(-2, 6)))
        else:
            snapshot = ours.snapshot()
            assert snapshot == model.snapshot()
            ours = SharePartition.restore(ours.start_offset, snapshot, limits)
            model = PerOffsetSharePartition.restore(model.start_offset, snapshot, limits)
            call = None
        if call is not None:
            name, *args = call
            assert getattr(ours, name)(*args) == getattr(model, name)(*args), (step, call)
        assert _state(ours) == _state(model), (step, call)


def test_restore_of_overlapping_and_unordered_batches_matches_the_model() -> None:
    """A snapshot written elsewhere (Kafka's share coordinator) is taken as given: later batches
    override earlier ones, offsets no batch names are available."""
    from kbroker.share.share_partition import RecordState, StateBatch

    limits = ShareLimits()
    batches = [StateBatch(20, 25, RecordState.ACKNOWLEDGED, 1), StateBatch(5, 12, RecordState.ARCHIVED, 2),
               StateBatch(11, 14, RecordState.AVAILABLE, 3), StateBatch(30, 31, RecordState.ACQUIRED, 1)]
    for start in (0, 8, 11, 40):
        ours = SharePartition.restore(start, batches, limits)
        model = PerOffsetSharePartition.restore(start, batches, limits)
        assert _state(ours) == _state(model), start
