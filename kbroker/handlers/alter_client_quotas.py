"""AlterClientQuotas: set or remove the quotas of users, client ids and users' client ids (and
their defaults: a null entity name), with Kafka's checks and errors per entry
(ZkAdminManager.alterClientQuotas): an empty entity, an unknown entity type, an empty name, an ip
entity with others, an unknown quota key or a fractional value of a whole-number key fail that
entry with INVALID_REQUEST. A value of 0 or less is refused as KRaft (and Kafka 4) refuse it
("Quota ... must be greater than 0"). With `validate_only` nothing is written. Requires
ALTER_CONFIGS on the cluster. IP entities (connection_creation_rate) are not supported.

Each entry's changes are read, applied and written together on the store writer's thread; every
broker hears of them through the store's change notifications.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kbroker.cluster.client_quotas import QUOTA_KEYS, QuotaEntity
from kbroker.handlers import RequestContext, authorize
from protocol.errors import ErrorCode, KafkaError

API_KEY = 49
MIN_VERSION = 0
MAX_VERSION = 1

USER, CLIENT_ID, IP = "user", "client-id", "ip"
_EPSILON = 1e-6


def _entity(pairs: list[tuple[str, str | None]]) -> QuotaEntity:
    """Kafka's parseAndSanitizeQuotaEntity and the entity combinations it accepts."""
    if not pairs:
        raise KafkaError(ErrorCode.INVALID_REQUEST, "Invalid empty client quota entity")
    names: dict[str, str | None] = {}
    for entity_type, name in pairs:
        if entity_type not in (USER, CLIENT_ID, IP):
            raise KafkaError(ErrorCode.INVALID_REQUEST, f"Unhandled client quota entity type: {entity_type}")
        if name == "":
            raise KafkaError(ErrorCode.INVALID_REQUEST, f"Empty {entity_type} not supported")
        names[entity_type] = name  # a type named twice: the last name counts (Kafka's map)
    if IP in names:
        if len(names) > 1:
            raise KafkaError(ErrorCode.INVALID_REQUEST, "Invalid quota entity combination, IP entity should not be "
                             "used with user/client ID entity.")
        raise KafkaError(ErrorCode.INVALID_REQUEST, "IP quotas (connection_creation_rate) are not supported by "
                         "kbroker")
    return QuotaEntity.of_names(names.get(USER), names.get(CLIENT_ID), user_default=USER in names and names[USER] is None,
                                client_default=CLIENT_ID in names and names[CLIENT_ID] is None)


def _value_text(key: str, value: float) -> str:
    """The stored text of a quota value, checked as Kafka checks it."""
    whole = QUOTA_KEYS.get(key)
    if whole is None:
        raise KafkaError(ErrorCode.INVALID_REQUEST, f"Invalid configuration key {key}")
    if not value > 0.0:
        raise KafkaError(ErrorCode.INVALID_REQUEST, f"Quota {key} must be greater than 0")
    if not whole:
        return repr(float(value))
    if value >= 2.0**63:
        raise KafkaError(ErrorCode.INVALID_REQUEST, f"Configuration {key} must be a LONG value")
    number = int(value + _EPSILON)
    if abs(number - value) > _EPSILON:
        raise KafkaError(ErrorCode.INVALID_REQUEST, f"Configuration {key} must be a LONG value")
    return str(number)


def _edit(ops: list[Any], validate_only: bool) -> Callable[[dict[str, str]], dict[str, str] | None]:
    def edit(configs: dict[str, str]) -> dict[str, str] | None:
        for op in ops:
            if op.remove:
                configs.pop(op.key, None)
            else:
                configs[op.key] = _value_text(op.key, op.value)
        return None if validate_only else configs
    return edit


def _checked_ops(ops: list[Any]) -> None:
    """The checks of the values, before anything is read (the same as `_edit` makes)."""
    for op in ops:
        if not op.remove:
            _value_text(op.key, op.value)


async def handle(ctx: RequestContext, request: Any) -> dict[str, Any]:
    authorize.require_cluster(ctx, authorize.Op.ALTER_CONFIGS)
    quotas = ctx.broker.quotas
    results = []
    for entry in request.entries:
        wire = [(e.entity_type, e.entity_name) for e in entry.entity]
        code, message = ErrorCode.NO_ERROR, None
        try:
            entity = _entity(wire)
            ops = list(entry.ops)
            _checked_ops(ops)
            await quotas.alter(entity, _edit(ops, request.validate_only))
        except KafkaError as e:
            code, message = e.code, e.message
        results.append(_result(wire, code, message))
    return {"throttle_time_ms": 0, "entries": results}


def _result(wire: list[tuple[str, str | None]], code: int, message: str | None) -> dict[str, Any]:
    return {"error_code": code, "error_message": message,
            "entity": [{"entity_type": t, "entity_name": n} for t, n in wire]}


def error_answer(version: int, request: Any, code: int, message: str | None) -> dict[str, Any]:
    """Kafka's AlterClientQuotasRequest.getErrorResponse: every entry with the error."""
    return {"throttle_time_ms": 0,
            "entries": [_result([(e.entity_type, e.entity_name) for e in entry.entity], code, message)
                        for entry in request.entries]}
