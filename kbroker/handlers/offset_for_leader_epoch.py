"""OffsetForLeaderEpoch: where a leader epoch ends in the log, so clients can detect truncation."""

from __future__ import annotations

from typing import Any

from kbroker.handlers import Pacer, RequestContext
from kbroker.handlers.authorize import Op, Resource, allowed_names, cluster_allowed
from protocol.errors import ErrorCode, KafkaError

API_KEY = 23
MIN_VERSION = 0
MAX_VERSION = 4

UNDEFINED = -1


async def handle(ctx: RequestContext, request: Any) -> dict[str, Any]:
    pacer = Pacer()
    # Followers have CLUSTER_ACTION; consumers (KIP-320) need DESCRIBE on the topic.
    if cluster_allowed(ctx, Op.CLUSTER_ACTION):
        describable = {t.topic for t in request.topics}
    else:
        describable = allowed_names(ctx, Op.DESCRIBE, Resource.TOPIC, (t.topic for t in request.topics))
    topics = [
        {"topic": t.topic, "partitions": await pacer.map(t.partitions, lambda p, t=t: _lookup(ctx, t.topic, p))
         if t.topic in describable else [{"partition": p.partition, "leader_epoch": UNDEFINED, "end_offset": UNDEFINED,
                                          "error_code": ErrorCode.TOPIC_AUTHORIZATION_FAILED} for p in t.partitions]}
        for t in request.topics
    ]
    return {"throttle_time_ms": 0, "topics": topics}


def _lookup(ctx: RequestContext, topic: str, request: Any) -> dict[str, Any]:
    result = {"partition": request.partition, "leader_epoch": UNDEFINED, "end_offset": UNDEFINED}
    try:
        epoch, end_offset = ctx.broker.replicas.last_offset_for_leader_epoch(
            topic, request.partition, request.current_leader_epoch, request.leader_epoch)
    except KafkaError as e:
        return {**result, "error_code": e.code}
    return {**result, "error_code": ErrorCode.NO_ERROR, "leader_epoch": epoch, "end_offset": end_offset}
