"""SaslHandshake outside a SASL exchange: on a listener without SASL, or on a connection already
authenticated that may not re-authenticate now. The exchange itself is the connection's SASL
session (kbroker.security.sasl_server). Kafka's KafkaApis answers these with ILLEGAL_SASL_STATE."""

from __future__ import annotations

from typing import Any

from kbroker.handlers import RequestContext
from protocol.errors import ErrorCode

API_KEY = 17
MIN_VERSION = 0
MAX_VERSION = 1


async def handle(ctx: RequestContext, request: Any) -> dict[str, Any]:
    return {"error_code": ErrorCode.ILLEGAL_SASL_STATE, "mechanisms": []}
