"""ListGroups: every group this coordinator knows, classic and consumer-protocol ones, filtered by
state (v4+) and type (v5+: "classic" or "consumer")."""

from __future__ import annotations

from typing import Any

from kbroker.handlers import RequestContext
from kbroker.handlers.authorize import Op, Resource, allowed, cluster_allowed
from protocol.errors import ErrorCode

API_KEY = 16
MIN_VERSION = 0
MAX_VERSION = 5


async def handle(ctx: RequestContext, request: Any) -> dict[str, Any]:
    states = {s.lower() for s in request.states_filter} if ctx.version >= 4 else set()
    types = {t.lower() for t in request.types_filter} if ctx.version >= 5 else set()
    # Kafka: every group for a caller who may describe the cluster, else those it may describe.
    everything = cluster_allowed(ctx, Op.DESCRIBE)
    groups = [
        {"group_id": g.group_id, "protocol_type": g.protocol_type, "group_state": g.state, "group_type": g.group_type}
        for g in ctx.broker.groups.list_groups()
        if (not states or g.state.lower() in states) and (not types or g.group_type in types)
        and (everything or allowed(ctx, Op.DESCRIBE, Resource.GROUP, g.group_id))
    ]
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NO_ERROR, "groups": groups}
