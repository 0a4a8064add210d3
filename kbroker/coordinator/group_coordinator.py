"""The group coordinator: what the broker and its handlers call for consumer groups.

It joins three parts over one `__consumer_offsets`, as Kafka's group coordinator shard joins its
group and offset managers: `GroupMembership` (group_membership.py: the classic protocol's
JoinGroup, SyncGroup, Heartbeat, LeaveGroup, the generation state machine, session timers),
`ConsumerMembership` (consumer_membership.py: the consumer protocol's ConsumerGroupHeartbeat,
KIP-848) and `GroupOffsets` (group_offsets.py: OffsetCommit, TxnOffsetCommit, OffsetFetch,
OffsetDelete, expiry). What needs them together lives here: loading and unloading a partition of
the topic, and listing, describing and deleting groups.

Runs on the event loop, so no locks: every method runs to completion between awaits.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from kbroker.clock import LoopClock, wall_clock_ms
from kbroker.coordinator.consumer_group import ConsumerGroup, Heartbeat, HeartbeatAnswer
from kbroker.coordinator.consumer_group_records import GroupReplay
from kbroker.coordinator.consumer_membership import ConsumerMembership
from kbroker.coordinator.group import Group, GroupState, JoinResult, SyncResult
from kbroker.coordinator.group_config import GroupConfig
from kbroker.coordinator.group_membership import GroupMembership, JoinRequest
from kbroker.coordinator.group_offsets import GroupOffsets, OffsetCommit
from kbroker.coordinator.offsets_topic import OffsetsTopic, Replayed
from protocol.consumer_group_records import ConsumerGroupRecordKey
from protocol.coordinator_records import GroupKey, GroupValue, OffsetValue
from protocol.errors import ErrorCode, KafkaError

log = logging.getLogger("kbroker.coordinator")

E = ErrorCode
CLASSIC, CONSUMER = "classic", "consumer"


@dataclass(frozen=True, slots=True)
class GroupListing:
    """One group as ListGroups reports it."""

    group_id: str
    protocol_type: str
    state: str
    group_type: str  # "classic" or "consumer": the protocol its members speak


class GroupCoordinator:
    def __init__(
        self, offsets_topic: OffsetsTopic, config: GroupConfig, partition_exists: Any, clock: LoopClock | None = None
    ) -> None:
        self.topic = offsets_topic
        self.membership = GroupMembership(offsets_topic, config, clock)
        self.consumer = ConsumerMembership(self.membership, offsets_topic.topics.cache, config, clock)
        self.committed = GroupOffsets(offsets_topic, config, partition_exists, self.membership, self.consumer)

    # The settings are the parts' own; setting one here (as tests do) sets it for both.

    @property
    def config(self) -> GroupConfig:
        return self.membership.config

    @config.setter
    def config(self, config: GroupConfig) -> None:
        self.membership.config = self.committed.config = config
        self.consumer.configure(config)

    @property
    def clock(self) -> LoopClock | None:
        """The clock of the join and session timers; None: the running event loop."""
        return self.membership.clock

    @clock.setter
    def clock(self, clock: LoopClock | None) -> None:
        self.membership.clock = self.consumer.clock = clock

    @property
    def partition_exists(self) -> Any:
        """(topic, partition) -> bool: whether a partition an offset names exists."""
        return self.committed.partition_exists

    @partition_exists.setter
    def partition_exists(self, partition_exists: Any) -> None:
        self.committed.partition_exists = partition_exists

    @property
    def groups(self) -> dict[str, Group]:
        return self.membership.groups

    # -- startup and leadership of `__consumer_offsets` partitions ---------------------------------

    def load(self, only: int | None = None) -> None:
        """Rebuild groups and offsets from `__consumer_offsets` (called once the logs are open):
        every partition this broker leads, or partition `only` when it just became its leader."""
        if not self.topic.exists():
            return
        records: dict[str, GroupValue | None] = {}
        consumer_groups = GroupReplay()
        loaded_before = set(self.groups)
        consumer_before = set(self.consumer.groups)
        for item in self.topic.replay(only):
            if isinstance(item, Replayed) and item.producer_id is None and isinstance(item.key, GroupKey):
                records[item.key.group] = item.value  # type: ignore[assignment]
                # A group is of the protocol whose record came last (a conversion also deletes
                # the other protocol's records, but a failed write may have left them).
                if item.value is not None:
                    consumer_groups.discard(item.key.group)
            elif isinstance(item, Replayed) and isinstance(item.key, ConsumerGroupRecordKey):
                consumer_groups.apply(item.key, item.value)  # type: ignore[arg-type]
                if item.value is not None:
                    records.pop(item.key.group_id, None)
            else:
                self.committed.replay(item)
        for group_id, value in records.items():
            if value is not None:
                self.groups[group_id] = self.membership.restore(group_id, value)
        self.consumer.restore(consumer_groups.build())
        for group_id in self.committed.groups_with_offsets():
            if group_id not in self.groups and group_id not in self.consumer.groups:
                self.groups[group_id] = Group(group_id, state_timestamp_ms=-1)
        if only is not None:
            self.membership.start_sessions(set(self.groups) - loaded_before)
            self.consumer.start_sessions(set(self.consumer.groups) - consumer_before)
        where = "" if only is None else f" from partition {only}"
        log.info("loaded %d groups (%d of the consumer protocol) and the offsets of %d groups%s",
                 len(self.groups) - len(loaded_before) + len(self.consumer.groups) - len(consumer_before),
                 len(self.consumer.groups) - len(consumer_before), len(self.committed.offsets), where)

    def unload(self, partition: int) -> None:
        """This broker no longer leads `partition` of `__consumer_offsets`: forget its groups
        (their members find the new coordinator), as Kafka's coordinator does on resignation."""
        self.membership.unload(partition)
        self.consumer.unload(partition)
        self.committed.unload(partition)

    def stop(self) -> None:
        """The broker stops: every group's timers with it (nothing is written any more)."""
        for partition in range(self.topic.partition_count()):
            self.unload(partition)

    def start_timers(self) -> None:
        """Members restored from the log get a session to come back in (needs the running loop)."""
        self.membership.start_sessions()
        self.consumer.start_sessions()

    # -- membership (group_membership.py) ----------------------------------------------------------

    async def join(self, request: JoinRequest) -> JoinResult:
        if self.consumer.is_consumer_group(request.group_id, with_members=True):
            # A classic member joins a consumer group (a mixed group, as in an online upgrade).
            try:
                self.membership.check_join(request)
            except KafkaError as e:
                return JoinResult(e.code, request.member_id)
            result = self.consumer.classic_join(request)
            if result.error == E.NO_ERROR and self.topic.has_unreplicated(request.group_id):
                code = await self.topic.wait_replicated(request.group_id)
                if code != E.NO_ERROR:
                    return JoinResult(code, result.member_id)
            return result
        self.consumer.release_for_classic(request.group_id)
        return await self.membership.join(request)

    def consumer_heartbeat(self, request: Heartbeat) -> HeartbeatAnswer:
        """ConsumerGroupHeartbeat (KIP-848); raises the KafkaError it is answered with."""
        return self.consumer.heartbeat(request)

    async def sync(
        self, group_id: str, generation_id: int, member_id: str, instance_id: str | None,
        protocol_type: str | None, protocol_name: str | None, assignments: dict[str, bytes],
    ) -> SyncResult:
        if self._consumer_group_of_classic_request(group_id):
            return self.consumer.classic_sync(group_id, generation_id, member_id, instance_id, protocol_type,
                                              protocol_name)
        return await self.membership.sync(group_id, generation_id, member_id, instance_id, protocol_type,
                                          protocol_name, assignments)

    def heartbeat(self, group_id: str, generation_id: int, member_id: str, instance_id: str | None) -> int:
        if self._consumer_group_of_classic_request(group_id):
            return self.consumer.classic_heartbeat(group_id, generation_id, member_id, instance_id)
        return self.membership.heartbeat(group_id, generation_id, member_id, instance_id)

    def leave(self, group_id: str, leaving: list[tuple[str, str | None]]) -> tuple[int, list[int]]:
        """Remove members (member id, instance id); returns the top-level and per-member errors."""
        if self._consumer_group_of_classic_request(group_id):
            return E.NO_ERROR, self.consumer.classic_leave(group_id, leaving)
        return self.membership.leave(group_id, leaving)

    def _consumer_group_of_classic_request(self, group_id: str) -> bool:
        """Whether a SyncGroup, Heartbeat or LeaveGroup goes to a consumer group's classic members
        (after the checks every group request passes)."""
        if not group_id or not self.consumer.is_consumer_group(group_id):
            return False
        try:
            self.membership.check_coordinator(group_id)
        except KafkaError:
            return False  # the classic side answers NOT_COORDINATOR
        return True

    # -- offsets (group_offsets.py) ----------------------------------------------------------------

    def commit(
        self, group_id: str, generation_id: int, member_id: str, instance_id: str | None,
        commits: list[OffsetCommit], api_version: int = 9,
    ) -> list[int]:
        """`generation_id` is the member epoch for a consumer-protocol group (OffsetCommit v9+)."""
        return self.committed.commit(group_id, generation_id, member_id, instance_id, commits, api_version)

    def commit_transactional(
        self, group_id: str, producer_id: int, producer_epoch: int, generation_id: int, member_id: str,
        instance_id: str | None, commits: list[OffsetCommit],
    ) -> list[int]:
        """Offsets that count only if the producer's transaction commits (exactly-once pipelines)."""
        return self.committed.commit_transactional(group_id, producer_id, producer_epoch, generation_id, member_id,
                                                   instance_id, commits)

    def complete_transaction(self, producer_id: int, committed: bool, partition: int) -> None:
        """A marker reached `__consumer_offsets` partition `partition`: settle that partition's
        pending offsets of the producer."""
        self.committed.complete_transaction(producer_id, committed, partition)

    def has_pending(self, group_id: str, tp: tuple[str, int]) -> bool:
        return self.committed.has_pending(group_id, tp)

    def fetch_offsets(
        self, group_id: str, partitions: list[tuple[str, int]] | None
    ) -> dict[tuple[str, int], OffsetValue | None]:
        """Committed offsets (None: nothing committed); all of the group's when `partitions` is None."""
        return self.committed.fetch_offsets(group_id, partitions)

    def validate_offset_fetch(self, group_id: str, member_id: str | None, member_epoch: int) -> None:
        """OffsetFetch v9 from a member of a consumer-protocol group: it must be current."""
        self.membership.check_coordinator(group_id)
        group = self.consumer.groups.get(group_id)
        if group is not None:
            self.consumer.consumer.validate_offset_fetch(group, member_id, member_epoch)

    def committed_offsets(self, group_id: str) -> Mapping[tuple[str, int], OffsetValue]:
        """The group's committed offsets, read-only (raises when this broker is not its coordinator)."""
        return self.committed.committed_offsets(group_id)

    def delete_offsets(self, group_id: str, partitions: list[tuple[str, int]]) -> tuple[int, dict[tuple[str, int], int]]:
        """OffsetDelete: only for partitions the group does not consume from right now."""
        return self.committed.delete_offsets(group_id, partitions)

    def expire_offsets(self, now: int) -> int:
        """offsets.retention.minutes: drop old offsets of empty groups (and of topics a stable
        consumer group no longer subscribes to); a group left with nothing is removed."""
        return self.committed.expire_offsets(now)

    # -- describing, listing, deleting -------------------------------------------------------------

    def describe(self, group_id: str) -> Group | None:
        """A classic group (None for a consumer-protocol one, which DescribeGroups shows Dead)."""
        self.membership.check_coordinator(group_id)
        return self.membership.live_group(group_id)

    def describe_consumer_group(self, group_id: str) -> ConsumerGroup:
        """ConsumerGroupDescribe: GROUP_ID_NOT_FOUND for a classic or unknown group."""
        self.membership.check_coordinator(group_id)
        group = self.consumer.groups.get(group_id)
        if group is None:
            raise KafkaError(E.GROUP_ID_NOT_FOUND, f"Group {group_id} not found.")
        return group

    def list_groups(self) -> list[GroupListing]:
        classic = [GroupListing(g.group_id, g.protocol_type or "", g.state.value, CLASSIC)
                   for g in self.groups.values() if not g.is_in(GroupState.DEAD)]
        consumer = [GroupListing(g.group_id, CONSUMER, g.state.value, CONSUMER) for g in self.consumer.groups.values()]
        return classic + consumer

    def delete_groups(self, group_ids: Iterable[str]) -> dict[str, int]:
        results = {}
        for group_id in group_ids:
            try:
                self.membership.check_coordinator(group_id)
                self._delete_group(group_id)
                results[group_id] = E.NO_ERROR
            except KafkaError as e:
                results[group_id] = e.code
        return results

    def _delete_group(self, group_id: str) -> None:
        consumer_group = self.consumer.groups.get(group_id)
        if consumer_group is not None:
            if not consumer_group.is_empty:
                raise KafkaError(E.NON_EMPTY_GROUP)
            # The offsets' and the group's tombstones in one write, as for a classic group.
            entries = self.committed.tombstones(group_id) + self.consumer.tombstones(group_id)
            self.topic.write(group_id, entries, wall_clock_ms())
            self.committed.forget(group_id)
            self.consumer.remove_group(group_id)
            log.info("deleted group %s", group_id)
            return
        group = self.membership.live_group(group_id)
        if group is None:
            raise KafkaError(E.GROUP_ID_NOT_FOUND)
        if not group.is_in(GroupState.EMPTY):
            raise KafkaError(E.NON_EMPTY_GROUP)
        # The offsets' tombstones and the group's in one write: a deletion is whole or not at all.
        entries = self.committed.tombstones(group_id)
        entries.append(self.topic.group_entry(group_id, None))
        self.topic.write(group_id, entries, wall_clock_ms())
        self.committed.forget(group_id)
        self.membership.remove_group(group, wall_clock_ms())
        log.info("deleted group %s", group_id)
