"""A classic consumer group: its members, generation, chosen protocol and state.

The state machine is Kafka's (classic protocol):

    Empty ──join──▶ PreparingRebalance ──all joined / timeout──▶ CompletingRebalance
      ▲                   ▲      │                                      │ leader's SyncGroup
      │                   │      └──no members left──▶ Empty             ▼
      └── last member ────┴────── join / leave / failure ─────────── Stable
    Dead: removed (deleted, or its offsets expired); a new group of the same id starts Empty.

The membership protocol (group_membership.py) drives transitions; this module holds the data
and the rules that depend only on it (protocol selection, who has joined, who may commit
offsets, what to report).
"""

from __future__ import annotations

import asyncio
import enum
import struct
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from kbroker.clock import Timer
from protocol.coordinator_records import GroupValue, MemberValue
from protocol.errors import ErrorCode, KafkaError

UNKNOWN_MEMBER_ID = ""  # what a member that has not joined yet sends as its id


class GroupState(enum.Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


_VALID_PREVIOUS = {
    GroupState.EMPTY: {GroupState.PREPARING_REBALANCE},
    GroupState.PREPARING_REBALANCE: {GroupState.EMPTY, GroupState.STABLE, GroupState.COMPLETING_REBALANCE},
    GroupState.COMPLETING_REBALANCE: {GroupState.PREPARING_REBALANCE},
    GroupState.STABLE: {GroupState.COMPLETING_REBALANCE},
    GroupState.DEAD: set(GroupState),
}


@dataclass(frozen=True, slots=True)
class JoinResult:
    error: int
    member_id: str
    generation_id: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str = ""
    members: list[dict[str, Any]] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class SyncResult:
    error: int
    assignment: bytes = b""
    protocol_type: str | None = None
    protocol_name: str | None = None


@dataclass(eq=False)
class Member:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]  # (name, metadata), in the member's order of preference
    assignment: bytes = b""
    awaiting_join: asyncio.Future[JoinResult] | None = None
    awaiting_sync: asyncio.Future[SyncResult] | None = None
    is_new: bool = False
    heartbeat_deadline: float = 0.0  # loop time after which the member is considered dead
    session_timer: Timer | None = None

    def metadata(self, protocol: str) -> bytes:
        return next((m for name, m in self.protocols if name == protocol), b"")

    def protocol_names(self) -> list[str]:
        return [name for name, _ in self.protocols]

    def matches(self, protocols: list[tuple[str, bytes]]) -> bool:
        return self.protocols == protocols

    def vote(self, candidates: set[str]) -> str:
        """The first of this member's protocols that every member supports."""
        return next(name for name in self.protocol_names() if name in candidates)


