"""LeaveGroup: members leave (one before v3, a batch since); the group rebalances."""

from __future__ import annotations

from typing import Any

from kbroker.handlers import RequestContext
from kbroker.handlers.authorize import Op, Resource, allowed
from protocol.errors import ErrorCode, KafkaError

API_KEY = 13
MIN_VERSION = 0
MAX_VERSION = 5


async def handle(ctx: RequestContext, request: Any) -> dict[str, Any]:
    if not allowed(ctx, Op.READ, Resource.GROUP, request.group_id):
        raise KafkaError(ErrorCode.GROUP_AUTHORIZATION_FAILED)
    if ctx.version < 3:
        error, errors = ctx.broker.groups.leave(request.group_id, [(request.member_id, None)])
        # One member, one error: before v3 it is the response's only error code.
        return {"throttle_time_ms": 0, "error_code": errors[0] if error == ErrorCode.NO_ERROR else error}
    leaving = [(m.member_id, m.group_instance_id) for m in request.members]
    error, errors = ctx.broker.groups.leave(request.group_id, leaving)
    members = [
        {"member_id": member_id, "group_instance_id": instance_id, "error_code": code}
        for (member_id, instance_id), code in zip(leaving, errors, strict=False)
    ]
    return {"throttle_time_ms": 0, "error_code": error, "members": members}
