"""ConsumerGroupHeartbeat (KIP-848): a consumer-protocol member joins, stays alive, learns its
assignment and leaves, all through this one request."""

from __future__ import annotations

from typing import Any

from kbroker.coordinator.consumer_group import Heartbeat
from kbroker.handlers import RequestContext
from kbroker.handlers.authorize import Op, Resource, allowed, allowed_names
from protocol.errors import ErrorCode, KafkaError
from protocol.messages.consumer_group_heartbeat import ConsumerGroupHeartbeatResponse

API_KEY = 68
MIN_VERSION = 0
MAX_VERSION = 1  # v1: consumer-made member ids and regex subscriptions (Kafka 4.0)


async def handle(ctx: RequestContext, request: Any) -> ConsumerGroupHeartbeatResponse:
    if not allowed(ctx, Op.READ, Resource.GROUP, request.group_id):
        return _error(ErrorCode.GROUP_AUTHORIZATION_FAILED, None)
    names = request.subscribed_topic_names
    if names and len(allowed_names(ctx, Op.DESCRIBE, Resource.TOPIC, names)) < len(set(names)):
        return _error(ErrorCode.TOPIC_AUTHORIZATION_FAILED, None)
    owned = request.topic_partitions
    heartbeat = Heartbeat(
        group_id=request.group_id,
        member_id=request.member_id,
        member_epoch=request.member_epoch,
        instance_id=request.instance_id,
        rack_id=request.rack_id,
        rebalance_timeout_ms=request.rebalance_timeout_ms,
        subscribed_topic_names=list(names) if names is not None else None,
        subscribed_topic_regex=request.subscribed_topic_regex,
        server_assignor=request.server_assignor,
        owned=[(t.topic_id, list(t.partitions)) for t in owned] if owned is not None else None,
        client_id=ctx.header.client_id or "",
        client_host=f"/{ctx.peer.rsplit(':', 1)[0]}",
        version=ctx.version,
    )
    try:
        answer = ctx.broker.groups.consumer_heartbeat(heartbeat)
    except KafkaError as e:
        return _error(e.code, e.message)
    # The group's changes are in `__consumer_offsets`: answer once they are replicated, as
    # Kafka's coordinator answers once its writes are committed (a new coordinator then knows
    # the epochs and assignments the member was told).
    offsets_topic = ctx.broker.groups.topic
    if offsets_topic.has_unreplicated(request.group_id):
        code = await offsets_topic.wait_replicated(request.group_id)
        if code != ErrorCode.NO_ERROR:
            return _error(code, None)
    assignment = None
    if answer.assignment is not None:
        assignment = {"topic_partitions": [{"topic_id": topic, "partitions": partitions}
                                           for topic, partitions in answer.assignment.items()]}
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NO_ERROR, "error_message": None,
            "member_id": answer.member_id, "member_epoch": answer.member_epoch,
            "heartbeat_interval_ms": answer.heartbeat_interval_ms, "assignment": assignment}


def _error(code: int, message: str | None) -> ConsumerGroupHeartbeatResponse:
    return {"throttle_time_ms": 0, "error_code": code, "error_message": message, "member_id": None,
            "member_epoch": 0, "heartbeat_interval_ms": 0, "assignment": None}
