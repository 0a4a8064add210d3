"""AlterConfigs (legacy): replace the whole set of overrides of a topic, broker or group."""

from __future__ import annotations

from collections import Counter
from typing import Any

from kbroker.cluster.configs import ResourceType
from kbroker.cluster.group_configs import check_group_name
from kbroker.handlers import RequestContext, authorize
from protocol.errors import ErrorCode, KafkaError

API_KEY = 33
MIN_VERSION = 0
MAX_VERSION = 2


async def handle(ctx: RequestContext, request: Any) -> dict[str, Any]:
    responses = [
        await _alter(ctx, resource, request.validate_only, repeated)
        for resource, repeated in with_repeats(request.resources)
    ]
    return {"throttle_time_ms": 0, "responses": responses}


def with_repeats(resources: Any) -> list[tuple[Any, bool]]:
    """Each resource with whether it appears more than once (Kafka refuses all copies then)."""
    counts = Counter((r.resource_type, r.resource_name) for r in resources)
    return [(r, counts[(r.resource_type, r.resource_name)] > 1) for r in resources]


def check_config_access(ctx: RequestContext, resource: Any, operation: authorize.Op) -> None:
    """Kafka: a topic's configs need the operation on the topic, a broker's (and its loggers')
    on the cluster. Altering a view's also needs READ on its source."""
    kind = resource.resource_type
    if kind == ResourceType.TOPIC and not authorize.allowed(ctx, operation, authorize.Resource.TOPIC,
                                                            resource.resource_name):
        raise KafkaError(ErrorCode.TOPIC_AUTHORIZATION_FAILED, "Topic authorization failed.")
    view = ctx.broker.metadata_cache.view(resource.resource_name) if kind == ResourceType.TOPIC else None
    if view is not None and operation == authorize.Op.ALTER_CONFIGS and not authorize.allowed(
            ctx, authorize.Op.READ, authorize.Resource.TOPIC, view.source):
        # Its filter decides which of the source's records the view shows (see CreateTopics).
        raise KafkaError(ErrorCode.TOPIC_AUTHORIZATION_FAILED, f"Changing view {view.name} needs READ on {view.source}.")
    if kind in (ResourceType.BROKER, ResourceType.BROKER_LOGGER) and not authorize.cluster_allowed(ctx, operation):
        raise KafkaError(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "Cluster authorization failed.")
    if kind == ResourceType.GROUP and not authorize.allowed(ctx, operation, authorize.Resource.GROUP,
                                                            resource.resource_name):
        raise KafkaError(ErrorCode.GROUP_AUTHORIZATION_FAILED, "Group authorization failed.")


def resource_result(resource: Any, error: KafkaError | None = None) -> dict[str, Any]:
    return {
        "resource_type": resource.resource_type,
        "resource_name": resource.resource_name,
        "error_code": error.code if error else ErrorCode.NO_ERROR,
        "error_message": error.message if error else None,
    }


async def _alter(ctx: RequestContext, resource: Any, validate_only: bool, repeated: bool) -> dict[str, Any]:
    try:
        if repeated:
            raise KafkaError(ErrorCode.INVALID_REQUEST, "Each resource must appear at most once.")
        check_config_access(ctx, resource, authorize.Op.ALTER_CONFIGS)
        await _apply(ctx, resource, validate_only)
    except KafkaError as e:
        return resource_result(resource, e)
    return resource_result(resource)


async def _apply(ctx: RequestContext, resource: Any, validate_only: bool) -> None:
    names = [c.name for c in resource.configs]
    if len(set(names)) != len(names):
        raise KafkaError(ErrorCode.INVALID_REQUEST, "Error due to duplicate config keys")
    nulls = [c.name for c in resource.configs if c.value is None]
    if nulls:
        raise KafkaError(ErrorCode.INVALID_REQUEST, f"Null value not supported for : {', '.join(nulls)}")
    configs = {c.name: c.value for c in resource.configs}
    service = ctx.broker.configs
    if resource.resource_type == ResourceType.TOPIC:
        await service.alter_topic(resource.resource_name, configs, validate_only)
    elif resource.resource_type == ResourceType.BROKER:
        await service.alter_broker(service.check_broker_resource(resource.resource_name), configs, validate_only)
    elif resource.resource_type == ResourceType.GROUP:
        check_group_name(resource.resource_name)
        await service.alter_group(resource.resource_name, configs, validate_only)
    elif resource.resource_type == ResourceType.BROKER_LOGGER:
        raise KafkaError(ErrorCode.INVALID_REQUEST, "AlterConfigs does not support the BROKER_LOGGER resource type")
    else:
        raise KafkaError(ErrorCode.INVALID_REQUEST, f"Unsupported resource type: {resource.resource_type}")
