"""DeleteRecords: move partitions' log start offsets forward (the low watermark)."""

from __future__ import annotations

from typing import Any

from kbroker.handlers import Pacer, RequestContext
from kbroker.handlers.authorize import Op, Resource, allowed
from protocol.errors import ErrorCode, KafkaError

API_KEY = 21
MIN_VERSION = 0
MAX_VERSION = 2


async def handle(ctx: RequestContext, request: Any) -> dict[str, Any]:
    pacer = Pacer()
    topics = [
        {"name": t.name,
         "partitions": await pacer.map(t.partitions, lambda p, t=t: _delete(ctx, t.name, p.partition_index, p.offset))}
        for t in request.topics
    ]
    return {"throttle_time_ms": 0, "topics": topics}


def _delete(ctx: RequestContext, topic: str, index: int, offset: int) -> dict[str, Any]:
    if not allowed(ctx, Op.DELETE, Resource.TOPIC, topic):
        return {"partition_index": index, "low_watermark": -1, "error_code": ErrorCode.TOPIC_AUTHORIZATION_FAILED}
    try:
        low_watermark = ctx.broker.replicas.delete_records(topic, index, offset)
    except KafkaError as e:
        return {"partition_index": index, "low_watermark": -1, "error_code": e.code}
    return {"partition_index": index, "low_watermark": low_watermark, "error_code": ErrorCode.NO_ERROR}
