"""SyncGroup: the leader hands in the assignment; every member gets its own part back."""

from __future__ import annotations

from typing import Any

from kbroker.handlers import RequestContext
from kbroker.handlers.authorize import Op, Resource, allowed
from protocol.errors import ErrorCode, KafkaError

API_KEY = 14
MIN_VERSION = 0
MAX_VERSION = 5


async def handle(ctx: RequestContext, request: Any) -> dict[str, Any]:
    if not allowed(ctx, Op.READ, Resource.GROUP, request.group_id):
        raise KafkaError(ErrorCode.GROUP_AUTHORIZATION_FAILED)
    result = await ctx.broker.groups.sync(
        request.group_id,
        request.generation_id,
        request.member_id,
        request.group_instance_id,
        request.protocol_type,
        request.protocol_name,
        {a.member_id: bytes(a.assignment) for a in request.assignments},
    )
    return {
        "throttle_time_ms": 0,
        "error_code": result.error,
        "protocol_type": result.protocol_type,
        "protocol_name": result.protocol_name,
        "assignment": result.assignment,
    }
