"""ApiVersions: what this broker serves, so clients pick versions."""

from __future__ import annotations

from typing import Any

from kbroker.handlers import HandlerResult, RequestContext, advertised_versions
from protocol.errors import ErrorCode

API_KEY = 18
MIN_VERSION = 0
MAX_VERSION = 4


# Share groups' APIs, advertised only with group.share.enable (as Kafka 4.0's early access).
SHARE_GROUP_APIS = frozenset({76, 77, 78, 79, 90, 91, 92})


def _api_keys(share_groups: bool = True) -> list[dict[str, int]]:
    return [{"api_key": k, "min_version": lo, "max_version": hi} for k, lo, hi in advertised_versions()
            if share_groups or k not in SHARE_GROUP_APIS]


async def handle(ctx: RequestContext, request: Any) -> dict[str, Any]:
    # Features are omitted (Kafka's default-valued tagged fields are not written):
    # librdkafka before 2.2 misreads a response that carries them.
    share_groups = ctx.broker.config.get("group.share.enable")
    return {"error_code": ErrorCode.NO_ERROR, "api_keys": _api_keys(share_groups), "throttle_time_ms": 0}


def unsupported_version_response() -> HandlerResult:
    """A v0 answer with UNSUPPORTED_VERSION and the full key list (KIP-511)."""
    body = {"error_code": ErrorCode.UNSUPPORTED_VERSION, "api_keys": _api_keys()}
    return HandlerResult(body=body, version=0)
