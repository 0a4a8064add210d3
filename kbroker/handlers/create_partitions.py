"""CreatePartitions: grow topics, optionally on chosen replicas (or only validate)."""

from __future__ import annotations

from collections import Counter
from typing import Any

from kbroker.handlers import Pacer, RequestContext
from kbroker.handlers.authorize import Op, Resource, allowed
from kbroker.handlers.mutation_quota import charger, quota_for, throttle
from protocol.errors import ErrorCode, KafkaError

API_KEY = 37
MIN_VERSION = 0
MAX_VERSION = 3
STRICT_QUOTA_SINCE = 3  # the first version that knows THROTTLING_QUOTA_EXCEEDED


async def handle(ctx: RequestContext, request: Any) -> dict[str, Any]:
    pacer = Pacer()
    counts: Counter[str] = Counter()
    for topic in request.topics:
        counts[topic.name] += 1
        await pacer.tick()
    results = []
    quota = quota_for(ctx, STRICT_QUOTA_SINCE)
    charge = charger(ctx, quota)
    for topic in request.topics:
        await pacer.tick()
        if counts[topic.name] > 1:
            results.append(_result(topic.name, KafkaError(ErrorCode.INVALID_REQUEST, "Duplicate topic in request.")))
            continue
        if not allowed(ctx, Op.ALTER, Resource.TOPIC, topic.name):
            results.append(_result(topic.name, KafkaError(ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                                                          "The topic authorization is failed.")))
            continue
        assignment = [list(a.broker_ids) for a in topic.assignments] if topic.assignments is not None else None
        try:
            await ctx.broker.topics.add_partitions_paced(topic.name, topic.count, assignment, request.validate_only,
                                                         pacer, charge)
        except KafkaError as e:
            results.append(_result(topic.name, e))
            continue
        results.append(_result(topic.name))
    return {"throttle_time_ms": throttle(ctx, quota), "results": results}


def _result(name: str, error: KafkaError | None = None) -> dict[str, Any]:
    return {
        "name": name,
        "error_code": error.code if error else ErrorCode.NO_ERROR,
        "error_message": error.message if error else None,
    }
