"""The consumer protocol (KIP-848) inside the group coordinator: ConsumerGroupHeartbeat over the
state machine of consumer_group.py, the classic protocol's requests to consumer groups
(classic_members.py), the timers that fence members whose session, rebalance, join or sync
timeout ran out, the topic metadata the assignors see, and the rules that move a group id from
one protocol to the other.

A group id names either a classic group (group_membership.py) or a consumer group. As in Kafka:

- an empty classic group (one that only has committed offsets) becomes a consumer group on the
  first ConsumerGroupHeartbeat, and an empty consumer group a classic one on the first JoinGroup;
- a classic group with members becomes a consumer group when a consumer-protocol member joins
  (an online upgrade, if `group.consumer.migration.policy` allows it): its members stay, as
  classic members of the consumer group;
- a consumer group becomes a classic group again when its last consumer-protocol member leaves
  and classic members remain (an online downgrade, policy permitting).

Committed offsets stay through every change. Runs on the event loop: every method runs to
completion between awaits.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Iterable

from kbroker.clock import LoopClock, Timer, wall_clock_ms
from kbroker.cluster.metadata_cache import MetadataCache
from kbroker.coordinator.assignors import assignors_from_config
from kbroker.coordinator.classic_members import ClassicMembers
from kbroker.coordinator.consumer_group import (
    ConsumerGroup,
    ConsumerGroupConfig,
    ConsumerGroups,
    Heartbeat,
    HeartbeatAnswer,
    MigrationPolicy,
)
from kbroker.coordinator.consumer_group_records import ConsumerGroupStore, Entry
from kbroker.coordinator.group import GroupState, JoinResult, SyncResult
from kbroker.coordinator.group_config import GroupConfig
from kbroker.coordinator.group_conversion import (
    classic_group_from_consumer_group,
    consumer_group_from_classic_group,
    upgrade_refusal,
)
from kbroker.coordinator.group_membership import GroupMembership, JoinRequest
from kbroker.coordinator.reconciliation import MemberState
from protocol.errors import ErrorCode, KafkaError

log = logging.getLogger("kbroker.coordinator")

E = ErrorCode


class MetadataTopicImage:
    """The assignors' view of topics: the broker's metadata cache."""

    def __init__(self, cache: MetadataCache) -> None:
        self.cache = cache

    def topic_id(self, name: str) -> uuid.UUID | None:
        record = self.cache.topic(name)
        return record.topic_id if record is not None else None

    def topic_name(self, topic_id: uuid.UUID) -> str | None:
        record = self.cache.topic_by_id(topic_id)
        return record.name if record is not None else None

    def partition_count(self, name: str) -> int:
        record = self.cache.topic(name)
        return len(record.assignment) if record is not None else 0

    def topic_names(self) -> Iterable[str]:
        return self.cache.topics.keys()


def consumer_group_config(config: GroupConfig) -> ConsumerGroupConfig:
    return ConsumerGroupConfig(
        heartbeat_interval_ms=config.consumer_heartbeat_interval_ms,
        session_timeout_ms=config.consumer_session_timeout_ms,
        max_size=config.consumer_max_size,
        regex_refresh_interval_ms=config.consumer_regex_refresh_interval_ms,
        assignors=tuple(assignors_from_config(list(config.consumer_assignors))),
        migration_policy=MigrationPolicy.parse(config.consumer_migration_policy),
        classic_max_size=config.max_size,
    )


class ConsumerMembership:
    def __init__(self, classic: GroupMembership, cache: MetadataCache, config: GroupConfig,
                 clock: LoopClock | None = None) -> None:
        self.classic = classic
        self.image = MetadataTopicImage(cache)
        self.consumer = ConsumerGroups(consumer_group_config(config), self.image)
        self.classic_members = ClassicMembers(self.consumer)
        self.enabled = config.consumer_protocol_enabled
        self.clock = clock  # None: the running event loop
        self._timers: dict[tuple[str, str], Timer] = {}
        # What is written of each group in `__consumer_offsets`; every change is appended there.
        self.records = ConsumerGroupStore(classic.topic)

    @property
    def groups(self) -> dict[str, ConsumerGroup]:
        return self.consumer.groups

    def configure(self, config: GroupConfig) -> None:
        self.consumer.config = consumer_group_config(config)
        self.enabled = config.consumer_protocol_enabled

    @property
    def _clock(self) -> LoopClock:
        return self.clock if self.clock is not None else asyncio.get_running_loop()

    def _now_ms(self) -> int:
        return int(self._clock.time() * 1000)

    # -- ConsumerGroupHeartbeat ------------------------------------------------------------------

    def heartbeat(self, request: Heartbeat) -> HeartbeatAnswer:
        if not self.enabled:
            raise KafkaError(E.UNSUPPORTED_VERSION, "The consumer group protocol is not enabled "
                             "(group.coordinator.rebalance.protocols).")
        self.consumer.validate(request)
        self.classic.check_coordinator(request.group_id)
        now_ms = self._now_ms()
        converted, classic_record_dropped = self._upgrade(request, now_ms)
        answer = self.consumer.heartbeat(request, now_ms, converted)
        if converted is not None:
            # Accepted: the classic group is gone, its members are the consumer group's now.
            classic = self.classic.groups[request.group_id]
            self.classic.hand_over(classic)
            classic_record_dropped = True
            log.info("group %s: the classic group of %d members becomes a consumer group", request.group_id,
                     len(classic.members))
            for member_id in converted.members:
                self._arm(request.group_id, member_id)
        self._arm(request.group_id, answer.member_id)
        self._downgrade_groups()
        # The classic group's record goes in the same batch as the consumer group's first records.
        dropped = [self.classic.topic.group_entry(request.group_id, None)] if classic_record_dropped else []
        self._save(request.group_id, before=dropped)
        return answer

    def _upgrade(self, request: Heartbeat, now_ms: int) -> tuple[ConsumerGroup | None, bool]:
        """The consumer group a classic group becomes as this heartbeat joins it (None when there
        is no classic group), and whether a classic group gave way (its record is to be deleted);
        raises Kafka's answer when it cannot become one."""
        classic = self.classic.live_group(request.group_id)
        if classic is None:
            return None, False
        if request.member_epoch == 0 and classic.is_in(GroupState.EMPTY):
            # An empty classic group (offsets only) turns into a consumer group; its offsets stay.
            del self.classic.groups[request.group_id]
            log.info("group %s: the empty classic group becomes a consumer group", request.group_id)
            return None, True
        refusal = upgrade_refusal(classic, self.consumer.config.migration_policy.upgrade_enabled,
                                  self.consumer.config.max_size)
        if request.member_epoch != 0 or refusal is not None:
            if refusal is not None:
                log.info("group %s: not upgraded to a consumer group: %s", request.group_id, refusal)
            raise KafkaError(E.GROUP_ID_NOT_FOUND, f"Group {request.group_id} is not a consumer group.")
        return consumer_group_from_classic_group(classic, self.image, now_ms), True

    def _downgrade_groups(self) -> None:
        """Consumer groups whose last consumer-protocol member left become classic groups."""
        for group, leaving_member_id in self.consumer.take_downgraded():
            for member_id in group.members:
                self._cancel_timer(group.group_id, member_id)
            classic = classic_group_from_consumer_group(group, leaving_member_id, self.image)
            self.classic.take_over(classic)
            # One batch: the consumer group's tombstones and the classic group's record.
            record = self.classic.topic.group_entry(group.group_id, classic.to_record(wall_clock_ms()))
            self._save_quietly(group.group_id, after=[record])

    # -- the classic protocol's requests to consumer groups ---------------------------------------

    def is_consumer_group(self, group_id: str, with_members: bool = False) -> bool:
        group = self.groups.get(group_id)
        return group is not None and not (with_members and group.is_empty)

    def release_for_classic(self, group_id: str) -> None:
        """A JoinGroup arrived for `group_id`, which has no members of the consumer protocol: an
        empty consumer group is dropped (its offsets stay) and it goes on as a classic group."""
        group = self.groups.get(group_id)
        if group is not None and group.is_empty:
            del self.groups[group_id]
            self._save_quietly(group_id)
            log.info("group %s: the empty consumer group becomes a classic group", group_id)

    def classic_join(self, request: JoinRequest) -> JoinResult:
        group = self.groups[request.group_id]
        result = self.classic_members.join(group, request, self._now_ms())
        self._arm(request.group_id, result.member_id)
        try:
            self._save(request.group_id)
        except KafkaError as e:
            return JoinResult(e.code, request.member_id)
        return result

    def classic_sync(
        self, group_id: str, generation_id: int, member_id: str, instance_id: str | None,
        protocol_type: str | None, protocol_name: str | None,
    ) -> SyncResult:
        result = self.classic_members.sync(self.groups[group_id], member_id, instance_id, generation_id,
                                           protocol_type, protocol_name, self._now_ms())
        self._arm(group_id, member_id)
        return result

    def classic_heartbeat(self, group_id: str, generation_id: int, member_id: str, instance_id: str | None) -> int:
        error = self.classic_members.heartbeat(self.groups[group_id], member_id, instance_id, generation_id,
                                               self._now_ms())
        self._arm(group_id, member_id)
        return error

    def classic_leave(self, group_id: str, leaving: list[tuple[str, str | None]]) -> list[int]:
        errors = self.classic_members.leave(self.groups[group_id], leaving)
        for member_id, _ in leaving:
            self._cancel_timer(group_id, member_id)
        self._save_quietly(group_id)
        return errors

    # -- timers ----------------------------------------------------------------------------------

    def _arm(self, group_id: str, member_id: str) -> None:
        group = self.groups.get(group_id)
        member = group.members.get(member_id) if group is not None else None
        if member is None:
            return
        deadline = min(member.deadlines())
        timer = self._timers.get((group_id, member_id))
        if timer is not None and not timer.cancelled() and timer.when() <= deadline / 1000:
            return  # it fires first and re-arms itself (a heartbeat costs no timer)
        if timer is not None:
            timer.cancel()
        self._timers[(group_id, member_id)] = self._clock.call_at(deadline / 1000 + 0.001, self._check,
                                                                  group_id, member_id)

    def _check(self, group_id: str, member_id: str) -> None:
        self._timers.pop((group_id, member_id), None)
        if self.consumer.expire(group_id, member_id, self._now_ms()) is not None:
            self._arm(group_id, member_id)
            return
        self._downgrade_groups()
        self._save_quietly(group_id)

    def _cancel_timer(self, group_id: str, member_id: str) -> None:
        timer = self._timers.pop((group_id, member_id), None)
        if timer is not None:
            timer.cancel()

    # -- `__consumer_offsets` ----------------------------------------------------------------------

    def _save(self, group_id: str, before: Iterable[Entry] = (), after: Iterable[Entry] = ()) -> bool:
        """Append what changed in the group (consumer_group_records.py), between the records
        `before` and `after`, in one batch; whether it wrote."""
        return self.records.save(group_id, self.groups.get(group_id), before, after)

    def _save_quietly(self, group_id: str, after: Iterable[Entry] = ()) -> None:
        """A save nobody waits for (a timer, a conversion): a failure is only logged, and what
        changed is written with the group's next save."""
        try:
            self._save(group_id, after=after)
        except KafkaError as e:
            log.warning("group %s: could not write the group's records: %s", group_id, e)

    def tombstones(self, group_id: str) -> list[Entry]:
        """The records that delete the consumer group (for its deletion, with its offsets')."""
        entries, _ = self.records.pending(group_id, None)
        return entries

    def remove_group(self, group_id: str) -> None:
        """The group was deleted (its tombstones written)."""
        self.groups.pop(group_id, None)
        self.records.forget(group_id)
        for key in [k for k in self._timers if k[0] == group_id]:
            self._cancel_timer(*key)

    def restore(self, groups: list[ConsumerGroup]) -> None:
        """Groups rebuilt from their records become this coordinator's (sessions not yet timed)."""
        for group in groups:
            group.assignor_name = self.consumer.preferred_assignor_name(group)
            self.groups[group.group_id] = group
            self.records.loaded(group)

    def start_sessions(self, group_ids: Iterable[str] | None = None) -> None:
        """Members restored from the log get a full session timeout to come back in, and those
        revoking partitions their rebalance timeout, as Kafka arms them on loading (needs the
        running loop)."""
        now_ms = self._now_ms()
        for group_id in list(self.groups) if group_ids is None else group_ids:
            group = self.groups.get(group_id)
            if group is None:
                continue
            session_timeout_ms, _ = self.consumer.timing(group_id)
            for member in group.members.values():
                classic = member.classic
                member.session_deadline_ms = now_ms + (classic.session_timeout_ms if classic else session_timeout_ms)
                if member.state is MemberState.UNREVOKED_PARTITIONS:
                    member.revocation_deadline_ms = now_ms + max(member.rebalance_timeout_ms, 0)
                self._arm(group_id, member.member_id)

    def unload(self, partition: int) -> None:
        """Forget the consumer groups of `partition` (their members find the new coordinator)."""
        for group_id in [g for g in self.groups if self.classic.topic.partition_of(g) == partition]:
            group = self.groups.pop(group_id)
            self.records.forget(group_id)
            for member_id in group.members:
                timer = self._timers.pop((group_id, member_id), None)
                if timer is not None:
                    timer.cancel()
