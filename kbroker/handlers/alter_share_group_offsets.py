"""AlterShareGroupOffsets (KIP-932): set the start offsets of an empty share group's share
partitions (kbroker/coordinator/share_offsets.py). As Kafka's KafkaApis: READ on the group (else
the whole request fails at the top level), READ on each topic (TOPIC_AUTHORIZATION_FAILED for its
partitions); group errors (NON_EMPTY_GROUP, coordinator errors) are answered at the top level."""

from __future__ import annotations

from typing import Any

from kbroker.handlers import RequestContext
from kbroker.handlers.authorize import Op, Resource, allowed
from kbroker.handlers.share_common import require_share_coordinator, require_share_groups
from protocol.errors import ErrorCode, KafkaError
from protocol.primitives import ZERO_UUID

API_KEY = 91
MIN_VERSION = 0
MAX_VERSION = 0


async def handle(ctx: RequestContext, request: Any) -> dict[str, Any]:
    group_id = request.group_id
    try:
        require_share_groups(ctx)
        if not allowed(ctx, Op.READ, Resource.GROUP, group_id):
            raise KafkaError(ErrorCode.GROUP_AUTHORIZATION_FAILED)
        require_share_coordinator(ctx, group_id)
        results: dict[tuple[str, int], int] = {}
        wanted = []
        for topic in request.topics:
            denied = not allowed(ctx, Op.READ, Resource.TOPIC, topic.topic_name)
            for p in topic.partitions:
                if denied:
                    results[(topic.topic_name, p.partition_index)] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
                else:
                    wanted.append((topic.topic_name, p.partition_index, p.start_offset))
        results.update(await ctx.broker.share_offsets.alter(group_id, wanted))
    except KafkaError as e:
        return {"throttle_time_ms": 0, "error_code": e.code, "error_message": e.message, "responses": []}
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NO_ERROR, "error_message": None,
            "responses": _by_topic(ctx, request, results)}


def _by_topic(ctx: RequestContext, request: Any, results: dict[tuple[str, int], int]) -> list[dict[str, Any]]:
    topics = []
    for topic in request.topics:
        record = ctx.broker.metadata_cache.topic(topic.topic_name)
        topics.append({"topic_name": topic.topic_name, "topic_id": record.topic_id if record else ZERO_UUID,
                       "partitions": [{"partition_index": p.partition_index,
                                       "error_code": results[(topic.topic_name, p.partition_index)],
                                       "error_message": None} for p in topic.partitions]})
    return topics
