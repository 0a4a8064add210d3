"""Produce: append record batches to partition logs."""

from __future__ import annotations

import asyncio
import struct
from typing import Any

from kbroker.cluster.partition import Partition
from kbroker.cluster.topics import INTERNAL_TOPICS
from kbroker.handlers import CloseConnection, Deferred, Pacer, RequestContext
from kbroker.storage.log_validator import RecordValidationError
from protocol.errors import ErrorCode, KafkaError
from protocol.messages.produce import PartitionProduceResponse, ProduceResponse, TopicProduceResponse
from protocol.records import (
    ATTRIBUTES_OFFSET,
    COMPRESSION_MASK,
    CURRENT_MAGIC,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC_OFFSET,
    TRANSACTIONAL_BIT,
    peek_magic,
    read_header,
)

API_KEY = 0
# v0-v2 carry legacy message sets only; Kafka 3.9 still advertises them, Kafka 4 drops
# the connection. We advertise like the former and answer like the latter.
ADVERTISED_MIN = 0
MIN_VERSION = 3
MAX_VERSION = 11
VALID_ACKS = (-1, 0, 1)
ZSTD = 4
_BATCH_LENGTH = struct.Struct(">i")


async def handle(ctx: RequestContext, request: Any) -> ProduceResponse | Deferred | None:
    now_ms = ctx.now_ms()
    failed = False
    topics: list[TopicProduceResponse] = []
    # acks=all: (result, partition, end offset)
    replicating: list[tuple[PartitionProduceResponse, Partition, int]] = []
    pacer = Pacer()
    for topic in request.topic_data:
        partitions: list[PartitionProduceResponse] = []
        for data in topic.partition_data:
            await pacer.tick()
            result, pending = _append(ctx, request.acks, request.transactional_id, topic.name, data, now_ms)
            failed = failed or result["error_code"] != ErrorCode.NO_ERROR
            partitions.append(result)
            if pending is not None:
                replicating.append((result, *pending))
        topics.append({"name": topic.name, "partition_responses": partitions})
    response: ProduceResponse = {"responses": topics, "throttle_time_ms": 0}
    if replicating:
        # Appended: the connection may take the producer's next request while this one waits.
        return Deferred(_when_replicated(replicating, request.timeout_ms / 1000, response))
    if request.acks == 0:
        if failed:
            # The client expects no answer; closing is how it learns to refresh metadata.
            raise CloseConnection("produce with acks=0 failed")
        return None
    return response


async def _when_replicated(waits: list[tuple[PartitionProduceResponse, Partition, int]], timeout_s: float,
                           response: ProduceResponse) -> ProduceResponse:
    """acks=all: answer once every ISR member has the data (the HW passed it), as Kafka's delayed produce."""
    codes = await asyncio.gather(*(p.wait_for_replication(end, timeout_s) for _, p, end in waits))
    for (result, _, _), code in zip(waits, codes, strict=True):
        if code != ErrorCode.NO_ERROR:
            result.update({"error_code": code, "base_offset": -1, "log_append_time_ms": -1, "log_start_offset": -1})
    return response


def _append(
    ctx: RequestContext, acks: int, transactional_id: str | None, topic: str, data: Any, now_ms: int
) -> tuple[PartitionProduceResponse, tuple[Partition, int] | None]:
    """The partition's result, and for acks=all the partition and offset to wait for."""
    try:
        if acks not in VALID_ACKS:
            raise KafkaError(ErrorCode.INVALID_REQUIRED_ACKS)
        if data.records is None:
            raise KafkaError(ErrorCode.INVALID_RECORD, "null records")
        if topic in INTERNAL_TOPICS:
            raise KafkaError(ErrorCode.INVALID_TOPIC, f"Cannot append to internal topic {topic}")
        _check_records(ctx.version, data.records)
        partition = ctx.broker.replicas.get(topic, data.index)
        _verify_transaction(ctx, transactional_id, partition, data.records)
        info = partition.append_as_leader(data.records, now_ms, required_acks=acks)
    except KafkaError as e:
        return _error(data.index, e), None
    result: PartitionProduceResponse = {
        "index": data.index,
        "error_code": ErrorCode.NO_ERROR,
        "base_offset": info.first_offset,
        "log_append_time_ms": info.log_append_time,
        "log_start_offset": info.log_start_offset,
    }
    end = info.last_offset + 1
    # On one node (or when the ISR is the leader alone) the HW is already past: no waiting.
    return result, (partition, end) if acks == -1 and partition.high_watermark < end else None


def _check_records(version: int, records: bytes) -> None:
    """Kafka's request-level checks (ProduceRequest.validateRecords), before the log sees the data."""
    if len(records) <= MAGIC_OFFSET:
        raise KafkaError(ErrorCode.INVALID_RECORD, f"Produce requests with version {version} must have at least "
                         "one record batch per partition")
    if peek_magic(records) != CURRENT_MAGIC:
        raise KafkaError(ErrorCode.INVALID_RECORD, f"Produce requests with version {version} are only allowed to "
                         "contain record batches with magic version 2")
    first_size = LOG_OVERHEAD + _BATCH_LENGTH.unpack_from(records, 8)[0]
    if len(records) > first_size:
        raise KafkaError(ErrorCode.INVALID_RECORD, f"Produce requests with version {version} are only allowed to "
                         "contain exactly one record batch per partition")
    if version < 7 and len(records) >= HEADER_SIZE and records[ATTRIBUTES_OFFSET + 1] & COMPRESSION_MASK == ZSTD:
        raise KafkaError(ErrorCode.UNSUPPORTED_COMPRESSION_TYPE, f"Produce requests with version {version} are not "
                         "allowed to use ZStandard compression")


def _verify_transaction(ctx: RequestContext, transactional_id: str | None, partition: Partition, records: bytes) -> None:
    """The first transactional batch of a producer on a partition must belong to its coordinator's transaction."""
    if len(records) < HEADER_SIZE or not records[ATTRIBUTES_OFFSET + 1] & TRANSACTIONAL_BIT:
        return
    if not ctx.broker.config.get("transaction.partition.verification.enable"):
        return
    header = read_header(records)
    if partition.log.has_open_transaction(header.producer_id):
        return
    ctx.broker.transactions.verify_partition(transactional_id, header.producer_id, header.producer_epoch,
                                             partition.topic, partition.index)


def _error(index: int, error: KafkaError) -> PartitionProduceResponse:
    # record_errors name the refused records of a batch (KIP-467), so a client fails only those.
    record_errors = error.record_errors if isinstance(error, RecordValidationError) else []
    return {
        "index": index,
        "error_code": error.code,
        "base_offset": -1,
        "log_append_time_ms": -1,
        "log_start_offset": -1,
        "record_errors": [{"batch_index": i, "batch_index_error_message": m} for i, m in record_errors],
        "error_message": error.message,
    }
