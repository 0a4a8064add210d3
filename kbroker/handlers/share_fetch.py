"""ShareFetch (KIP-932): a share consumer's fetch in its share session. Acknowledgements
piggybacked on the request are applied first; then records are acquired for the member from
every partition of the session (kbroker/coordinator/share_partitions.py)."""

from __future__ import annotations

from typing import Any

from kbroker.handlers import RequestContext
from kbroker.handlers.authorize import Op, Resource, allowed
from kbroker.handlers.share_common import (
    SharePartitionKey,
    acknowledge_all,
    listed_partitions,
    partition_answer,
    resolve,
    share_request_member,
)
from kbroker.share.share_sessions import FINAL_EPOCH
from protocol.errors import ErrorCode

API_KEY = 78
MIN_VERSION = 1
MAX_VERSION = 1


async def handle(ctx: RequestContext, request: Any) -> dict[str, Any]:
    group_id, member_id = share_request_member(ctx, request, "ShareFetch")
    listed = listed_partitions(request)
    forget = [(t.topic_id, index) for t in request.forgotten_topics_data for index in t.partitions]
    has_acks = any(batches for _, _, batches in listed)
    session = ctx.broker.share_sessions.for_fetch(group_id, member_id, request.share_session_epoch,
                                                  [(topic_id, index) for topic_id, index, _ in listed], forget,
                                                  has_acks, ctx.now_ms())
    answers: dict[SharePartitionKey, dict[str, Any]] = {}
    await acknowledge_all(ctx, group_id, member_id, listed, answers)
    if request.share_session_epoch == FINAL_EPOCH:
        ctx.broker.end_share_session(group_id, member_id)
    else:
        await _fetch(ctx, request, group_id, member_id, list(session.partitions), answers)
    return _response(ctx, answers)


async def _fetch(ctx: RequestContext, request: Any, group_id: str, member_id: str,
                 keys: list[SharePartitionKey], answers: dict[SharePartitionKey, dict[str, Any]]) -> None:
    readable: list[SharePartitionKey] = []
    for key in keys:
        name = resolve(ctx, [key])
        if not name:
            answers[key] = {**answers.get(key, partition_answer(key[1])), "error_code": ErrorCode.UNKNOWN_TOPIC_ID}
        elif not allowed(ctx, Op.READ, Resource.TOPIC, name[0][0]):
            answers[key] = {**answers.get(key, partition_answer(key[1])),
                            "error_code": ErrorCode.TOPIC_AUTHORIZATION_FAILED}
        else:
            readable.append(key)
    fetched = await ctx.broker.share_partitions.fetch(group_id, member_id, resolve(ctx, readable),
                                                      max(request.max_records, 1), request.max_bytes,
                                                      request.max_wait_ms)
    for key, result in zip(readable, fetched, strict=True):
        answer = answers.get(key, partition_answer(key[1]))
        answer["error_code"] = result.error
        if result.records is not None:
            # Passed as it is, not as bytes: the response is built around it and it is written
            # to the socket straight from the read (a record set is about a megabyte).
            answer["records"] = result.records
            answer["acquired_records"] = [{"first_offset": r.first_offset, "last_offset": r.last_offset,
                                           "delivery_count": r.delivery_count} for r in result.acquired]
        partition = ctx.broker.replicas.find(*resolve(ctx, [key])[0])
        if partition is not None:
            answer["current_leader"] = {"leader_id": partition.leader_id, "leader_epoch": partition.leader_epoch}
        if result.error or result.acquired or key in answers:
            answers[key] = answer


def _response(ctx: RequestContext, answers: dict[SharePartitionKey, dict[str, Any]]) -> dict[str, Any]:
    by_topic: dict[Any, list[dict[str, Any]]] = {}
    for (topic_id, _), answer in answers.items():
        by_topic.setdefault(topic_id, []).append(answer)
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NO_ERROR, "error_message": None,
            "acquisition_lock_timeout_ms": ctx.broker.share_partitions.lock_duration_ms(),
            "responses": [{"topic_id": t, "partitions": p} for t, p in by_topic.items()], "node_endpoints": []}
