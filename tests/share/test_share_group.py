"""Share group membership (kbroker/share/share_group.py): ShareGroupHeartbeat's rules."""

from __future__ import annotations

import uuid

import pytest

from kbroker.share.share_group import HeartbeatAnswer, ShareGroup, TopicInfo
from protocol.errors import ErrorCode, KafkaError

QUEUE = TopicInfo(uuid.UUID(int=1), 1)
WIDE = TopicInfo(uuid.UUID(int=2), 4)
TOPICS = {"queue": QUEUE, "wide": WIDE}


def _error(group: ShareGroup, *args: object) -> ErrorCode:
    with pytest.raises(KafkaError) as raised:
        group.heartbeat(*args)  # type: ignore[arg-type]
    return raised.value.code


def test_members_join_share_one_partition_and_keep_their_epochs() -> None:
    group = ShareGroup("g")
    first = group.heartbeat("a", 0, ["queue"], None, TOPICS, now_ms=0)
    assert first == HeartbeatAnswer(1, {QUEUE.topic_id: [0]})
    second = group.heartbeat("b", 0, ["queue"], None, TOPICS, now_ms=0)
    assert second == HeartbeatAnswer(2, {QUEUE.topic_id: [0]})
    # a's next heartbeat moves it to the new epoch; the assignment itself is unchanged.
    assert group.heartbeat("a", 1, None, None, TOPICS, now_ms=1).member_epoch == 2
    assert group.heartbeat("a", 2, None, None, TOPICS, now_ms=2) == HeartbeatAnswer(2, None)
    assert group.state == "Stable"


def test_partitions_spread_and_move_when_members_come_and_go() -> None:
    group = ShareGroup("g")
    group.heartbeat("a", 0, ["wide"], None, TOPICS, 0)
    answer = group.heartbeat("b", 0, ["wide"], None, TOPICS, 0)
    assert len(answer.assignment[WIDE.topic_id]) == 2  # type: ignore[index]
    a = group.heartbeat("a", 1, None, None, TOPICS, 1)
    assert sorted(a.assignment[WIDE.topic_id] + answer.assignment[WIDE.topic_id]) == [0, 1, 2, 3]  # type: ignore[index]
    # b leaves: a gets everything at its next heartbeat.
    assert group.heartbeat("b", 2, None, None, TOPICS, 2) == HeartbeatAnswer(2, None)
    assert group.heartbeat("b", -1, None, None, TOPICS, 3) == HeartbeatAnswer(-1, None)
    assert group.heartbeat("a", 2, None, None, TOPICS, 4) == HeartbeatAnswer(3, {WIDE.topic_id: [0, 1, 2, 3]})


def test_a_new_topic_or_more_partitions_make_a_new_assignment() -> None:
    group = ShareGroup("g")
    assert group.heartbeat("a", 0, ["later"], None, TOPICS, 0) == HeartbeatAnswer(1, {})
    later = TopicInfo(uuid.UUID(int=3), 2)
    answer = group.heartbeat("a", 1, None, None, {**TOPICS, "later": later}, 1)
    assert answer == HeartbeatAnswer(2, {later.topic_id: [0, 1]})
    grown = TopicInfo(later.topic_id, 3)
    assert group.heartbeat("a", 2, None, None, {**TOPICS, "later": grown}, 2) == \
        HeartbeatAnswer(3, {later.topic_id: [0, 1, 2]})


def test_errors() -> None:
    group = ShareGroup("g", max_size=1)
    assert _error(group, "", 0, ["queue"], None, TOPICS, 0) == ErrorCode.INVALID_REQUEST
    assert _error(group, "a", 0, None, None, TOPICS, 0) == ErrorCode.INVALID_REQUEST
    assert _error(group, "a", 0, [], None, TOPICS, 0) == ErrorCode.INVALID_REQUEST
    assert _error(group, "a", 3, None, None, TOPICS, 0) == ErrorCode.UNKNOWN_MEMBER_ID
    group.heartbeat("a", 0, ["queue"], None, TOPICS, 0)
    assert _error(group, "a", 7, None, None, TOPICS, 0) == ErrorCode.FENCED_MEMBER_EPOCH
    assert _error(group, "b", 0, ["queue"], None, TOPICS, 0) == ErrorCode.GROUP_MAX_SIZE_REACHED


def test_a_silent_member_is_removed_after_its_session_timeout() -> None:
    group = ShareGroup("g", session_timeout_ms=45_000)
    group.heartbeat("a", 0, ["queue"], None, TOPICS, 0)
    group.heartbeat("b", 0, ["queue"], None, TOPICS, 10_000)
    assert group.expire_sessions(44_999) == []
    assert [m.member_id for m in group.expire_sessions(45_000)] == ["a"]
    assert _error(group, "a", 1, None, None, TOPICS, 46_000) == ErrorCode.UNKNOWN_MEMBER_ID
    assert group.heartbeat("b", 2, None, None, TOPICS, 46_000).member_epoch == 3
