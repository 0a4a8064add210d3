"""OffsetDelete: drop a group's committed offsets for partitions it no longer consumes."""

from __future__ import annotations

from typing import Any

from kbroker.handlers import RequestContext
from protocol.errors import ErrorCode, KafkaError

API_KEY = 47
MIN_VERSION = 0
MAX_VERSION = 0


async def handle(ctx: RequestContext, request: Any) -> dict[str, Any]:
    wanted = [(t.name, p.partition_index) for t in request.topics for p in t.partitions]
    try:
        error, results = ctx.broker.groups.delete_offsets(request.group_id, wanted)
    except KafkaError as e:
        error, results = e.code, {}
    if error != ErrorCode.NO_ERROR:
        return {"throttle_time_ms": 0, "error_code": error, "topics": []}
    topics = [
        {"name": t.name, "partitions": [{"partition_index": p.partition_index,
                                         "error_code": results[(t.name, p.partition_index)]} for p in t.partitions]}
        for t in request.topics
    ]
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NO_ERROR, "topics": topics}
