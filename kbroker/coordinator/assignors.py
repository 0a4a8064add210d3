"""The server-side partition assignors of the consumer group protocol (KIP-848): `uniform` and
`range`, the two Kafka ships and lists in `group.consumer.assignors`.

An assignor maps every partition of the topics the members subscribe to onto one member that
subscribes to its topic. It sees each member's current target assignment, so both keep what
they can (sticky): a member only loses a partition when balance requires it, which is what makes
the protocol's rebalances incremental.

Pure functions over plain data: no IO, no clock.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Set
from dataclasses import dataclass, field
from typing import Protocol

TopicId = uuid.UUID
Assignment = dict[TopicId, set[int]]


@dataclass(frozen=True, slots=True)
class MemberSpec:
    subscribed: frozenset[TopicId]  # the member's topics that exist
    current: Mapping[TopicId, Set[int]] = field(default_factory=dict)  # its target so far
    rack_id: str | None = None


@dataclass(frozen=True, slots=True)
class GroupSpec:
    members: Mapping[str, MemberSpec]
    partitions: Mapping[TopicId, int]  # partition count of every subscribed topic


class Assignor(Protocol):
    name: str

    def assign(self, spec: GroupSpec) -> dict[str, Assignment]: ...


class UniformAssignor:
    """Kafka's default: spread all partitions evenly over the members (each member's count is
    within one of every other member that could take the same partitions), moving as few as
    possible from where they are."""

    name = "uniform"

    def assign(self, spec: GroupSpec) -> dict[str, Assignment]:
        owner: dict[tuple[TopicId, int], str] = {}
        owned: dict[str, list[tuple[TopicId, int]]] = {member: [] for member in spec.members}
        for member in sorted(spec.members):
            for tp in _kept(spec, member):
                if tp not in owner:
                    owner[tp] = member
                    owned[member].append(tp)
        eligible = {t: sorted(m for m, s in spec.members.items() if t in s.subscribed) for t in spec.partitions}
        unassigned = [(t, p) for t, count in spec.partitions.items() for p in range(count) if (t, p) not in owner]
        # The most constrained partitions first, each to the least loaded member that may take it.
        unassigned.sort(key=lambda tp: (len(eligible[tp[0]]), str(tp[0]), tp[1]))
        for tp in unassigned:
            candidates = eligible[tp[0]]
            if candidates:
                member = min(candidates, key=lambda m: (len(owned[m]), m))
                owner[tp] = member
                owned[member].append(tp)
        _balance(owned, eligible)
        return {member: _as_assignment(tps) for member, tps in owned.items()}


def _kept(spec: GroupSpec, member: str) -> list[tuple[TopicId, int]]:
    """The partitions of the member's current target that it may keep: topics it still
    subscribes to, partitions that still exist."""
    member_spec = spec.members[member]
    kept = []
    for topic, partitions in member_spec.current.items():
        count = spec.partitions.get(topic)
        if count is None or topic not in member_spec.subscribed:
            continue
        kept.extend((topic, p) for p in sorted(partitions) if p < count)
    return kept


def _balance(owned: dict[str, list[tuple[TopicId, int]]], eligible: Mapping[TopicId, list[str]]) -> None:
    """Move partitions, one at a time, from a member to an eligible one holding at least two
    fewer, until no such move is left. Each move lowers the sum of squared counts, so this ends;
    it moves no partition that balance does not require."""
    moved = True
    while moved:
        moved = False
        for heavy in sorted(owned, key=lambda m: (-len(owned[m]), m)):
            for tp in reversed(owned[heavy]):  # give up the partitions gained last
                lighter = [m for m in eligible[tp[0]] if len(owned[m]) <= len(owned[heavy]) - 2]
                if lighter:
                    target = min(lighter, key=lambda m: (len(owned[m]), m))
                    owned[heavy].remove(tp)
                    owned[target].append(tp)
                    moved = True
                    break
            if moved:
                break


class RangeAssignor:
    """Kafka's server-side `range`: per topic, its subscribers (by member id) each get a range
    of consecutive partitions, the first ones one more when the count does not divide; members
    keep the partitions they had within their share. Members subscribed to co-partitioned
    topics get the same partition numbers of each, which joins need."""

    name = "range"

    def assign(self, spec: GroupSpec) -> dict[str, Assignment]:
        result: dict[str, Assignment] = {member: {} for member in spec.members}
        for topic, count in spec.partitions.items():
            members = sorted(m for m, s in spec.members.items() if topic in s.subscribed)
            if not members:
                continue
            share, extra = divmod(count, len(members))
            quota = {m: share + (1 if i < extra else 0) for i, m in enumerate(members)}
            taken: set[int] = set()
            for member in members:
                current = sorted(p for p in spec.members[member].current.get(topic, ()) if p < count)
                kept = current[: quota[member]]
                if kept:
                    result[member][topic] = set(kept)
                    taken.update(kept)
            free = iter(p for p in range(count) if p not in taken)
            for member in members:
                have = result[member].setdefault(topic, set())
                while len(have) < quota[member]:
                    have.add(next(free))
                if not have:
                    del result[member][topic]
        return result


def _as_assignment(tps: list[tuple[TopicId, int]]) -> Assignment:
    assignment: Assignment = {}
    for topic, partition in tps:
        assignment.setdefault(topic, set()).add(partition)
    return assignment


# Kafka accepts an assignor by its name or by its class name.
_BUILT_IN: dict[str, type[UniformAssignor] | type[RangeAssignor]] = {
    "uniform": UniformAssignor,
    "range": RangeAssignor,
    "org.apache.kafka.coordinator.group.assignor.UniformAssignor": UniformAssignor,
    "org.apache.kafka.coordinator.group.assignor.RangeAssignor": RangeAssignor,
}


def assignors_from_config(names: list[str]) -> list[Assignor]:
    """`group.consumer.assignors`, in order (the first is the default); an unknown name is a
    configuration error."""
    unknown = [n for n in names if n not in _BUILT_IN]
    if unknown or not names:
        raise ValueError(f"group.consumer.assignors: unknown assignor(s) {unknown or names}; "
                         f"kbroker has {sorted(set(_BUILT_IN))}")
    chosen: list[Assignor] = []
    for name in names:
        assignor = _BUILT_IN[name]()
        if all(a.name != assignor.name for a in chosen):
            chosen.append(assignor)
    return chosen
