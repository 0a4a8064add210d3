"""OffsetFetch: a group's committed offsets (one group before v8, several since)."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from kbroker.handlers import Pacer, RequestContext
from kbroker.handlers.authorize import Op, Resource, allowed, allowed_names
from protocol.coordinator_records import OffsetValue
from protocol.errors import ErrorCode, KafkaError
from protocol.messages.offset_fetch import (
    OffsetFetchResponse,
    OffsetFetchResponseGroup,
    OffsetFetchResponsePartitions,
)

API_KEY = 9
MIN_VERSION = 0
MAX_VERSION = 9


async def handle(ctx: RequestContext, request: Any) -> OffsetFetchResponse:
    stable = ctx.version >= 7 and request.require_stable
    if ctx.version >= 8:
        pacer = Pacer()
        # v9: a consumer-protocol member names itself and its epoch, which must be current.
        member = (lambda g: (g.member_id, g.member_epoch)) if ctx.version >= 9 else (lambda g: None)
        groups = [await _fetch_group(ctx, g.group_id, g.topics, stable, pacer, member(g)) for g in request.groups]
        return {"throttle_time_ms": 0, "groups": groups}
    topics = request.topics if ctx.version >= 2 else (request.topics or [])
    result = await _fetch_group(ctx, request.group_id, topics, stable, Pacer())
    return {"throttle_time_ms": 0, "topics": result["topics"], "error_code": result["error_code"]}


async def _fetch_group(ctx: RequestContext, group_id: str, topics: Any, stable: bool,
                       pacer: Pacer, member: tuple[str | None, int] | None = None) -> OffsetFetchResponseGroup:
    """One group's answer, in v8+'s shape; before v8 its topics and error code are the answer's own."""
    if not allowed(ctx, Op.DESCRIBE, Resource.GROUP, group_id):
        return {"group_id": group_id, "error_code": ErrorCode.GROUP_AUTHORIZATION_FAILED, "topics": []}
    try:
        if member is not None:
            ctx.broker.groups.validate_offset_fetch(group_id, *member)
        committed = ctx.broker.groups.committed_offsets(group_id)
    except KafkaError as e:
        return {"group_id": group_id, "error_code": e.code, "topics": []}
    # Offsets of topics the caller may not describe: left out of "all", refused when named.
    if topics is None:
        describable = allowed_names(ctx, Op.DESCRIBE, Resource.TOPIC, (t for t, _ in committed))
        wanted: Any = sorted(item for item in committed.items() if item[0][0] in describable)
    else:
        describable = allowed_names(ctx, Op.DESCRIBE, Resource.TOPIC, (t.name for t in topics))
        wanted = (((t.name, p), committed.get((t.name, p))) for t in topics for p in t.partition_indexes)
    by_topic: dict[str, list[OffsetFetchResponsePartitions]] = defaultdict(list)
    for (topic, partition), value in wanted:
        await pacer.tick()
        if topic not in describable:
            by_topic[topic].append({**_partition(partition, None), "error_code": ErrorCode.TOPIC_AUTHORIZATION_FAILED})
            continue
        entry = _partition(partition, value)
        if stable and ctx.broker.groups.has_pending(group_id, (topic, partition)):
            # An open transaction may still change this offset (KIP-447): the client retries.
            entry = {**_partition(partition, None), "error_code": ErrorCode.UNSTABLE_OFFSET_COMMIT}
        by_topic[topic].append(entry)
    return {
        "group_id": group_id,
        "error_code": ErrorCode.NO_ERROR,
        "topics": [{"name": name, "partitions": partitions} for name, partitions in by_topic.items()],
    }


def _partition(index: int, value: OffsetValue | None) -> OffsetFetchResponsePartitions:
    if value is None:
        return {"partition_index": index, "committed_offset": -1, "committed_leader_epoch": -1, "metadata": "",
                "error_code": ErrorCode.NO_ERROR}
    return {"partition_index": index, "committed_offset": value.offset, "committed_leader_epoch": value.leader_epoch,
            "metadata": value.metadata, "error_code": ErrorCode.NO_ERROR}
