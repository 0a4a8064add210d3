"""Reconciliation of one member of a consumer group (KIP-848): how its current assignment moves
towards its target, as Kafka's CurrentAssignmentBuilder does it.

A partition is never owned by two members at once. So a member that must give up partitions
first stays at its epoch with those partitions *pending revocation* (UNREVOKED_PARTITIONS) until
a heartbeat no longer lists them as owned; only then does it move to the target epoch. A
partition of its target still owned by another member (assigned there, or pending revocation)
is not handed out until that member has released it (UNRELEASED_PARTITIONS).

Pure functions over plain data: no IO, no clock.
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Callable, Mapping, Sequence, Set
from dataclasses import dataclass

TopicId = uuid.UUID
Assignment = Mapping[TopicId, Set[int]]
Owned = Sequence[tuple[TopicId, Sequence[int]]]  # what a heartbeat says the member owns


class MemberState(enum.Enum):
    STABLE = "stable"
    UNREVOKED_PARTITIONS = "unrevoked_partitions"
    UNRELEASED_PARTITIONS = "unreleased_partitions"


@dataclass(frozen=True, slots=True)
class MemberAssignment:
    """Where a member is: its state, epoch, the partitions it may use and those it must give up."""

    state: MemberState
    member_epoch: int
    assigned: Mapping[TopicId, frozenset[int]]
    pending_revocation: Mapping[TopicId, frozenset[int]]


def reconcile(
    current: MemberAssignment,
    target_epoch: int,
    target: Assignment,
    subscribed: Set[TopicId],
    owner_epoch: Callable[[TopicId, int], int],
    owned: Owned | None,
) -> MemberAssignment:
    """The member's next assignment (`current` itself when it cannot move yet).

    `owner_epoch(topic, partition)` is the epoch of the member owning the partition, -1 when
    none does; `owned` is what the member's heartbeat reported (None: not reported)."""
    if current.state is MemberState.STABLE:
        if current.member_epoch == target_epoch:
            return current
        return _next(current, target_epoch, target, subscribed, owner_epoch, owned)
    if current.state is MemberState.UNREVOKED_PARTITIONS:
        if _owns_any(owned, current.pending_revocation):
            return current  # it has not released them yet
        return _next(current, target_epoch, target, subscribed, owner_epoch, owned)
    return _next(current, target_epoch, target, subscribed, owner_epoch, owned)  # UNRELEASED_PARTITIONS


def _next(
    current: MemberAssignment, target_epoch: int, target: Assignment, subscribed: Set[TopicId],
    owner_epoch: Callable[[TopicId, int], int], owned: Owned | None,
) -> MemberAssignment:
    assigned: dict[TopicId, frozenset[int]] = {}
    revoking: dict[TopicId, frozenset[int]] = {}
    to_assign: dict[TopicId, frozenset[int]] = {}
    unreleased = False
    for topic in set(target) | set(current.assigned):
        # A topic the member no longer subscribes to is given up, whatever the target says.
        wanted = frozenset(target.get(topic, ())) if topic in subscribed else frozenset()
        had = current.assigned.get(topic, frozenset())
        keep = had & wanted
        give_up = had - keep
        pending_own = current.pending_revocation.get(topic, frozenset())
        missing = wanted - keep
        # Owned elsewhere: wait for its release (its own pending revocations are its to take back).
        blocked = {p for p in missing if owner_epoch(topic, p) != -1 and p not in pending_own}
        unreleased = unreleased or bool(blocked)
        missing -= blocked
        if keep:
            assigned[topic] = keep
        if give_up:
            revoking[topic] = give_up
        if missing:
            to_assign[topic] = frozenset(missing)
    if revoking and _owns_any(owned, revoking):
        # Revocation before assignment: same epoch until the member reports them gone.
        return MemberAssignment(MemberState.UNREVOKED_PARTITIONS, current.member_epoch, assigned, revoking)
    for topic, partitions in to_assign.items():
        assigned[topic] = assigned.get(topic, frozenset()) | partitions
    state = MemberState.UNRELEASED_PARTITIONS if unreleased else MemberState.STABLE
    return MemberAssignment(state, target_epoch, assigned, {})


def _owns_any(owned: Owned | None, partitions: Mapping[TopicId, Set[int]]) -> bool:
    """Whether the member still owns one of `partitions`; a heartbeat that did not say what it
    owns is taken to own them all (Kafka's rule)."""
    if owned is None:
        return True
    return any(p in partitions.get(topic, ()) for topic, ps in owned for p in ps)
