"""AlterPartitionReassignments: move a partition's replicas to other brokers (KIP-455).

New replicas join first and catch up; the old ones are dropped only once every target replica
is in sync (see Controller.reassign). On one node there is nowhere to move to.
"""

from __future__ import annotations

from typing import Any

from kbroker.handlers import RequestContext
from kbroker.handlers.authorize import Op, require_cluster
from protocol.errors import ErrorCode

API_KEY = 45
MIN_VERSION = 0
MAX_VERSION = 0


async def handle(ctx: RequestContext, request: Any) -> dict[str, Any]:
    require_cluster(ctx, Op.ALTER)
    responses = [
        {"name": t.name, "partitions": [await _reassign(ctx, t.name, p.partition_index, p.replicas)
                                        for p in t.partitions]}
        for t in request.topics
    ]
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NO_ERROR, "error_message": None, "responses": responses}


async def _reassign(ctx: RequestContext, topic: str, index: int, replicas: list[int] | None) -> dict[str, Any]:
    cluster = ctx.broker.cluster
    if cluster is None:
        exists = ctx.broker.metadata_cache.partition_exists(topic, index)
        same = exists and replicas is not None and list(replicas) == [ctx.broker.config.broker_id]
        code = (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION if not exists else ErrorCode.NO_ERROR if same
                else ErrorCode.NO_REASSIGNMENT_IN_PROGRESS if replicas is None
                else ErrorCode.INVALID_REPLICATION_ASSIGNMENT)
    else:
        code = await cluster.reassign(topic, index, None if replicas is None else list(replicas))
    return {"partition_index": index, "error_code": code, "error_message": None}
