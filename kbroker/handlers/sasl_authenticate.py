"""SaslAuthenticate outside a SASL exchange (see sasl_handshake): ILLEGAL_SASL_STATE, with Kafka's
message."""

from __future__ import annotations

from typing import Any

from kbroker.handlers import RequestContext
from protocol.errors import ErrorCode

API_KEY = 36
MIN_VERSION = 0
MAX_VERSION = 2


async def handle(ctx: RequestContext, request: Any) -> dict[str, Any]:
    return {"error_code": ErrorCode.ILLEGAL_SASL_STATE,
            "error_message": "SaslAuthenticate request received after successful authentication",
            "auth_bytes": b"", "session_lifetime_ms": 0}
