"""The consumer protocol's group model (KIP-848): members, groups, their states and the
messages of ConsumerGroupHeartbeat, as data. The rules that change them are in
consumer_group.py (`ConsumerGroups`); this module has no behaviour beyond a group's own
bookkeeping (its members, static members and partition epochs)."""

from __future__ import annotations

import base64
import enum
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from kbroker.coordinator.assignors import Assignor, UniformAssignor
from kbroker.coordinator.reconciliation import MemberAssignment, MemberState
from protocol.errors import ErrorCode

E = ErrorCode
TopicId = uuid.UUID
Assignment = dict[TopicId, frozenset[int]]


def new_member_id() -> str:
    """A member id the coordinator makes up, in the form of Kafka's Uuid.toString()."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()


class MigrationPolicy(enum.Enum):
    """Kafka's ConsumerGroupMigrationPolicy: which online conversions of a group with members are
    allowed (an empty group always changes protocol freely)."""

    BIDIRECTIONAL = "bidirectional"
    UPGRADE = "upgrade"
    DOWNGRADE = "downgrade"
    DISABLED = "disabled"

    @classmethod
    def parse(cls, text: str) -> MigrationPolicy:
        try:
            return cls(text.strip().lower())
        except ValueError:
            raise ValueError(f"group.consumer.migration.policy must be one of "
                             f"{', '.join(p.value for p in cls)}; got {text!r}") from None

    @property
    def upgrade_enabled(self) -> bool:
        return self in (MigrationPolicy.BIDIRECTIONAL, MigrationPolicy.UPGRADE)

    @property
    def downgrade_enabled(self) -> bool:
        return self in (MigrationPolicy.BIDIRECTIONAL, MigrationPolicy.DOWNGRADE)


@dataclass(frozen=True, slots=True)
class ConsumerGroupConfig:
    """Kafka's `group.consumer.*` settings."""

    heartbeat_interval_ms: int = 5_000
    session_timeout_ms: int = 45_000
    max_size: int = 2**31 - 1
    regex_refresh_interval_ms: int = 600_000
    assignors: tuple[Assignor, ...] = (UniformAssignor(),)
    # `group.consumer.migration.policy`: whether a group with members may change protocol.
    migration_policy: MigrationPolicy = MigrationPolicy.BIDIRECTIONAL
    classic_max_size: int = 2**31 - 1  # `group.max.size`: a downgraded group must fit in it


class TopicImage(Protocol):
    """What the coordinator knows of topics: ids, names, partition counts."""

    def topic_id(self, name: str) -> TopicId | None: ...

    def topic_name(self, topic_id: TopicId) -> str | None: ...

    def partition_count(self, name: str) -> int: ...

    def topic_names(self) -> Iterable[str]: ...


@dataclass(frozen=True, slots=True)
class Heartbeat:
    """One ConsumerGroupHeartbeat request; None fields did not change since the last one."""

    group_id: str
    member_id: str
    member_epoch: int
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    subscribed_topic_names: Sequence[str] | None = None
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    owned: Sequence[tuple[TopicId, Sequence[int]]] | None = None
    client_id: str = ""
    client_host: str = ""
    version: int = 1


@dataclass(frozen=True, slots=True)
class HeartbeatAnswer:
    member_id: str
    member_epoch: int
    heartbeat_interval_ms: int
    assignment: dict[TopicId, list[int]] | None = None  # None: unchanged, not sent


class ConsumerGroupState(enum.Enum):
    EMPTY = "Empty"
    ASSIGNING = "Assigning"  # the group epoch moved past the target assignment's
    RECONCILING = "Reconciling"  # some member is not at the target yet
    STABLE = "Stable"
    DEAD = "Dead"


@dataclass(frozen=True, slots=True)
class ClassicMetadata:
    """What a member speaking the classic protocol said in its JoinGroup (Kafka's
    ClassicMemberMetadata): its session timeout and its protocols (name, subscription bytes)."""

    session_timeout_ms: int
    protocols: tuple[tuple[str, bytes], ...]


@dataclass(slots=True)
class ConsumerMember:
    """One member. Its fields written to `__consumer_offsets` (all but the deadlines) are never
    changed on a member in a group: a change makes a new member (`dataclasses.replace`) put in
    with `ConsumerGroup.put_member`, which is how consumer_group_records.py sees what changed."""

    member_id: str
    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    rebalance_timeout_ms: int = -1
    server_assignor: str | None = None
    subscribed_topic_names: frozenset[str] = frozenset()
    subscribed_topic_regex: str = ""  # "" when none, as Kafka describes it
    state: MemberState = MemberState.STABLE
    member_epoch: int = 0
    previous_member_epoch: int = 0
    assigned: Assignment = field(default_factory=dict)
    pending_revocation: Assignment = field(default_factory=dict)
    session_deadline_ms: int = 0
    revocation_deadline_ms: int | None = None
    # Members of the classic protocol only: their JoinGroup metadata, and the times by which they
    # must rejoin (told REBALANCE_IN_PROGRESS) and send their SyncGroup (after a JoinGroup answer).
    classic: ClassicMetadata | None = None
    join_deadline_ms: int | None = None
    sync_deadline_ms: int | None = None

    @property
    def uses_classic_protocol(self) -> bool:
        return self.classic is not None

    def deadlines(self) -> list[int]:
        """Every time at which the member may have to be fenced."""
        times = [self.session_deadline_ms, self.revocation_deadline_ms, self.join_deadline_ms, self.sync_deadline_ms]
        return [t for t in times if t is not None]

    def reconciliation_view(self) -> MemberAssignment:
        return MemberAssignment(self.state, self.member_epoch, self.assigned, self.pending_revocation)


