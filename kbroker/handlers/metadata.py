"""Metadata: brokers, topics and partition leadership; auto-creates topics when allowed.

Answered from the broker's MetadataCache, as Kafka's brokers answer it: never from the store."""

from __future__ import annotations

import uuid
from typing import Any

from kbroker.cluster.controller import Controller
from kbroker.cluster.metadata_cache import MetadataCache, TopicRecord
from kbroker.cluster.topics import INTERNAL_TOPICS, TopicSpec, validate_topic_name
from kbroker.handlers import Pacer, RequestContext
from kbroker.handlers.authorize import NOT_REQUESTED, Op, Resource, allowed, allowed_names, cluster_allowed
from kbroker.handlers.authorize import operations as authorized_operations
from protocol.errors import ErrorCode, KafkaError
from protocol.messages.metadata import MetadataResponse, MetadataResponsePartition, MetadataResponseTopic
from protocol.primitives import ZERO_UUID

API_KEY = 3
MIN_VERSION = 0
MAX_VERSION = 12

async def handle(ctx: RequestContext, request: Any) -> MetadataResponse:
    broker = ctx.broker
    operations = request.include_topic_authorized_operations
    # Before v4 a request always auto-creates; later versions say so explicitly.
    auto_create = request.allow_auto_topic_creation if ctx.version >= 4 else True
    pacer = Pacer()
    if request.topics is None or (ctx.version == 0 and not request.topics):  # v0: an empty list means all
        # Topics the caller may not describe are left out, never named (Kafka's rule).
        names = sorted(allowed_names(ctx, Op.DESCRIBE, Resource.TOPIC, broker.metadata_cache.topic_names()))
        topics = await _describe_all(ctx, names, False, operations, pacer)
    else:
        names, topic_ids = await _requested(ctx.version, request.topics, pacer)
        if topic_ids:
            # As in Kafka: once a v12+ request names any topic by id, topics are looked up by
            # id only (never auto-created), and names in the request are ignored.
            topics = await pacer.map(topic_ids, lambda topic_id: _describe_topic_id(ctx, topic_id, operations))
        else:
            topics = await _describe_all(ctx, names, auto_create, operations, pacer)
    return {
        "throttle_time_ms": 0,
        "brokers": broker.broker_endpoints(ctx.listener),
        "cluster_id": broker.cluster_id,
        "controller_id": _controller(ctx),
        "topics": topics,
        "cluster_authorized_operations": _cluster_operations(ctx, request.include_cluster_authorized_operations),
    }


def _cluster_operations(ctx: RequestContext, requested: bool) -> int:
    """v8-v10: the cluster's bitfield when asked, 0 for a caller who may not describe the cluster."""
    if not requested or ctx.version > 10:
        return NOT_REQUESTED
    if not cluster_allowed(ctx, Op.DESCRIBE):
        return 0
    return authorized_operations(ctx, Resource.CLUSTER, "kafka-cluster")


async def _requested(version: int, topics: Any, pacer: Pacer) -> tuple[list[str | None], list[uuid.UUID]]:
    """The names and (v12+) ids a request asks for, each once: Kafka reads them as sets.

    Before v12 a topic has a name and no id, or the whole request is refused as Kafka does. The
    Java client sends name "" (not null) next to a topic id, so an id decides.
    """
    names: dict[str | None, None] = {}
    ids: dict[uuid.UUID, None] = {}
    for topic in topics:
        name, topic_id = topic.name, topic.topic_id
        if version < 12:
            if name is None:
                raise KafkaError(ErrorCode.INVALID_REQUEST, f"Topic name can not be null for version {version}")
            if topic_id is not None and topic_id != ZERO_UUID:
                raise KafkaError(ErrorCode.INVALID_REQUEST,
                                 f"Topic IDs are not supported in requests for version {version}")
        elif topic_id and topic_id != ZERO_UUID:
            ids[topic_id] = None
        names[name] = None
        await pacer.tick()
    return list(names), list(ids)


async def _describe_all(ctx: RequestContext, names: list[str | None], auto_create: bool, operations: bool,
                        pacer: Pacer) -> list[MetadataResponseTopic]:
    described = []
    for name in names:
        # v12 allows a null name; with no id either there is nothing to look up.
        described.append(_unknown_id(ZERO_UUID) if name is None
                         else await _describe_topic(ctx, name, auto_create, operations, pacer))
        await pacer.tick()
    return described


def _describe_topic_id(ctx: RequestContext, topic_id: uuid.UUID, operations: bool) -> MetadataResponseTopic:
    record = ctx.broker.metadata_cache.topic_by_id(topic_id)
    if record is None:
        return _unknown_id(topic_id)
    if not allowed(ctx, Op.DESCRIBE, Resource.TOPIC, record.name):
        # Ids are not secret (Kafka): the id comes back with the error, the name does not.
        return {"error_code": ErrorCode.TOPIC_AUTHORIZATION_FAILED, "name": None, "topic_id": topic_id,
                "partitions": []}
    return _describe_record(ctx, record.name, record, operations)


