"""ListOffsets: earliest, latest, max-timestamp and by-timestamp offset lookups
(`ReplicaManager.list_offset`)."""

from __future__ import annotations

from typing import Any

from kbroker.handlers import Pacer, RequestContext
from kbroker.handlers.authorize import Op, Resource, allowed_names
from protocol.errors import ErrorCode, KafkaError
from protocol.messages.list_offsets import (
    ListOffsetsPartitionResponse,
    ListOffsetsResponse,
    ListOffsetsTopicResponse,
)

API_KEY = 2
ADVERTISED_MIN = 0
MIN_VERSION = 1  # v0's multi-offset form is gone from Kafka 4
MAX_VERSION = 9

READ_COMMITTED = 1


async def handle(ctx: RequestContext, request: Any) -> ListOffsetsResponse:
    committed = ctx.version >= 2 and request.isolation_level == READ_COMMITTED
    pacer = Pacer()
    topics: list[ListOffsetsTopicResponse] = []
    describable = allowed_names(ctx, Op.DESCRIBE, Resource.TOPIC, (t.name for t in request.topics))
    for topic in request.topics:
        partitions: list[ListOffsetsPartitionResponse] = []
        for partition in topic.partitions:
            if topic.name not in describable:
                partitions.append({"partition_index": partition.partition_index, "timestamp": -1, "offset": -1,
                                   "leader_epoch": -1, "error_code": ErrorCode.TOPIC_AUTHORIZATION_FAILED})
            else:
                partitions.append(await _lookup(ctx, topic.name, partition, committed))
            await pacer.tick()
        topics.append({"name": topic.name, "partitions": partitions})
    return {"throttle_time_ms": 0, "topics": topics}


async def _lookup(ctx: RequestContext, topic: str, request: Any, committed: bool) -> ListOffsetsPartitionResponse:
    result: ListOffsetsPartitionResponse = {"partition_index": request.partition_index, "timestamp": -1, "offset": -1, "leader_epoch": -1}
    try:
        found = await ctx.broker.replicas.list_offset(
            topic, request.partition_index, request.timestamp, request.current_leader_epoch, committed)
    except KafkaError as e:
        return {**result, "error_code": e.code}
    return {**result, "error_code": ErrorCode.NO_ERROR, "offset": found.offset, "timestamp": found.timestamp,
            "leader_epoch": found.leader_epoch}
