"""DescribeClientQuotas: the client quotas of users, client ids and users' client ids whose
entities match a filter, with Kafka's ZooKeeper-mode semantics and errors
(ZkAdminManager.describeClientQuotas): each filter component matches an entity type by exact name
(match type 0), its default (1) or any specified name (2); without `strict`, entities with more
parts than the filter names match too. Requires DESCRIBE_CONFIGS on the cluster. The quotas are
read from the metadata store, as Kafka reads ZooKeeper. IP quotas are not kept: an ip filter
matches nothing."""

from __future__ import annotations

from typing import Any

from kbroker.handlers import RequestContext, authorize
from protocol.errors import ErrorCode, KafkaError

API_KEY = 48
MIN_VERSION = 0
MAX_VERSION = 1

USER, CLIENT_ID, IP = "user", "client-id", "ip"
MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED = 0, 1, 2
_ABSENT = object()  # an entity without this part (a default part is None, a named one its name)
_ANY = object()  # a component matching any specified name


async def handle(ctx: RequestContext, request: Any) -> dict[str, Any]:
    authorize.require_cluster(ctx, authorize.Op.DESCRIBE_CONFIGS)
    components: dict[str, Any] = {}
    for component in request.components:
        entity_type = component.entity_type
        if entity_type in components:
            word = "client" if entity_type == CLIENT_ID else entity_type
            raise KafkaError(ErrorCode.INVALID_REQUEST, f"Duplicate {word} filter component entity type")
        if entity_type not in (USER, CLIENT_ID, IP):
            if not entity_type:
                raise KafkaError(ErrorCode.INVALID_REQUEST, "Unexpected empty filter component entity type")
            raise KafkaError(ErrorCode.UNSUPPORTED_VERSION, f"Custom entity type '{entity_type}' not supported")
        components[entity_type] = _wanted(component)
    if IP in components and (USER in components or CLIENT_ID in components):
        raise KafkaError(ErrorCode.INVALID_REQUEST, "Invalid entity filter component combination, IP filter "
                         "component should not be used with user or clientId filter component.")
    entries = []
    if IP not in components:
        strict = request.strict
        for entity, values in sorted((await ctx.broker.quotas.read_all()).items(), key=lambda e: e[0].path):
            parts = dict(entity.wire())
            if _matches(components, USER, parts, strict) and _matches(components, CLIENT_ID, parts, strict):
                entries.append({
                    "entity": [{"entity_type": t, "entity_name": n} for t, n in entity.wire()],
                    "values": [{"key": k, "value": v} for k, v in sorted(values.items())],
                })
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NO_ERROR, "error_message": None, "entries": entries}


def _wanted(component: Any) -> object:
    """What a component matches: a name, None (the default) or _ANY."""
    if component.match_type == MATCH_EXACT:
        if component.match is None:
            raise KafkaError(ErrorCode.INVALID_REQUEST, f"Exact match of {component.entity_type} needs a name")
        return component.match
    if component.match_type == MATCH_DEFAULT:
        return None
    if component.match_type == MATCH_SPECIFIED:
        return _ANY
    raise KafkaError(ErrorCode.INVALID_REQUEST, f"Unexpected match type: {component.match_type}")


def _matches(components: dict[str, Any], entity_type: str, parts: dict[str, str | None], strict: bool) -> bool:
    """Kafka's `matches`: a component wants the part present (with its name, the default, or any);
    without a component a part may be absent, or present unless the filter is strict."""
    name = parts.get(entity_type, _ABSENT)
    if entity_type not in components:
        return name is _ABSENT or not strict
    wanted = components[entity_type]
    if wanted is _ANY:
        return name is not _ABSENT
    return name is not _ABSENT and name == wanted


def error_answer(version: int, request: Any, code: int, message: str | None) -> dict[str, Any]:
    """Kafka's DescribeClientQuotasRequest.getErrorResponse: the error and no entries (null)."""
    return {"throttle_time_ms": 0, "error_code": code, "error_message": message, "entries": None}

