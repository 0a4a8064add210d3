"""ListGroups: every group this coordinator knows, classic, consumer-protocol and share groups,
filtered by state (v4+) and type (v5+: "classic", "consumer" or "share")."""

from __future__ import annotations

from typing import Any

from kbroker.handlers import RequestContext
from kbroker.handlers.authorize import Op, Resource, allowed, cluster_allowed
from protocol.errors import ErrorCode

API_KEY = 16
MIN_VERSION = 0
MAX_VERSION = 5
SHARE = "share"


async def handle(ctx: RequestContext, request: Any) -> dict[str, Any]:
    states = {s.lower() for s in request.states_filter} if ctx.version >= 4 else set()
    types = {t.lower() for t in request.types_filter} if ctx.version >= 5 else set()
    # Kafka: every group for a caller who may describe the cluster, else those it may describe.
    everything = cluster_allowed(ctx, Op.DESCRIBE)
    listed = [(g.group_id, g.protocol_type, g.state, g.group_type) for g in ctx.broker.groups.list_groups()]
    # Share groups (KIP-932): protocol type and group type "share", states Empty and Stable.
    listed += [(g.group_id, SHARE, g.state, SHARE) for g in ctx.broker.share_groups.list_groups()]
    groups = [
        {"group_id": group_id, "protocol_type": protocol_type, "group_state": state, "group_type": group_type}
        for group_id, protocol_type, state, group_type in listed
        if (not states or state.lower() in states) and (not types or group_type in types)
        and (everything or allowed(ctx, Op.DESCRIBE, Resource.GROUP, group_id))
    ]
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NO_ERROR, "groups": groups}
