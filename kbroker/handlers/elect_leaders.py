"""ElectLeaders: move leadership to the preferred replica, or (unclean) to any live replica.

On one node every partition's only replica leads already: ELECTION_NOT_NEEDED (left out of
the answer when every partition was asked for, as Kafka's controller does). In a cluster
the broker asked writes the new partition state itself (compare-and-set in ZooKeeper), as the
controller would; the replicas take their new roles from the state's watch.
"""

from __future__ import annotations

from typing import Any

from kbroker.handlers import RequestContext
from kbroker.handlers.authorize import Op, require_cluster
from protocol.errors import ErrorCode

API_KEY = 43
MIN_VERSION = 0
MAX_VERSION = 2
PREFERRED, UNCLEAN = 0, 1


async def handle(ctx: RequestContext, request: Any) -> dict[str, Any]:
    require_cluster(ctx, Op.ALTER)
    election_type = request.election_type if ctx.version >= 1 else PREFERRED
    if election_type not in (PREFERRED, UNCLEAN):
        return {"throttle_time_ms": 0, "error_code": ErrorCode.INVALID_REQUEST, "replica_election_results": []}
    every_partition = request.topic_partitions is None
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for topic, index in _wanted(ctx, request.topic_partitions):
        code = await _elect(ctx, topic, index, election_type == UNCLEAN)
        results_of_topic = by_topic.setdefault(topic, [])
        # Asked for every partition, Kafka's controller answers only for those that needed an
        # election (each topic is still listed): on a balanced cluster the answer is empty.
        if every_partition and code == ErrorCode.ELECTION_NOT_NEEDED:
            continue
        results_of_topic.append({"partition_id": index, "error_code": code,
                                 "error_message": _message(ctx, topic, index, code)})
    results = [{"topic": t, "partition_result": ps} for t, ps in by_topic.items()]
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NO_ERROR, "replica_election_results": results}


def _wanted(ctx: RequestContext, topic_partitions: Any) -> list[tuple[str, int]]:
    if topic_partitions is None:  # every partition of the cluster
        return [(t.name, i) for t in ctx.broker.metadata_cache.topic_records() for i in sorted(t.assignment)]
    return [(t.topic, p) for t in topic_partitions for p in t.partitions]


def _message(ctx: RequestContext, topic: str, index: int, code: ErrorCode) -> str | None:
    """KRaft's texts for what does not exist (kafka-leader-election.sh prints them)."""
    if code != ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
        return None
    if ctx.broker.metadata_cache.topic(topic) is None:
        return f"No such topic as {topic}"
    return f"No such partition as {topic}-{index}"


async def _elect(ctx: RequestContext, topic: str, index: int, unclean: bool) -> ErrorCode:
    cluster = ctx.broker.cluster
    if cluster is not None:
        return await cluster.elect(topic, index, unclean)
    if not ctx.broker.metadata_cache.partition_exists(topic, index):
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    return ErrorCode.ELECTION_NOT_NEEDED
