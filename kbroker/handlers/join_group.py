"""JoinGroup: a member joins (or rejoins) a group; answered when the join phase completes."""

from __future__ import annotations

from typing import Any

from kbroker.coordinator.group_membership import JoinRequest
from kbroker.handlers import RequestContext
from kbroker.handlers.authorize import Op, Resource, allowed
from protocol.errors import ErrorCode, KafkaError

API_KEY = 11
MIN_VERSION = 0
MAX_VERSION = 9


async def handle(ctx: RequestContext, request: Any) -> dict[str, Any]:
    if not allowed(ctx, Op.READ, Resource.GROUP, request.group_id):
        raise KafkaError(ErrorCode.GROUP_AUTHORIZATION_FAILED)
    join = JoinRequest(
        group_id=request.group_id,
        member_id=request.member_id,
        group_instance_id=request.group_instance_id,
        client_id=ctx.header.client_id or "",
        client_host=f"/{ctx.peer.rsplit(':', 1)[0]}",
        session_timeout_ms=request.session_timeout_ms,
        # v0 had no rebalance timeout: the session timeout served as both.
        rebalance_timeout_ms=request.rebalance_timeout_ms if ctx.version >= 1 else request.session_timeout_ms,
        protocol_type=request.protocol_type,
        protocols=[(p.name, bytes(p.metadata)) for p in request.protocols],
        require_known_member_id=ctx.version >= 4,
    )
    result = await ctx.broker.groups.join(join)
    protocol_name = result.protocol_name
    if protocol_name is None and ctx.version < 7:
        protocol_name = ""  # not nullable before v7
    return {
        "throttle_time_ms": 0,
        "error_code": result.error,
        "generation_id": result.generation_id,
        "protocol_type": result.protocol_type,
        "protocol_name": protocol_name,
        "leader": result.leader,
        "skip_assignment": False,
        "member_id": result.member_id,
        "members": result.members,
    }
