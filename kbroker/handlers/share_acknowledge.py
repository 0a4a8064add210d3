"""ShareAcknowledge (KIP-932): a share consumer settles records it holds, outside a fetch;
with the final epoch it also ends its share session (what it still holds goes back). From v2
(KIP-1222) a RENEW acknowledgement restarts a held record's acquisition lock, and the answer
says how long a lock lasts."""

from __future__ import annotations

from typing import Any

from kbroker.handlers import RequestContext
from kbroker.handlers.share_common import (
    SharePartitionKey,
    acknowledge_all,
    listed_partitions,
    share_request_member,
)
from kbroker.share.share_sessions import FINAL_EPOCH
from protocol.errors import ErrorCode

API_KEY = 79
MIN_VERSION = 1
MAX_VERSION = 2


async def handle(ctx: RequestContext, request: Any) -> dict[str, Any]:
    group_id, member_id = share_request_member(ctx, request, "ShareAcknowledge")
    ctx.broker.share_sessions.for_acknowledge(group_id, member_id, request.share_session_epoch, ctx.now_ms())
    answers: dict[SharePartitionKey, dict[str, Any]] = {}
    await acknowledge_all(ctx, group_id, member_id, listed_partitions(request), answers,
                          renew_allowed=ctx.version >= 2)
    if request.share_session_epoch == FINAL_EPOCH:
        ctx.broker.end_share_session(group_id, member_id)
    by_topic: dict[Any, list[dict[str, Any]]] = {}
    for (topic_id, index), answer in answers.items():
        by_topic.setdefault(topic_id, []).append(
            {"partition_index": index, "error_code": answer["acknowledge_error_code"], "error_message": None,
             "current_leader": answer["current_leader"]})
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NO_ERROR, "error_message": None,
            "acquisition_lock_timeout_ms": ctx.broker.share_partitions.lock_duration_ms(group_id),
            "responses": [{"topic_id": t, "partitions": p} for t, p in by_topic.items()], "node_endpoints": []}