def _unknown_id(topic_id: uuid.UUID) -> MetadataResponseTopic:
    # The id must come back: clients match by-id answers on it (Java's
    # MetadataResponse.errorsByTopicId rejects an answer with a zero id outright).
    return {"error_code": ErrorCode.UNKNOWN_TOPIC_ID, "name": None, "topic_id": topic_id, "partitions": []}


async def _describe_topic(ctx: RequestContext, name: str, auto_create: bool, operations: bool,
                          pacer: Pacer) -> MetadataResponseTopic:
    broker = ctx.broker
    if not allowed(ctx, Op.DESCRIBE, Resource.TOPIC, name):
        # Named explicitly: refused without saying whether it exists.
        return {"error_code": ErrorCode.TOPIC_AUTHORIZATION_FAILED, "name": name, "topic_id": ZERO_UUID}
    try:
        validate_topic_name(name)  # before any lookup: an illegal name costs nothing but this check
    except KafkaError as e:
        return {"error_code": e.code, "name": name}
    record = broker.metadata_cache.topic(name)
    if record is None:
        if not (auto_create and broker.config.auto_create_topics_enable):
            return {"error_code": ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "name": name}
        if not (cluster_allowed(ctx, Op.CREATE) or allowed(ctx, Op.CREATE, Resource.TOPIC, name)):
            return {"error_code": ErrorCode.TOPIC_AUTHORIZATION_FAILED, "name": name, "topic_id": ZERO_UUID,
                    "is_internal": name in INTERNAL_TOPICS}
        try:
            record = await broker.topics.create_paced(TopicSpec(name), pacer)
        except KafkaError as e:
            record = broker.metadata_cache.topic(name)
            if record is None:
                # Created meanwhile by another request, not known here yet: Kafka's answer for
                # a topic being created, which clients retry.
                code = ErrorCode.LEADER_NOT_AVAILABLE if e.code == ErrorCode.TOPIC_ALREADY_EXISTS else e.code
                return {"error_code": code, "name": name}
    return _describe_record(ctx, name, record, operations)


def _describe_record(ctx: RequestContext, name: str, record: TopicRecord,
                     operations: bool) -> MetadataResponseTopic:
    source = served_by(ctx, name)
    return {
        "error_code": ErrorCode.NO_ERROR,
        "name": name,
        "topic_id": record.topic_id,
        "is_internal": name in INTERNAL_TOPICS,
        "partitions": [describe_partition(ctx, source, i, r) for i, r in sorted(record.assignment.items())],
        "topic_authorized_operations": (authorized_operations(ctx, Resource.TOPIC, name)
                                        if operations and ctx.version >= 8 else NOT_REQUESTED),
    }


def served_by(ctx: RequestContext, name: str) -> str:
    """The topic whose partitions' leaders serve `name`: a filtered view's source, or itself."""
    view = ctx.broker.metadata_cache.view(name)
    return view.source if view is not None else name


def _controller(ctx: RequestContext) -> int:
    cluster = ctx.broker.cluster
    if cluster is None:
        return ctx.broker.config.broker_id
    return cluster.controller if cluster.controller is not None else -1


def describe_partition(ctx: RequestContext, topic: str, index: int, replicas: list[int]) -> MetadataResponsePartition:
    cluster = ctx.broker.cluster
    if cluster is not None:
        return _cluster_partition(ctx.broker.metadata_cache, cluster, topic, index, replicas, ctx)
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


def _cluster_partition(cache: MetadataCache, cluster: Controller, topic: str, index: int, replicas: list[int],
                       ctx: RequestContext) -> MetadataResponsePartition:
    """Leadership as the cluster's partition state says, with the replicas that are not alive."""
    state = cache.state_of(topic, index)
    live = set(cache.brokers)
    offline = [r for r in replicas if r not in live]
    if state is None or state.leader < 0 or state.leader not in live:
        return {"error_code": ErrorCode.LEADER_NOT_AVAILABLE, "partition_index": index, "leader_id": -1,
                "leader_epoch": state.leader_epoch if state else -1, "replica_nodes": replicas,
                "isr_nodes": state.isr if state else [], "offline_replicas": offline}
    if cluster.endpoint_of(state.leader, ctx.listener) is None:
        # As Kafka's MetadataCache: a live leader without the client's listener cannot be
        # reached by it; LISTENER_NOT_FOUND from v6, LEADER_NOT_AVAILABLE before.
        code = ErrorCode.LISTENER_NOT_FOUND if ctx.version >= 6 else ErrorCode.LEADER_NOT_AVAILABLE
        return {"error_code": code, "partition_index": index, "leader_id": -1, "leader_epoch": -1,
                "replica_nodes": replicas, "isr_nodes": [], "offline_replicas": offline}
    return {"error_code": ErrorCode.NO_ERROR, "partition_index": index, "leader_id": state.leader,
            "leader_epoch": state.leader_epoch, "replica_nodes": replicas, "isr_nodes": state.isr,
            "offline_replicas": offline}
