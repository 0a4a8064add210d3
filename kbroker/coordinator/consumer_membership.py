"""The consumer protocol (KIP-848) inside the group coordinator: ConsumerGroupHeartbeat over the
state machine of consumer_group.py, the timers that fence members whose session or rebalance
timeout ran out, the topic metadata the assignors see, and the one rule that ties a group id to
one protocol at a time.

A group id names either a classic group (group_membership.py) or a consumer group. An empty
classic group (one that only has committed offsets) becomes a consumer group on the first
ConsumerGroupHeartbeat, and an empty consumer group a classic one on the first JoinGroup, as in
Kafka; the offsets stay. A group with members does not change protocol here: Kafka 4.0 lets
classic and consumer members share a group during an online upgrade, which kbroker does not
build yet, so such a request is refused with the answer Kafka gives when it cannot take it.

Runs on the event loop: every method runs to completion between awaits.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Iterable

from kbroker.clock import LoopClock, Timer
from kbroker.cluster.metadata_cache import MetadataCache
from kbroker.coordinator.assignors import assignors_from_config
from kbroker.coordinator.consumer_group import (
    ConsumerGroup,
    ConsumerGroupConfig,
    ConsumerGroups,
    Heartbeat,
    HeartbeatAnswer,
)
from kbroker.coordinator.group import GroupState
from kbroker.coordinator.group_config import GroupConfig
from kbroker.coordinator.group_membership import GroupMembership
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
    )


class ConsumerMembership:
    def __init__(self, classic: GroupMembership, cache: MetadataCache, config: GroupConfig,
                 clock: LoopClock | None = None) -> None:
        self.classic = classic
        self.image = MetadataTopicImage(cache)
        self.consumer = ConsumerGroups(consumer_group_config(config), self.image)
        self.enabled = config.consumer_protocol_enabled
        self.clock = clock  # None: the running event loop
        self._timers: dict[tuple[str, str], Timer] = {}

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
        self._take_over_empty_classic_group(request)
        answer = self.consumer.heartbeat(request, self._now_ms())
        self._arm(request.group_id, answer.member_id)
        return answer

    def _take_over_empty_classic_group(self, request: Heartbeat) -> None:
        classic = self.classic.live_group(request.group_id)
        if classic is None:
            return
        if request.member_epoch != 0 or not classic.is_in(GroupState.EMPTY):
            raise KafkaError(E.GROUP_ID_NOT_FOUND, f"Group {request.group_id} is not a consumer group.")
        # An empty classic group (offsets only) turns into a consumer group; its offsets stay.
        del self.classic.groups[request.group_id]
        log.info("group %s: the empty classic group becomes a consumer group", request.group_id)

    def release_for_classic(self, group_id: str) -> int:
        """A JoinGroup arrived for `group_id`: NO_ERROR when it may go on as a classic group (an
        empty consumer group is dropped; its offsets stay), else Kafka's refusal."""
        group = self.groups.get(group_id)
        if group is None:
            return E.NO_ERROR
        if group.is_empty:
            del self.groups[group_id]
            log.info("group %s: the empty consumer group becomes a classic group", group_id)
            return E.NO_ERROR
        # Kafka 4.0 would take the member into the consumer group (mixed membership), which is
        # not built: it is refused as Kafka refuses members the group cannot take.
        return E.INCONSISTENT_GROUP_PROTOCOL

    # -- timers ----------------------------------------------------------------------------------

    def _arm(self, group_id: str, member_id: str) -> None:
        group = self.groups.get(group_id)
        member = group.members.get(member_id) if group is not None else None
        if member is None:
            return
        deadline = member.session_deadline_ms
        if member.revocation_deadline_ms is not None:
            deadline = min(deadline, member.revocation_deadline_ms)
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

    # -- leadership of `__consumer_offsets` partitions --------------------------------------------

    def unload(self, partition: int) -> None:
        """Forget the consumer groups of `partition` (their members find the new coordinator)."""
        for group_id in [g for g in self.groups if self.classic.topic.partition_of(g) == partition]:
            group = self.groups.pop(group_id)
            for member_id in group.members:
                timer = self._timers.pop((group_id, member_id), None)
                if timer is not None:
                    timer.cancel()
