"""The group coordinator: Kafka's classic group protocol and committed offsets.

Runs on the event loop, so no locks: every method runs to completion between awaits. JoinGroup
and SyncGroup wait on futures that the rebalance completes; timers (loop.call_later) end join
phases and expire members whose session timed out. State is persisted to `__consumer_offsets`
before it is acknowledged, and rebuilt from it on start.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from kbroker.clock import LoopClock, wall_clock_ms
from kbroker.coordinator.group import Group, GroupState, JoinResult, Member, SyncResult
from kbroker.coordinator.offsets_topic import Marker, OffsetsTopic
from protocol.coordinator_records import GroupKey, GroupValue, OffsetKey, OffsetValue
from protocol.errors import ErrorCode, KafkaError

log = logging.getLogger("kbroker.coordinator")

UNKNOWN_MEMBER_ID = ""
# How long a new member's first JoinGroup may wait for the join phase to end, whatever its
# session timeout (Kafka's NEW_MEMBER_JOIN_TIMEOUT_MS): it cannot heartbeat before it has joined.
NEW_MEMBER_JOIN_TIMEOUT_MS = 300_000
E = ErrorCode


@dataclass(frozen=True, slots=True)
class GroupConfig:
    initial_rebalance_delay_ms: int = 3000
    min_session_timeout_ms: int = 6000
    max_session_timeout_ms: int = 1_800_000
    max_size: int = 2**31 - 1
    offset_metadata_max_bytes: int = 4096
    offsets_retention_ms: int = 7 * 24 * 3600 * 1000


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


@dataclass(frozen=True, slots=True)
class OffsetCommit:
    topic: str
    partition: int
    offset: int
    leader_epoch: int
    metadata: str | None


class GroupCoordinator:
    def __init__(
        self, offsets_topic: OffsetsTopic, config: GroupConfig, partition_exists: Any, clock: LoopClock | None = None
    ) -> None:
        self.topic = offsets_topic
        self.config = config
        self.partition_exists = partition_exists  # (topic, partition) -> bool
        self.groups: dict[str, Group] = {}
        self.offsets: dict[str, dict[tuple[str, int], OffsetValue]] = {}
        # Offsets committed inside transactions, by producer id then group, until the marker.
        self.pending: dict[int, dict[str, dict[tuple[str, int], OffsetValue]]] = {}
        self.clock = clock  # None: the running event loop

    @property
    def _loop(self) -> asyncio.AbstractEventLoop:
        return asyncio.get_running_loop()

    @property
    def _clock(self) -> LoopClock:
        return self.clock if self.clock is not None else asyncio.get_running_loop()

    # -- startup ---------------------------------------------------------------------------------

    def load(self, only: int | None = None) -> None:
        """Rebuild groups and offsets from `__consumer_offsets` (called once the logs are open):
        every partition this broker leads, or partition `only` when it just became its leader."""
        if not self.topic.exists():
            return
        records: dict[str, GroupValue | None] = {}
        loaded_before = set(self.groups)
        for item in self.topic.replay(only):
            if isinstance(item, Marker):
                self._finish_pending(item.producer_id, item.committed, item.partition)
                continue
            if item.producer_id is not None:
                if isinstance(item.key, OffsetKey) and isinstance(item.value, OffsetValue):
                    group_pending = self.pending.setdefault(item.producer_id, {}).setdefault(item.key.group, {})
                    group_pending[(item.key.topic, item.key.partition)] = item.value
                continue
            if isinstance(item.key, OffsetKey):
                offsets = self.offsets.setdefault(item.key.group, {})
                if item.value is None:
                    offsets.pop((item.key.topic, item.key.partition), None)
                else:
                    assert isinstance(item.value, OffsetValue)
                    offsets[(item.key.topic, item.key.partition)] = item.value
            elif isinstance(item.key, GroupKey):
                records[item.key.group] = item.value  # type: ignore[assignment]
        for group_id, value in records.items():
            if value is not None:
                self.groups[group_id] = self._restore(group_id, value)
        for group_id, offsets in list(self.offsets.items()):
            if not offsets:
                del self.offsets[group_id]
            elif group_id not in self.groups:
                self.groups[group_id] = Group(group_id, state_timestamp_ms=-1)
        if only is not None:
            for group_id in set(self.groups) - loaded_before:
                for member in self.groups[group_id].members.values():
                    self._touch(self.groups[group_id], member)
        where = "" if only is None else f" from partition {only}"
        log.info("loaded %d groups and the offsets of %d groups%s", len(self.groups) - len(loaded_before),
                 len(self.offsets), where)

    def unload(self, partition: int) -> None:
        """This broker no longer leads `partition` of `__consumer_offsets`: forget its groups
        (their members find the new coordinator), as Kafka's coordinator does on resignation."""
        for group_id in [g for g in self.groups if self.topic.partition_of(g) == partition]:
            group = self.groups.pop(group_id)
            if group.join_timer is not None:
                group.join_timer.cancel()
            for member in group.members.values():
                if member.session_timer is not None:
                    member.session_timer.cancel()
        for group_id in [g for g in self.offsets if self.topic.partition_of(g) == partition]:
            del self.offsets[group_id]
        for by_group in self.pending.values():
            for group_id in [g for g in by_group if self.topic.partition_of(g) == partition]:
                del by_group[group_id]

    def _restore(self, group_id: str, value: GroupValue) -> Group:
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

    def start_timers(self) -> None:
        """Members restored from the log get a session to come back in (needs the running loop)."""
        for group in self.groups.values():
            for member in group.members.values():
                self._touch(group, member)

    # -- lookups ---------------------------------------------------------------------------------

    def _check_coordinator(self, group_id: str) -> None:
        self.topic.ensure()
        if self.topic.hosted(group_id) is None:
            raise KafkaError(E.NOT_COORDINATOR)

    def _group(self, group_id: str) -> Group | None:
        group = self.groups.get(group_id)
        return None if group is None or group.is_in(GroupState.DEAD) else group

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
        self._check_coordinator(request.group_id)
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
        self._touch(group, member)
        if group.is_in(GroupState.STABLE) and same_protocols and group.protocol_name == group.select_protocol():
            # Nothing the assignment depends on changed: no rebalance, as KIP-345 promises.
            self._store_group(group)
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
            self._touch(group, member)
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
        self._touch(group, member, NEW_MEMBER_JOIN_TIMEOUT_MS)
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
            self._store_group(group)
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
            self._touch(group, member)

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
        self._touch(group, member)
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
            self._store_group(group)
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
        self._check_coordinator(group_id)
        group = self.groups.get(group_id)
        if group is None:
            raise KafkaError(missing_group)
        if group.is_in(GroupState.DEAD):
            raise KafkaError(E.COORDINATOR_NOT_AVAILABLE)
        self._validate_member(group, member_id, instance_id)
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
        self._touch(group, member)
        if group.is_in(GroupState.PREPARING_REBALANCE):
            return E.REBALANCE_IN_PROGRESS
        return E.NO_ERROR

    def leave(self, group_id: str, leaving: list[tuple[str, str | None]]) -> tuple[int, list[int]]:
        """Remove members (member id, instance id); returns the top-level and per-member errors."""
        if not group_id:
            return E.INVALID_GROUP_ID, []
        try:
            self._check_coordinator(group_id)
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

    def _touch(self, group: Group, member: Member, timeout_ms: int | None = None) -> None:
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
            self._touch(group, member)
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

    # -- offsets ---------------------------------------------------------------------------------

    def commit(
        self, group_id: str, generation_id: int, member_id: str, instance_id: str | None,
        commits: list[OffsetCommit],
    ) -> list[int]:
        errors = self._commit_errors(group_id, generation_id, member_id, instance_id, commits, transactional=False)
        accepted = [c for c, error in zip(commits, errors, strict=True) if error == E.NO_ERROR]
        if accepted:
            try:
                self._store_offsets(group_id, accepted)
            except KafkaError as e:
                return [e.code if error == E.NO_ERROR else error for error in errors]
        return errors

    def _commit_errors(
        self, group_id: str, generation_id: int, member_id: str, instance_id: str | None,
        commits: list[OffsetCommit], *, transactional: bool,
    ) -> list[int]:
        """Each offset's error, checked in Kafka's order: unknown partitions first (KafkaApis),
        then the group (GroupCoordinator), then the offset's metadata."""
        errors = [E.NO_ERROR if self.partition_exists(c.topic, c.partition) else E.UNKNOWN_TOPIC_OR_PARTITION
                  for c in commits]
        if E.NO_ERROR not in errors:
            return errors  # Kafka does not ask the coordinator then
        try:
            if transactional and not group_id:  # OffsetCommit takes "" for old clients' sake
                raise KafkaError(E.INVALID_GROUP_ID)
            self._check_coordinator(group_id)
            self._group_for_commit(group_id, generation_id, member_id, instance_id, transactional=transactional)
        except KafkaError as e:
            return [e.code if error == E.NO_ERROR else error for error in errors]
        return [self._metadata_error(c) if error == E.NO_ERROR else error
                for c, error in zip(commits, errors, strict=True)]

    def _group_for_commit(
        self, group_id: str, generation_id: int, member_id: str, instance_id: str | None, *, transactional: bool
    ) -> Group:
        group = self.groups.get(group_id)
        if group is None:
            if generation_id >= 0 and not transactional:
                raise KafkaError(E.ILLEGAL_GENERATION)  # from a generation of a group that is gone
            # Offsets only (assign + commit), or a producer's offsets: a group the coordinator
            # does not manage, Empty.
            group = self.groups[group_id] = Group(group_id, state_timestamp_ms=wall_clock_ms())
        self._validate_commit(group, generation_id, member_id, instance_id, transactional)
        if not transactional and group.is_in(GroupState.STABLE, GroupState.PREPARING_REBALANCE):
            # During PreparingRebalance a member may still commit: its heartbeat tells it of the
            # rebalance. A commit proves it alive, as a heartbeat does.
            self._touch(group, group.members[member_id])
        return group

    def _validate_commit(
        self, group: Group, generation_id: int, member_id: str, instance_id: str | None, transactional: bool
    ) -> None:
        """Kafka's validateOffsetCommit: who commits is checked before the group's state, so a
        stale member hears ILLEGAL_GENERATION or UNKNOWN_MEMBER_ID, never REBALANCE_IN_PROGRESS."""
        if group.is_in(GroupState.DEAD):
            raise KafkaError(E.COORDINATOR_NOT_AVAILABLE)
        if generation_id < 0 and group.is_in(GroupState.EMPTY):
            return  # the admin client, or a consumer that assigns itself: offsets only
        if generation_id >= 0 or member_id != UNKNOWN_MEMBER_ID or instance_id is not None:
            self._validate_member(group, member_id, instance_id)
            if generation_id != group.generation_id:
                raise KafkaError(E.ILLEGAL_GENERATION)
        elif not transactional and not group.is_in(GroupState.EMPTY):
            # Only members commit for a group that has some (v0 requests name no member). Older
            # TxnOffsetCommit versions name none either, so that rule is not theirs.
            raise KafkaError(E.UNKNOWN_MEMBER_ID)
        if not transactional and group.is_in(GroupState.COMPLETING_REBALANCE):
            # A current member that has its JoinGroup answer but no assignment yet.
            raise KafkaError(E.REBALANCE_IN_PROGRESS)

    @staticmethod
    def _validate_member(group: Group, member_id: str, instance_id: str | None) -> None:
        """Kafka's validateCurrentMember: a named instance must be mapped to this member, and the
        member must be in the group."""
        if instance_id is not None:
            static_id = group.static_member_id(instance_id)
            if static_id is None:
                raise KafkaError(E.UNKNOWN_MEMBER_ID)
            if static_id != member_id:
                raise KafkaError(E.FENCED_INSTANCE_ID)
        if member_id not in group.members:
            raise KafkaError(E.UNKNOWN_MEMBER_ID)

    def _metadata_error(self, commit: OffsetCommit) -> int:
        if commit.metadata is not None and len(commit.metadata.encode()) > self.config.offset_metadata_max_bytes:
            return E.OFFSET_METADATA_TOO_LARGE
        return E.NO_ERROR

    def _store_offsets(self, group_id: str, commits: list[OffsetCommit]) -> None:
        timestamp = wall_clock_ms()
        values = {
            (c.topic, c.partition): OffsetValue(c.offset, c.leader_epoch, c.metadata or "", timestamp) for c in commits
        }
        entries = [self.topic.offset_entry(group_id, t, p, v) for (t, p), v in values.items()]
        self.topic.write(group_id, entries, timestamp)
        self.offsets.setdefault(group_id, {}).update(values)

    # -- transactional offsets (TxnOffsetCommit) ------------------------------------------------

    def commit_transactional(
        self, group_id: str, producer_id: int, producer_epoch: int, generation_id: int, member_id: str,
        instance_id: str | None, commits: list[OffsetCommit],
    ) -> list[int]:
        """Offsets that count only if the producer's transaction commits (exactly-once pipelines)."""
        errors = self._commit_errors(group_id, generation_id, member_id, instance_id, commits, transactional=True)
        accepted = [c for c, error in zip(commits, errors, strict=True) if error == E.NO_ERROR]
        if accepted:
            timestamp = wall_clock_ms()
            values = {(c.topic, c.partition): OffsetValue(c.offset, c.leader_epoch, c.metadata or "", timestamp)
                      for c in accepted}
            entries = [self.topic.offset_entry(group_id, t, p, v) for (t, p), v in values.items()]
            try:
                self.topic.write(group_id, entries, timestamp, producer_id=producer_id, producer_epoch=producer_epoch)
            except KafkaError as e:
                return [e.code if error == E.NO_ERROR else error for error in errors]
            self.pending.setdefault(producer_id, {}).setdefault(group_id, {}).update(values)
        return errors

    def complete_transaction(self, producer_id: int, committed: bool, partition: int) -> None:
        """A marker reached `__consumer_offsets` partition `partition`: settle that partition's
        pending offsets of the producer."""
        self._finish_pending(producer_id, committed, partition)

    def _finish_pending(self, producer_id: int, committed: bool, partition: int) -> None:
        by_group = self.pending.get(producer_id)
        if not by_group:
            return
        for group_id in list(by_group):
            if self.topic.partition_of(group_id) != partition:
                continue
            values = by_group.pop(group_id)
            if committed:
                self.offsets.setdefault(group_id, {}).update(values)
        if not by_group:
            del self.pending[producer_id]

    def has_pending(self, group_id: str, tp: tuple[str, int]) -> bool:
        return any(tp in groups.get(group_id, {}) for groups in self.pending.values())

    def fetch_offsets(
        self, group_id: str, partitions: list[tuple[str, int]] | None
    ) -> dict[tuple[str, int], OffsetValue | None]:
        """Committed offsets (None: nothing committed); all of the group's when `partitions` is None."""
        committed = self.committed_offsets(group_id)
        if partitions is None:
            return dict(sorted(committed.items()))
        return {tp: committed.get(tp) for tp in partitions}

    def committed_offsets(self, group_id: str) -> Mapping[tuple[str, int], OffsetValue]:
        """The group's committed offsets, read-only (raises when this broker is not its coordinator)."""
        self._check_coordinator(group_id)
        return self.offsets.get(group_id, {})

    # -- describing, listing, deleting -----------------------------------------------------------

    def describe(self, group_id: str) -> Group | None:
        self._check_coordinator(group_id)
        return self._group(group_id)

    def list_groups(self) -> list[Group]:
        return [g for g in self.groups.values() if not g.is_in(GroupState.DEAD)]

    def delete_groups(self, group_ids: Iterable[str]) -> dict[str, int]:
        results = {}
        for group_id in group_ids:
            try:
                self._check_coordinator(group_id)
                self._delete_group(group_id)
                results[group_id] = E.NO_ERROR
            except KafkaError as e:
                results[group_id] = e.code
        return results

    def _delete_group(self, group_id: str) -> None:
        group = self._group(group_id)
        if group is None:
            raise KafkaError(E.GROUP_ID_NOT_FOUND)
        if not group.is_in(GroupState.EMPTY):
            raise KafkaError(E.NON_EMPTY_GROUP)
        offsets = self.offsets.get(group_id, {})
        entries = [self.topic.offset_entry(group_id, t, p, None) for t, p in offsets]
        entries.append(self.topic.group_entry(group_id, None))
        self.topic.write(group_id, entries, wall_clock_ms())
        self.offsets.pop(group_id, None)
        group.transition(GroupState.DEAD, wall_clock_ms())
        del self.groups[group_id]
        log.info("deleted group %s", group_id)

    def delete_offsets(self, group_id: str, partitions: list[tuple[str, int]]) -> tuple[int, dict[tuple[str, int], int]]:
        """OffsetDelete: only for partitions the group does not consume from right now."""
        self._check_coordinator(group_id)
        group = self._group(group_id)
        if group is None:
            return E.GROUP_ID_NOT_FOUND, {}
        if not group.is_in(GroupState.EMPTY) and group.protocol_type != "consumer":
            return E.NON_EMPTY_GROUP, {}
        subscribed = set() if group.is_in(GroupState.EMPTY) else group.subscribed_topics()
        results: dict[tuple[str, int], int] = {}
        deletable = []
        for topic, partition in partitions:
            if not self.partition_exists(topic, partition):
                results[(topic, partition)] = E.UNKNOWN_TOPIC_OR_PARTITION
            elif subscribed is None or topic in subscribed:
                results[(topic, partition)] = E.GROUP_SUBSCRIBED_TO_TOPIC
            else:
                results[(topic, partition)] = E.NO_ERROR
                deletable.append((topic, partition))
        committed = self.offsets.get(group_id, {})
        present = [tp for tp in deletable if tp in committed]
        if present:
            self.topic.write(group_id, [self.topic.offset_entry(group_id, t, p, None) for t, p in present], wall_clock_ms())
            for tp in present:
                del committed[tp]
        return E.NO_ERROR, results

    # -- persistence and expiry ------------------------------------------------------------------

    def _store_group(self, group: Group) -> None:
        self.topic.write(group.group_id, [self.topic.group_entry(group.group_id, group.to_record(wall_clock_ms()))], wall_clock_ms())

    def expire_offsets(self, now: int) -> int:
        """offsets.retention.minutes: drop old offsets of empty groups (and of topics a stable
        consumer group no longer subscribes to); a group left with nothing is removed."""
        removed = 0
        retention = self.config.offsets_retention_ms
        for group_id in list(self.groups):
            group = self.groups[group_id]
            offsets = self.offsets.get(group_id, {})
            if group.is_in(GroupState.EMPTY):
                expired = [tp for tp, v in offsets.items()
                           if (group.state_timestamp_ms if group.state_timestamp_ms >= 0 else v.commit_timestamp)
                           + retention <= now]
            elif group.is_in(GroupState.STABLE) and (subscribed := group.subscribed_topics()) is not None:
                expired = [tp for tp, v in offsets.items() if tp[0] not in subscribed
                           and v.commit_timestamp + retention <= now]
            else:
                continue
            entries = [self.topic.offset_entry(group_id, t, p, None) for t, p in expired]
            drop_group = group.is_in(GroupState.EMPTY) and len(expired) == len(offsets)
            if drop_group:
                entries.append(self.topic.group_entry(group_id, None))
            if not entries:
                continue
            self.topic.write(group_id, entries, now)
            for tp in expired:
                del offsets[tp]
            removed += len(expired)
            if drop_group:
                group.transition(GroupState.DEAD, now)
                del self.groups[group_id]
                self.offsets.pop(group_id, None)
                log.info("group %s removed: its offsets expired", group_id)
        return removed
