"""ListPartitionReassignments: the reassignments in progress (those this broker drives)."""

from __future__ import annotations

from typing import Any

from kbroker.handlers import RequestContext
from kbroker.handlers.authorize import Op, require_cluster
from protocol.errors import ErrorCode

API_KEY = 46
MIN_VERSION = 0
MAX_VERSION = 0


async def handle(ctx: RequestContext, request: Any) -> dict[str, Any]:
    require_cluster(ctx, Op.DESCRIBE)
    cluster = ctx.broker.cluster
    ongoing = dict(cluster.reassignments) if cluster is not None else {}
    if request.topics is not None:
        wanted = {(t.name, p) for t in request.topics for p in t.partition_indexes}
        ongoing = {k: v for k, v in ongoing.items() if k in wanted}
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for (topic, index), (target, original) in sorted(ongoing.items()):
        by_topic.setdefault(topic, []).append({
            "partition_index": index, "replicas": [*target, *(r for r in original if r not in target)],
            "adding_replicas": [r for r in target if r not in original],
            "removing_replicas": [r for r in original if r not in target],
        })
    topics = [{"name": t, "partitions": ps} for t, ps in by_topic.items()]
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NO_ERROR, "error_message": None, "topics": topics}
