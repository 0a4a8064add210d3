"""DescribeLogDirs: which partitions each log directory holds, and their sizes.

A replica being moved to another log dir (AlterReplicaLogDirs) is listed twice, as Kafka lists
it: the current replica in its dir, and the future replica (`is_future_key`) in the destination
with `offset_lag` = how far its log end is behind the current replica's. That is what
kafka-reassign-partitions.sh --verify and kafka-log-dirs.sh read.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from kbroker.cluster.replica_manager import LogDirDescription
from kbroker.handlers import RequestContext
from kbroker.handlers.authorize import Op, cluster_allowed
from protocol.errors import ErrorCode

API_KEY = 35
MIN_VERSION = 0
MAX_VERSION = 4


async def handle(ctx: RequestContext, request: Any) -> dict[str, Any]:
    if not cluster_allowed(ctx, Op.DESCRIBE):
        return {"throttle_time_ms": 0, "error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "results": []}
    wanted = None if request.topics is None else {(t.topic, p) for t in request.topics for p in t.partitions}
    results = [_describe_dir(d) for d in ctx.broker.replicas.describe_log_dirs(wanted)]
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NO_ERROR, "results": results}


def _describe_dir(description: LogDirDescription) -> dict[str, Any]:
    topics: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for replica in description.replicas:
        topics[replica.topic].append({
            "partition_index": replica.partition,
            "partition_size": replica.size,
            "offset_lag": replica.offset_lag,
            "is_future_key": replica.is_future,
        })
    return {
        # A full or failed dir is reported as Kafka reports an offline one; its partitions are
        # still listed (a full dir still serves reads).
        "error_code": ErrorCode.NO_ERROR if description.writable else ErrorCode.KAFKA_STORAGE_ERROR,
        "log_dir": str(description.path.resolve()),
        "topics": [{"name": name, "partitions": partitions} for name, partitions in topics.items()],
        "total_bytes": description.total_bytes,
        "usable_bytes": description.usable_bytes,
    }
