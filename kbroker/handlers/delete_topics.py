"""DeleteTopics: by name (v0-v5) or by name or id (v6+)."""

from __future__ import annotations

from typing import Any

from kbroker.cluster.topics import Charge
from kbroker.handlers import Pacer, RequestContext
from kbroker.handlers.authorize import Op, Resource, allowed
from kbroker.handlers.mutation_quota import charger, quota_for, throttle
from protocol.errors import ErrorCode, KafkaError

API_KEY = 20
MIN_VERSION = 0
MAX_VERSION = 6
STRICT_QUOTA_SINCE = 5  # the first version that knows THROTTLING_QUOTA_EXCEEDED


async def handle(ctx: RequestContext, request: Any) -> dict[str, Any]:
    if ctx.version >= 6:
        targets = [(t.name, t.topic_id) for t in request.topics]
    else:
        targets = [(name, None) for name in request.topic_names]
    pacer = Pacer()
    quota = quota_for(ctx, STRICT_QUOTA_SINCE)
    charge = charger(ctx, quota)
    responses = [await _delete(ctx, name, topic_id, pacer, charge) for name, topic_id in targets]
    return {"throttle_time_ms": throttle(ctx, quota), "responses": responses}


async def _delete(ctx: RequestContext, name: str | None, topic_id: Any, pacer: Pacer,
                  charge: Charge | None) -> dict[str, Any]:
    topics = ctx.broker.topics
    try:
        if not ctx.broker.config.delete_topic_enable:
            raise KafkaError(ErrorCode.TOPIC_DELETION_DISABLED)
        if name is None:
            record = ctx.broker.metadata_cache.topic_by_id(topic_id)
            if record is None:
                raise KafkaError(ErrorCode.UNKNOWN_TOPIC_ID)
            name = record.name
            if not allowed(ctx, Op.DESCRIBE, Resource.TOPIC, name):
                # Named by id only: the name stays hidden from a caller who may not describe it.
                return {"name": None, "topic_id": topic_id, "error_code": ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                        "error_message": None}
        if not allowed(ctx, Op.DELETE, Resource.TOPIC, name):
            raise KafkaError(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
        await pacer.tick()
        record = await topics.delete_paced(name, pacer, charge)
    except KafkaError as e:
        return {"name": name, "topic_id": topic_id, "error_code": e.code, "error_message": e.message}
    return {"name": name, "topic_id": record.topic_id, "error_code": ErrorCode.NO_ERROR, "error_message": None}
