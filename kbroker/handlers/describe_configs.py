"""DescribeConfigs: the effective configs of topics, brokers and groups, with their sources."""

from __future__ import annotations

from typing import Any

from kbroker.cluster.configs import ResourceType, describe_loggers
from kbroker.cluster.group_configs import GROUP_CONFIG_DEFS, check_group_name
from kbroker.cluster.topics import validate_topic_name
from kbroker.config import BROKER_CONFIG_DEFS
from kbroker.handlers import RequestContext, authorize, each
from kbroker.handlers.alter_configs import check_config_access
from protocol.errors import ErrorCode, KafkaError

API_KEY = 32
MIN_VERSION = 0
MAX_VERSION = 4


async def handle(ctx: RequestContext, request: Any) -> dict[str, Any]:
    synonyms = ctx.version >= 1 and request.include_synonyms
    documentation = ctx.version >= 3 and request.include_documentation
    results = [_describe(ctx, resource, synonyms, documentation) async for resource in each(request.resources)]
    return {"throttle_time_ms": 0, "results": results}


def _describe(ctx: RequestContext, resource: Any, synonyms: bool, documentation: bool) -> dict[str, Any]:
    result = {
        "resource_type": resource.resource_type,
        "resource_name": resource.resource_name,
        "error_code": ErrorCode.NO_ERROR,
        "error_message": None,
        "configs": [],
    }
    keys = list(resource.configuration_keys) if resource.configuration_keys is not None else None
    try:
        check_config_access(ctx, resource, authorize.Op.DESCRIBE_CONFIGS)
    except KafkaError as e:
        return {**result, "error_code": e.code, "error_message": e.message}
    try:
        configs = _configs(ctx, resource.resource_type, resource.resource_name, keys, synonyms)
    except KafkaError as e:
        # Kafka answers a topic it does not have with the code and an empty message (the field's
        # default; kafka-configs.sh prints "UnknownTopicOrPartitionException: " and nothing more).
        unknown_topic = e.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION and resource.resource_type == ResourceType.TOPIC
        return {**result, "error_code": e.code, "error_message": "" if unknown_topic else e.message}
    if documentation:
        docs = GROUP_CONFIG_DEFS if resource.resource_type == ResourceType.GROUP else BROKER_CONFIG_DEFS
        for entry in configs:
            definition = docs.get(entry["name"])
            entry["documentation"] = definition.doc if definition is not None else None
    return {**result, "configs": configs}


def _configs(
    ctx: RequestContext, resource_type: int, name: str, keys: list[str] | None, synonyms: bool
) -> list[dict[str, Any]]:
    service = ctx.broker.configs
    if resource_type == ResourceType.TOPIC:
        validate_topic_name(name)
        return service.describe_topic(name, service.topic_overrides(name), keys, synonyms)
    if resource_type == ResourceType.BROKER:
        return service.describe_broker(service.check_broker_resource(name, describing=True), keys, synonyms)
    if resource_type == ResourceType.GROUP:
        check_group_name(name, describing=True)
        return service.describe_group(name, keys, synonyms)
    if resource_type == ResourceType.BROKER_LOGGER:
        service.check_broker_resource(name)
        return describe_loggers(keys)
    raise KafkaError(ErrorCode.INVALID_REQUEST, f"Unsupported resource type: {resource_type}")
