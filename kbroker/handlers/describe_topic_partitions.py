"""DescribeTopicPartitions: topic and partition metadata in pages, for admin clients (KIP-966)."""

from __future__ import annotations

from typing import Any

from kbroker.cluster.topics import INTERNAL_TOPICS, validate_topic_name
from kbroker.handlers import RequestContext
from kbroker.handlers.authorize import Op, Resource, allowed, allowed_names, operations
from kbroker.handlers.metadata import describe_partition, served_by
from protocol.errors import ErrorCode, KafkaError

API_KEY = 75
MIN_VERSION = 0
MAX_VERSION = 0

# Kafka's max.request.partition.size.limit: the most partitions one response carries.
MAX_PARTITIONS_PER_RESPONSE = 2000


async def handle(ctx: RequestContext, request: Any) -> dict[str, Any]:
    cursor = request.cursor
    start_topic = cursor.topic_name if cursor is not None else ""
    all_topics = not request.topics
    if all_topics:  # topics the caller may not describe are left out, never named
        names = allowed_names(ctx, Op.DESCRIBE, Resource.TOPIC, ctx.broker.metadata_cache.topic_names())
    else:
        names = {t.name for t in request.topics}
        if cursor is not None and cursor.topic_name not in names:
            # Kafka fails the whole request: every topic carries the error.
            return _response([_topic_error(n, ErrorCode.INVALID_REQUEST) for n in sorted(names)], None)
    names = sorted(n for n in names if n >= start_topic)
    limit = min(MAX_PARTITIONS_PER_RESPONSE, request.response_partition_limit)
    first_partition = cursor.partition_index if cursor is not None else 0
    return _page(ctx, names, first_partition, limit, skip_missing=all_topics)


def _page(ctx: RequestContext, names: list[str], first_partition: int, limit: int, skip_missing: bool) -> dict[str, Any]:
    """Up to `limit` partitions from `names`, and a cursor to the first one left out."""
    topics: list[dict[str, Any]] = []
    remaining = limit
    for position, name in enumerate(names):
        if remaining <= 0:
            return _response(topics, {"topic_name": name, "partition_index": 0})
        if not allowed(ctx, Op.DESCRIBE, Resource.TOPIC, name):
            topics.append(_topic_error(name, ErrorCode.TOPIC_AUTHORIZATION_FAILED))
            continue
        record = ctx.broker.metadata_cache.topic(name)
        if record is None:
            if not skip_missing:
                topics.append(_topic_error(name, _missing_error(name)))
            continue
        start = first_partition if position == 0 else 0
        indexes = sorted(i for i in record.assignment if i >= start)
        shown = indexes[:remaining]
        topics.append({
            "error_code": ErrorCode.NO_ERROR,
            "name": name,
            "topic_id": record.topic_id,
            "is_internal": name in INTERNAL_TOPICS,
            "partitions": [describe_partition(ctx, served_by(ctx, name), i, record.assignment[i]) for i in shown],
            "topic_authorized_operations": operations(ctx, Resource.TOPIC, name),  # always reported by this API
        })
        if len(shown) < len(indexes):
            return _response(topics, {"topic_name": name, "partition_index": indexes[len(shown)]})
        remaining -= len(shown)
    return _response(topics, None)


def _response(topics: list[dict[str, Any]], next_cursor: dict[str, Any] | None) -> dict[str, Any]:
    return {"throttle_time_ms": 0, "topics": topics, "next_cursor": next_cursor}


def _missing_error(name: str) -> ErrorCode:
    try:
        validate_topic_name(name)
    except KafkaError:
        return ErrorCode.INVALID_TOPIC
    return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def _topic_error(name: str, code: int) -> dict[str, Any]:
    return {"error_code": code, "name": name, "partitions": []}
