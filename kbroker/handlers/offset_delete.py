"""OffsetDelete: drop a group's committed offsets for partitions it no longer consumes."""

from __future__ import annotations

from typing import Any

from kbroker.handlers import RequestContext
from kbroker.handlers.authorize import Op, Resource, allowed, allowed_names
from protocol.errors import ErrorCode, KafkaError

API_KEY = 47
MIN_VERSION = 0
MAX_VERSION = 0


async def handle(ctx: RequestContext, request: Any) -> dict[str, Any]:
    if not allowed(ctx, Op.DELETE, Resource.GROUP, request.group_id):
        raise KafkaError(ErrorCode.GROUP_AUTHORIZATION_FAILED)
    readable = allowed_names(ctx, Op.READ, Resource.TOPIC, (t.name for t in request.topics))
    wanted = [(t.name, p.partition_index) for t in request.topics if t.name in readable for p in t.partitions]
    try:
        error, results = ctx.broker.groups.delete_offsets(request.group_id, wanted)
    except KafkaError as e:
        error, results = e.code, {}
    if error != ErrorCode.NO_ERROR:
        return {"throttle_time_ms": 0, "error_code": error, "topics": []}
    topics = [
        {"name": t.name, "partitions": [{"partition_index": p.partition_index,
                                         "error_code": results[(t.name, p.partition_index)] if t.name in readable
                                         else ErrorCode.TOPIC_AUTHORIZATION_FAILED} for p in t.partitions]}
        for t in request.topics
    ]
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NO_ERROR, "topics": topics}
