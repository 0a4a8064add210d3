"""AlterReplicaLogDirs: move replicas to another of this broker's log dirs (KIP-113).

Kafka's ReplicaManager.alterReplicaLogDirs, partition by partition: the path must be one of
`log.dirs` (LOG_DIR_NOT_FOUND) and take writes (KAFKA_STORAGE_ERROR); a move to another dir in
progress stops; a partition not hosted here yet has the dir recorded so that it is created there
later, and gets REPLICA_NOT_AVAILABLE (UNKNOWN_TOPIC_OR_PARTITION, and nothing recorded, when
the partition does not exist);
otherwise the copy starts in the background (see kbroker/storage/log_mover.py) and the answer is
NONE at once. DescribeLogDirs shows its progress.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from kbroker.handlers import Pacer, RequestContext
from kbroker.handlers.authorize import Op, require_cluster
from protocol.errors import ErrorCode, KafkaError

API_KEY = 34
MIN_VERSION = 0
MAX_VERSION = 2


async def handle(ctx: RequestContext, request: Any) -> dict[str, Any]:
    require_cluster(ctx, Op.ALTER)
    # As Kafka reads the request: one destination per partition, the last one named wins.
    destinations: dict[tuple[str, int], str] = {}
    for directory in request.dirs:
        for topic in directory.topics:
            for partition in topic.partitions:
                destinations[(topic.name, partition)] = directory.path
    pacer = Pacer()
    by_topic: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for (topic, partition), path in destinations.items():
        await pacer.tick()
        by_topic[topic].append({"partition_index": partition, "error_code": _alter(ctx, topic, partition, path)})
    return {"throttle_time_ms": 0,
            "results": [{"topic_name": topic, "partitions": results} for topic, results in by_topic.items()]}


def _alter(ctx: RequestContext, topic: str, partition: int, path: str) -> int:
    mover = ctx.broker.log_mover
    key = (topic, partition)
    try:
        log_dir = mover.log_dir_for(path, topic, partition)
        hosted = ctx.broker.replicas.find(topic, partition) is not None
        if not hosted and not ctx.broker.metadata_cache.partition_exists(topic, partition):
            # Kafka records a preferred dir even for unknown partitions; kbroker does not, so that
            # requests naming made-up partitions cannot grow the broker's memory.
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        mover.prefer(key, log_dir)
        if not hosted:
            return ErrorCode.REPLICA_NOT_AVAILABLE
        mover.move(key, log_dir)
    except KafkaError as e:
        return e.code
    return ErrorCode.NO_ERROR
