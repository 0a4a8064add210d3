"""IncrementalAlterConfigs: set, delete, append to or subtract from single configs."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any

from kbroker import dynamic_config
from kbroker.cluster.configs import ResourceType, set_logger_level
from kbroker.cluster.group_configs import check_group_name
from kbroker.config import BUILT_IN_DEFAULTS
from kbroker.handlers import RequestContext, authorize
from kbroker.handlers.alter_configs import check_config_access, resource_result, with_repeats
from kbroker.kafka_configs import TOPIC_CONFIG_TYPES
from protocol.errors import ErrorCode, KafkaError

API_KEY = 44
MIN_VERSION = 0
MAX_VERSION = 1



class Op(enum.IntEnum):
    SET = 0
    DELETE = 1
    APPEND = 2
    SUBTRACT = 3


async def handle(ctx: RequestContext, request: Any) -> dict[str, Any]:
    responses = [
        await _alter(ctx, resource, request.validate_only, repeated)
        for resource, repeated in with_repeats(request.resources)
    ]
    return {"throttle_time_ms": 0, "responses": responses}


async def _alter(ctx: RequestContext, resource: Any, validate_only: bool, repeated: bool) -> dict[str, Any]:
    try:
        if repeated:
            raise KafkaError(ErrorCode.INVALID_REQUEST, "Each resource must appear at most once.")
        check_config_access(ctx, resource, authorize.Op.ALTER_CONFIGS)
        _check_ops(resource.resource_type, resource.configs)
        await _apply(ctx, resource, validate_only)
    except KafkaError as e:
        return resource_result(resource, e)
    return resource_result(resource)


def _is_list(resource_type: int, name: str) -> bool:
    """Only configs of Kafka's LIST type take APPEND and SUBTRACT."""
    if resource_type == ResourceType.BROKER:
        return dynamic_config.config_type(dynamic_config.base_name(name)) == "LIST"
    return TOPIC_CONFIG_TYPES.get(name) == "LIST"


def _check_ops(resource_type: int, configs: Any) -> None:
    names = [c.name for c in configs]
    if len(set(names)) != len(names):
        raise KafkaError(ErrorCode.INVALID_REQUEST, "Error due to duplicate config keys")
    for config in configs:
        if config.config_operation not in Op.__members__.values():
            raise KafkaError(ErrorCode.INVALID_REQUEST, f"Unknown alter configs operation {config.config_operation}")
        if config.config_operation in (Op.APPEND, Op.SUBTRACT) and not _is_list(resource_type, config.name):
            verb = "append" if config.config_operation == Op.APPEND else "subtract"
            raise KafkaError(ErrorCode.INVALID_CONFIG, f"Config value {verb} is not allowed for config key: {config.name}")
        if config.config_operation != Op.DELETE and config.value is None:
            raise KafkaError(ErrorCode.INVALID_REQUEST, f"Null value not supported for : {config.name}")


async def _apply(ctx: RequestContext, resource: Any, validate_only: bool) -> None:
    service = ctx.broker.configs
    name = resource.resource_name
    if resource.resource_type == ResourceType.TOPIC:
        current = service.topic_overrides(name)
        effective = {e["name"]: e["value"] for e in service.describe_topic(name, current)}
        await service.alter_topic(name, _updated(current, effective, resource.configs), validate_only)
    elif resource.resource_type == ResourceType.BROKER:
        broker_id = service.check_broker_resource(name)
        # As Kafka: a list operation on a config the entity does not set starts from the default.
        current = service.broker_overrides(broker_id)
        await service.alter_broker(broker_id, _updated(current, BUILT_IN_DEFAULTS, resource.configs), validate_only)
    elif resource.resource_type == ResourceType.GROUP:
        check_group_name(name)
        current = ctx.broker.group_configs.overrides(name)
        await service.alter_group(name, _updated(current, {}, resource.configs), validate_only)
    elif resource.resource_type == ResourceType.BROKER_LOGGER:
        service.check_broker_resource(name)
        for config in resource.configs:
            if config.config_operation not in (Op.SET, Op.DELETE):
                raise KafkaError(ErrorCode.INVALID_REQUEST, f"{Op(config.config_operation).name} is not supported for loggers")
        for config in resource.configs:
            set_logger_level(config.name, config.value if config.config_operation == Op.SET else None, validate_only)
    else:
        raise KafkaError(ErrorCode.INVALID_REQUEST, f"Unsupported resource type: {resource.resource_type}")


def _updated(current: Mapping[str, str], effective: Mapping[str, str | None], ops: Any) -> dict[str, str]:
    """The overrides after applying `ops`; list operations start from the effective value."""
    result = dict(current)
    for op in ops:
        if op.config_operation == Op.SET:
            result[op.name] = op.value
        elif op.config_operation == Op.DELETE:
            result.pop(op.name, None)
        else:
            items = _split(result.get(op.name, effective.get(op.name)))
            change = _split(op.value)
            if op.config_operation == Op.APPEND:
                items += [item for item in change if item not in items]
            else:
                items = [item for item in items if item not in change]
            result[op.name] = ",".join(items)
    return result


def _split(value: str | None) -> list[str]:
    return [item.strip() for item in (value or "").split(",") if item.strip()]
