"""TxnOffsetCommit: offsets committed inside a transaction, visible once it commits."""

from __future__ import annotations

from typing import Any

from kbroker.coordinator.group_offsets import OffsetCommit
from kbroker.handlers import RequestContext
from kbroker.handlers.authorize import Op, Resource, allowed, allowed_names
from protocol.errors import ErrorCode, KafkaError

API_KEY = 28
MIN_VERSION = 0
MAX_VERSION = 4


async def handle(ctx: RequestContext, request: Any) -> dict[str, Any]:
    if not allowed(ctx, Op.WRITE, Resource.TRANSACTIONAL_ID, request.transactional_id):
        raise KafkaError(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    if not allowed(ctx, Op.READ, Resource.GROUP, request.group_id):
        raise KafkaError(ErrorCode.GROUP_AUTHORIZATION_FAILED)
    readable = allowed_names(ctx, Op.READ, Resource.TOPIC, (t.name for t in request.topics))
    commits = [
        OffsetCommit(t.name, p.partition_index, p.committed_offset, p.committed_leader_epoch, p.committed_metadata)
        for t in request.topics if t.name in readable
        for p in t.partitions
    ]
    errors = iter(ctx.broker.groups.commit_transactional(
        request.group_id, request.producer_id, request.producer_epoch, request.generation_id,
        request.member_id, request.group_instance_id, commits,
    ) if commits else [])
    codes = list(errors)
    if ErrorCode.NO_ERROR in codes:  # acknowledged only once the commit is replicated
        replicated = await ctx.broker.groups.topic.wait_replicated(request.group_id)
        codes = [replicated if code == ErrorCode.NO_ERROR else code for code in codes]
    results = iter(codes)
    topics = [
        {"name": t.name, "partitions": [{"partition_index": p.partition_index,
                                         "error_code": next(results) if t.name in readable
                                         else ErrorCode.TOPIC_AUTHORIZATION_FAILED} for p in t.partitions]}
        for t in request.topics
    ]
    return {"throttle_time_ms": 0, "topics": topics}