@dataclass(eq=False)
class ConsumerGroup:
    group_id: str
    group_epoch: int = 0
    assignment_epoch: int = 0
    members: dict[str, ConsumerMember] = field(default_factory=dict)
    static_members: dict[str, str] = field(default_factory=dict)  # instance id -> member id
    target: dict[str, Assignment] = field(default_factory=dict)
    # Epoch of the member owning each partition (assigned or pending revocation).
    partition_epochs: dict[tuple[TopicId, int], int] = field(default_factory=dict)
    subscription_metadata: dict[str, tuple[TopicId, int]] = field(default_factory=dict)
    resolved_regexes: dict[str, frozenset[str]] = field(default_factory=dict)
    regexes_resolved_at_ms: int = 0
    topics_at_resolution: frozenset[str] = frozenset()
    assignor_name: str = ""

    @property
    def state(self) -> ConsumerGroupState:
        if not self.members:
            return ConsumerGroupState.EMPTY
        if self.group_epoch != self.assignment_epoch:
            return ConsumerGroupState.ASSIGNING
        if any(m.state is not MemberState.STABLE or m.member_epoch != self.assignment_epoch
               for m in self.members.values()):
            return ConsumerGroupState.RECONCILING
        return ConsumerGroupState.STABLE

    @property
    def is_empty(self) -> bool:
        return not self.members

    def subscribed_topic_names(self, image: TopicImage | None = None) -> set[str]:
        """Every topic some member subscribes to, by name or through its regex."""
        names: set[str] = set()
        for member in self.members.values():
            names |= member.subscribed_topic_names
            names |= self.resolved_regexes.get(member.subscribed_topic_regex, frozenset())
        return names

    def classic_members(self) -> list[ConsumerMember]:
        return [m for m in self.members.values() if m.uses_classic_protocol]

    def supports_classic_protocols(self, protocol_type: str, names: Iterable[str]) -> bool:
        """Kafka's supportsClassicProtocols: a classic member may join with protocol type
        `consumer` and a protocol every classic member already in the group supports."""
        if protocol_type != "consumer":
            return False
        names = set(names)
        for member in self.classic_members():
            assert member.classic is not None
            names &= {name for name, _ in member.classic.protocols}
        return bool(names)

    def only_classic_members_besides(self, member_id: str) -> bool:
        """Whether `member_id` is the group's last member of the consumer protocol and others remain."""
        others = [m for m in self.members.values() if m.member_id != member_id]
        member = self.members.get(member_id)
        return (member is not None and not member.uses_classic_protocol and bool(others)
                and all(m.uses_classic_protocol for m in others))

    def waiting_on_unreleased_partition(self, member: ConsumerMember) -> bool:
        """Whether a partition of the member's target is still owned by another member."""
        if member.state is not MemberState.UNRELEASED_PARTITIONS:
            return False
        for topic, partitions in self.target.get(member.member_id, {}).items():
            assigned = member.assigned.get(topic, frozenset())
            if any(p not in assigned and self.owner_epoch(topic, p) != -1 for p in partitions):
                return True
        return False

    def owner_epoch(self, topic: TopicId, partition: int) -> int:
        return self.partition_epochs.get((topic, partition), -1)

    def put_member(self, member: ConsumerMember) -> None:
        """Add or replace a member, keeping the partition owners' epochs in step."""
        old = self.members.get(member.member_id)
        if old is not None:
            self._release(old)
        self.members[member.member_id] = member
        if member.instance_id is not None:
            self.static_members[member.instance_id] = member.member_id
        for assignment in (member.assigned, member.pending_revocation):
            for topic, partitions in assignment.items():
                for p in partitions:
                    self.partition_epochs[(topic, p)] = member.member_epoch

    def remove_member(self, member_id: str) -> ConsumerMember | None:
        member = self.members.pop(member_id, None)
        if member is None:
            return None
        self._release(member)
        self.target.pop(member_id, None)
        if member.instance_id is not None and self.static_members.get(member.instance_id) == member_id:
            del self.static_members[member.instance_id]
        return member

    def _release(self, member: ConsumerMember) -> None:
        for assignment in (member.assigned, member.pending_revocation):
            for topic, partitions in assignment.items():
                for p in partitions:
                    if self.partition_epochs.get((topic, p)) == member.member_epoch:
                        del self.partition_epochs[(topic, p)]
