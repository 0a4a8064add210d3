"""ApiVersions: what this broker serves, so clients pick versions."""

from __future__ import annotations

from typing import Any

from kbroker.handlers import HandlerResult, RequestContext, advertised_versions
from protocol.errors import ErrorCode

API_KEY = 18
MIN_VERSION = 0
MAX_VERSION = 4


def _api_keys() -> list[dict[str, int]]:
    return [{"api_key": k, "min_version": lo, "max_version": hi} for k, lo, hi in advertised_versions()]


async def handle(ctx: RequestContext, request: Any) -> dict[str, Any]:
    # Features are omitted (Kafka's default-valued tagged fields are not written):
    # librdkafka before 2.2 misreads a response that carries them.
    return {"error_code": ErrorCode.NO_ERROR, "api_keys": _api_keys(), "throttle_time_ms": 0}


def unsupported_version_response() -> HandlerResult:
    """A v0 answer with UNSUPPORTED_VERSION and the full key list (KIP-511)."""
    body = {"error_code": ErrorCode.UNSUPPORTED_VERSION, "api_keys": _api_keys()}
    return HandlerResult(body=body, version=0)
