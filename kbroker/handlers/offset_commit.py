"""OffsetCommit: store a group's consumed positions (with metadata and leader epochs)."""

from __future__ import annotations

import asyncio
from typing import Any

from kbroker.coordinator.group_offsets import OffsetCommit
from kbroker.handlers import ENTRIES_PER_TURN, Pacer, RequestContext
from kbroker.handlers.authorize import Op, Resource, allowed, allowed_names
from protocol.errors import ErrorCode
from protocol.messages.offset_commit import (
    OffsetCommitResponse,
    OffsetCommitResponsePartition,
    OffsetCommitResponseTopic,
)

COMMITS_PER_TURN = ENTRIES_PER_TURN // 2
API_KEY = 8
MIN_VERSION = 0
MAX_VERSION = 9


async def handle(ctx: RequestContext, request: Any) -> OffsetCommitResponse:
    pacer = Pacer()
    commits = []
    for t in request.topics:
        for p in t.partitions:
            commits.append(OffsetCommit(t.name, p.partition_index, p.committed_offset, p.committed_leader_epoch,
                                        p.committed_metadata))
            await pacer.tick()
    # Kafka's checks: READ on the group (else every partition fails), then READ on each topic.
    if not allowed(ctx, Op.READ, Resource.GROUP, request.group_id):
        return await _answer(request, [ErrorCode.GROUP_AUTHORIZATION_FAILED] * len(commits), pacer)
    if ctx.version == 0:
        return await _refuse_v0(ctx, request, commits, pacer)
    readable = allowed_names(ctx, Op.READ, Resource.TOPIC, (c.topic for c in commits))
    permitted = [c for c in commits if c.topic in readable]
    codes: list[int] = []
    # In slices, each written as one batch, so a commit of thousands of partitions does not hold
    # up every other client while its records are built.
    for start in range(0, len(permitted), COMMITS_PER_TURN):
        codes += ctx.broker.groups.commit(request.group_id, request.generation_id_or_member_epoch, request.member_id,
                                          request.group_instance_id, permitted[start : start + COMMITS_PER_TURN],
                                          ctx.version)
        await asyncio.sleep(0)
    if ErrorCode.NO_ERROR in codes:  # acknowledged only once the commit is replicated
        replicated = await ctx.broker.groups.topic.wait_replicated(request.group_id)
        codes = [replicated if code == ErrorCode.NO_ERROR else code for code in codes]
    results = iter(codes)
    all_codes = [next(results) if c.topic in readable else ErrorCode.TOPIC_AUTHORIZATION_FAILED for c in commits]
    return await _answer(request, all_codes, pacer)


async def _refuse_v0(ctx: RequestContext, request: Any, commits: list[OffsetCommit], pacer: Pacer) -> dict[str, Any]:
    """Kafka 3.9 keeps v0 commits in ZooKeeper, apart from the group coordinator, and without
    ZooKeeper (KRaft) refuses them: UNSUPPORTED_VERSION for every partition, unless none exists."""
    exists = ctx.broker.groups.partition_exists
    if any(exists(c.topic, c.partition) for c in commits):
        codes = [ErrorCode.UNSUPPORTED_VERSION] * len(commits)
    else:
        codes = [ErrorCode.UNKNOWN_TOPIC_OR_PARTITION] * len(commits)
    return await _answer(request, codes, pacer)


async def _answer(request: Any, codes: list[int], pacer: Pacer) -> dict[str, Any]:
    results = iter(codes)

    def answer(partition: Any) -> OffsetCommitResponsePartition:
        return {"partition_index": partition.partition_index, "error_code": next(results)}

    topics: list[OffsetCommitResponseTopic] = [
        {"name": t.name, "partitions": await pacer.map(t.partitions, answer)} for t in request.topics
    ]
    return {"throttle_time_ms": 0, "topics": topics}
