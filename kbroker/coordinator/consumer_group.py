"""Consumer groups of the consumer protocol (KIP-848, `group.protocol=consumer`): the rules of
ConsumerGroupHeartbeat as Kafka's GroupMetadataManager applies them, with no IO and no clock
of its own (every call is given the time), so tests drive it by hand.

A heartbeat does three things, in Kafka's order:

1. it creates or updates the member; a new member, a changed subscription (names or regex) or
   a change of the subscribed topics' metadata bumps the *group epoch*;
2. when the group epoch is ahead of the *assignment epoch*, the server-side assignor computes a
   new target assignment for every member (sticky: members keep what they can);
3. it reconciles the member towards its target (reconciliation.py): partitions are revoked
   before others are handed out, and a partition is handed out only once released; the member
   reaches the target's epoch when nothing stands in the way.

The group model (members, groups, the heartbeat's messages) is consumer_group_model.py.

Members are fenced (removed, group epoch bumped) when they leave (epoch -1), when their session
times out, or when they take longer than their rebalance timeout to revoke partitions. A static
member (instance id) leaving with epoch -2 keeps its place and partitions for a session timeout,
and a new incarnation with the same instance id takes them over.

A group may also hold members of the classic protocol during an online upgrade or downgrade
(Kafka 4.0's mixed groups): classic_members.py serves their JoinGroup, SyncGroup, Heartbeat and
LeaveGroup over this same machinery, and group_conversion.py turns a classic group with members
into a consumer group and back. When the last consumer-protocol member of a group is fenced and
classic members remain, the group is handed back to the classic protocol (`take_downgraded`).
"""

from __future__ import annotations

import logging
import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import replace

from kbroker.coordinator.assignors import Assignor, GroupSpec, MemberSpec
from kbroker.coordinator.consumer_group_model import (
    Assignment,
    ClassicMetadata,
    ConsumerGroup,
    ConsumerGroupConfig,
    ConsumerGroupState,
    ConsumerMember,
    Heartbeat,
    HeartbeatAnswer,
    MigrationPolicy,
    TopicId,
    TopicImage,
    new_member_id,
)
from kbroker.coordinator.reconciliation import MemberState, reconcile
from kbroker.coordinator.topic_regex import InvalidRegex, compile_topic_regex, matching_topics
from protocol.errors import ErrorCode, KafkaError

log = logging.getLogger("kbroker.coordinator")

E = ErrorCode
# The model's names are this module's too: the callers know consumer groups by one module.
__all__ = ["ClassicMetadata", "ConsumerGroup", "ConsumerGroupConfig", "ConsumerGroupState", "ConsumerGroups",
           "ConsumerMember", "Heartbeat", "HeartbeatAnswer", "MigrationPolicy", "TopicImage", "new_member_id"]

LEAVE_GROUP_MEMBER_EPOCH = -1
LEAVE_GROUP_STATIC_MEMBER_EPOCH = -2
# From ConsumerGroupHeartbeat v1 on, the client makes up its member id (KIP-1082).
CONSUMER_GENERATED_MEMBER_ID_REQUIRED_VERSION = 1
# Regexes are re-resolved against new topics at most this often (Kafka's batch refresh interval).
REGEX_MIN_REFRESH_INTERVAL_MS = 10_000


