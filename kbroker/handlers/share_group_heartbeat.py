"""ShareGroupHeartbeat (KIP-932): a share consumer joins, stays in, or leaves its share group
and learns its assignment."""

from __future__ import annotations

from typing import Any

from kbroker.handlers import RequestContext
from kbroker.handlers.authorize import Op, Resource, allowed
from kbroker.handlers.share_common import require_share_coordinator, require_share_groups
from protocol.errors import ErrorCode, KafkaError

API_KEY = 76
MIN_VERSION = 1
MAX_VERSION = 1


async def handle(ctx: RequestContext, request: Any) -> dict[str, Any]:
    require_share_groups(ctx)
    if not allowed(ctx, Op.READ, Resource.GROUP, request.group_id):
        raise KafkaError(ErrorCode.GROUP_AUTHORIZATION_FAILED)
    require_share_coordinator(ctx, request.group_id)
    share_groups = ctx.broker.share_groups
    answer = share_groups.heartbeat(request.group_id, request.member_id, request.member_epoch,
                                    request.subscribed_topic_names, request.rack_id, ctx.header.client_id or "",
                                    ctx.host or ctx.peer)
    assignment = None
    if answer.assignment is not None:
        assignment = {"topic_partitions": [{"topic_id": topic_id, "partitions": partitions}
                                           for topic_id, partitions in answer.assignment.items()]}
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NO_ERROR, "error_message": None,
            "member_id": request.member_id, "member_epoch": answer.member_epoch,
            "heartbeat_interval_ms": share_groups.config_of(request.group_id).heartbeat_interval_ms, "assignment": assignment}
