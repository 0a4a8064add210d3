"""ShareGroupDescribe (KIP-932): a share group's state, epochs and members with assignments."""

from __future__ import annotations

from typing import Any

from kbroker.handlers import Pacer, RequestContext
from kbroker.handlers.authorize import NOT_REQUESTED, Op, Resource, allowed, operations
from kbroker.handlers.share_common import require_share_coordinator, require_share_groups, topic_name
from kbroker.share.share_group import ShareGroup
from protocol.errors import ErrorCode, KafkaError

API_KEY = 77
MIN_VERSION = 1
MAX_VERSION = 1
ASSIGNOR = "simple"


async def handle(ctx: RequestContext, request: Any) -> dict[str, Any]:
    require_share_groups(ctx)
    groups = await Pacer().map(request.group_ids, lambda g: _describe(ctx, g, request.include_authorized_operations))
    return {"throttle_time_ms": 0, "groups": groups}


def _describe(ctx: RequestContext, group_id: str, asked: bool) -> dict[str, Any]:
    result: dict[str, Any] = {"error_code": ErrorCode.NO_ERROR, "error_message": None, "group_id": group_id,
                              "group_state": "Dead", "group_epoch": -1, "assignment_epoch": -1,
                              "assignor_name": "", "members": [], "authorized_operations": NOT_REQUESTED}
    if not allowed(ctx, Op.DESCRIBE, Resource.GROUP, group_id):
        return {**result, "error_code": ErrorCode.GROUP_AUTHORIZATION_FAILED}
    try:
        require_share_coordinator(ctx, group_id)
    except KafkaError as e:
        return {**result, "error_code": e.code, "error_message": e.message}
    group = ctx.broker.share_groups.describe(group_id)
    if group is None:
        return {**result, "error_code": ErrorCode.GROUP_ID_NOT_FOUND,
                "error_message": f"Group {group_id} not found."}
    if asked:
        result["authorized_operations"] = operations(ctx, Resource.GROUP, group_id)
    return {**result, **_summary(ctx, group)}


def _summary(ctx: RequestContext, group: ShareGroup) -> dict[str, Any]:
    members = [{"member_id": m.member_id, "rack_id": m.rack, "member_epoch": m.member_epoch,
                "client_id": m.client_id, "client_host": m.client_host,
                "subscribed_topic_names": list(m.subscribed),
                "assignment": {"topic_partitions": [
                    {"topic_id": topic_id, "topic_name": topic_name(ctx, topic_id) or "", "partitions": partitions}
                    for topic_id, partitions in m.assignment.items()]}}
               for m in group.members.values()]
    return {"group_state": group.state, "group_epoch": group.group_epoch,
            "assignment_epoch": group.assignment_epoch, "assignor_name": ASSIGNOR, "members": members}