class ConsumerGroups:
    """The consumer groups of one group coordinator."""

    def __init__(self, config: ConsumerGroupConfig, image: TopicImage) -> None:
        self.config = config
        self.image = image
        self.groups: dict[str, ConsumerGroup] = {}
        # A group's own (session timeout, heartbeat interval) from its group configs
        # (consumer.session.timeout.ms, consumer.heartbeat.interval.ms); None: the broker's.
        self.timing_of: Callable[[str], tuple[int, int]] | None = None
        # Groups whose last consumer-protocol member (the id beside each) left while classic members
        # remain: no longer consumer groups, for the classic side to take over (group_conversion.py).
        self.downgraded: list[tuple[ConsumerGroup, str]] = []

    def take_downgraded(self) -> list[tuple[ConsumerGroup, str]]:
        groups, self.downgraded = self.downgraded, []
        return groups

    @property
    def assignor_names(self) -> list[str]:
        return [a.name for a in self.config.assignors]

    # -- ConsumerGroupHeartbeat ------------------------------------------------------------------

    def heartbeat(self, request: Heartbeat, now_ms: int, converted: ConsumerGroup | None = None) -> HeartbeatAnswer:
        """Answer one heartbeat, or raise the KafkaError Kafka answers it with. Nothing changes
        when it raises. `converted`: the group a classic group with members becomes (an online
        upgrade), taken in only if the heartbeat is accepted."""
        self.validate(request)
        if request.member_epoch in (LEAVE_GROUP_MEMBER_EPOCH, LEAVE_GROUP_STATIC_MEMBER_EPOCH):
            return self._leave(request, now_ms)
        joining = request.member_epoch == 0
        if joining and not request.member_id:
            # Before v1 the coordinator names a new member (KIP-1082 moved that to the client).
            request = replace(request, member_id=new_member_id())
        group = converted if converted is not None else self.groups.get(request.group_id)
        if group is None:
            if not joining:
                raise KafkaError(E.GROUP_ID_NOT_FOUND, f"Consumer group {request.group_id} not found.")
            group = ConsumerGroup(request.group_id)
        if len(group.members) >= self.config.max_size and request.member_id not in group.members:
            raise KafkaError(E.GROUP_MAX_SIZE_REACHED, "The consumer group has reached its maximum capacity of "
                             f"{self.config.max_size} members.")
        member, replaced = self._member_for(group, request, joining)
        updated = self._updated(member, request)
        new_regex = updated.subscribed_topic_regex != member.subscribed_topic_regex
        if new_regex and updated.subscribed_topic_regex:
            pattern = _compile(updated.subscribed_topic_regex)  # refused before anything changes
        bump = group.group_epoch == 0 or updated.subscribed_topic_names != member.subscribed_topic_names or new_regex
        # -- from here on the request is accepted: change the group ------------------------------
        self.groups[group.group_id] = group
        if replaced is not None:
            self.replace_static(group, replaced, updated)
        group.put_member(updated)
        if new_regex and updated.subscribed_topic_regex:
            self._resolve(group, updated.subscribed_topic_regex, pattern, now_ms)
        final = self.advance(group, updated, bump, request.owned, now_ms)
        session_timeout_ms, heartbeat_interval_ms = self.timing(group.group_id)
        final.session_deadline_ms = now_ms + session_timeout_ms
        full_request = joining or (request.rebalance_timeout_ms != -1 and request.owned is not None and (
            request.subscribed_topic_names is not None or request.subscribed_topic_regex is not None))
        changed = final.assigned != member.assigned or joining
        assignment = _wire_assignment(final.assigned) if full_request or changed else None
        return HeartbeatAnswer(final.member_id, final.member_epoch, heartbeat_interval_ms, assignment)

    def timing(self, group_id: str) -> tuple[int, int]:
        """(session timeout, heartbeat interval) of a group: its group configs', else the broker's."""
        if self.timing_of is not None:
            return self.timing_of(group_id)
        return self.config.session_timeout_ms, self.config.heartbeat_interval_ms

    def advance(
        self, group: ConsumerGroup, member: ConsumerMember, bump: bool,
        owned: Sequence[tuple[TopicId, Sequence[int]]] | None, now_ms: int,
    ) -> ConsumerMember:
        """Steps 1-3 of a heartbeat once the member is in the group: a new group epoch if its
        subscription (or the topics) changed, a new target assignment if the epoch moved, and
        the member's reconciliation towards its target."""
        bump |= self._refresh_regexes(group, now_ms)
        bump |= self._refresh_subscription_metadata(group)
        if bump:
            group.group_epoch += 1
            log.info("group %s: epoch %d", group.group_id, group.group_epoch)
        if group.group_epoch > group.assignment_epoch:
            self._assign(group)
        return self._reconcile(group, member, owned, now_ms)

    def validate(self, request: Heartbeat) -> None:
        """Kafka's checks before a heartbeat reaches the group (GroupCoordinatorService)."""
        epoch = request.member_epoch
        if (request.version >= CONSUMER_GENERATED_MEMBER_ID_REQUIRED_VERSION or epoch > 0
                or epoch == LEAVE_GROUP_MEMBER_EPOCH) and not request.member_id:
            raise KafkaError(E.INVALID_REQUEST, "MemberId can't be empty.")
        if not request.group_id:
            raise KafkaError(E.INVALID_REQUEST, "GroupId can't be empty.")
        if request.instance_id == "":
            raise KafkaError(E.INVALID_REQUEST, "InstanceId can't be empty.")
        if request.rack_id == "":
            raise KafkaError(E.INVALID_REQUEST, "RackId can't be empty.")
        if epoch == 0:
            if request.rebalance_timeout_ms == -1:
                raise KafkaError(E.INVALID_REQUEST, "RebalanceTimeoutMs must be provided in first request.")
            if request.owned is None or len(request.owned) > 0:
                raise KafkaError(E.INVALID_REQUEST, "TopicPartitions must be empty when (re-)joining.")
            if request.subscribed_topic_names is None and request.subscribed_topic_regex is None:
                raise KafkaError(E.INVALID_REQUEST, "Either SubscribedTopicNames or SubscribedTopicRegex must be "
                                 "non-null when (re-)joining.")
        elif epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            if request.instance_id is None:
                raise KafkaError(E.INVALID_REQUEST, "InstanceId can't be null.")
        elif epoch < LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            raise KafkaError(E.INVALID_REQUEST, "MemberEpoch is invalid.")
        if request.server_assignor is not None and request.server_assignor not in self.assignor_names:
            raise KafkaError(E.UNSUPPORTED_ASSIGNOR, f"ServerAssignor {request.server_assignor} is not supported. "
                             f"Supported assignors: {', '.join(self.assignor_names)}.")

    def _member_for(
        self, group: ConsumerGroup, request: Heartbeat, joining: bool
    ) -> tuple[ConsumerMember, ConsumerMember | None]:
        """The member the heartbeat is from (a new one when it joins), and the static member it
        replaces, if any."""
        if request.instance_id is None:
            member = group.members.get(request.member_id)
            if member is None:
                if not joining:
                    raise KafkaError(E.UNKNOWN_MEMBER_ID,
                                     f"Member {request.member_id} is not a member of group {group.group_id}.")
                member = ConsumerMember(request.member_id)
            _check_epoch(member, request)
            return member, None
        existing_id = group.static_members.get(request.instance_id)
        existing = group.members.get(existing_id) if existing_id is not None else None
        if joining:
            if existing is None:
                return group.members.get(request.member_id) or ConsumerMember(request.member_id), None
            if existing.member_epoch != LEAVE_GROUP_STATIC_MEMBER_EPOCH:
                raise KafkaError(E.UNRELEASED_INSTANCE_ID, f"Static member {request.member_id} with instance id "
                                 f"{request.instance_id} cannot join the group because the instance id is owned by "
                                 f"{existing.member_id} member.")
            # The new incarnation takes the old one's place and partitions, from epoch 0.
            return replace(existing, member_id=request.member_id, member_epoch=0, previous_member_epoch=0), existing
        if existing is None:
            raise KafkaError(E.UNKNOWN_MEMBER_ID, f"Instance id {request.instance_id} is unknown.")
        if existing.member_id != request.member_id:
            raise KafkaError(E.FENCED_INSTANCE_ID, f"Static member {request.member_id} with instance id "
                             f"{request.instance_id} was fenced by member {existing.member_id}.")
        _check_epoch(existing, request)
        return existing, None

    @staticmethod
    def _updated(member: ConsumerMember, request: Heartbeat) -> ConsumerMember:
        updated = replace(member, client_id=request.client_id, client_host=request.client_host)
        if request.instance_id is not None:
            updated.instance_id = request.instance_id
        if request.rack_id is not None:
            updated.rack_id = request.rack_id
        if request.rebalance_timeout_ms != -1:
            updated.rebalance_timeout_ms = request.rebalance_timeout_ms
        if request.server_assignor is not None:
            updated.server_assignor = request.server_assignor
        if request.subscribed_topic_names is not None:
            updated.subscribed_topic_names = frozenset(request.subscribed_topic_names)
        if request.subscribed_topic_regex is not None:
            updated.subscribed_topic_regex = request.subscribed_topic_regex
        return updated

    def replace_static(self, group: ConsumerGroup, old: ConsumerMember, new: ConsumerMember) -> None:
        target = group.target.get(old.member_id)
        group.remove_member(old.member_id)
        if target is not None:
            group.target[new.member_id] = target
        log.info("group %s: static member %s replaced by %s", group.group_id, old.member_id, new.member_id)

    # -- epochs, assignment, reconciliation -------------------------------------------------------

    def _refresh_subscription_metadata(self, group: ConsumerGroup) -> bool:
        """Whether the subscribed topics' ids or partition counts changed (a new epoch)."""
        metadata: dict[str, tuple[TopicId, int]] = {}
        for name in group.subscribed_topic_names():
            topic_id = self.image.topic_id(name)
            if topic_id is not None:
                metadata[name] = (topic_id, self.image.partition_count(name))
        if metadata == group.subscription_metadata:
            return False
        group.subscription_metadata = metadata
        return True

    def _assign(self, group: ConsumerGroup) -> None:
        assignor = self._preferred_assignor(group)
        partitions = {topic_id: count for topic_id, count in group.subscription_metadata.values()}
        members = {
            member_id: MemberSpec(
                frozenset(self._subscribed_ids(group, member)), group.target.get(member_id, {}), member.rack_id)
            for member_id, member in group.members.items()
        }
        result = assignor.assign(GroupSpec(members, partitions))
        group.target = {m: {t: frozenset(ps) for t, ps in a.items() if ps} for m, a in result.items()}
        group.assignment_epoch = group.group_epoch
        group.assignor_name = assignor.name
        log.info("group %s: target assignment of epoch %d by %s", group.group_id, group.group_epoch, assignor.name)

    def preferred_assignor_name(self, group: ConsumerGroup) -> str:
        return self._preferred_assignor(group).name

    def _preferred_assignor(self, group: ConsumerGroup) -> Assignor:
        """The assignor most members ask for; the first configured one when none asks."""
        votes = Counter(m.server_assignor for m in group.members.values() if m.server_assignor is not None)
        by_name = {a.name: a for a in self.config.assignors}
        if votes:
            name = max(votes, key=lambda n: (votes[n], n))
            if name in by_name:
                return by_name[name]
        return self.config.assignors[0]

    def _subscribed_ids(self, group: ConsumerGroup, member: ConsumerMember) -> set[TopicId]:
        names = set(member.subscribed_topic_names)
        names |= group.resolved_regexes.get(member.subscribed_topic_regex, frozenset())
        return {group.subscription_metadata[n][0] for n in names if n in group.subscription_metadata}

    def _reconcile(
        self, group: ConsumerGroup, member: ConsumerMember, owned: Sequence[tuple[TopicId, Sequence[int]]] | None,
        now_ms: int,
    ) -> ConsumerMember:
        before = member.reconciliation_view()
        after = reconcile(before, group.assignment_epoch, group.target.get(member.member_id, {}),
                          self._subscribed_ids(group, member), group.owner_epoch, owned)
        if after == before:
            return member
        updated = replace(member, state=after.state, member_epoch=after.member_epoch,
                          assigned=dict(after.assigned), pending_revocation=dict(after.pending_revocation))
        if after.member_epoch != member.member_epoch:
            updated.previous_member_epoch = member.member_epoch
        if after.state is MemberState.UNREVOKED_PARTITIONS:
            if member.state is not MemberState.UNREVOKED_PARTITIONS or updated.revocation_deadline_ms is None:
                updated.revocation_deadline_ms = now_ms + max(member.rebalance_timeout_ms, 0)
        else:
            updated.revocation_deadline_ms = None
        group.put_member(updated)
        log.info("group %s: member %s at epoch %d (%s)", group.group_id, member.member_id, updated.member_epoch,
                 after.state.value)
        return updated

    # -- regexes ---------------------------------------------------------------------------------

    def _resolve(self, group: ConsumerGroup, regex: str, pattern: re.Pattern[str], now_ms: int) -> None:
        if regex not in group.resolved_regexes:
            group.resolved_regexes[regex] = matching_topics(pattern, self.image.topic_names())

    def _refresh_regexes(self, group: ConsumerGroup, now_ms: int) -> bool:
        """Re-resolve the group's regexes against topics created or deleted since (at most every
        10 s), and every `group.consumer.regex.refresh.interval.ms`; whether a resolution changed."""
        in_use = {m.subscribed_topic_regex for m in group.members.values() if m.subscribed_topic_regex}
        for regex in set(group.resolved_regexes) - in_use:
            del group.resolved_regexes[regex]
        if not group.resolved_regexes:
            return False
        since = now_ms - group.regexes_resolved_at_ms
        if since < REGEX_MIN_REFRESH_INTERVAL_MS:
            return False
        names = frozenset(self.image.topic_names())
        if names == group.topics_at_resolution and since < self.config.regex_refresh_interval_ms:
            return False
        group.topics_at_resolution = names
        group.regexes_resolved_at_ms = now_ms
        changed = False
        for regex in list(group.resolved_regexes):
            topics = matching_topics(_compile(regex), names)
            if topics != group.resolved_regexes[regex]:
                group.resolved_regexes[regex] = topics
                changed = True
        return changed

    # -- leaving and fencing ---------------------------------------------------------------------

    def _leave(self, request: Heartbeat, now_ms: int) -> HeartbeatAnswer:
        group = self.groups.get(request.group_id)
        if group is None:
            raise KafkaError(E.GROUP_ID_NOT_FOUND, f"Group {request.group_id} not found.")
        if request.instance_id is None:
            if request.member_id not in group.members:
                raise KafkaError(E.UNKNOWN_MEMBER_ID,
                                 f"Member {request.member_id} is not a member of group {group.group_id}.")
            self.fence(group, request.member_id, "left the group")
            return HeartbeatAnswer(request.member_id, request.member_epoch, 0)
        member_id = group.static_members.get(request.instance_id)
        if member_id is None:
            raise KafkaError(E.UNKNOWN_MEMBER_ID, f"Instance id {request.instance_id} is unknown.")
        if member_id != request.member_id:
            raise KafkaError(E.FENCED_INSTANCE_ID, f"Static member {request.member_id} with instance id "
                             f"{request.instance_id} was fenced by member {member_id}.")
        if request.member_epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            # It will be back (a restart): its place and partitions wait one session timeout.
            member = group.members[member_id]
            group.put_member(replace(member, member_epoch=LEAVE_GROUP_STATIC_MEMBER_EPOCH, pending_revocation={},
                                     revocation_deadline_ms=None))
            log.info("group %s: static member %s (%s) left for now", group.group_id, member_id, request.instance_id)
        else:
            self.fence(group, member_id, "left the group")
        return HeartbeatAnswer(request.member_id, request.member_epoch, 0)

    def fence(self, group: ConsumerGroup, member_id: str, reason: str) -> None:
        """Remove a member; the others get a new target assignment (the group epoch moves). When
        it was the last member of the consumer protocol and the policy allows, the group goes
        back to the classic protocol instead (Kafka's online downgrade)."""
        if self._downgrade_allowed(group, member_id):
            self._downgrade(group, member_id, reason)
            return
        if group.remove_member(member_id) is None:
            return
        self.members_left(group)
        log.info("group %s: member %s %s (group epoch %d)", group.group_id, member_id, reason, group.group_epoch)

    def members_left(self, group: ConsumerGroup) -> None:
        """Members were removed: a new group epoch, so the others get a new target assignment."""
        self._refresh_regexes(group, 0)  # drops the regexes nobody uses any more
        self._refresh_subscription_metadata(group)
        group.group_epoch += 1

    def _downgrade_allowed(self, group: ConsumerGroup, member_id: str) -> bool:
        """Kafka's validateOnlineDowngradeWithFencedMember."""
        if not group.only_classic_members_besides(member_id):
            return False
        if not self.config.migration_policy.downgrade_enabled:
            log.info("group %s: not downgraded to a classic group: the migration policy does not allow it",
                     group.group_id)
            return False
        if len(group.members) - 1 > self.config.classic_max_size:
            log.info("group %s: not downgraded to a classic group: too many members for group.max.size",
                     group.group_id)
            return False
        return True

    def _downgrade(self, group: ConsumerGroup, member_id: str, reason: str) -> None:
        # The group epoch stays: it becomes the classic generation, so members at the current
        # epoch keep a valid generation and are simply asked to rejoin.
        del self.groups[group.group_id]
        self.downgraded.append((group, member_id))
        log.info("group %s: member %s %s, the last of the consumer protocol: the group becomes a classic group",
                 group.group_id, member_id, reason)

    def expire(self, group_id: str, member_id: str, now_ms: int) -> int | None:
        """Fence the member if its session, its revocation time, or (classic members) the time
        to rejoin or to sync ran out; otherwise the time at which to look again (None: the
        member is gone)."""
        group = self.groups.get(group_id)
        member = group.members.get(member_id) if group is not None else None
        if group is None or member is None:
            return None
        for deadline, reason in (
            (member.session_deadline_ms, "failed: its session timed out"),
            (member.revocation_deadline_ms, "failed to revoke its partitions within its rebalance timeout"),
            (member.join_deadline_ms, "failed to rejoin within its rebalance timeout"),
            (member.sync_deadline_ms, "failed to send its SyncGroup within its rebalance timeout"),
        ):
            if deadline is not None and now_ms >= deadline:
                self.fence(group, member_id, reason)
                return None
        return min(member.deadlines())

    # -- offsets ---------------------------------------------------------------------------------

    def validate_offset_commit(
        self, group: ConsumerGroup, member_id: str, member_epoch: int, transactional: bool, api_version: int
    ) -> None:
        """Kafka's ConsumerGroup.validateOffsetCommit."""
        if member_epoch < 0 and group.is_empty:
            return  # the admin client, or a consumer assigning itself partitions
        if transactional and member_epoch < 0 and not member_id:
            return  # TxnOffsetCommit before v3 names no member
        member = group.members.get(member_id)
        if member is None:
            raise KafkaError(E.UNKNOWN_MEMBER_ID, f"Member {member_id} is not a member of group {group.group_id}.")
        if not transactional and not member.uses_classic_protocol and api_version < 9:
            raise KafkaError(E.UNSUPPORTED_VERSION, "OffsetCommit version 9 or above must be used by members "
                             "using the modern group protocol")
        _check_commit_epoch(member, member_epoch)

    @staticmethod
    def validate_offset_fetch(group: ConsumerGroup, member_id: str | None, member_epoch: int) -> None:
        """Kafka's ConsumerGroup.validateOffsetFetch: the admin client names no member."""
        if member_id is None and member_epoch < 0:
            return
        member = group.members.get(member_id or "")
        if member is None:
            raise KafkaError(E.UNKNOWN_MEMBER_ID, f"Member {member_id} is not a member of group {group.group_id}.")
        _check_commit_epoch(member, member_epoch)


