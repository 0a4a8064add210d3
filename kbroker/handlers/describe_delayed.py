"""DescribeDelayed (kbroker's own API, key 10000): the pending delayed records of the partitions
this broker leads, for `kbroker delayed --describe` (`ReplicaManager.delayed_summary`).

Not advertised in ApiVersions: Kafka's clients and tools see only Kafka's APIs. Topics,
authorization and errors as every kbroker describe API answers them (`led_partitions`).
"""

from __future__ import annotations

from typing import Any

from kbroker.handlers import RequestContext
from kbroker.handlers.led_partitions import describe_topics
from protocol.errors import ErrorCode

API_KEY = 10000
MIN_VERSION = 0
MAX_VERSION = 0
ADVERTISED = False

NO_DUE_TIME = -1


async def handle(ctx: RequestContext, request: Any) -> dict[str, Any]:
    async def pending(topic: str, index: int) -> dict[str, Any]:
        summary = ctx.broker.replicas.delayed_summary(topic, index)
        return {"pending_count": summary.pending_count, "pending_bytes": summary.pending_bytes,
                "held_count": summary.held_count,
                "next_due_ms": NO_DUE_TIME if summary.next_due_ms is None else summary.next_due_ms}

    topics = await describe_topics(ctx, request.topics, pending)
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NO_ERROR, "error_message": None, "topics": topics}
