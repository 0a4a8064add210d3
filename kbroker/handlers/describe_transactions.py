"""DescribeTransactions: state, producer and partitions of transactional ids."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from kbroker.handlers import RequestContext
from kbroker.handlers.authorize import Op, Resource, allowed
from protocol.errors import ErrorCode, KafkaError

API_KEY = 65
MIN_VERSION = 0
MAX_VERSION = 0


async def handle(ctx: RequestContext, request: Any) -> dict[str, Any]:
    return {"throttle_time_ms": 0, "transaction_states": [_describe(ctx, t) for t in request.transactional_ids]}


def _describe(ctx: RequestContext, transactional_id: str) -> dict[str, Any]:
    empty = {"transactional_id": transactional_id, "transaction_state": "", "transaction_timeout_ms": 0,
             "transaction_start_time_ms": -1, "producer_id": -1, "producer_epoch": -1, "topics": []}
    if not allowed(ctx, Op.DESCRIBE, Resource.TRANSACTIONAL_ID, transactional_id):
        return {**empty, "error_code": ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED}
    try:
        txn = ctx.broker.transactions.describe(transactional_id)
    except KafkaError as e:
        return {**empty, "error_code": e.code}
    topics: dict[str, list[int]] = defaultdict(list)
    for topic, partition in txn.partition_list():
        topics[topic].append(partition)
    return {
        **empty,
        "error_code": ErrorCode.NO_ERROR,
        "transaction_state": txn.state.display,
        "transaction_timeout_ms": txn.timeout_ms,
        "transaction_start_time_ms": txn.start_ms,
        "producer_id": txn.producer_id,
        "producer_epoch": txn.producer_epoch,
        # Only the topics the caller may describe (Kafka's rule).
        "topics": [{"topic": t, "partitions": ps} for t, ps in topics.items()
                   if allowed(ctx, Op.DESCRIBE, Resource.TOPIC, t)],
    }
