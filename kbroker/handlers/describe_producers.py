"""DescribeProducers: the idempotent and transactional producers active on partitions."""

from __future__ import annotations

from typing import Any

from kbroker.handlers import Pacer, RequestContext
from kbroker.handlers.authorize import Op, Resource, allowed
from protocol.errors import ErrorCode, KafkaError

API_KEY = 61
MIN_VERSION = 0
MAX_VERSION = 0


async def handle(ctx: RequestContext, request: Any) -> dict[str, Any]:
    pacer = Pacer()
    topics = [
        {"name": t.name, "partitions": await pacer.map(t.partition_indexes, lambda p, t=t: _describe(ctx, t.name, p))}
        for t in request.topics
    ]
    return {"throttle_time_ms": 0, "topics": topics}


def _describe(ctx: RequestContext, topic: str, index: int) -> dict[str, Any]:
    if not allowed(ctx, Op.READ, Resource.TOPIC, topic):
        return {"partition_index": index, "error_code": ErrorCode.TOPIC_AUTHORIZATION_FAILED, "error_message": None,
                "active_producers": []}
    try:
        active = ctx.broker.replicas.active_producers(topic, index)
    except KafkaError as e:
        return {"partition_index": index, "error_code": e.code, "error_message": e.message, "active_producers": []}
    producers = [
        {"producer_id": p.producer_id, "producer_epoch": p.producer_epoch, "last_sequence": p.last_sequence,
         "last_timestamp": p.last_timestamp, "coordinator_epoch": p.coordinator_epoch,
         "current_txn_start_offset": p.current_txn_start_offset}
        for p in active
    ]
    return {"partition_index": index, "error_code": ErrorCode.NO_ERROR, "error_message": None,
            "active_producers": producers}
