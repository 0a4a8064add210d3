"""The share group's assignor (kbroker/share/assignor.py)."""

from __future__ import annotations

import itertools

from kbroker.share.assignor import assign_share_partitions


def _holders(assignment: dict[str, set[tuple[str, int]]]) -> dict[tuple[str, int], int]:
    counts: dict[tuple[str, int], int] = {}
    for assigned in assignment.values():
        for tp in assigned:
            counts[tp] = counts.get(tp, 0) + 1
    return counts


def test_four_members_share_one_partition() -> None:
    members = {m: {"queue"} for m in "abcd"}
    assert assign_share_partitions(members, {"queue": 1}) == {m: {("queue", 0)} for m in "abcd"}


def test_balance_for_every_shape() -> None:
    for member_count, partitions in itertools.product(range(1, 9), range(1, 9)):
        members = {f"m{i}": {"t"} for i in range(member_count)}
        assignment = assign_share_partitions(members, {"t": partitions})
        sharing = -(-member_count // partitions)
        holders = _holders(assignment)
        # Every partition is read, none by more members than needed, and loads differ by one at most.
        assert set(holders) == {("t", p) for p in range(partitions)}, (member_count, partitions)
        assert max(holders.values()) <= sharing
        sizes = [len(a) for a in assignment.values()]
        assert min(sizes) >= 1 and max(sizes) - min(sizes) <= 1, (member_count, partitions, assignment)


def test_a_joining_member_leaves_the_others_most_of_what_they_had() -> None:
    before = assign_share_partitions({m: {"t"} for m in "ab"}, {"t": 6})
    after = assign_share_partitions({m: {"t"} for m in "abc"}, {"t": 6}, before)
    assert [len(after[m]) for m in "abc"] == [2, 2, 2]
    assert after["a"] <= before["a"] and after["b"] <= before["b"]
    # And leaving: the remaining members keep theirs and take the leaver's.
    again = assign_share_partitions({m: {"t"} for m in "ab"}, {"t": 6}, after)
    assert again["a"] >= after["a"] and again["b"] >= after["b"]


def test_each_topic_is_shared_among_its_own_subscribers() -> None:
    assignment = assign_share_partitions({"a": {"x"}, "b": {"x", "y"}, "c": {"y"}}, {"x": 1, "y": 2, "z": 3})
    assert assignment["a"] == {("x", 0)}
    assert ("x", 0) in assignment["b"]
    assert {tp for m in "bc" for tp in assignment[m] if tp[0] == "y"} == {("y", 0), ("y", 1)}
    # Topics nobody subscribes to, or that do not exist, go to no one.
    assert assign_share_partitions({"a": {"missing"}}, {"x": 1}) == {"a": set()}


def test_a_shrunk_topic_drops_partitions_that_are_gone() -> None:
    before = {"a": {("t", 0), ("t", 1), ("t", 2)}}
    assert assign_share_partitions({"a": {"t"}}, {"t": 2}, before) == {"a": {("t", 0), ("t", 1)}}
