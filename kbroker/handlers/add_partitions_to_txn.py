"""AddPartitionsToTxn: the partitions a transaction will write to (v4+: batched, for brokers)."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from kbroker.cluster.topics import INTERNAL_TOPICS
from kbroker.handlers import RequestContext
from kbroker.handlers.authorize import Op, Resource, allowed, allowed_names, require_cluster
from protocol.errors import ErrorCode, KafkaError

API_KEY = 24
MIN_VERSION = 0
MAX_VERSION = 5


async def handle(ctx: RequestContext, request: Any) -> dict[str, Any]:
    if ctx.version >= 4:  # batched, sent by brokers (KIP-890): CLUSTER_ACTION, as in Kafka
        require_cluster(ctx, Op.CLUSTER_ACTION)
    elif not allowed(ctx, Op.WRITE, Resource.TRANSACTIONAL_ID, request.v3_and_below_transactional_id):
        raise KafkaError(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    if ctx.version < 4:
        results = _add(ctx, request.v3_and_below_transactional_id, request.v3_and_below_producer_id,
                       request.v3_and_below_producer_epoch, request.v3_and_below_topics, False)
        return {"throttle_time_ms": 0, "results_by_topic_v3_and_below": results}
    by_txn = [
        {"transactional_id": t.transactional_id,
         "topic_results": _add(ctx, t.transactional_id, t.producer_id, t.producer_epoch, t.topics, t.verify_only)}
        for t in request.transactions
    ]
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NO_ERROR, "results_by_transaction": by_txn}


def _refused(ctx: RequestContext, wanted: list[tuple[str, int]]) -> dict[tuple[str, int], int] | None:
    """Kafka: WRITE on each topic (internal topics never: they are written through their
    coordinators). If any partition fails, none is added: the others get OPERATION_NOT_ATTEMPTED."""
    writable = allowed_names(ctx, Op.WRITE, Resource.TOPIC, (t for t, _ in wanted if t not in INTERNAL_TOPICS))
    if all(t in writable for t, _ in wanted):
        return None
    return {tp: ErrorCode.OPERATION_NOT_ATTEMPTED if tp[0] in writable else ErrorCode.TOPIC_AUTHORIZATION_FAILED
            for tp in wanted}


def _add(ctx: RequestContext, transactional_id: str, producer_id: int, epoch: int, topics: Any,
         verify_only: bool) -> list[dict[str, Any]]:
    wanted = [(t.name, p) for t in topics for p in t.partitions]
    errors = _refused(ctx, wanted)
    if errors is None:
        errors = ctx.broker.transactions.add_partitions(transactional_id, producer_id, epoch, wanted, verify_only)
    by_topic: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for (topic, partition), code in errors.items():
        by_topic[topic].append({"partition_index": partition,
                                "partition_error_code": ctx.fenced_code(code, known_since=2)})
    return [{"name": name, "results_by_partition": results} for name, results in by_topic.items()]
