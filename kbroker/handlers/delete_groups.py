"""DeleteGroups: remove empty groups and their committed offsets."""

from __future__ import annotations

from typing import Any

from kbroker.handlers import Pacer, RequestContext

API_KEY = 42
MIN_VERSION = 0
MAX_VERSION = 2


async def handle(ctx: RequestContext, request: Any) -> dict[str, Any]:
    groups = ctx.broker.groups
    results = await Pacer().map(request.groups_names, lambda g: {"group_id": g,
                                                                  "error_code": groups.delete_groups([g])[g]})
    return {"throttle_time_ms": 0, "results": results}
