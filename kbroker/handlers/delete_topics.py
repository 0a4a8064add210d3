"""DeleteTopics: by name (v0-v5) or by name or id (v6+)."""

from __future__ import annotations

from typing import Any

from kbroker.handlers import Pacer, RequestContext
from kbroker.handlers.authorize import Op, Resource, allowed
from protocol.errors import ErrorCode, KafkaError

API_KEY = 20
MIN_VERSION = 0
MAX_VERSION = 6


async def handle(ctx: RequestContext, request: Any) -> dict[str, Any]:
    if ctx.version >= 6:
        targets = [(t.name, t.topic_id) for t in request.topics]
    else:
        targets = [(name, None) for name in request.topic_names]
    pacer = Pacer()
    return {"throttle_time_ms": 0,
            "responses": [await _delete(ctx, name, topic_id, pacer) for name, topic_id in targets]}


async def _delete(ctx: RequestContext, name: str | None, topic_id: Any, pacer: Pacer) -> dict[str, Any]:
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
        record = await topics.delete_paced(name, pacer)
    except KafkaError as e:
        return {"name": name, "topic_id": topic_id, "error_code": e.code, "error_message": e.message}
    return {"name": name, "topic_id": record.topic_id, "error_code": ErrorCode.NO_ERROR, "error_message": None}
