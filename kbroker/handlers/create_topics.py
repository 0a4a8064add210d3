"""CreateTopics: validate and create topics (optionally validate only)."""

from __future__ import annotations

from collections import Counter
from typing import Any

from kbroker.cluster.topics import MAX_PARTITIONS_PER_REQUEST, Charge, TopicSpec
from kbroker.handlers import Pacer, RequestContext
from kbroker.handlers.authorize import Op, Resource, allowed, cluster_allowed
from kbroker.handlers.mutation_quota import charger, quota_for, throttle
from kbroker.views.view import SOURCE_CONFIG as VIEW_SOURCE_CONFIG
from protocol.errors import ErrorCode, KafkaError

API_KEY = 19
MIN_VERSION = 0
MAX_VERSION = 7
STRICT_QUOTA_SINCE = 6  # the first version that knows THROTTLING_QUOTA_EXCEEDED
# A created topic's config carries fewer fields than the DescribeConfigs entries it is made from.
CREATED_CONFIG_FIELDS = ("name", "value", "read_only", "config_source", "is_sensitive")


async def handle(ctx: RequestContext, request: Any) -> dict[str, Any]:
    pacer = Pacer()
    counts: Counter[str] = Counter()
    partitions = 0
    default_partitions = ctx.broker.topics.default_partitions
    for topic in request.topics:
        counts[topic.name] += 1
        partitions += _requested_partitions(topic, default_partitions)
        await pacer.tick()
    if partitions > MAX_PARTITIONS_PER_REQUEST:
        # Like Kafka's controller, one oversized request fails as a whole.
        error = KafkaError(ErrorCode.POLICY_VIOLATION, "Excessively large number of partitions per request.")
        return {"throttle_time_ms": 0, "topics": await pacer.map(request.topics, lambda t: _error(t.name, error))}
    results = []
    quota = quota_for(ctx, STRICT_QUOTA_SINCE)
    charge = charger(ctx, quota)
    # Kafka: CREATE on the cluster allows every topic, else CREATE on each topic.
    may_create = cluster_allowed(ctx, Op.CREATE)
    for topic in request.topics:
        await pacer.tick()
        if counts[topic.name] > 1:
            results.append(_error(topic.name, KafkaError(ErrorCode.INVALID_REQUEST, "Duplicate topic name.")))
            continue
        if not (may_create or allowed(ctx, Op.CREATE, Resource.TOPIC, topic.name)):
            results.append(_error(topic.name, KafkaError(ErrorCode.TOPIC_AUTHORIZATION_FAILED, "Authorization failed.")))
            continue
        result = await _create(ctx, topic, request.validate_only, pacer, charge)
        if result["error_code"] == ErrorCode.NO_ERROR and not allowed(ctx, Op.DESCRIBE_CONFIGS, Resource.TOPIC,
                                                                      topic.name):
            # Created, but the caller may not see its configs (Kafka's topic config error).
            result = {**result, "configs": None, "topic_config_error_code": ErrorCode.TOPIC_AUTHORIZATION_FAILED}
        results.append(result)
    return {"throttle_time_ms": throttle(ctx, quota), "topics": results}


def _requested_partitions(topic: Any, default_partitions: int) -> int:
    """Partitions a topic of the request would create, as Kafka's controller counts them."""
    if topic.assignments:
        return len(topic.assignments)
    return default_partitions if topic.num_partitions == -1 else max(topic.num_partitions, 0)


async def _create(ctx: RequestContext, topic: Any, validate_only: bool, pacer: Pacer,
                  charge: Charge | None) -> dict[str, Any]:
    configs = {c.name: c.value for c in topic.configs if c.value is not None}
    assignment = {a.partition_index: list(a.broker_ids) for a in topic.assignments} or None
    if assignment and (topic.num_partitions != -1 or topic.replication_factor != -1):
        error = KafkaError(
            ErrorCode.INVALID_REQUEST,
            "Both numPartitions or replicationFactor and replicasAssignments were set.",
        )
        return _error(topic.name, error)
    source = configs.get(VIEW_SOURCE_CONFIG)
    if source and not allowed(ctx, Op.READ, Resource.TOPIC, source):
        # A view shows its source's records to whoever may read the view: only a caller who may
        # read the source can make one, or CREATE on a prefix would read any topic.
        return _error(topic.name, KafkaError(ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                                             f"A view of {source} needs READ on {source}."))
    spec = TopicSpec(topic.name, topic.num_partitions, topic.replication_factor, assignment, configs)
    try:
        record = await ctx.broker.topics.create_paced(spec, pacer, validate_only=validate_only, charge=charge)
    except KafkaError as e:
        return _error(topic.name, e)
    return {
        "name": topic.name,
        "topic_id": record.topic_id,
        "error_code": ErrorCode.NO_ERROR,
        "error_message": None,
        "num_partitions": len(record.assignment),
        "replication_factor": len(record.assignment[0]),
        "configs": [{field: entry[field] for field in CREATED_CONFIG_FIELDS}
                    for entry in ctx.broker.configs.describe_topic(record.name, record.configs)],
    }


def _error(name: str, error: KafkaError) -> dict[str, Any]:
    return {"name": name, "error_code": error.code, "error_message": error.message, "configs": None}
