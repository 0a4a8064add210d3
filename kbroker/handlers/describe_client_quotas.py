"""DescribeClientQuotas: kbroker keeps no client quotas (quota settings are refused at start and
never stored), so every well-formed filter matches nothing. Answered so that Kafka's tools work
where they ask for quotas alongside something else (`kafka-configs.sh --describe --entity-type
users` shows quotas and SCRAM credentials), with Kafka's errors for malformed filters
(ZkAdminManager.describeClientQuotas)."""

from __future__ import annotations

from typing import Any

from kbroker.handlers import RequestContext
from protocol.errors import ErrorCode, KafkaError

API_KEY = 48
MIN_VERSION = 0
MAX_VERSION = 1

ENTITY_TYPES = ("user", "client-id", "ip")


async def handle(ctx: RequestContext, request: Any) -> dict[str, Any]:
    seen: set[str] = set()
    for component in request.components:
        entity_type = component.entity_type
        if not entity_type:
            raise KafkaError(ErrorCode.INVALID_REQUEST, "Unexpected empty filter component entity")
        if entity_type in seen:
            raise KafkaError(ErrorCode.INVALID_REQUEST, f"Duplicate {entity_type} filter component entity type")
        if entity_type not in ENTITY_TYPES:
            raise KafkaError(ErrorCode.UNSUPPORTED_VERSION, f"Custom entity type '{entity_type}' not supported")
        seen.add(entity_type)
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NO_ERROR, "error_message": None, "entries": []}
