"""The timing wheel: exact due times, (due, offset) order, overflow wheels, lazy removal."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from kbroker.delay.timing_wheel import TimingWheel

DAY_MS = 24 * 3600 * 1000
START = 1_700_000_000_000


def test_entries_come_out_at_their_due_time_in_due_order() -> None:
    wheel = TimingWheel(tick_ms=100, wheel_size=8, start_ms=START)
    wheel.add(START + 500, 1)
    wheel.add(START + 250, 2)
    wheel.add(START + 260, 3)
    assert wheel.advance(START + 249) == []
    assert wheel.advance(START + 255) == [2]
    assert wheel.advance(START + 260) == [3]
    assert len(wheel) == 1
    assert wheel.advance(START + 10_000) == [1]
    assert len(wheel) == 0


def test_ties_come_out_in_offset_order_whatever_the_insertion_order() -> None:
    wheel = TimingWheel(tick_ms=10, wheel_size=4, start_ms=START)
    for offset in (9, 3, 7, 1):
        wheel.add(START + 1000, offset)
    assert wheel.advance(START + 1000) == [1, 3, 7, 9]


def test_an_entry_is_never_returned_before_its_due_time_within_a_tick() -> None:
    wheel = TimingWheel(tick_ms=100, wheel_size=8, start_ms=START)
    wheel.add(START + 199, 5)
    assert wheel.advance(START + 100) == []  # its bucket [100, 200) expired, the entry is not due
    assert wheel.advance(START + 198) == []
    assert wheel.advance(START + 199) == [5]


def test_overdue_and_current_tick_entries_come_out_on_the_next_advance() -> None:
    wheel = TimingWheel(tick_ms=100, wheel_size=8, start_ms=START)
    wheel.add(START - 5000, 1)
    wheel.add(START, 2)
    assert wheel.next_due_ms() == START - 5000
    assert wheel.advance(START) == [1, 2]


def test_a_far_future_entry_moves_down_the_wheels() -> None:
    wheel = TimingWheel(tick_ms=100, wheel_size=16, start_ms=START)
    due = START + 40 * DAY_MS + 1234
    wheel.add(due, 42)
    wheel.add(START + 150, 1)
    assert wheel.level_count > 3  # 100 ms * 16^k: 40 days needs overflow wheels
    assert wheel.advance(START + 150) == [1]
    # Each call lands on the next bucket expiration: a higher wheel's cascades, then level 0.
    now = START + 150
    wakeups = 0
    while (next_due := wheel.next_due_ms()) is not None and next_due < due:
        now = next_due
        assert wheel.advance(now) == []
        wakeups += 1
    assert wakeups <= wheel.level_count * 2
    assert wheel.advance(due - 1) == []
    assert wheel.advance(due) == [42]


def test_advancing_over_a_long_idle_time_does_not_step_every_tick() -> None:
    wheel = TimingWheel(tick_ms=1, wheel_size=64, start_ms=0)
    wheel.add(10 * DAY_MS, 7)
    # Ten days of 1 ms ticks would be 864 million steps; the bucket heap jumps over them.
    assert wheel.advance(10 * DAY_MS) == [7]


def test_removed_entries_are_not_returned() -> None:
    wheel = TimingWheel(tick_ms=100, wheel_size=8, start_ms=START)
    for offset in range(5):
        wheel.add(START + 1000 * offset, offset)
    wheel.add(START, 9)
    wheel.remove(2)
    wheel.remove(9)  # in the ready list
    wheel.remove(2)  # twice: still one removal
    assert len(wheel) == 4
    assert wheel.advance(START + 10_000) == [0, 1, 3, 4]
    assert len(wheel) == 0


def test_limit_leaves_the_rest_for_the_next_call_in_order() -> None:
    wheel = TimingWheel(tick_ms=100, wheel_size=8, start_ms=START)
    for offset in range(10):
        wheel.add(START + 10 * (10 - offset), offset)
    assert wheel.advance(START + 1000, limit=3) == [9, 8, 7]
    wheel.add(START + 5, 100)
    assert wheel.advance(START + 1000) == [100, 6, 5, 4, 3, 2, 1, 0]


def test_next_due_is_never_after_the_earliest_entry() -> None:
    wheel = TimingWheel(tick_ms=100, wheel_size=8, start_ms=START)
    assert wheel.next_due_ms() is None
    wheel.add(START + 12_345, 1)
    next_due = wheel.next_due_ms()
    assert next_due is not None and next_due <= START + 12_345


class SortedModel:
    """The specification: every live entry with due <= now, by (due, offset)."""

    def __init__(self) -> None:
        self.entries: list[tuple[int, int]] = []

    def add(self, due: int, offset: int) -> None:
        self.entries.append((due, offset))

    def remove(self, offset: int) -> None:
        self.entries = [e for e in self.entries if e[1] != offset]

    def advance(self, now: int, limit: int | None) -> list[int]:
        due = sorted(e for e in self.entries if e[0] <= now)[:limit]
        taken = set(due)
        self.entries = [e for e in self.entries if e not in taken]
        return [offset for _, offset in due]


operations = st.lists(
    st.one_of(
        st.tuples(st.just("add"), st.integers(-2_000, 3_000_000)),
        st.tuples(st.just("advance"), st.integers(0, 400_000), st.one_of(st.none(), st.integers(1, 5))),
        st.tuples(st.just("remove"), st.integers(0, 60)),
    ),
    max_size=120,
)


@settings(max_examples=300, deadline=None)
@given(operations, st.sampled_from([(1, 2), (10, 4), (100, 8), (7, 3)]))
def test_the_wheel_behaves_as_a_sorted_list(ops: list[tuple], shape: tuple[int, int]) -> None:
    tick_ms, size = shape
    wheel = TimingWheel(tick_ms=tick_ms, wheel_size=size, start_ms=1000)
    model = SortedModel()
    now = 1000
    next_offset = 0
    for op in ops:
        if op[0] == "add":
            due = now + op[1]
            wheel.add(due, next_offset)
            model.add(due, next_offset)
            next_offset += 1
        elif op[0] == "advance":
            now += op[1]
            assert wheel.advance(now, op[2]) == model.advance(now, op[2])
        elif any(offset == op[1] for _, offset in model.entries):
            wheel.remove(op[1])
            model.remove(op[1])
        assert len(wheel) == len(model.entries)
        next_due = wheel.next_due_ms()
        if model.entries:
            assert next_due is not None and next_due <= min(model.entries)[0]
    assert wheel.advance(now + 10**10) == model.advance(now + 10**10, None)


def test_a_seeded_random_run_against_the_model() -> None:
    rng = random.Random(20240601)
    wheel = TimingWheel(tick_ms=100, wheel_size=16, start_ms=START)
    model = SortedModel()
    now = START
    for offset in range(3000):
        due = now + rng.choice([0, rng.randrange(-500, 500), rng.randrange(40 * DAY_MS)])
        wheel.add(due, offset)
        model.add(due, offset)
        if rng.random() < 0.2:
            now += rng.randrange(5 * DAY_MS)
            assert wheel.advance(now) == model.advance(now, None)
    assert wheel.advance(now + 41 * DAY_MS) == model.advance(now + 41 * DAY_MS, None)
