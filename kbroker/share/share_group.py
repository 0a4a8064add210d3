"""A share group's membership (KIP-932's ShareGroupHeartbeat), as pure state with time passed in.

Members name themselves (the client makes the member id), join with epoch 0 and the topics
they subscribe to, then heartbeat with their current epoch. The group epoch moves on whenever
the membership, a subscription or a subscribed topic's partitions change; the coordinator then
computes a target assignment with the share assignor. Unlike a consumer group there is nothing
to revoke first (a share partition can be read by several members at once), so a member takes
its target assignment, and the target's epoch, at its next heartbeat.

A member that misses heartbeats for the session timeout is removed; one that leaves sends
epoch -1. A heartbeat with a stale epoch is fenced (FENCED_MEMBER_EPOCH) and must join again.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from kbroker.share.assignor import assign_share_partitions
from protocol.errors import ErrorCode, KafkaError

JOIN_EPOCH = 0
LEAVE_EPOCH = -1
# topic id -> partition indexes
Assignment = dict[uuid.UUID, list[int]]


@dataclass(frozen=True)
class TopicInfo:
    topic_id: uuid.UUID
    partitions: int


@dataclass
class ShareMember:
    member_id: str
    subscribed: tuple[str, ...]
    rack: str | None
    client_id: str
    client_host: str
    member_epoch: int = 0
    assignment: Assignment = field(default_factory=dict)
    session_deadline_ms: int = 0


@dataclass(frozen=True)
class HeartbeatAnswer:
    member_epoch: int
    # The member's whole assignment when it changed (or on joining); None when unchanged.
    assignment: Assignment | None


@dataclass
class ShareGroup:
    group_id: str
    session_timeout_ms: int = 45_000
    max_size: int = 200
    group_epoch: int = 0
    assignment_epoch: int = 0
    members: dict[str, ShareMember] = field(default_factory=dict)
    # The share partitions the group has state for, as far as its coordinator knows (Kafka's
    # initialized share partitions): every one ever assigned or altered, until its offsets are
    # deleted. DescribeShareGroupOffsets of "all topics" lists these.
    initialized: set[tuple[uuid.UUID, int]] = field(default_factory=set)
    # The partitions of the subscribed topics the target assignment was computed for.
    _assigned_for: dict[str, TopicInfo] = field(default_factory=dict)
    _target: dict[str, Assignment] = field(default_factory=dict)

    @property
    def state(self) -> str:
        """ShareGroupDescribe's GroupState."""
        if not self.members:
            return "Empty"
        return "Stable" if all(m.member_epoch == self.assignment_epoch for m in self.members.values()) else "Assigning"

    def target_partitions(self) -> set[tuple[uuid.UUID, int]]:
        """Every (topic id, partition) the target assignment gives to some member."""
        return {(t, p) for assignment in self._target.values() for t, parts in assignment.items() for p in parts}

    def subscribed_topics(self) -> set[str]:
        return {t for m in self.members.values() for t in m.subscribed}

    def heartbeat(self, member_id: str, member_epoch: int, subscribed: Sequence[str] | None, rack: str | None,
                  topics: Mapping[str, TopicInfo], now_ms: int, client_id: str = "",
                  client_host: str = "") -> HeartbeatAnswer:
        """One ShareGroupHeartbeat; `topics` is what the broker knows of the cluster's topics."""
        if not member_id:
            raise KafkaError(ErrorCode.INVALID_REQUEST, "MemberId can't be empty.")
        if member_epoch == LEAVE_EPOCH:
            self.leave(member_id)
            return HeartbeatAnswer(LEAVE_EPOCH, None)
        member = self.members.get(member_id)
        changed = False  # one group epoch per heartbeat, however many things changed
        if member_epoch == JOIN_EPOCH:
            if not subscribed:
                raise KafkaError(ErrorCode.INVALID_REQUEST, "SubscribedTopicNames must be set in first request.")
            if member is None:
                if len(self.members) >= self.max_size:
                    raise KafkaError(ErrorCode.GROUP_MAX_SIZE_REACHED,
                                     f"The share group has reached its maximum capacity of {self.max_size} members.")
                member = ShareMember(member_id, (), rack, client_id, client_host)
                self.members[member_id] = member
                changed = True
        elif member is None:
            raise KafkaError(ErrorCode.UNKNOWN_MEMBER_ID, f"Member {member_id} is not a member of the share group.")
        elif member_epoch != member.member_epoch:
            raise KafkaError(ErrorCode.FENCED_MEMBER_EPOCH,
                             f"The share group member has a different epoch ({member.member_epoch}).")
        if subscribed is not None and tuple(sorted(set(subscribed))) != member.subscribed:
            member.subscribed = tuple(sorted(set(subscribed)))
            changed = True
        member.rack = rack if rack is not None else member.rack
        member.session_deadline_ms = now_ms + self.session_timeout_ms
        self._refresh_target(topics, changed)
        return self._reconcile(member, joined=member_epoch == JOIN_EPOCH)

    def leave(self, member_id: str) -> ShareMember | None:
        member = self.members.pop(member_id, None)
        if member is not None:
            self.group_epoch += 1
            self._target.pop(member_id, None)
        return member

    def expire_sessions(self, now_ms: int) -> list[ShareMember]:
        """Remove the members whose session timed out; they are returned."""
        gone = [m for m in self.members.values() if m.session_deadline_ms <= now_ms]
        for member in gone:
            self.leave(member.member_id)
        return gone

    def _refresh_target(self, topics: Mapping[str, TopicInfo], changed: bool) -> None:
        current = {name: topics[name] for name in sorted(self.subscribed_topics()) if name in topics}
        if changed or current != self._assigned_for:
            self._assigned_for = current
            self.group_epoch += 1
        if self.assignment_epoch == self.group_epoch:
            return
        by_id = {info.topic_id: info for info in current.values()}
        previous = {m: {(t, p) for t, parts in a.items() for p in parts} for m, a in self._target.items()}
        subscriptions = {m.member_id: {current[n].topic_id for n in m.subscribed if n in current}
                         for m in self.members.values()}
        target = assign_share_partitions(subscriptions, {t: info.partitions for t, info in by_id.items()}, previous)
        self._target = {m: _by_topic(assigned) for m, assigned in target.items()}
        self.assignment_epoch = self.group_epoch

    def _reconcile(self, member: ShareMember, joined: bool) -> HeartbeatAnswer:
        target = self._target.get(member.member_id, {})
        changed = target != member.assignment or member.member_epoch != self.assignment_epoch
        member.assignment = target
        member.member_epoch = self.assignment_epoch
        return HeartbeatAnswer(member.member_epoch, dict(target) if changed or joined else None)


def _by_topic(assigned: set[tuple[uuid.UUID, int]]) -> Assignment:
    result: Assignment = {}
    for topic_id, partition in sorted(assigned):
        result.setdefault(topic_id, []).append(partition)
    return result
