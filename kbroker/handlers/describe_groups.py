"""DescribeGroups: state, protocol and members (with assignments when stable) of groups."""

from __future__ import annotations

from typing import Any

from kbroker.coordinator.group import Group, GroupState
from kbroker.handlers import Pacer, RequestContext
from kbroker.handlers.authorize import NOT_REQUESTED, Op, Resource, allowed, operations
from protocol.errors import ErrorCode, KafkaError

API_KEY = 15
MIN_VERSION = 0
MAX_VERSION = 5


async def handle(ctx: RequestContext, request: Any) -> dict[str, Any]:
    asked = ctx.version >= 3 and request.include_authorized_operations
    groups = await Pacer().map(request.groups, lambda g: _describe(ctx, g, asked))
    return {"throttle_time_ms": 0, "groups": groups}


def _describe(ctx: RequestContext, group_id: str, asked: bool) -> dict[str, Any]:
    result = {"group_id": group_id, "error_code": ErrorCode.NO_ERROR, "group_state": GroupState.DEAD.value,
              "protocol_type": "", "protocol_data": "", "members": [], "authorized_operations": NOT_REQUESTED}
    if not allowed(ctx, Op.DESCRIBE, Resource.GROUP, group_id):
        return {**result, "group_state": "", "error_code": ErrorCode.GROUP_AUTHORIZATION_FAILED}
    if asked:
        result["authorized_operations"] = operations(ctx, Resource.GROUP, group_id)
    try:
        group = ctx.broker.groups.describe(group_id)
    except KafkaError as e:
        return {**result, "error_code": e.code}
    if group is None:
        return result  # Kafka's classic coordinator describes an unknown group as Dead
    return {**result, **_summary(group)}


def _summary(group: Group) -> dict[str, Any]:
    # Member metadata and assignments only mean something once the group is stable.
    stable = group.is_in(GroupState.STABLE)
    protocol = (group.protocol_name or "") if stable else ""
    members = [
        {
            "member_id": m.member_id,
            "group_instance_id": m.group_instance_id,
            "client_id": m.client_id,
            "client_host": m.client_host,
            "member_metadata": m.metadata(protocol) if stable else b"",
            "member_assignment": m.assignment if stable else b"",
        }
        for m in group.members.values()
    ]
    return {"group_state": group.state.value, "protocol_type": group.protocol_type or "", "protocol_data": protocol,
            "members": members}
