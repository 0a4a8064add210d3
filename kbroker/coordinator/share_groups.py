"""The share groups this broker coordinates: ShareGroupHeartbeat and ShareGroupDescribe over
`ShareGroup` (kbroker/share/share_group.py), the topics as the metadata cache knows them, and
the timers that expire silent members and acquisition locks.

A member removed for silence has its share sessions closed and the records it holds released
at once through `on_member_gone`, rather than waiting for their locks. A member that leaves
ends its share sessions itself (the final epoch of ShareAcknowledge or ShareFetch).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from kbroker.clock import WallClock, wall_clock_ms
from kbroker.share.share_group import HeartbeatAnswer, ShareGroup, TopicInfo
from protocol.errors import ErrorCode, KafkaError


@dataclass(frozen=True)
class ShareGroupConfig:
    session_timeout_ms: int = 45_000  # group.share.session.timeout.ms
    heartbeat_interval_ms: int = 5_000  # group.share.heartbeat.interval.ms
    max_size: int = 200  # group.share.max.size


# (group id, member id) of a member that is gone.
MemberGone = Callable[[str, str], None]
# (group id, topic name, partition) of every partition a group's target assignment holds.
Assigned = Callable[[str, str, int], None]


class ShareGroupCoordinator:
    def __init__(self, config: ShareGroupConfig, topics: Callable[[], Mapping[str, TopicInfo]],
                 is_other_group: Callable[[str], bool] = lambda group_id: False,
                 clock: WallClock = wall_clock_ms, on_member_gone: MemberGone | None = None,
                 on_assigned: Assigned | None = None,
                 config_of: Callable[[str], ShareGroupConfig] | None = None) -> None:
        self.config = config
        # A group's own settings (its share.session.timeout.ms, ... group configs); the broker's otherwise.
        self.config_of = config_of or (lambda group_id: config)
        self.topics = topics
        self.is_other_group = is_other_group  # a classic or consumer group of that id exists
        self.clock = clock
        self.on_member_gone = on_member_gone
        self.on_assigned = on_assigned
        self.groups: dict[str, ShareGroup] = {}
        self._expiry: asyncio.TimerHandle | None = None

    def heartbeat(self, group_id: str, member_id: str, member_epoch: int, subscribed: list[str] | None,
                  rack: str | None, client_id: str, client_host: str) -> HeartbeatAnswer:
        if not group_id:
            raise KafkaError(ErrorCode.INVALID_REQUEST, "GroupId can't be empty.")
        group = self.groups.get(group_id)
        if group is None:
            if self.is_other_group(group_id):
                raise KafkaError(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a share group.")
            group = ShareGroup(group_id, self.config.session_timeout_ms, self.config.max_size)
        # Read at every heartbeat, so a changed group config applies from the member's next one.
        group.session_timeout_ms = self.config_of(group_id).session_timeout_ms
        topics = self.topics()
        epoch_before = group.assignment_epoch
        answer = group.heartbeat(member_id, member_epoch, subscribed, rack, topics, self.clock(),
                                 client_id, client_host)
        self.groups.setdefault(group_id, group)
        if group.assignment_epoch != epoch_before:
            group.initialized |= group.target_partitions()
        if group.assignment_epoch != epoch_before and self.on_assigned is not None:
            names = {info.topic_id: name for name, info in topics.items()}
            for topic_id, index in sorted(group.target_partitions()):
                if topic_id in names:
                    self.on_assigned(group_id, names[topic_id], index)
        # A member that leaves keeps its share sessions: its final ShareAcknowledge (or ShareFetch
        # with epoch -1), sent beside the leave on another connection, settles and releases
        # what it holds. Releasing here first would lose those acknowledgements.
        self._arm_expiry()
        return answer

    def describe(self, group_id: str) -> ShareGroup | None:
        return self.groups.get(group_id)

    def empty_group(self, group_id: str) -> ShareGroup:
        """The share group whose offsets an administrator alters: created (empty) when there is
        none, as Kafka's AlterShareGroupOffsets does; GROUP_ID_NOT_FOUND when the id is another
        kind of group's, NON_EMPTY_GROUP while it has members."""
        group = self.existing_group(group_id)
        if group is None:
            group = self.groups[group_id] = ShareGroup(group_id, self.config.session_timeout_ms, self.config.max_size)
        if group.members:
            raise KafkaError(ErrorCode.NON_EMPTY_GROUP, f"Share group {group_id} is not empty.")
        return group

    def existing_group(self, group_id: str) -> ShareGroup | None:
        """The share group of that id (None when there is none); GROUP_ID_NOT_FOUND when the id is
        a classic or consumer group's."""
        group = self.groups.get(group_id)
        if group is None and self.is_other_group(group_id):
            raise KafkaError(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a share group.")
        return group

    def list_groups(self) -> Iterable[ShareGroup]:
        return self.groups.values()

    def delete(self, group_id: str) -> int:
        """DeleteGroups of a share group: only an empty one goes (NON_EMPTY_GROUP otherwise)."""
        group = self.groups.get(group_id)
        if group is None:
            return ErrorCode.GROUP_ID_NOT_FOUND
        if group.members:
            return ErrorCode.NON_EMPTY_GROUP
        del self.groups[group_id]
        return ErrorCode.NO_ERROR

    def expire_sessions(self, now_ms: int) -> None:
        for group in list(self.groups.values()):
            for member in group.expire_sessions(now_ms):
                if self.on_member_gone is not None:
                    self.on_member_gone(group.group_id, member.member_id)

    def _arm_expiry(self) -> None:
        """Wake at the earliest session deadline (one timer for all groups)."""
        deadlines = [m.session_deadline_ms for g in self.groups.values() for m in g.members.values()]
        if self._expiry is not None:
            self._expiry.cancel()
            self._expiry = None
        if not deadlines:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return  # no loop (tests of the state alone): the caller expires by hand
        delay_s = max(0.0, (min(deadlines) - self.clock()) / 1000)
        self._expiry = loop.call_later(delay_s, self._on_expiry)

    def _on_expiry(self) -> None:
        self._expiry = None
        self.expire_sessions(self.clock())
        self._arm_expiry()

    def stop(self) -> None:
        if self._expiry is not None:
            self._expiry.cancel()
            self._expiry = None
