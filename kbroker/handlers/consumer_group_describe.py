"""ConsumerGroupDescribe (KIP-848): the epochs, assignor and members (subscriptions, current and
target assignments) of consumer-protocol groups."""

from __future__ import annotations

from typing import Any

from kbroker.coordinator.consumer_group import ConsumerGroup, ConsumerMember
from kbroker.handlers import Pacer, RequestContext
from kbroker.handlers.authorize import NOT_REQUESTED, Op, Resource, allowed, operations
from protocol.errors import ErrorCode, KafkaError
from protocol.messages.consumer_group_describe import ConsumerGroupDescribeResponse, DescribedGroup

API_KEY = 69
MIN_VERSION = 0
MAX_VERSION = 0


async def handle(ctx: RequestContext, request: Any) -> ConsumerGroupDescribeResponse:
    asked = request.include_authorized_operations
    groups = await Pacer().map(request.group_ids, lambda group_id: _describe(ctx, group_id, asked))
    return {"throttle_time_ms": 0, "groups": groups}


def _describe(ctx: RequestContext, group_id: str, asked: bool) -> DescribedGroup:
    if not allowed(ctx, Op.DESCRIBE, Resource.GROUP, group_id):
        return {"group_id": group_id, "error_code": ErrorCode.GROUP_AUTHORIZATION_FAILED}
    try:
        group = ctx.broker.groups.describe_consumer_group(group_id)
    except KafkaError as e:
        return {"group_id": group_id, "error_code": e.code, "error_message": e.message}
    image = ctx.broker.groups.consumer.image
    assignor = group.assignor_name or ctx.broker.groups.consumer.consumer.assignor_names[0]
    return {
        "group_id": group_id, "error_code": ErrorCode.NO_ERROR, "group_state": group.state.value,
        "group_epoch": group.group_epoch, "assignment_epoch": group.assignment_epoch, "assignor_name": assignor,
        "members": [_member(group, m, image) for m in group.members.values()],
        "authorized_operations": operations(ctx, Resource.GROUP, group_id) if asked else NOT_REQUESTED,
    }


def _member(group: ConsumerGroup, member: ConsumerMember, image: Any) -> dict[str, Any]:
    return {
        "member_id": member.member_id, "instance_id": member.instance_id, "rack_id": member.rack_id,
        "member_epoch": member.member_epoch, "client_id": member.client_id, "client_host": member.client_host,
        "subscribed_topic_names": sorted(member.subscribed_topic_names),
        "subscribed_topic_regex": member.subscribed_topic_regex,
        "assignment": _assignment(member.assigned, image),
        "target_assignment": _assignment(group.target.get(member.member_id, {}), image),
    }


def _assignment(assignment: Any, image: Any) -> dict[str, Any]:
    return {"topic_partitions": [
        {"topic_id": topic, "topic_name": image.topic_name(topic) or "", "partitions": sorted(partitions)}
        for topic, partitions in assignment.items() if partitions
    ]}
