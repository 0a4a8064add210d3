"""Members of the classic protocol inside a consumer group (Kafka 4.0's mixed groups, during an
online upgrade or downgrade): their JoinGroup, SyncGroup, Heartbeat and LeaveGroup served by the
consumer group's state machine, as Kafka's GroupMetadataManager does (classicGroupJoinToConsumerGroup
and its siblings).

A classic member is a member like the others to the server-side assignor and to reconciliation:

- JoinGroup is answered at once (no join phase): the member is created or updated from its
  subscription, the group epoch moves if its subscription changed, and it is reconciled using
  the partitions its subscription says it owns. Its generation is its member epoch; it is never
  the leader, so it sends an empty SyncGroup.
- SyncGroup returns its current assignment as a ConsumerProtocolAssignment: partitions it must
  give up are already left out, and partitions still owned by others are not in it yet.
- Heartbeat answers REBALANCE_IN_PROGRESS when it must rejoin: the group epoch moved past its
  epoch, it has partitions to revoke, or partitions it waited for were released. It then has its
  rebalance timeout to rejoin, and after a JoinGroup answer its rebalance timeout to sync; its
  session timeout is its own (from JoinGroup), not `group.consumer.session.timeout.ms`.

Pure: no IO and no clock of its own, like consumer_group.py.
"""

from __future__ import annotations

import logging
from dataclasses import replace

from kbroker.coordinator.consumer_group import (
    ClassicMetadata,
    ConsumerGroup,
    ConsumerGroups,
    ConsumerMember,
    new_member_id,
)
from kbroker.coordinator.group import UNKNOWN_MEMBER_ID, JoinResult, SyncResult
from kbroker.coordinator.group_conversion import (
    CONSUMER_PROTOCOL_TYPE,
    encode_assignment,
    first_subscription,
    metadata_version,
    to_topic_ids,
)
from kbroker.coordinator.group_membership import JoinRequest
from kbroker.coordinator.reconciliation import MemberState
from protocol.errors import ErrorCode, KafkaError

log = logging.getLogger("kbroker.coordinator")

E = ErrorCode


