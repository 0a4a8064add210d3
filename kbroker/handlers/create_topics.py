"""CreateTopics: validate and create topics (optionally validate only)."""

from __future__ import annotations

from collections import Counter
from typing import Any

from kbroker.cluster.topics import MAX_PARTITIONS_PER_REQUEST, TopicSpec
from kbroker.handlers import RequestContext
from protocol.errors import ErrorCode, KafkaError

API_KEY = 19
MIN_VERSION = 0
MAX_VERSION = 7


async def handle(ctx: RequestContext, request: Any) -> dict[str, Any]:
    counts = Counter(t.name for t in request.topics)
    if _requested_partitions(request.topics) > MAX_PARTITIONS_PER_REQUEST:
        # Like Kafka's controller, one oversized request fails as a whole.
        error = KafkaError(ErrorCode.POLICY_VIOLATION, "Excessively large number of partitions per request.")
        return {"throttle_time_ms": 0, "topics": [_error(t.name, error) for t in request.topics]}
    results = []
    for topic in request.topics:
        if counts[topic.name] > 1:
            results.append(_error(topic.name, KafkaError(ErrorCode.INVALID_REQUEST, "Duplicate topic name.")))
            continue
        results.append(_create(ctx, topic, request.validate_only))
    return {"throttle_time_ms": 0, "topics": results}


def _requested_partitions(topics: Any) -> int:
    return sum(len(t.assignments) if t.assignments else max(t.num_partitions, 0) for t in topics)


def _create(ctx: RequestContext, topic: Any, validate_only: bool) -> dict[str, Any]:
    configs = {c.name: c.value for c in topic.configs if c.value is not None}
    assignment = {a.partition_index: list(a.broker_ids) for a in topic.assignments} or None
    if assignment and (topic.num_partitions != -1 or topic.replication_factor != -1):
        error = KafkaError(
            ErrorCode.INVALID_REQUEST,
            "Both numPartitions or replicationFactor and replicasAssignments were set.",
        )
        return _error(topic.name, error)
    spec = TopicSpec(topic.name, topic.num_partitions, topic.replication_factor, assignment, configs)
    try:
        record = ctx.broker.topics.create(spec, validate_only=validate_only)
    except KafkaError as e:
        return _error(topic.name, e)
    return {
        "name": topic.name,
        "topic_id": record.topic_id,
        "error_code": ErrorCode.NO_ERROR,
        "error_message": None,
        "num_partitions": len(record.assignment),
        "replication_factor": len(record.assignment[0]),
        "configs": ctx.broker.configs.describe_topic(record.name, record.configs),
    }


def _error(name: str, error: KafkaError) -> dict[str, Any]:
    return {"name": name, "error_code": error.code, "error_message": error.message, "configs": None}