def _check_commit_epoch(member: ConsumerMember, member_epoch: int) -> None:
    """Kafka's ConsumerGroup.validateMemberEpoch: a classic member's epoch is its generation."""
    if member_epoch == member.member_epoch:
        return
    if member.uses_classic_protocol:
        raise KafkaError(E.ILLEGAL_GENERATION, f"The received generation id {member_epoch} does not match the "
                         f"expected generation id {member.member_epoch}.")
    raise KafkaError(E.STALE_MEMBER_EPOCH, f"The received member epoch {member_epoch} does not match the "
                     f"expected member epoch {member.member_epoch}.")


def _check_epoch(member: ConsumerMember, request: Heartbeat) -> None:
    """Kafka's throwIfMemberEpochIsInvalid: a member one epoch behind is still accepted when it
    owns no more than it is assigned (the answer that moved it on may have been lost)."""
    received = request.member_epoch
    if received > member.member_epoch:
        raise KafkaError(E.FENCED_MEMBER_EPOCH, f"The consumer group member has a greater member epoch ({received}) "
                         f"than the one known by the group coordinator ({member.member_epoch}). The member must "
                         "abandon all its partitions and rejoin.")
    if received < member.member_epoch and (
        received != member.previous_member_epoch or not _is_subset(request.owned, member.assigned)
    ):
        raise KafkaError(E.FENCED_MEMBER_EPOCH, f"The consumer group member has a smaller member epoch ({received}) "
                         f"than the one known by the group coordinator ({member.member_epoch}). The member must "
                         "abandon all its partitions and rejoin.")


def _is_subset(owned: Sequence[tuple[TopicId, Sequence[int]]] | None, assigned: Assignment) -> bool:
    if owned is None:
        return False
    return all(p in assigned.get(topic, ()) for topic, partitions in owned for p in partitions)


def _compile(regex: str) -> re.Pattern[str]:
    try:
        return compile_topic_regex(regex)
    except InvalidRegex as e:
        raise KafkaError(ErrorCode.INVALID_REGULAR_EXPRESSION,
                         f"SubscribedTopicRegex `{regex}` is not a valid regular expression: {e}.") from None


def _wire_assignment(assigned: Assignment) -> dict[TopicId, list[int]]:
    return {topic: sorted(partitions) for topic, partitions in assigned.items() if partitions}
