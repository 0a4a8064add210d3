"""ShareAcknowledge (KIP-932): a share consumer settles records it holds, outside a fetch;
with the final epoch it also ends its share session (what it still holds goes back)."""

from __future__ import annotations

from typing import Any

from kbroker.handlers import RequestContext
from kbroker.handlers.authorize import Op, Resource, allowed
from kbroker.handlers.share_common import SharePartitionKey, acknowledge_all, require_share_groups, resolve
from kbroker.share.share_sessions import FINAL_EPOCH
from protocol.errors import ErrorCode, KafkaError

API_KEY = 79
MIN_VERSION = 1
MAX_VERSION = 1


async def handle(ctx: RequestContext, request: Any) -> dict[str, Any]:
    require_share_groups(ctx)
    group_id, member_id = request.group_id, request.member_id
    if not group_id or not member_id:
        raise KafkaError(ErrorCode.INVALID_REQUEST, "ShareAcknowledge needs a group and a member id.")
    if not allowed(ctx, Op.READ, Resource.GROUP, group_id):
        raise KafkaError(ErrorCode.GROUP_AUTHORIZATION_FAILED)
    broker = ctx.broker
    broker.share_sessions.for_acknowledge(group_id, member_id, request.share_session_epoch, ctx.now_ms())
    listed = [(t.topic_id, p.partition_index, p.acknowledgement_batches) for t in request.topics for p in t.partitions]
    answers: dict[SharePartitionKey, dict[str, Any]] = {}
    await acknowledge_all(ctx, group_id, member_id, listed, answers)
    if request.share_session_epoch == FINAL_EPOCH:
        closed = broker.share_sessions.close(group_id, member_id)
        broker.share_partitions.release_member(group_id, member_id, resolve(ctx, closed.partitions if closed else {}))
    by_topic: dict[Any, list[dict[str, Any]]] = {}
    for (topic_id, index), answer in answers.items():
        by_topic.setdefault(topic_id, []).append(
            {"partition_index": index, "error_code": answer["acknowledge_error_code"], "error_message": None,
             "current_leader": answer["current_leader"]})
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NO_ERROR, "error_message": None,
            "responses": [{"topic_id": t, "partitions": p} for t, p in by_topic.items()], "node_endpoints": []}
