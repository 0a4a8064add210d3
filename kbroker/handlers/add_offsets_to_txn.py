"""AddOffsetsToTxn: a group's offsets will be committed inside the transaction."""

from __future__ import annotations

from typing import Any

from kbroker.handlers import RequestContext
from kbroker.handlers.authorize import Op, Resource, allowed
from protocol.errors import ErrorCode, KafkaError

API_KEY = 25
MIN_VERSION = 0
MAX_VERSION = 4


async def handle(ctx: RequestContext, request: Any) -> dict[str, Any]:
    if not allowed(ctx, Op.WRITE, Resource.TRANSACTIONAL_ID, request.transactional_id):
        raise KafkaError(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    if not allowed(ctx, Op.READ, Resource.GROUP, request.group_id):
        raise KafkaError(ErrorCode.GROUP_AUTHORIZATION_FAILED)
    try:
        ctx.broker.transactions.add_offsets(
            request.transactional_id, request.producer_id, request.producer_epoch, request.group_id
        )
    except KafkaError as e:
        return {"throttle_time_ms": 0, "error_code": ctx.fenced_code(e.code, known_since=2)}
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NO_ERROR}
