"""WriteTxnMarkers: write COMMIT/ABORT markers to partitions this broker leads.

Transaction coordinators send it to partition leaders; admin tools send it to abort a hanging
transaction (`kbroker transactions abort`, Kafka's Admin.abortTransaction). On one node the
coordinator writes its own markers directly, so here it serves the tools.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from kbroker.coordinator.txn_coordinator import write_marker
from kbroker.handlers import RequestContext
from kbroker.handlers.authorize import Op, require_cluster
from protocol.errors import ErrorCode, KafkaError

API_KEY = 27
MIN_VERSION = 0
MAX_VERSION = 1


async def handle(ctx: RequestContext, request: Any) -> dict[str, Any]:
    require_cluster(ctx, Op.CLUSTER_ACTION)  # brokers' request (Kafka's inter-broker rule)
    return {"markers": [_write(ctx, marker) for marker in request.markers]}


def _write(ctx: RequestContext, marker: Any) -> dict[str, Any]:
    now = ctx.now_ms()
    by_topic: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for topic in marker.topics:
        for index in topic.partition_indexes:
            try:
                write_marker(ctx.broker.replicas, ctx.broker.groups, topic.name, index, marker.producer_id,
                             marker.producer_epoch, marker.coordinator_epoch, marker.transaction_result, now)
                code = ErrorCode.NO_ERROR
            except KafkaError as e:
                code = e.code
            by_topic[topic.name].append({"partition_index": index, "error_code": code})
    return {"producer_id": marker.producer_id,
            "topics": [{"name": name, "partitions": partitions} for name, partitions in by_topic.items()]}
