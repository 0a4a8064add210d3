"""DeleteGroups: remove empty groups and their committed offsets."""

from __future__ import annotations

from typing import Any

from kbroker.handlers import Pacer, RequestContext
from kbroker.handlers.authorize import Op, Resource, allowed
from protocol.errors import ErrorCode

API_KEY = 42
MIN_VERSION = 0
MAX_VERSION = 2


async def handle(ctx: RequestContext, request: Any) -> dict[str, Any]:
    groups = ctx.broker.groups

    def delete(group_id: str) -> dict[str, Any]:
        if not allowed(ctx, Op.DELETE, Resource.GROUP, group_id):
            return {"group_id": group_id, "error_code": ErrorCode.GROUP_AUTHORIZATION_FAILED}
        return {"group_id": group_id, "error_code": groups.delete_groups([group_id])[group_id]}

    results = await Pacer().map(request.groups_names, delete)
    return {"throttle_time_ms": 0, "results": results}