@dataclass(eq=False)
class Group:
    group_id: str
    state: GroupState = GroupState.EMPTY
    state_timestamp_ms: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    generation_id: int = 0
    leader_id: str | None = None
    members: dict[str, Member] = field(default_factory=dict)
    static_members: dict[str, str] = field(default_factory=dict)  # group.instance.id -> member id
    pending_members: set[str] = field(default_factory=set)  # told MEMBER_ID_REQUIRED, not joined yet
    new_member_added: bool = False
    join_timer: Timer | None = None
    join_deadline: float = 0.0  # loop time at which the join phase ends regardless

    # -- state -----------------------------------------------------------------------------------

    def is_in(self, *states: GroupState) -> bool:
        return self.state in states

    def transition(self, state: GroupState, now_ms: int) -> None:
        if self.state not in _VALID_PREVIOUS[state]:
            raise AssertionError(f"group {self.group_id}: illegal transition {self.state.value} -> {state.value}")
        self.state = state
        self.state_timestamp_ms = now_ms

    @property
    def is_empty(self) -> bool:
        return not self.members

    # -- members ---------------------------------------------------------------------------------

    def add(self, member: Member) -> None:
        if not self.members:
            self.protocol_type = member.protocol_type
        self.members[member.member_id] = member
        if member.group_instance_id is not None:
            self.static_members[member.group_instance_id] = member.member_id
        if self.leader_id is None:
            self.leader_id = member.member_id

    def remove(self, member_id: str) -> Member | None:
        member = self.members.pop(member_id, None)
        if member is None:
            return None
        if member.group_instance_id is not None and self.static_members.get(member.group_instance_id) == member_id:
            del self.static_members[member.group_instance_id]
        if self.leader_id == member_id:
            self.leader_id = next(iter(self.members), None)
        return member

    def replace_static(self, instance_id: str, old_id: str, new_id: str) -> Member:
        """A static member rejoined without its member id: it takes over under a new one."""
        member = self.members.pop(old_id)
        member.member_id = new_id
        self.members[new_id] = member
        self.static_members[instance_id] = new_id
        if self.leader_id == old_id:
            self.leader_id = new_id
        return member

    def static_member_id(self, instance_id: str | None) -> str | None:
        return self.static_members.get(instance_id) if instance_id is not None else None

    def all_joined(self) -> bool:
        return not self.pending_members and all(m.awaiting_join is not None for m in self.members.values())

    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    # -- who may act for the group --------------------------------------------------------------

    def validate_member(self, member_id: str, instance_id: str | None) -> None:
        """Kafka's validateCurrentMember: a named instance must be mapped to this member, and the
        member must be in the group."""
        if instance_id is not None:
            static_id = self.static_member_id(instance_id)
            if static_id is None:
                raise KafkaError(ErrorCode.UNKNOWN_MEMBER_ID)
            if static_id != member_id:
                raise KafkaError(ErrorCode.FENCED_INSTANCE_ID)
        if member_id not in self.members:
            raise KafkaError(ErrorCode.UNKNOWN_MEMBER_ID)

    def validate_offset_commit(
        self, generation_id: int, member_id: str, instance_id: str | None, transactional: bool
    ) -> None:
        """Kafka's validateOffsetCommit: who commits is checked before the group's state, so a
        stale member hears ILLEGAL_GENERATION or UNKNOWN_MEMBER_ID, never REBALANCE_IN_PROGRESS."""
        if self.is_in(GroupState.DEAD):
            raise KafkaError(ErrorCode.COORDINATOR_NOT_AVAILABLE)
        if generation_id < 0 and self.is_in(GroupState.EMPTY):
            return  # the admin client, or a consumer that assigns itself: offsets only
        if generation_id >= 0 or member_id != UNKNOWN_MEMBER_ID or instance_id is not None:
            self.validate_member(member_id, instance_id)
            if generation_id != self.generation_id:
                raise KafkaError(ErrorCode.ILLEGAL_GENERATION)
        elif not transactional and not self.is_in(GroupState.EMPTY):
            # Only members commit for a group that has some (v0 requests name no member). Older
            # TxnOffsetCommit versions name none either, so that rule is not theirs.
            raise KafkaError(ErrorCode.UNKNOWN_MEMBER_ID)
        if not transactional and self.is_in(GroupState.COMPLETING_REBALANCE):
            # A current member that has its JoinGroup answer but no assignment yet.
            raise KafkaError(ErrorCode.REBALANCE_IN_PROGRESS)

    # -- protocols -------------------------------------------------------------------------------

    def supports(self, protocol_type: str, protocols: list[tuple[str, bytes]]) -> bool:
        """Whether a member with these protocols may join: same type, and a protocol in common."""
        if not protocol_type or not protocols:
            return False
        if not self.members:
            return True
        names = {name for name, _ in protocols}
        return protocol_type == self.protocol_type and bool(names & self.candidate_protocols())

    def candidate_protocols(self) -> set[str]:
        sets = [set(m.protocol_names()) for m in self.members.values()]
        return set.intersection(*sets) if sets else set()

    def select_protocol(self) -> str:
        """Each member votes for its first supported candidate; the most votes win (Kafka's rule)."""
        candidates = self.candidate_protocols()
        votes = Counter(member.vote(candidates) for member in self.members.values())
        return max(votes, key=lambda name: (votes[name], name))

    # -- reporting and persistence ---------------------------------------------------------------

    def subscribed_topics(self) -> set[str] | None:
        """Topics the consumer members subscribe to, or None when that cannot be known."""
        if self.protocol_type != "consumer" or self.protocol_name is None:
            return None
        topics: set[str] = set()
        for member in self.members.values():
            parsed = parse_subscription_topics(member.metadata(self.protocol_name))
            if parsed is None:
                return None
            topics.update(parsed)
        return topics

    def to_record(self, now_ms: int) -> GroupValue:
        members = [
            MemberValue(
                m.member_id, m.group_instance_id, m.client_id, m.client_host, m.rebalance_timeout_ms,
                m.session_timeout_ms, m.metadata(self.protocol_name or ""), m.assignment,
            )
            for m in self.members.values()
        ]
        state_ts = self.state_timestamp_ms if self.state_timestamp_ms >= 0 else now_ms
        return GroupValue(self.protocol_type or "", self.generation_id, self.protocol_name, self.leader_id,
                          state_ts, members)


def parse_subscription_topics(metadata: bytes) -> list[str] | None:
    """The topic list of a ConsumerProtocolSubscription (any version: topics come right after
    the int16 version), or None if it does not parse."""
    try:
        (count,) = struct.unpack_from(">i", metadata, 2)
        position, topics = 6, []
        for _ in range(max(count, 0)):
            (length,) = struct.unpack_from(">h", metadata, position)
            position += 2
            topics.append(metadata[position : position + length].decode())
            position += length
        return topics
    except (struct.error, UnicodeDecodeError):
        return None
