"""DeleteShareGroupOffsets (KIP-932): forget an empty share group's state for whole topics
(kbroker/coordinator/share_offsets.py), so it starts them again as `share.auto.offset.reset`
says. DELETE on the group (as for OffsetDelete), READ on each topic (TOPIC_AUTHORIZATION_FAILED
for that topic); group errors are answered at the top level, as Kafka does."""

from __future__ import annotations

from typing import Any

from kbroker.handlers import RequestContext
from kbroker.handlers.authorize import Op, Resource, allowed
from kbroker.handlers.share_common import require_share_coordinator, require_share_groups
from protocol.errors import ErrorCode, KafkaError
from protocol.primitives import ZERO_UUID

API_KEY = 92
MIN_VERSION = 0
MAX_VERSION = 0


async def handle(ctx: RequestContext, request: Any) -> dict[str, Any]:
    group_id = request.group_id
    try:
        require_share_groups(ctx)
        if not allowed(ctx, Op.DELETE, Resource.GROUP, group_id):
            raise KafkaError(ErrorCode.GROUP_AUTHORIZATION_FAILED)
        require_share_coordinator(ctx, group_id)
        names = list(dict.fromkeys(t.topic_name for t in request.topics))
        results = {t: ErrorCode.TOPIC_AUTHORIZATION_FAILED for t in names
                   if not allowed(ctx, Op.READ, Resource.TOPIC, t)}
        results.update(await ctx.broker.share_offsets.delete(group_id, [t for t in names if t not in results]))
    except KafkaError as e:
        return {"throttle_time_ms": 0, "error_code": e.code, "error_message": e.message, "responses": []}
    responses = []
    for name in names:
        record = ctx.broker.metadata_cache.topic(name)
        responses.append({"topic_name": name, "topic_id": record.topic_id if record else ZERO_UUID,
                          "error_code": results[name], "error_message": None})
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NO_ERROR, "error_message": None, "responses": responses}
