"""DescribeShareGroupOffsets (KIP-932; v1's lag, KIP-1226): each share partition's start offset,
leader epoch and lag, per group (kbroker/coordinator/share_offsets.py). As Kafka's KafkaApis: DESCRIBE
on the group; the topics the caller may not DESCRIBE are left out of an all-topics answer and
answered TOPIC_AUTHORIZATION_FAILED when named."""

from __future__ import annotations

from typing import Any

from kbroker.coordinator.share_coordinator import UNINITIALIZED_START_OFFSET
from kbroker.coordinator.share_offsets import DEFAULT_LEADER_EPOCH, UNINITIALIZED_LAG, TopicOffsets
from kbroker.handlers import RequestContext
from kbroker.handlers.authorize import Op, Resource, allowed
from kbroker.handlers.share_common import require_share_coordinator, require_share_groups
from protocol.errors import ErrorCode, KafkaError
from protocol.primitives import ZERO_UUID

API_KEY = 90
MIN_VERSION = 0
MAX_VERSION = 1
TOPIC_AUTHORIZATION_FAILED_MESSAGE = "Topic authorization failed."  # Kafka's Errors message


async def handle(ctx: RequestContext, request: Any) -> dict[str, Any]:
    return {"throttle_time_ms": 0, "groups": [await _describe(ctx, group) for group in request.groups]}


async def _describe(ctx: RequestContext, group: Any) -> dict[str, Any]:
    group_id = group.group_id
    try:
        require_share_groups(ctx)
        if not allowed(ctx, Op.DESCRIBE, Resource.GROUP, group_id):
            raise KafkaError(ErrorCode.GROUP_AUTHORIZATION_FAILED)
        if group.topics is not None and not group.topics:
            return _group(group_id, [])  # asked for nothing
        require_share_coordinator(ctx, group_id)
        offsets = ctx.broker.share_offsets
        if group.topics is None:
            wanted = [(t, parts) for t, parts in offsets.initialized_topics(group_id)
                      if allowed(ctx, Op.DESCRIBE, Resource.TOPIC, t)]
            return _group(group_id, [_topic(t) for t in await offsets.describe(group_id, wanted)])
        named = [(t.topic_name, list(t.partitions)) for t in group.topics]
        permitted = [(t, parts) for t, parts in named if allowed(ctx, Op.DESCRIBE, Resource.TOPIC, t)]
        denied = [(t, parts) for t, parts in named if (t, parts) not in permitted]
        topics = [_topic(t) for t in await offsets.describe(group_id, permitted)]
        return _group(group_id, topics + [_denied(t, parts) for t, parts in denied])
    except KafkaError as e:
        return {**_group(group_id, []), "error_code": e.code, "error_message": e.message}


def _group(group_id: str, topics: list[dict[str, Any]]) -> dict[str, Any]:
    return {"group_id": group_id, "topics": topics, "error_code": ErrorCode.NO_ERROR, "error_message": None}


def _topic(offsets: TopicOffsets) -> dict[str, Any]:
    return {"topic_name": offsets.name, "topic_id": offsets.topic_id, "partitions": [
        {"partition_index": p.partition, "start_offset": p.start_offset, "leader_epoch": p.leader_epoch,
         "lag": p.lag, "error_code": p.error, "error_message": p.error_message} for p in offsets.partitions]}


def _denied(topic: str, partitions: list[int]) -> dict[str, Any]:
    """A named topic the caller may not DESCRIBE: as Kafka answers it, with no offsets."""
    code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
    return {"topic_name": topic, "topic_id": ZERO_UUID, "partitions": [
        {"partition_index": p, "start_offset": UNINITIALIZED_START_OFFSET, "leader_epoch": DEFAULT_LEADER_EPOCH,
         "lag": UNINITIALIZED_LAG,
         "error_code": code, "error_message": TOPIC_AUTHORIZATION_FAILED_MESSAGE} for p in partitions]}
