"""Committed offsets of the groups this broker coordinates: OffsetCommit (checked against the
group's membership), TxnOffsetCommit (held pending until the producer's transaction ends),
OffsetFetch, OffsetDelete, their replay from `__consumer_offsets`, and their expiry
(`offsets.retention.minutes`). Offsets are written to the topic before they are acknowledged.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from kbroker.clock import wall_clock_ms
from kbroker.coordinator.consumer_membership import ConsumerMembership
from kbroker.coordinator.group import Group, GroupState
from kbroker.coordinator.group_config import GroupConfig
from kbroker.coordinator.group_membership import GroupMembership
from kbroker.coordinator.offsets_topic import Marker, OffsetsTopic, Replayed
from protocol.coordinator_records import OffsetKey, OffsetValue
from protocol.errors import ErrorCode, KafkaError

log = logging.getLogger("kbroker.coordinator")

E = ErrorCode
OffsetsByPartition = dict[tuple[str, int], OffsetValue]


@dataclass(frozen=True, slots=True)
class OffsetCommit:
    topic: str
    partition: int
    offset: int
    leader_epoch: int
    metadata: str | None


class GroupOffsets:
    """The committed offsets, and the transactional ones not yet committed, of the groups that
    `membership` knows."""

    def __init__(
        self, offsets_topic: OffsetsTopic, config: GroupConfig, partition_exists: Callable[[str, int], bool],
        membership: GroupMembership, consumer: ConsumerMembership,
    ) -> None:
        self.topic = offsets_topic
        self.config = config
        self.partition_exists = partition_exists
        self.membership = membership
        self.consumer = consumer  # the consumer-protocol groups, whose members commit by epoch
        self.offsets: dict[str, OffsetsByPartition] = {}
        # Offsets committed inside transactions, by producer id then group, until the marker.
        self.pending: dict[int, dict[str, OffsetsByPartition]] = {}

    # -- loading ---------------------------------------------------------------------------------

    def replay(self, item: Replayed | Marker) -> None:
        """One offset record (or transaction marker) read back from `__consumer_offsets`."""
        if isinstance(item, Marker):
            self._finish_pending(item.producer_id, item.committed, item.partition)
            return
        if item.producer_id is not None:
            if isinstance(item.key, OffsetKey) and isinstance(item.value, OffsetValue):
                group_pending = self.pending.setdefault(item.producer_id, {}).setdefault(item.key.group, {})
                group_pending[(item.key.topic, item.key.partition)] = item.value
            return
        if isinstance(item.key, OffsetKey):
            offsets = self.offsets.setdefault(item.key.group, {})
            if item.value is None:
                offsets.pop((item.key.topic, item.key.partition), None)
            else:
                assert isinstance(item.value, OffsetValue)
                offsets[(item.key.topic, item.key.partition)] = item.value

    def groups_with_offsets(self) -> list[str]:
        """The groups that have committed offsets (forgetting those whose offsets were all deleted)."""
        for group_id in [g for g, offsets in self.offsets.items() if not offsets]:
            del self.offsets[group_id]
        return list(self.offsets)

    def unload(self, partition: int) -> None:
        """Forget the offsets, pending ones included, of the groups of `partition`."""
        for group_id in [g for g in self.offsets if self.topic.partition_of(g) == partition]:
            del self.offsets[group_id]
        for by_group in self.pending.values():
            for group_id in [g for g in by_group if self.topic.partition_of(g) == partition]:
                del by_group[group_id]

    # -- OffsetCommit ----------------------------------------------------------------------------

    def commit(
        self, group_id: str, generation_id: int, member_id: str, instance_id: str | None,
        commits: list[OffsetCommit], api_version: int = 9,
    ) -> list[int]:
        errors = self._commit_errors(group_id, generation_id, member_id, instance_id, commits, transactional=False,
                                     api_version=api_version)
        accepted = [c for c, error in zip(commits, errors, strict=True) if error == E.NO_ERROR]
        if accepted:
            try:
                self._store_offsets(group_id, accepted)
            except KafkaError as e:
                return [e.code if error == E.NO_ERROR else error for error in errors]
        return errors

    def _commit_errors(
        self, group_id: str, generation_id: int, member_id: str, instance_id: str | None,
        commits: list[OffsetCommit], *, transactional: bool, api_version: int = 9,
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
            self.membership.check_coordinator(group_id)
            consumer_group = self.consumer.groups.get(group_id)
            if consumer_group is not None:
                # A consumer-protocol group: its members commit with their member epoch (v9+).
                self.consumer.consumer.validate_offset_commit(consumer_group, member_id, generation_id, transactional,
                                                              api_version)
            else:
                self._group_for_commit(group_id, generation_id, member_id, instance_id, transactional=transactional)
        except KafkaError as e:
            return [e.code if error == E.NO_ERROR else error for error in errors]
        return [self._metadata_error(c) if error == E.NO_ERROR else error
                for c, error in zip(commits, errors, strict=True)]

    def _group_for_commit(
        self, group_id: str, generation_id: int, member_id: str, instance_id: str | None, *, transactional: bool
    ) -> Group:
        groups = self.membership.groups
        group = groups.get(group_id)
        if group is None:
            if generation_id >= 0 and not transactional:
                raise KafkaError(E.ILLEGAL_GENERATION)  # from a generation of a group that is gone
            # Offsets only (assign + commit), or a producer's offsets: a group the coordinator
            # does not manage, Empty.
            group = groups[group_id] = Group(group_id, state_timestamp_ms=wall_clock_ms())
        group.validate_offset_commit(generation_id, member_id, instance_id, transactional)
        if not transactional and group.is_in(GroupState.STABLE, GroupState.PREPARING_REBALANCE):
            # During PreparingRebalance a member may still commit: its heartbeat tells it of the
            # rebalance. A commit proves it alive, as a heartbeat does.
            self.membership.touch(group, group.members[member_id])
        return group

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

    # -- OffsetFetch -----------------------------------------------------------------------------

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
        self.membership.check_coordinator(group_id)
        return self.offsets.get(group_id, {})

    # -- OffsetDelete and deleted groups --------------------------------------------------------

    def delete_offsets(self, group_id: str, partitions: list[tuple[str, int]]) -> tuple[int, dict[tuple[str, int], int]]:
        """OffsetDelete: only for partitions the group does not consume from right now."""
        self.membership.check_coordinator(group_id)
        consumer_group = self.consumer.groups.get(group_id)
        group = self.membership.live_group(group_id)
        subscribed: set[str] | None
        if consumer_group is not None:
            subscribed = consumer_group.subscribed_topic_names()
        elif group is None:
            return E.GROUP_ID_NOT_FOUND, {}
        elif not group.is_in(GroupState.EMPTY) and group.protocol_type != "consumer":
            return E.NON_EMPTY_GROUP, {}
        else:
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

    def tombstones(self, group_id: str) -> list[tuple[bytes, bytes | None]]:
        """The records that delete every committed offset of the group."""
        return [self.topic.offset_entry(group_id, t, p, None) for t, p in self.offsets.get(group_id, {})]

    def forget(self, group_id: str) -> None:
        """The group was deleted (its tombstones written): its offsets are gone."""
        self.offsets.pop(group_id, None)

    # -- expiry ----------------------------------------------------------------------------------

    def expire_offsets(self, now: int) -> int:
        """offsets.retention.minutes: drop old offsets of empty groups (and of topics a stable
        consumer group no longer subscribes to); a group left with nothing is removed."""
        removed = self._expire_consumer_group_offsets(now)
        retention = self.config.offsets_retention_ms
        groups = self.membership.groups
        for group_id in list(groups):
            group = groups[group_id]
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
                self.membership.remove_group(group, now)
                self.offsets.pop(group_id, None)
                log.info("group %s removed: its offsets expired", group_id)
        return removed

    def _expire_consumer_group_offsets(self, now: int) -> int:
        """Kafka's rule for consumer-protocol groups: only an empty group's offsets expire, each
        `offsets.retention.minutes` after its commit; the group goes with its last offset."""
        removed = 0
        for group_id, group in list(self.consumer.groups.items()):
            if not group.is_empty:
                continue
            offsets = self.offsets.get(group_id, {})
            expired = [tp for tp, v in offsets.items() if v.commit_timestamp + self.config.offsets_retention_ms <= now]
            entries = [self.topic.offset_entry(group_id, t, p, None) for t, p in expired]
            drop_group = len(expired) == len(offsets)
            if drop_group:  # the group's own records go in the same write
                entries += self.consumer.tombstones(group_id)
            if entries:
                self.topic.write(group_id, entries, now)
            for tp in expired:
                del offsets[tp]
            removed += len(expired)
            if drop_group:
                self.consumer.remove_group(group_id)
                self.offsets.pop(group_id, None)
                log.info("group %s removed: empty, and its offsets expired", group_id)
        return removed
