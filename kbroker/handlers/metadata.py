"""Metadata: brokers, topics and partition leadership; auto-creates topics when allowed."""

from __future__ import annotations

from typing import Any

from kbroker.cluster.authorization import cluster_operations, topic_operations
from kbroker.cluster.topics import INTERNAL_TOPICS, TopicSpec
from kbroker.handlers import RequestContext
from protocol.errors import ErrorCode, KafkaError

API_KEY = 3
MIN_VERSION = 0
MAX_VERSION = 12


async def handle(ctx: RequestContext, request: Any) -> dict[str, Any]:
    broker = ctx.broker
    topics = broker.topics
    if request.topics is None:
        names = sorted(t.name for t in topics.store.list_topics())
    else:
        names = [_topic_name(ctx, t) for t in request.topics]
    # Before v4 a request always auto-creates; later versions say so explicitly.
    auto_create = request.allow_auto_topic_creation if ctx.version >= 4 else True
    return {
        "throttle_time_ms": 0,
        "brokers": broker.broker_endpoints(),
        "cluster_id": broker.cluster_id,
        "controller_id": broker.config.broker_id,
        "topics": [_describe_topic(ctx, name, auto_create, request.include_topic_authorized_operations)
                   for name in names],
        "cluster_authorized_operations": cluster_operations(request.include_cluster_authorized_operations),
    }


def _topic_name(ctx: RequestContext, topic: Any) -> str | None:
    if topic.name is None and getattr(topic, "topic_id", None):
        record = ctx.broker.topics.find_by_id(topic.topic_id)
        return record.name if record else None
    return topic.name


def _describe_topic(ctx: RequestContext, name: str | None, auto_create: bool, operations: bool) -> dict[str, Any]:
    broker = ctx.broker
    if name is None:
        return {"error_code": ErrorCode.UNKNOWN_TOPIC_ID, "name": None}
    record = broker.topics.store.get_topic(name)
    if record is None:
        if not (auto_create and broker.config.auto_create_topics_enable):
            return {"error_code": ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "name": name}
        error = _auto_create(ctx, name)
        if error is not None:
            return {"error_code": error, "name": name}
        record = broker.topics.require(name)
    return {
        "error_code": ErrorCode.NO_ERROR,
        "name": name,
        "topic_id": record.topic_id,
        "is_internal": name in INTERNAL_TOPICS,
        "partitions": [describe_partition(ctx, name, i, r) for i, r in sorted(record.assignment.items())],
        "topic_authorized_operations": topic_operations(operations),
    }


def _auto_create(ctx: RequestContext, name: str) -> ErrorCode | None:
    try:
        ctx.broker.topics.create(TopicSpec(name))
    except KafkaError as e:
        return e.code
    return None


def describe_partition(ctx: RequestContext, topic: str, index: int, replicas: list[int]) -> dict[str, Any]:
    partition = ctx.broker.replicas.find(topic, index)
    if partition is None:
        return {
            "error_code": ErrorCode.LEADER_NOT_AVAILABLE,
            "partition_index": index,
            "leader_id": -1,
            "leader_epoch": -1,
            "replica_nodes": replicas,
            "isr_nodes": [],
            "offline_replicas": replicas,
        }
    return {
        "error_code": ErrorCode.NO_ERROR,
        "partition_index": index,
        "leader_id": partition.leader_id,
        "leader_epoch": partition.leader_epoch,
        "replica_nodes": partition.replicas,
        "isr_nodes": partition.isr,
        "offline_replicas": [],
    }
