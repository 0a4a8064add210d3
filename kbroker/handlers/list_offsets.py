"""ListOffsets: earliest, latest, max-timestamp and by-timestamp offset lookups."""

from __future__ import annotations

from typing import Any

from kbroker.cluster.partition import Partition
from kbroker.handlers import Pacer, RequestContext
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

LATEST = -1
EARLIEST = -2
MAX_TIMESTAMP = -3
EARLIEST_LOCAL = -4
LATEST_TIERED = -5
READ_COMMITTED = 1


async def handle(ctx: RequestContext, request: Any) -> ListOffsetsResponse:
    committed = ctx.version >= 2 and request.isolation_level == READ_COMMITTED
    pacer = Pacer()
    topics: list[ListOffsetsTopicResponse] = []
    for topic in request.topics:
        partitions: list[ListOffsetsPartitionResponse] = []
        for partition in topic.partitions:
            partitions.append(_lookup(ctx, topic.name, partition, committed))
            await pacer.tick()
        topics.append({"name": topic.name, "partitions": partitions})
    return {"throttle_time_ms": 0, "topics": topics}


def _lookup(ctx: RequestContext, topic: str, request: Any, committed: bool) -> ListOffsetsPartitionResponse:
    result: ListOffsetsPartitionResponse = {"partition_index": request.partition_index, "timestamp": -1, "offset": -1, "leader_epoch": -1}
    try:
        partition = ctx.broker.replicas.get(topic, request.partition_index)
        partition.require_leader()
        partition.check_leader_epoch(request.current_leader_epoch)
        offset, timestamp = _find(partition, request.timestamp, committed)
    except KafkaError as e:
        return {**result, "error_code": e.code}
    epoch = partition.leader_epoch if offset >= 0 else -1
    return {**result, "error_code": ErrorCode.NO_ERROR, "offset": offset, "timestamp": timestamp, "leader_epoch": epoch}


def _find(partition: Partition, timestamp: int, committed: bool) -> tuple[int, int]:
    log = partition.log
    upper = partition.last_stable_offset if committed else partition.high_watermark
    if timestamp == LATEST:
        return upper, -1
    if timestamp in (EARLIEST, EARLIEST_LOCAL):
        return log.log_start_offset, -1
    if timestamp == LATEST_TIERED:
        return -1, -1
    if timestamp == MAX_TIMESTAMP:
        found = log.max_timestamp_offset()
    elif timestamp < 0:
        raise KafkaError(ErrorCode.INVALID_REQUEST, f"unknown special timestamp {timestamp}")
    else:
        found = log.offset_for_timestamp(timestamp)
    # Offsets a consumer cannot fetch yet are not reported.
    if found is None or found[0] >= upper:
        return -1, -1
    return found
