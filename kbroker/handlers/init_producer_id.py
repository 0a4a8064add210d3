"""InitProducerId: producer ids for idempotent producers.

Transactional ids need the transaction coordinator, which is not built yet; they get
a clear authorization error instead of a retry loop.
"""

from __future__ import annotations

from typing import Any

from kbroker.handlers import RequestContext
from protocol.errors import ErrorCode

API_KEY = 22
MIN_VERSION = 0
MAX_VERSION = 5


async def handle(ctx: RequestContext, request: Any) -> dict[str, Any]:
    if request.transactional_id is not None:
        return {"error_code": ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, "producer_id": -1, "producer_epoch": -1}
    return {"error_code": ErrorCode.NO_ERROR, "producer_id": ctx.broker.producer_ids.next_id(), "producer_epoch": 0}
