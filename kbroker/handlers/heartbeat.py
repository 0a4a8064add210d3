"""Heartbeat: keeps a member's session alive and tells it when to rejoin."""

from __future__ import annotations

from typing import Any

from kbroker.handlers import RequestContext
from kbroker.handlers.authorize import Op, Resource, allowed
from protocol.errors import ErrorCode, KafkaError

API_KEY = 12
MIN_VERSION = 0
MAX_VERSION = 4


async def handle(ctx: RequestContext, request: Any) -> dict[str, Any]:
    if not allowed(ctx, Op.READ, Resource.GROUP, request.group_id):
        raise KafkaError(ErrorCode.GROUP_AUTHORIZATION_FAILED)
    error = ctx.broker.groups.heartbeat(
        request.group_id, request.generation_id, request.member_id, request.group_instance_id
    )
    return {"throttle_time_ms": 0, "error_code": error}