class ClassicMembers:
    """The classic protocol's requests to the consumer groups of `groups`."""

    def __init__(self, groups: ConsumerGroups) -> None:
        self.groups = groups

    # -- JoinGroup -------------------------------------------------------------------------------

    def join(self, group: ConsumerGroup, request: JoinRequest, now_ms: int) -> JoinResult:
        try:
            return self._join(group, request, now_ms)
        except KafkaError as e:
            return JoinResult(e.code, request.member_id)

    def _join(self, group: ConsumerGroup, request: JoinRequest, now_ms: int) -> JoinResult:
        unknown = request.member_id == UNKNOWN_MEMBER_ID
        member_id = new_member_id() if unknown else request.member_id
        max_size = self.groups.config.max_size
        if len(group.members) >= max_size and member_id not in group.members:
            raise KafkaError(E.GROUP_MAX_SIZE_REACHED)
        names = [name for name, _ in request.protocols]
        if not group.supports_classic_protocols(request.protocol_type, names):
            raise KafkaError(E.INCONSISTENT_GROUP_PROTOCOL, f"Member {member_id}'s protocols are not supported.")
        if request.require_known_member_id and unknown and request.group_instance_id is None:
            # As in a classic group: hand out the id first (KIP-394).
            return JoinResult(E.MEMBER_ID_REQUIRED, member_id)
        subscription = first_subscription(request.protocols)
        if subscription is None:
            raise KafkaError(E.INCONSISTENT_GROUP_PROTOCOL)
        member, replaced = self._member_for(group, request, member_id, unknown)
        updated = replace(
            member, client_id=request.client_id, client_host=request.client_host,
            rebalance_timeout_ms=request.rebalance_timeout_ms,
            subscribed_topic_names=frozenset(subscription.topics),
            classic=ClassicMetadata(request.session_timeout_ms, tuple(request.protocols)),
        )
        if request.group_instance_id is not None:
            updated.instance_id = request.group_instance_id
        if subscription.rack_id is not None:
            updated.rack_id = subscription.rack_id
        bump = updated.subscribed_topic_names != member.subscribed_topic_names
        # -- accepted: change the group ------------------------------------------------------------
        if replaced is not None:
            self.groups.replace_static(group, replaced, updated)
        group.put_member(updated)
        owned = [(t, sorted(ps)) for t, ps in to_topic_ids(subscription.owned, self.groups.image).items()]
        final = self.groups.advance(group, updated, bump, owned, now_ms)
        final.session_deadline_ms = now_ms + request.session_timeout_ms
        final.join_deadline_ms = None
        final.sync_deadline_ms = now_ms + request.rebalance_timeout_ms
        log.info("group %s: classic member %s joined at epoch %d", group.group_id, member_id, final.member_epoch)
        return JoinResult(E.NO_ERROR, member_id, final.member_epoch, CONSUMER_PROTOCOL_TYPE, names[0])

    @staticmethod
    def _member_for(
        group: ConsumerGroup, request: JoinRequest, member_id: str, unknown: bool
    ) -> tuple[ConsumerMember, ConsumerMember | None]:
        """The member joining (a new one if need be), and the static member it replaces, if any."""
        instance_id = request.group_instance_id
        if instance_id is None:
            return group.members.get(member_id) or ConsumerMember(member_id), None
        existing_id = group.static_members.get(instance_id)
        existing = group.members.get(existing_id) if existing_id is not None else None
        if unknown:
            if existing is None:
                return group.members.get(member_id) or ConsumerMember(member_id), None
            # A restarted static member takes its old place (and partitions) under its new id.
            return replace(existing, member_id=member_id, member_epoch=0, previous_member_epoch=0), existing
        if existing is None:
            raise KafkaError(E.UNKNOWN_MEMBER_ID, f"Instance id {instance_id} is unknown.")
        if existing.member_id != member_id:
            raise KafkaError(E.FENCED_INSTANCE_ID)
        return existing, None

    # -- SyncGroup and Heartbeat ------------------------------------------------------------------

    def sync(
        self, group: ConsumerGroup, member_id: str, instance_id: str | None, generation_id: int,
        protocol_type: str | None, protocol_name: str | None, now_ms: int,
    ) -> SyncResult:
        try:
            member = self._classic_member(group, member_id, instance_id)
            _check_generation(member, generation_id)
            assert member.classic is not None
            first_protocol = member.classic.protocols[0][0]
            if protocol_type is not None and protocol_type != CONSUMER_PROTOCOL_TYPE:
                raise KafkaError(E.INCONSISTENT_GROUP_PROTOCOL)
            if protocol_name is not None and protocol_name != first_protocol:
                raise KafkaError(E.INCONSISTENT_GROUP_PROTOCOL)
            if group.group_epoch > member.member_epoch and member.state is not MemberState.UNREVOKED_PARTITIONS:
                # A newer epoch came meanwhile: the member rejoins to catch up.
                self._expect_rejoin(member, now_ms)
                raise KafkaError(E.REBALANCE_IN_PROGRESS)
        except KafkaError as e:
            return SyncResult(e.code)
        member.sync_deadline_ms = None
        member.session_deadline_ms = now_ms + member.classic.session_timeout_ms
        version = metadata_version(member.classic.protocols[0][1])
        assignment = encode_assignment(member.assigned, self.groups.image, version)
        return SyncResult(E.NO_ERROR, assignment, protocol_type, protocol_name)

    def heartbeat(self, group: ConsumerGroup, member_id: str, instance_id: str | None, generation_id: int,
                  now_ms: int) -> int:
        try:
            member = self._classic_member(group, member_id, instance_id)
            _check_generation(member, generation_id)
        except KafkaError as e:
            return e.code
        assert member.classic is not None
        member.session_deadline_ms = now_ms + member.classic.session_timeout_ms
        if self.must_rejoin(group, member):
            self._expect_rejoin(member, now_ms)
            return E.REBALANCE_IN_PROGRESS
        return E.NO_ERROR

    @staticmethod
    def must_rejoin(group: ConsumerGroup, member: ConsumerMember) -> bool:
        """Whether the classic member has to rejoin: the group epoch moved past it, it has
        partitions to revoke, or the partitions it waited for are free now."""
        return (member.member_epoch < group.group_epoch
                or member.state is MemberState.UNREVOKED_PARTITIONS
                or (member.state is MemberState.UNRELEASED_PARTITIONS
                    and not group.waiting_on_unreleased_partition(member)))

    @staticmethod
    def _expect_rejoin(member: ConsumerMember, now_ms: int) -> None:
        if member.join_deadline_ms is None:
            member.join_deadline_ms = now_ms + max(member.rebalance_timeout_ms, 0)

    @staticmethod
    def _classic_member(group: ConsumerGroup, member_id: str, instance_id: str | None) -> ConsumerMember:
        """Kafka's validateConsumerGroupMember and throwIfMemberDoesNotUseClassicProtocol."""
        if instance_id is None:
            member = group.members.get(member_id)
            if member is None:
                raise KafkaError(E.UNKNOWN_MEMBER_ID, f"Member {member_id} is not a member of group {group.group_id}.")
        else:
            static_id = group.static_members.get(instance_id)
            member = group.members.get(static_id) if static_id is not None else None
            if member is None:
                raise KafkaError(E.UNKNOWN_MEMBER_ID)
            if member.member_id != member_id:
                raise KafkaError(E.FENCED_INSTANCE_ID)
        if not member.uses_classic_protocol:
            raise KafkaError(E.UNKNOWN_MEMBER_ID, f"Member {member.member_id} does not use the classic protocol.")
        return member

    # -- LeaveGroup ------------------------------------------------------------------------------

    def leave(self, group: ConsumerGroup, leaving: list[tuple[str, str | None]]) -> list[int]:
        """Remove classic members (member id, instance id); one error per member. The group epoch
        moves once for all of them."""
        errors: list[int] = []
        removed = False
        for member_id, instance_id in leaving:
            try:
                member = self._leaving_member(group, member_id, instance_id)
            except KafkaError as e:
                errors.append(e.code)
                continue
            group.remove_member(member.member_id)
            log.info("group %s: classic member %s left the group", group.group_id, member.member_id)
            removed = True
            errors.append(E.NO_ERROR)
        if removed:
            self.groups.members_left(group)
        return errors

    def _leaving_member(self, group: ConsumerGroup, member_id: str, instance_id: str | None) -> ConsumerMember:
        if instance_id is None:
            return self._classic_member(group, member_id, None)
        static_id = group.static_members.get(instance_id)
        member = group.members.get(static_id) if static_id is not None else None
        if member is None:
            raise KafkaError(E.UNKNOWN_MEMBER_ID, f"Instance id {instance_id} is unknown.")
        # LeaveGroup may remove a static member by instance id alone (an administrator).
        if member_id != UNKNOWN_MEMBER_ID and member.member_id != member_id:
            raise KafkaError(E.FENCED_INSTANCE_ID)
        if not member.uses_classic_protocol:
            raise KafkaError(E.UNKNOWN_MEMBER_ID, f"Member {member.member_id} does not use the classic protocol.")
        return member


def _check_generation(member: ConsumerMember, generation_id: int) -> None:
    if generation_id != member.member_epoch:
        raise KafkaError(E.ILLEGAL_GENERATION, f"The member {member.member_id} has a generation id "
                         f"{generation_id} different from its member epoch {member.member_epoch}.")
