"""DeleteGroups: remove empty groups and their committed offsets."""

from __future__ import annotations

from typing import Any

from kbroker.handlers import RequestContext

API_KEY = 42
MIN_VERSION = 0
MAX_VERSION = 2


async def handle(ctx: RequestContext, request: Any) -> dict[str, Any]:
    results = ctx.broker.groups.delete_groups(request.groups_names)
    return {
        "throttle_time_ms": 0,
        "results": [{"group_id": g, "error_code": results[g]} for g in request.groups_names],
    }
