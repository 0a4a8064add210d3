"""ReadShareGroupState (KIP-932, inter-broker): a share-partition leader reads the state the share
coordinator keeps for it (kbroker/coordinator/share_coordinator.py). Served to brokers (CLUSTER_ACTION),
not advertised: its only version is Kafka 4.0's early access."""

from __future__ import annotations

import asyncio
from typing import Any

from kbroker.handlers import RequestContext
from kbroker.handlers.authorize import Op, require_cluster

API_KEY = 84
MIN_VERSION = 0
MAX_VERSION = 0
ADVERTISED = False


async def handle(ctx: RequestContext, request: Any) -> dict[str, Any]:
    require_cluster(ctx, Op.CLUSTER_ACTION)
    coordinator = ctx.broker.share_coordinator
    results = []
    for topic in request.topics:
        reads = await asyncio.gather(*(coordinator.read(request.group_id, topic.topic_id, p.partition, p.leader_epoch)
                                       for p in topic.partitions))
        results.append({"topic_id": topic.topic_id, "partitions": [
            {"partition": p.partition, "error_code": read.error, "error_message": None,
             "state_epoch": read.state_epoch, "start_offset": read.start_offset,
             "state_batches": [{"first_offset": b.first_offset, "last_offset": b.last_offset,
                                "delivery_state": b.delivery_state, "delivery_count": b.delivery_count}
                               for b in read.batches]}
            for p, read in zip(topic.partitions, reads, strict=True)]})
    return {"results": results}
