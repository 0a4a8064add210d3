"""Produce: the request-level checks of the record sets, then `ReplicaManager.append`, and its
results (at once, or for acks=all once replicated) as the wire's answer."""

from __future__ import annotations

import struct
from typing import Any

from kbroker.cluster.replica_manager import Appended, AppendResult, VerifyTransaction
from kbroker.handlers import CloseConnection, Deferred, Pacer, RequestContext
from kbroker.handlers.authorize import Op, Resource, allowed, allowed_names
from protocol.errors import ErrorCode, KafkaError
from protocol.messages.produce import PartitionProduceResponse, ProduceResponse, TopicProduceResponse
from protocol.records import (
    ATTRIBUTES_OFFSET,
    COMPRESSION_MASK,
    CURRENT_MAGIC,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC_OFFSET,
    peek_magic,
    peek_transactional,
)

API_KEY = 0
# v0-v2 carry legacy message sets only; Kafka 3.9 still advertises them, Kafka 4 drops
# the connection. We advertise like the former and answer like the latter.
ADVERTISED_MIN = 0
MIN_VERSION = 3
MAX_VERSION = 11
ZSTD = 4
_BATCH_LENGTH = struct.Struct(">i")


async def handle(ctx: RequestContext, request: Any) -> ProduceResponse | Deferred | None:
    pacer = Pacer()
    # Kafka's order: the transactional id (the whole request), then WRITE on each topic.
    if await _has_transactional_records(request, pacer) and not (
            request.transactional_id is not None
            and allowed(ctx, Op.WRITE, Resource.TRANSACTIONAL_ID, request.transactional_id)):
        raise KafkaError(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                         "Transactional Id authorization failed.")
    writable = allowed_names(ctx, Op.WRITE, Resource.TOPIC, (t.name for t in request.topic_data))
    # Per topic, per partition: its answer already (refused by the request-level checks), or
    # where its result will be among the appended entries.
    layout: list[tuple[str, list[PartitionProduceResponse | int]]] = []
    entries: list[tuple[str, int, bytes]] = []
    for topic in request.topic_data:
        slots: list[PartitionProduceResponse | int] = []
        for data in topic.partition_data:
            await pacer.tick()
            if topic.name not in writable:
                slots.append(_answer(data.index, AppendResult.failed(
                    KafkaError(ErrorCode.TOPIC_AUTHORIZATION_FAILED))))
                continue
            try:
                _check_records(ctx.version, data.records)
            except KafkaError as e:
                slots.append(_answer(data.index, AppendResult.failed(e)))
                continue
            slots.append(len(entries))
            entries.append((topic.name, data.index, data.records))
        layout.append((topic.name, slots))
    appended = await ctx.broker.replicas.append(
        entries, request.acks, request.timeout_ms, ctx.now_ms(), transactional_id=request.transactional_id,
        verify_transaction=_transaction_verifier(ctx), pacer=pacer,
        in_place=True)  # the records are views of this request's frame, read by nothing after this
    quota = ctx.broker.quotas.produce
    if quota.enabled:  # Kafka's produce quota counts the request's bytes, throttles with muting
        ctx.throttle_ms = quota.record(ctx.principal, ctx.header.client_id or "", ctx.size,
                                       ctx.broker.quotas.now_ms())
        if ctx.throttle_ms:
            ctx.broker.stats.record_throttle(*quota.throttle_entity(ctx.principal, ctx.header.client_id or ""),
                                             ctx.throttle_ms)
    if appended.replicated is not None:
        # Appended: the connection may take the producer's next request while this one waits.
        return Deferred(_when_replicated(appended, entries, layout, ctx.throttle_ms))
    response = await _response(appended, entries, layout, pacer, ctx.throttle_ms)
    if request.acks == 0:
        if _failed(response):
            # The client expects no answer; closing is how it learns to refresh metadata.
            raise CloseConnection("produce with acks=0 failed")
        return None
    return response


async def _when_replicated(appended: Appended, entries: list[tuple[str, int, bytes]],
                           layout: list[tuple[str, list[PartitionProduceResponse | int]]],
                           throttle_ms: int) -> ProduceResponse:
    """acks=all: the answer once every ISR member has the data, or the wait failed."""
    assert appended.replicated is not None
    await appended.replicated
    return await _response(appended, entries, layout, Pacer(), throttle_ms)


async def _response(appended: Appended, entries: list[tuple[str, int, bytes]],
                    layout: list[tuple[str, list[PartitionProduceResponse | int]]], pacer: Pacer,
                    throttle_ms: int = 0) -> ProduceResponse:
    topics: list[TopicProduceResponse] = []
    for name, slots in layout:
        partitions: list[PartitionProduceResponse] = []
        for slot in slots:
            partitions.append(slot if not isinstance(slot, int) else _answer(entries[slot][1], appended.results[slot]))
            await pacer.tick()
        topics.append({"name": name, "partition_responses": partitions})
    return {"responses": topics, "throttle_time_ms": throttle_ms}


def _failed(response: ProduceResponse) -> bool:
    return any(p["error_code"] != ErrorCode.NO_ERROR
               for t in response["responses"] for p in t["partition_responses"])


def _answer(index: int, result: AppendResult) -> PartitionProduceResponse:
    if result.error == ErrorCode.NO_ERROR:
        return {"index": index, "error_code": ErrorCode.NO_ERROR, "base_offset": result.base_offset,
                "log_append_time_ms": result.log_append_time, "log_start_offset": result.log_start_offset}
    return {
        "index": index,
        "error_code": result.error,
        "base_offset": -1,
        "log_append_time_ms": -1,
        "log_start_offset": -1,
        "record_errors": [{"batch_index": i, "batch_index_error_message": m} for i, m in result.record_errors],
        "error_message": result.message,
    }


async def _has_transactional_records(request: Any, pacer: Pacer) -> bool:
    """Kafka's RequestUtils.hasTransactionalRecords: any batch with the transactional bit. Paced:
    a request may name tens of thousands of partitions."""
    for topic in request.topic_data:
        for data in topic.partition_data:
            if data.records is not None and peek_transactional(data.records):
                return True
            await pacer.tick()
    return False


def _transaction_verifier(ctx: RequestContext) -> VerifyTransaction | None:
    """KIP-890 part 1: the transaction coordinator vouches for a producer's first transactional
    write to a partition (`transaction.partition.verification.enable`)."""
    if not ctx.broker.config.get("transaction.partition.verification.enable"):
        return None
    return ctx.broker.transactions.verify_partition


def _check_records(version: int, records: bytes | None) -> None:
    """Kafka's request-level checks (ProduceRequest.validateRecords), before the log sees the data."""
    if records is None:
        raise KafkaError(ErrorCode.INVALID_RECORD, "null records")
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
