"""DescribeDelayed (kbroker's own API, key 10000): the pending delayed records of the partitions
this broker leads, for `kbroker delayed --describe` (`ReplicaManager.delayed_summary`).

Not advertised in ApiVersions: Kafka's clients and tools see only Kafka's APIs. A topic needs
DESCRIBE, as ListOffsets and Metadata ask; a full listing (topics null) leaves out the topics
the caller may not describe, as Metadata does, and names only the partitions led here.
"""

from __future__ import annotations

from typing import Any

from kbroker.handlers import Pacer, RequestContext
from kbroker.handlers.authorize import Op, Resource, allowed_names
from protocol.errors import ErrorCode, KafkaError
from protocol.messages.describe_delayed import (
    DescribeDelayedPartitionResult,
    DescribeDelayedResponse,
    DescribeDelayedTopicResult,
)

API_KEY = 10000
MIN_VERSION = 0
MAX_VERSION = 0
ADVERTISED = False

NO_DUE_TIME = -1


async def handle(ctx: RequestContext, request: Any) -> DescribeDelayedResponse:
    if request.topics is None:
        wanted = _led_here(ctx)
    else:
        wanted = [(t.name, t.partition_indexes) for t in request.topics]
    describable = allowed_names(ctx, Op.DESCRIBE, Resource.TOPIC, (name for name, _ in wanted))
    pacer = Pacer()
    topics = [await _topic(ctx, pacer, name, indexes, name in describable) for name, indexes in wanted]
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NO_ERROR, "error_message": None, "topics": topics}


def _led_here(ctx: RequestContext) -> list[tuple[str, list[int] | None]]:
    """Every topic the caller may describe that has partitions led here, with those partitions."""
    led: dict[str, list[int]] = {}
    for partition in ctx.broker.replicas.partitions():
        if partition.is_leader:
            led.setdefault(partition.topic, []).append(partition.index)
    names = allowed_names(ctx, Op.DESCRIBE, Resource.TOPIC, led)
    return [(name, sorted(led[name])) for name in sorted(names)]


async def _topic(ctx: RequestContext, pacer: Pacer, name: str, indexes: list[int] | None,
                 describable: bool) -> DescribeDelayedTopicResult:
    # Authorization first: a topic the caller may not describe must not show whether it exists.
    if not describable:
        return _topic_error(name, ErrorCode.TOPIC_AUTHORIZATION_FAILED, None)
    record = ctx.broker.metadata_cache.topic(name)
    if record is None:
        return _topic_error(name, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Topic '{name}' does not exist.")
    partitions = []
    for index in sorted(record.assignment) if indexes is None else indexes:
        partitions.append(_partition(ctx, name, index, index in record.assignment))
        await pacer.tick()  # each partition may scan its pending records
    return {"name": name, "error_code": ErrorCode.NO_ERROR, "error_message": None, "partitions": partitions}


def _topic_error(name: str, code: int, message: str | None) -> DescribeDelayedTopicResult:
    return {"name": name, "error_code": code, "error_message": message, "partitions": []}


def _partition(ctx: RequestContext, topic: str, index: int, exists: bool) -> DescribeDelayedPartitionResult:
    if not exists:
        return {"partition_index": index, "error_code": ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                "error_message": f"Partition {index} of topic '{topic}' does not exist."}
    try:
        summary = ctx.broker.replicas.delayed_summary(topic, index)
    except KafkaError as e:
        return {"partition_index": index, "error_code": e.code, "error_message": e.message}
    return {"partition_index": index, "error_code": ErrorCode.NO_ERROR, "error_message": None,
            "pending_count": summary.pending_count, "pending_bytes": summary.pending_bytes,
            "held_count": summary.held_count,
            "next_due_ms": NO_DUE_TIME if summary.next_due_ms is None else summary.next_due_ms}
