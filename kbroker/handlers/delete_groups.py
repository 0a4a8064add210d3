"""DeleteGroups: remove empty groups and their committed offsets, and empty share groups."""

from __future__ import annotations

from typing import Any

from kbroker.handlers import Pacer, RequestContext
from kbroker.handlers.authorize import Op, Resource, allowed
from kbroker.handlers.share_common import require_share_coordinator
from protocol.errors import ErrorCode, KafkaError

API_KEY = 42
MIN_VERSION = 0
MAX_VERSION = 2


async def handle(ctx: RequestContext, request: Any) -> dict[str, Any]:
    groups = ctx.broker.groups

    def delete(group_id: str) -> dict[str, Any]:
        if not allowed(ctx, Op.DELETE, Resource.GROUP, group_id):
            return {"group_id": group_id, "error_code": ErrorCode.GROUP_AUTHORIZATION_FAILED}
        if ctx.broker.share_groups.describe(group_id) is not None:
            return {"group_id": group_id, "error_code": _delete_share_group(ctx, group_id)}
        return {"group_id": group_id, "error_code": groups.delete_groups([group_id])[group_id]}

    results = await Pacer().map(request.groups_names, delete)
    return {"throttle_time_ms": 0, "results": results}


def _delete_share_group(ctx: RequestContext, group_id: str) -> int:
    """An empty share group goes (NON_EMPTY_GROUP while it has members), as Kafka answers."""
    try:
        require_share_coordinator(ctx, group_id)
    except KafkaError as e:
        return e.code
    return ctx.broker.share_groups.delete(group_id)
