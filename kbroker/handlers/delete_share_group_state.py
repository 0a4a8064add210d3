"""DeleteShareGroupState (KIP-932, inter-broker): the group coordinator has the share coordinator
forget share partitions' state (DeleteShareGroupOffsets). Served to brokers (CLUSTER_ACTION), not
advertised: its only version is Kafka 4.0's early access."""

from __future__ import annotations

import asyncio
from typing import Any

from kbroker.handlers import RequestContext
from kbroker.handlers.authorize import Op, require_cluster

API_KEY = 86
MIN_VERSION = 0
MAX_VERSION = 0
ADVERTISED = False


async def handle(ctx: RequestContext, request: Any) -> dict[str, Any]:
    require_cluster(ctx, Op.CLUSTER_ACTION)
    coordinator = ctx.broker.share_coordinator
    results = []
    for topic in request.topics:
        codes = await asyncio.gather(*(coordinator.delete(request.group_id, topic.topic_id, p.partition)
                                       for p in topic.partitions))
        results.append({"topic_id": topic.topic_id, "partitions": [
            {"partition": p.partition, "error_code": code, "error_message": None}
            for p, code in zip(topic.partitions, codes, strict=True)]})
    return {"results": results}
