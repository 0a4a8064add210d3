"""Consumer-protocol groups in `__consumer_offsets`: the group model (consumer_group_model.py)
mapped to Kafka's records (protocol/consumer_group_records.py) and back.

Writing: `ConsumerGroupStore.save` compares a group with what was last written of it and
appends, as one batch, only the records that changed, in the order Kafka's
GroupMetadataManager writes them: members that left (current assignment, target assignment
and member metadata tombstones), new or changed member metadata, regexes, the subscribed
topics' metadata, the group epoch, changed target assignments and then the assignment epoch,
changed current assignments. A group gone writes the tombstones of all its records.

A snapshot holds, per member, the member object it was taken of: the coordinator replaces a
member object whenever a persisted field changes (`dataclasses.replace`, `put_member`), so an
unchanged object needs no comparison and a heartbeat that changed nothing costs one identity
check per member.

Reading: `GroupReplay` folds the records of a partition, in log order, into one builder per
group (any record creates the group, a ConsumerGroupMetadata tombstone drops it, Kafka's
replay rules) and builds the groups at the end.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field

from kbroker.clock import wall_clock_ms
from kbroker.coordinator.consumer_group_model import (
    Assignment,
    ClassicMetadata,
    ConsumerGroup,
    ConsumerMember,
)
from kbroker.coordinator.offsets_topic import OffsetsTopic
from kbroker.coordinator.reconciliation import MemberState
from protocol.consumer_group_records import (
    CURRENT_MEMBER_ASSIGNMENT,
    GROUP_METADATA,
    MEMBER_METADATA,
    PARTITION_METADATA,
    REGULAR_EXPRESSION,
    TARGET_ASSIGNMENT_MEMBER,
    TARGET_ASSIGNMENT_METADATA,
    ClassicMemberMetadata,
    ConsumerGroupRecordKey,
    ConsumerGroupRecordValue,
    CurrentAssignment,
    GroupEpoch,
    MemberMetadata,
    PartitionMetadata,
    ResolvedRegex,
    SubscribedTopic,
    TargetAssignment,
    TargetAssignmentEpoch,
    entry,
)

log = logging.getLogger("kbroker.coordinator")

Entry = tuple[bytes, bytes | None]
# kbroker has no metadata image offset to version a regex resolution with (Kafka writes its
# image's offset); -1 tells a reader to resolve the regex again.
REGEX_VERSION_UNKNOWN = -1

_STATE_BYTES = {MemberState.STABLE: 0, MemberState.UNREVOKED_PARTITIONS: 1, MemberState.UNRELEASED_PARTITIONS: 2}
_STATES = {v: k for k, v in _STATE_BYTES.items()}


# -- model -> records -----------------------------------------------------------------------------


def member_metadata(member: ConsumerMember) -> MemberMetadata:
    classic = None
    if member.classic is not None:
        classic = ClassicMemberMetadata(member.classic.session_timeout_ms, member.classic.protocols)
    return MemberMetadata(member.instance_id, member.rack_id, member.client_id, member.client_host,
                          tuple(sorted(member.subscribed_topic_names)), member.subscribed_topic_regex,
                          member.rebalance_timeout_ms, member.server_assignor, classic)


def current_assignment(member: ConsumerMember) -> CurrentAssignment:
    return CurrentAssignment(member.member_epoch, member.previous_member_epoch, _STATE_BYTES[member.state],
                             _non_empty(member.assigned), _non_empty(member.pending_revocation))


def _non_empty(assignment: Assignment) -> Assignment:
    return {t: frozenset(ps) for t, ps in assignment.items() if ps}


def partition_metadata(group: ConsumerGroup) -> PartitionMetadata:
    return PartitionMetadata(tuple(SubscribedTopic(topic_id, name, count)
                                   for name, (topic_id, count) in sorted(group.subscription_metadata.items())))


@dataclass(frozen=True, slots=True)
class MemberSnapshot:
    member: ConsumerMember  # the object this was taken of
    metadata: MemberMetadata
    current: CurrentAssignment


@dataclass(slots=True)
class GroupSnapshot:
    """What was last written of a group. `topics_of` is the group's subscription metadata dict
    the topics were taken from (replaced, never changed in place, when the topics change)."""

    epoch: int
    topics: PartitionMetadata
    assignment_epoch: int
    topics_of: object = None
    members: dict[str, MemberSnapshot] = field(default_factory=dict)
    targets: dict[str, Assignment] = field(default_factory=dict)
    regexes: dict[str, frozenset[str]] = field(default_factory=dict)


def snapshot(group: ConsumerGroup, previous: GroupSnapshot | None = None) -> GroupSnapshot:
    members = {}
    for member_id, member in group.members.items():
        before = previous.members.get(member_id) if previous is not None else None
        if before is not None and before.member is member:
            members[member_id] = before
        else:
            members[member_id] = MemberSnapshot(member, member_metadata(member), current_assignment(member))
    # Target assignments are replaced whole, never changed in place: kept by reference.
    targets = {m: a for m, a in group.target.items() if m in group.members}
    if previous is not None and previous.topics_of is group.subscription_metadata:
        topics = previous.topics
    else:
        topics = partition_metadata(group)
    return GroupSnapshot(group.group_epoch, topics, group.assignment_epoch, group.subscription_metadata, members,
                         targets, dict(group.resolved_regexes))


def changes(group_id: str, before: GroupSnapshot | None, after: GroupSnapshot | None) -> list[Entry]:
    """The records that take the log from `before` to `after` (None: no group)."""
    if before is None and after is None:
        return []
    old = before if before is not None else _EMPTY
    new = after if after is not None else _EMPTY
    out: list[Entry] = []

    def put(record_type: int, value: ConsumerGroupRecordValue | None, subject: str = "") -> None:
        out.append(entry(ConsumerGroupRecordKey(record_type, group_id, subject), value))

    for member_id in old.members.keys() - new.members.keys():
        put(CURRENT_MEMBER_ASSIGNMENT, None, member_id)
        put(TARGET_ASSIGNMENT_MEMBER, None, member_id)
        put(MEMBER_METADATA, None, member_id)
    for member_id, member in new.members.items():
        was = old.members.get(member_id)
        if was is None or was.metadata != member.metadata:
            put(MEMBER_METADATA, member.metadata, member_id)
    now_ms = wall_clock_ms()
    for regex, topics in new.regexes.items():
        if old.regexes.get(regex) != topics:
            put(REGULAR_EXPRESSION, ResolvedRegex(topics, REGEX_VERSION_UNKNOWN, now_ms), regex)
    for regex in old.regexes.keys() - new.regexes.keys():
        put(REGULAR_EXPRESSION, None, regex)
    if after is None:
        put(TARGET_ASSIGNMENT_METADATA, None)
        put(PARTITION_METADATA, None)
        put(GROUP_METADATA, None)
        return out
    if before is None or old.topics != new.topics:
        put(PARTITION_METADATA, new.topics)
    if before is None or old.epoch != new.epoch:
        put(GROUP_METADATA, GroupEpoch(new.epoch))
    for member_id, target in new.targets.items():
        was_target = old.targets.get(member_id)
        if was_target is None or (was_target is not target and was_target != target):
            put(TARGET_ASSIGNMENT_MEMBER, TargetAssignment(target), member_id)
    if before is None or old.assignment_epoch != new.assignment_epoch:
        put(TARGET_ASSIGNMENT_METADATA, TargetAssignmentEpoch(new.assignment_epoch))
    for member_id, member in new.members.items():
        was = old.members.get(member_id)
        if was is None or was.current != member.current:
            put(CURRENT_MEMBER_ASSIGNMENT, member.current, member_id)
    return out


_EMPTY = GroupSnapshot(0, PartitionMetadata(()), 0)


class ConsumerGroupStore:
    """What has been written of each consumer group this coordinator holds, and the writes."""

    def __init__(self, topic: OffsetsTopic) -> None:
        self.topic = topic
        self.written: dict[str, GroupSnapshot] = {}

    def save(self, group_id: str, group: ConsumerGroup | None, before: Iterable[Entry] = (),
             after: Iterable[Entry] = ()) -> bool:
        """Append what changed in the group since the last save (`group` None: it is gone), with
        the records `before` and `after` it, as one batch; whether anything was written. Raises
        the KafkaError of a failed write (what was written stays the reference then)."""
        changed, snapshot_after = self.pending(group_id, group)
        entries = [*before, *changed, *after]
        if not entries:
            return False
        self.topic.write(group_id, entries, wall_clock_ms())
        self.remember(group_id, snapshot_after)
        return True

    def pending(self, group_id: str, group: ConsumerGroup | None) -> tuple[list[Entry], GroupSnapshot | None]:
        """The records a save would write now, and the snapshot it would leave."""
        before = self.written.get(group_id)
        after = snapshot(group, before) if group is not None else None
        return changes(group_id, before, after), after

    def remember(self, group_id: str, after: GroupSnapshot | None) -> None:
        if after is None:
            self.written.pop(group_id, None)
        else:
            self.written[group_id] = after

    def loaded(self, group: ConsumerGroup) -> None:
        """The group was just rebuilt from its records: they are what is written."""
        self.written[group.group_id] = snapshot(group)

    def forget(self, group_id: str) -> None:
        self.written.pop(group_id, None)


# -- records -> model -----------------------------------------------------------------------------


@dataclass(slots=True)
class _GroupRecords:
    epoch: int = 0
    topics: PartitionMetadata = PartitionMetadata(())
    assignment_epoch: int = 0
    members: dict[str, MemberMetadata] = field(default_factory=dict)
    current: dict[str, CurrentAssignment] = field(default_factory=dict)
    targets: dict[str, Assignment] = field(default_factory=dict)
    regexes: dict[str, frozenset[str]] = field(default_factory=dict)


class GroupReplay:
    """Consumer groups rebuilt from their records, fed in log order."""

    def __init__(self) -> None:
        self.groups: dict[str, _GroupRecords] = {}

    def apply(self, key: ConsumerGroupRecordKey, value: ConsumerGroupRecordValue | None) -> None:
        records = self.groups.get(key.group_id)
        if value is None:
            if records is not None:
                self._delete(key, records)
            return
        if records is None:
            records = self.groups[key.group_id] = _GroupRecords()
        subject = key.subject
        if isinstance(value, GroupEpoch):
            records.epoch = value.epoch
        elif isinstance(value, PartitionMetadata):
            records.topics = value
        elif isinstance(value, TargetAssignmentEpoch):
            records.assignment_epoch = value.assignment_epoch
        elif isinstance(value, MemberMetadata):
            records.members[subject] = value
        elif isinstance(value, CurrentAssignment):
            records.current[subject] = value
        elif isinstance(value, TargetAssignment):
            records.targets[subject] = value.partitions
        elif isinstance(value, ResolvedRegex):
            records.regexes[subject] = value.topics

    def _delete(self, key: ConsumerGroupRecordKey, records: _GroupRecords) -> None:
        kind = key.record_type
        if kind == GROUP_METADATA:
            del self.groups[key.group_id]
        elif kind == PARTITION_METADATA:
            records.topics = PartitionMetadata(())
        elif kind == TARGET_ASSIGNMENT_METADATA:
            records.assignment_epoch = 0
        elif kind == MEMBER_METADATA:
            records.members.pop(key.subject, None)
        elif kind == CURRENT_MEMBER_ASSIGNMENT:
            records.current.pop(key.subject, None)
        elif kind == TARGET_ASSIGNMENT_MEMBER:
            records.targets.pop(key.subject, None)
        elif kind == REGULAR_EXPRESSION:
            records.regexes.pop(key.subject, None)

    def discard(self, group_id: str) -> None:
        """A later classic group record replaces the group."""
        self.groups.pop(group_id, None)

    def build(self) -> list[ConsumerGroup]:
        return [_build(group_id, records) for group_id, records in self.groups.items()]


def _build(group_id: str, records: _GroupRecords) -> ConsumerGroup:
    group = ConsumerGroup(group_id, group_epoch=records.epoch, assignment_epoch=records.assignment_epoch)
    group.subscription_metadata = {t.name: (t.topic_id, t.partitions) for t in records.topics.topics}
    group.resolved_regexes = dict(records.regexes)
    for member_id in records.members.keys() | records.current.keys():
        group.put_member(_member(member_id, records.members.get(member_id), records.current.get(member_id)))
    group.target = {m: dict(a) for m, a in records.targets.items() if m in group.members}
    return group


def _member(member_id: str, metadata: MemberMetadata | None, current: CurrentAssignment | None) -> ConsumerMember:
    # Kafka's defaults for a record not seen (a member is created by whichever comes first).
    member = ConsumerMember(member_id)
    if metadata is not None:
        member.instance_id = metadata.instance_id
        member.rack_id = metadata.rack_id
        member.client_id = metadata.client_id
        member.client_host = metadata.client_host
        member.subscribed_topic_names = frozenset(metadata.subscribed_topic_names)
        member.subscribed_topic_regex = metadata.subscribed_topic_regex
        member.rebalance_timeout_ms = metadata.rebalance_timeout_ms
        member.server_assignor = metadata.server_assignor
        if metadata.classic is not None:
            member.classic = ClassicMetadata(metadata.classic.session_timeout_ms, metadata.classic.protocols)
    if current is not None:
        member.member_epoch = current.member_epoch
        member.previous_member_epoch = current.previous_member_epoch
        member.state = _STATES.get(current.state, MemberState.STABLE)
        member.assigned = dict(current.assigned)
        member.pending_revocation = dict(current.pending_revocation)
    return member
