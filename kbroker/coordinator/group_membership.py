"""Kafka's classic group membership protocol: JoinGroup, SyncGroup, Heartbeat and LeaveGroup
over the generation state machine of `group.py`, and the session timers that expire members.

Runs on the event loop, so no locks: every method runs to completion between awaits. JoinGroup
and SyncGroup wait on futures that the rebalance completes; timers (the loop's clock) end join
phases and expire members whose session timed out. A group's metadata (members, generation,
assignment) is written to `__consumer_offsets` before it is acknowledged.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Iterable
from dataclasses import dataclass

from kbroker.clock import LoopClock, wall_clock_ms
from kbroker.coordinator.group import UNKNOWN_MEMBER_ID, Group, GroupState, JoinResult, Member, SyncResult
from kbroker.coordinator.group_config import GroupConfig
from kbroker.coordinator.offsets_topic import OffsetsTopic
from protocol.coordinator_records import GroupValue
from protocol.errors import ErrorCode, KafkaError

log = logging.getLogger("kbroker.coordinator")

# How long a new member's first JoinGroup may wait for the join phase to end, whatever its
# session timeout (Kafka's NEW_MEMBER_JOIN_TIMEOUT_MS): it cannot heartbeat before it has joined.
NEW_MEMBER_JOIN_TIMEOUT_MS = 300_000
E = ErrorCode


@dataclass(frozen=True, slots=True)
class JoinRequest:
    group_id: str
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    require_known_member_id: bool  # JoinGroup v4+: a new member first gets MEMBER_ID_REQUIRED


class GroupMembership:
    """The groups this broker coordinates, and the protocol their members speak."""

    def __init__(self, offsets_topic: OffsetsTopic, config: GroupConfig, clock: LoopClock | None = None) -> None:
        self.topic = offsets_topic
        self.config = config
        self.groups: dict[str, Group] = {}
        self.clock = clock  # None: the running event loop

    @property
    def _loop(self) -> asyncio.AbstractEventLoop:
        return asyncio.get_running_loop()

    @property
    def _clock(self) -> LoopClock:
        return self.clock if self.clock is not None else asyncio.get_running_loop()

    # -- the groups of this coordinator ----------------------------------------------------------

    def check_coordinator(self, group_id: str) -> None:
        self.topic.ensure()
        if self.topic.hosted(group_id) is None:
            raise KafkaError(E.NOT_COORDINATOR)

    def live_group(self, group_id: str) -> Group | None:
        group = self.groups.get(group_id)
        return None if group is None or group.is_in(GroupState.DEAD) else group

    def restore(self, group_id: str, value: GroupValue) -> Group:
        """The group its latest record in `__consumer_offsets` describes (members not yet timed)."""
        group = Group(
            group_id, protocol_type=value.protocol_type or None, protocol_name=value.protocol,
            generation_id=value.generation, state_timestamp_ms=value.current_state_timestamp,
        )
        for m in value.members:
            member = Member(
                m.member_id, m.group_instance_id, m.client_id, m.client_host,
                m.rebalance_timeout if m.rebalance_timeout >= 0 else m.session_timeout, m.session_timeout,
                value.protocol_type, [(value.protocol or "", m.subscription)], m.assignment,
            )
            group.add(member)
        group.leader_id = value.leader if value.leader in group.members else group.leader_id
        group.state = GroupState.STABLE if group.members else GroupState.EMPTY
        return group

    def store_group(self, group: Group) -> None:
        self.topic.write(group.group_id, [self.topic.group_entry(group.group_id, group.to_record(wall_clock_ms()))],
                         wall_clock_ms())

    def start_sessions(self, group_ids: Iterable[str] | None = None) -> None:
        """Members restored from the log (of `group_ids`, else of every group) get a session to
        come back in (needs the running loop)."""
        for group_id in self.groups if group_ids is None else group_ids:
            group = self.groups[group_id]
            for member in group.members.values():
                self.touch(group, member)

    def unload(self, partition: int) -> None:
        """Forget the groups of `partition` of `__consumer_offsets` and stop their timers."""
        for group_id in [g for g in self.groups if self.topic.partition_of(g) == partition]:
            group = self.groups.pop(group_id)
            if group.join_timer is not None:
                group.join_timer.cancel()
            for member in group.members.values():
                if member.session_timer is not None:
                    member.session_timer.cancel()

    def hand_over(self, group: Group) -> None:
        """The group becomes a consumer group (an online upgrade): members waiting in a join or
        a sync are told to rejoin (they will, through the consumer group), and its timers stop.
        The caller deletes its record in `__consumer_offsets` with the consumer group's first
        records, in one batch (its offsets stay)."""
        if group.join_timer is not None:
            group.join_timer.cancel()
        for member in group.members.values():
            if member.awaiting_join is not None and not member.awaiting_join.done():
                member.awaiting_join.set_result(JoinResult(E.REBALANCE_IN_PROGRESS, member.member_id))
            if member.awaiting_sync is not None and not member.awaiting_sync.done():
                member.awaiting_sync.set_result(SyncResult(E.REBALANCE_IN_PROGRESS))
            member.awaiting_join = member.awaiting_sync = None
            if member.session_timer is not None:
                member.session_timer.cancel()
        del self.groups[group.group_id]

    def take_over(self, group: Group) -> None:
        """A consumer group became this classic group (an online downgrade): its members get a
        session, and a rebalance starts in which each rejoins through JoinGroup."""
        self.groups[group.group_id] = group
        group.state_timestamp_ms = wall_clock_ms()
        for member in group.members.values():
            self.touch(group, member)
        self._prepare_rebalance(group, "the group was downgraded from the consumer protocol")

    def check_join(self, request: JoinRequest) -> None:
        """The checks a JoinGroup passes whatever protocol its group speaks."""
        self._check_join(request)

    def remove_group(self, group: Group, now_ms: int) -> None:
        """The group is gone (deleted, or its offsets expired): Dead, and no longer known."""
        group.transition(GroupState.DEAD, now_ms)
        del self.groups[group.group_id]

    # -- JoinGroup -------------------------------------------------------------------------------

    async def join(self, request: JoinRequest) -> JoinResult:
        try:
            self._check_join(request)
        except KafkaError as e:
            return JoinResult(e.code, request.member_id)
        group = self.groups.get(request.group_id)
        if group is None or group.is_in(GroupState.DEAD):
            if request.member_id != UNKNOWN_MEMBER_ID:
                return JoinResult(E.UNKNOWN_MEMBER_ID, request.member_id)
            group = self.groups[request.group_id] = Group(request.group_id, state_timestamp_ms=wall_clock_ms())
        if not group.supports(request.protocol_type, request.protocols):
            return JoinResult(E.INCONSISTENT_GROUP_PROTOCOL, request.member_id)
        if request.member_id == UNKNOWN_MEMBER_ID:
            return await self._join_new(group, request)
        return await self._join_known(group, request)

    def _check_join(self, request: JoinRequest) -> None:
        if not request.group_id:
            raise KafkaError(E.INVALID_GROUP_ID)
        self.check_coordinator(request.group_id)
        if not request.protocol_type or not request.protocols:
            raise KafkaError(E.INCONSISTENT_GROUP_PROTOCOL)
        if not self.config.min_session_timeout_ms <= request.session_timeout_ms <= self.config.max_session_timeout_ms:
            raise KafkaError(E.INVALID_SESSION_TIMEOUT)

    async def _join_new(self, group: Group, request: JoinRequest) -> JoinResult:
        if request.group_instance_id is not None:
            return await self._join_static(group, request)
        if len(group.members) + len(group.pending_members) >= self.config.max_size:
            return JoinResult(E.GROUP_MAX_SIZE_REACHED, UNKNOWN_MEMBER_ID)
        member_id = f"{request.client_id}-{uuid.uuid4()}"
        if request.require_known_member_id:
            # KIP-394: hand out the id first, so a client that retries a lost response keeps one id.
            group.pending_members.add(member_id)
            self._clock.call_later(request.session_timeout_ms / 1000, self._expire_pending, group, member_id)
            return JoinResult(E.MEMBER_ID_REQUIRED, member_id)
        return await self._add_and_rebalance(group, request, member_id)

    async def _join_static(self, group: Group, request: JoinRequest) -> JoinResult:
        instance_id = request.group_instance_id
        assert instance_id is not None
        new_id = f"{instance_id}-{uuid.uuid4()}"
        old_id = group.static_member_id(instance_id)
        if old_id is None:
            if len(group.members) >= self.config.max_size:
                return JoinResult(E.GROUP_MAX_SIZE_REACHED, UNKNOWN_MEMBER_ID)
            return await self._add_and_rebalance(group, request, new_id)
        return await self._replace_static(group, request, old_id, new_id)

    async def _replace_static(self, group: Group, request: JoinRequest, old_id: str, new_id: str) -> JoinResult:
        """A known static member is back (e.g. restarted): it takes its old place under a new id."""
        old = group.members[old_id]
        if old.awaiting_join is not None and not old.awaiting_join.done():
            old.awaiting_join.set_result(JoinResult(E.FENCED_INSTANCE_ID, old_id))
        if old.awaiting_sync is not None and not old.awaiting_sync.done():
            old.awaiting_sync.set_result(SyncResult(E.FENCED_INSTANCE_ID))
        old.awaiting_join = old.awaiting_sync = None
        previous_leader = group.leader_id
        member = group.replace_static(request.group_instance_id or "", old_id, new_id)
        same_protocols = member.matches(request.protocols)
        self._update_member(member, request)
        self.touch(group, member)
        if group.is_in(GroupState.STABLE) and same_protocols and group.protocol_name == group.select_protocol():
            # Nothing the assignment depends on changed: no rebalance, as KIP-345 promises.
            self.store_group(group)
            return JoinResult(
                E.NO_ERROR, new_id, group.generation_id, group.protocol_type, group.protocol_name,
                # The old leader id, so the rejoined member does not run a pointless assignment.
                leader=(old_id if previous_leader == old_id else previous_leader) or "",
            )
        future = self._await_join(member)
        if group.is_in(GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self._prepare_rebalance(group, f"static member {request.group_instance_id} rejoined with changes")
        else:
            self._maybe_complete_join(group)
        return await future

    async def _join_known(self, group: Group, request: JoinRequest) -> JoinResult:
        member_id = request.member_id
        if member_id in group.pending_members:
            group.pending_members.discard(member_id)
            return await self._add_and_rebalance(group, request, member_id)
        static_id = group.static_member_id(request.group_instance_id)
        if request.group_instance_id is not None and static_id is not None and static_id != member_id:
            return JoinResult(E.FENCED_INSTANCE_ID, member_id)
        member = group.members.get(member_id)
        if member is None or group.is_in(GroupState.EMPTY):
            return JoinResult(E.UNKNOWN_MEMBER_ID, member_id)
        if not member.is_new:  # a new member keeps its join allowance until the join phase ends
            self.touch(group, member)
        if group.is_in(GroupState.PREPARING_REBALANCE):
            self._update_member(member, request)
            future = self._await_join(member)
            self._maybe_complete_join(group)
            return await future
        if group.is_in(GroupState.COMPLETING_REBALANCE) and member.matches(request.protocols):
            # A retry of a join whose answer was lost: send the same answer again.
            return self._join_result(group, member)
        if group.is_in(GroupState.STABLE) and member_id != group.leader_id and member.matches(request.protocols):
            return self._join_result(group, member)
        self._update_member(member, request)
        future = self._await_join(member)
        self._prepare_rebalance(group, f"member {member_id} rejoined")
        return await future

    async def _add_and_rebalance(self, group: Group, request: JoinRequest, member_id: str) -> JoinResult:
        member = Member(
            member_id, request.group_instance_id, request.client_id, request.client_host,
            request.rebalance_timeout_ms, request.session_timeout_ms, request.protocol_type, list(request.protocols),
            is_new=True,
        )
        group.add(member)
        group.new_member_added = True
        future = self._await_join(member)
        # Not the session timeout: a new member cannot heartbeat while its JoinGroup waits (an
        # initial rebalance delay can outlast a short session), so it gets Kafka's fixed allowance.
        self.touch(group, member, NEW_MEMBER_JOIN_TIMEOUT_MS)
        if group.is_in(GroupState.PREPARING_REBALANCE):
            self._maybe_complete_join(group)
        else:
            self._prepare_rebalance(group, f"member {member_id} joined")
        return await future

    def _update_member(self, member: Member, request: JoinRequest) -> None:
        member.protocols = list(request.protocols)
        member.protocol_type = request.protocol_type
        member.rebalance_timeout_ms = request.rebalance_timeout_ms
        member.session_timeout_ms = request.session_timeout_ms
        member.client_id = request.client_id
        member.client_host = request.client_host

    def _await_join(self, member: Member) -> asyncio.Future[JoinResult]:
        future: asyncio.Future[JoinResult] = self._loop.create_future()
        member.awaiting_join = future
        return future

    def _join_result(self, group: Group, member: Member) -> JoinResult:
        is_leader = member.member_id == group.leader_id
        members = (
            [
                {"member_id": m.member_id, "group_instance_id": m.group_instance_id,
                 "metadata": m.metadata(group.protocol_name or "")}
                for m in group.members.values()
            ]
            if is_leader
            else []
        )
        return JoinResult(
            E.NO_ERROR, member.member_id, group.generation_id, group.protocol_type, group.protocol_name,
            group.leader_id or "", members,
        )

    # -- rebalancing -----------------------------------------------------------------------------

    def _prepare_rebalance(self, group: Group, reason: str) -> None:
        if group.is_in(GroupState.COMPLETING_REBALANCE):
            self._reset_assignments(group, E.REBALANCE_IN_PROGRESS)
        initial = group.is_in(GroupState.EMPTY)
        group.transition(GroupState.PREPARING_REBALANCE, wall_clock_ms())
        log.info("group %s rebalancing (generation %d): %s", group.group_id, group.generation_id, reason)
        if group.join_timer is not None:
            group.join_timer.cancel()
        rebalance_s = group.rebalance_timeout_ms() / 1000
        if initial:
            # Wait for more members to arrive before the first assignment (group.initial.rebalance.delay.ms).
            delay = min(self.config.initial_rebalance_delay_ms / 1000, rebalance_s)
            group.new_member_added = False
            group.join_timer = self._clock.call_later(delay, self._initial_delay_over, group, max(rebalance_s - delay, 0))
        else:
            group.join_deadline = self._clock.time() + rebalance_s
            group.join_timer = self._clock.call_later(rebalance_s, self._complete_join, group)
            self._maybe_complete_join(group)

    def _initial_delay_over(self, group: Group, remaining_s: float) -> None:
        if not group.is_in(GroupState.PREPARING_REBALANCE):
            return
        if group.new_member_added and remaining_s > 0:
            group.new_member_added = False
            delay = min(self.config.initial_rebalance_delay_ms / 1000, remaining_s)
            group.join_timer = self._clock.call_later(delay, self._initial_delay_over, group, remaining_s - delay)
            return
        self._complete_join(group)

    def _maybe_complete_join(self, group: Group) -> None:
        initial_delay_running = group.join_deadline == 0.0
        if group.is_in(GroupState.PREPARING_REBALANCE) and group.all_joined() and not initial_delay_running:
            self._complete_join(group)

    def _complete_join(self, group: Group) -> None:
        if not group.is_in(GroupState.PREPARING_REBALANCE):
            return
        if group.join_timer is not None:
            group.join_timer.cancel()
            group.join_timer = None
        group.join_deadline = 0.0
        for member in [m for m in group.members.values() if m.awaiting_join is None and m.group_instance_id is None]:
            log.info("group %s: member %s did not rejoin in time", group.group_id, member.member_id)
            group.remove(member.member_id)
        group.pending_members.clear()
        group.generation_id += 1
        if group.is_empty:
            group.protocol_name = None
            group.transition(GroupState.EMPTY, wall_clock_ms())
            self.store_group(group)
            log.info("group %s is empty at generation %d", group.group_id, group.generation_id)
            return
        group.protocol_name = group.select_protocol()
        group.transition(GroupState.COMPLETING_REBALANCE, wall_clock_ms())
        log.info("group %s generation %d: %d members, protocol %s", group.group_id, group.generation_id,
                 len(group.members), group.protocol_name)
        for member in group.members.values():
            if member.awaiting_join is not None:
                if not member.awaiting_join.done():
                    member.awaiting_join.set_result(self._join_result(group, member))
                member.awaiting_join = None
            member.is_new = False
            self.touch(group, member)

    def _reset_assignments(self, group: Group, error: ErrorCode) -> None:
        for member in group.members.values():
            member.assignment = b""
            if member.awaiting_sync is not None and not member.awaiting_sync.done():
                member.awaiting_sync.set_result(SyncResult(error))
            member.awaiting_sync = None

    # -- SyncGroup -------------------------------------------------------------------------------

    async def sync(
        self, group_id: str, generation_id: int, member_id: str, instance_id: str | None,
        protocol_type: str | None, protocol_name: str | None, assignments: dict[str, bytes],
    ) -> SyncResult:
        try:
            group, member = self._member_for(group_id, member_id, instance_id, E.UNKNOWN_MEMBER_ID)
            if generation_id != group.generation_id:
                raise KafkaError(E.ILLEGAL_GENERATION)
            if (protocol_type is not None and protocol_type != group.protocol_type) or (
                protocol_name is not None and protocol_name != group.protocol_name
            ):
                raise KafkaError(E.INCONSISTENT_GROUP_PROTOCOL)
        except KafkaError as e:
            return SyncResult(e.code)
        if group.is_in(GroupState.PREPARING_REBALANCE):
            return SyncResult(E.REBALANCE_IN_PROGRESS)
        self.touch(group, member)
        if group.is_in(GroupState.STABLE):
            return SyncResult(E.NO_ERROR, member.assignment, group.protocol_type, group.protocol_name)
        future: asyncio.Future[SyncResult] = self._loop.create_future()
        member.awaiting_sync = future
        if member_id == group.leader_id:
            self._apply_assignment(group, assignments)
        return await future

    def _apply_assignment(self, group: Group, assignments: dict[str, bytes]) -> None:
        for member in group.members.values():
            member.assignment = assignments.get(member.member_id, b"")
        try:
            self.store_group(group)
        except KafkaError as e:
            self._reset_assignments(group, e.code)
            self._prepare_rebalance(group, f"storing the assignment failed: {e}")
            return
        group.transition(GroupState.STABLE, wall_clock_ms())
        for member in group.members.values():
            if member.awaiting_sync is not None and not member.awaiting_sync.done():
                member.awaiting_sync.set_result(
                    SyncResult(E.NO_ERROR, member.assignment, group.protocol_type, group.protocol_name)
                )
            member.awaiting_sync = None
        log.info("group %s stable at generation %d", group.group_id, group.generation_id)

    def _member_for(
        self, group_id: str, member_id: str, instance_id: str | None, missing_group: ErrorCode
    ) -> tuple[Group, Member]:
        if not group_id:
            raise KafkaError(E.INVALID_GROUP_ID)
        self.check_coordinator(group_id)
        group = self.groups.get(group_id)
        if group is None:
            raise KafkaError(missing_group)
        if group.is_in(GroupState.DEAD):
            raise KafkaError(E.COORDINATOR_NOT_AVAILABLE)
        group.validate_member(member_id, instance_id)
        if group.is_in(GroupState.EMPTY):
            raise KafkaError(E.UNKNOWN_MEMBER_ID)
        return group, group.members[member_id]

    # -- Heartbeat and LeaveGroup ----------------------------------------------------------------

    def heartbeat(self, group_id: str, generation_id: int, member_id: str, instance_id: str | None) -> int:
        try:
            group, member = self._member_for(group_id, member_id, instance_id, E.UNKNOWN_MEMBER_ID)
        except KafkaError as e:
            return e.code
        if generation_id != group.generation_id:
            return E.ILLEGAL_GENERATION
        self.touch(group, member)
        if group.is_in(GroupState.PREPARING_REBALANCE):
            return E.REBALANCE_IN_PROGRESS
        return E.NO_ERROR

    def leave(self, group_id: str, leaving: list[tuple[str, str | None]]) -> tuple[int, list[int]]:
        """Remove members (member id, instance id); returns the top-level and per-member errors."""
        if not group_id:
            return E.INVALID_GROUP_ID, []
        try:
            self.check_coordinator(group_id)
        except KafkaError as e:
            return e.code, []
        group = self.groups.get(group_id)
        if group is None:
            return E.NO_ERROR, [E.UNKNOWN_MEMBER_ID for _ in leaving]
        if group.is_in(GroupState.DEAD):
            return E.COORDINATOR_NOT_AVAILABLE, []
        return E.NO_ERROR, [self._leave_one(group, member_id, instance_id) for member_id, instance_id in leaving]

    def _leave_one(self, group: Group, member_id: str, instance_id: str | None) -> int:
        if member_id == UNKNOWN_MEMBER_ID and instance_id is not None:
            found = group.static_member_id(instance_id)
            if found is None:
                return E.UNKNOWN_MEMBER_ID
            member_id = found
        elif instance_id is not None and group.static_member_id(instance_id) not in (None, member_id):
            return E.FENCED_INSTANCE_ID
        if member_id in group.pending_members:
            group.pending_members.discard(member_id)
            self._maybe_complete_join(group)
            return E.NO_ERROR
        if member_id not in group.members:
            return E.UNKNOWN_MEMBER_ID
        self._remove_member(group, member_id, "left the group")
        return E.NO_ERROR

    def _remove_member(self, group: Group, member_id: str, reason: str) -> None:
        member = group.remove(member_id)
        if member is None:
            return
        if member.session_timer is not None:
            member.session_timer.cancel()
        log.info("group %s: member %s %s", group.group_id, member_id, reason)
        if member.awaiting_join is not None and not member.awaiting_join.done():
            member.awaiting_join.set_result(JoinResult(E.UNKNOWN_MEMBER_ID, member_id))
        if group.is_in(GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self._prepare_rebalance(group, f"member {member_id} {reason}")
        elif group.is_in(GroupState.PREPARING_REBALANCE):
            self._maybe_complete_join(group)

    # -- session timeouts ------------------------------------------------------------------------

    def touch(self, group: Group, member: Member, timeout_ms: int | None = None) -> None:
        """Any request from a member proves it alive for another session timeout (`timeout_ms`
        instead, for a new member's first join).

        Only the deadline moves; one timer per member re-arms itself when it fires early, so a
        heartbeat costs no timer (unless the session got shorter than the pending check)."""
        timeout_ms = member.session_timeout_ms if timeout_ms is None else timeout_ms
        member.heartbeat_deadline = self._clock.time() + timeout_ms / 1000
        timer = member.session_timer
        if timer is None or timer.cancelled() or timer.when() > member.heartbeat_deadline:
            if timer is not None:
                timer.cancel()
            self._arm_session_check(group, member)

    def _arm_session_check(self, group: Group, member: Member) -> None:
        member.session_timer = self._clock.call_at(member.heartbeat_deadline + 0.001, self._check_session, group, member)

    def _check_session(self, group: Group, member: Member) -> None:
        member.session_timer = None
        if group.members.get(member.member_id) is not member:
            return  # left, replaced or already expired
        if self._clock.time() < member.heartbeat_deadline:
            self._arm_session_check(group, member)  # heartbeats came since: check again later
            return
        if self._heartbeat_satisfied(member):
            # Blocked in a join or sync: the rebalance timeout governs it, not the session.
            self.touch(group, member)
            return
        reason = "failed: its first join timed out" if member.is_new else "failed: session timed out"
        self._remove_member(group, member.member_id, reason)

    @staticmethod
    def _heartbeat_satisfied(member: Member) -> bool:
        """Kafka's rule: an established member waiting in a join or sync needs no heartbeat; a
        new member's join allowance ends even while it waits, so the defunct members left by
        clients that timed out and joined again afresh do not pile up in a long rebalance."""
        return not member.is_new and (member.awaiting_join is not None or member.awaiting_sync is not None)

    def _expire_pending(self, group: Group, member_id: str) -> None:
        if member_id in group.pending_members:
            group.pending_members.discard(member_id)
            self._maybe_complete_join(group)

