"""InitProducerId: a producer id and epoch, for idempotent and for transactional producers.

Idempotent producers get a fresh id each time; a transactional id keeps its producer id and
gets the next epoch, which fences any older producer using the same transactional id.
"""

from __future__ import annotations

from typing import Any

from kbroker.handlers import RequestContext
from protocol.errors import ErrorCode, KafkaError

API_KEY = 22
MIN_VERSION = 0
MAX_VERSION = 5


async def handle(ctx: RequestContext, request: Any) -> dict[str, Any]:
    if request.transactional_id is None:
        return _result(ErrorCode.NO_ERROR, ctx.broker.producer_ids.next_id(), 0)
    try:
        producer_id, epoch = ctx.broker.transactions.init_producer(
            request.transactional_id, request.transaction_timeout_ms, request.producer_id, request.producer_epoch
        )
    except KafkaError as e:
        return _result(ctx.fenced_code(e.code, known_since=4), -1, -1)
    code = await ctx.broker.transactions.topic.wait_replicated(request.transactional_id)
    if code != ErrorCode.NO_ERROR:
        return _result(code, -1, -1)
    return _result(ErrorCode.NO_ERROR, producer_id, epoch)


def _result(code: int, producer_id: int, epoch: int) -> dict[str, Any]:
    return {"throttle_time_ms": 0, "error_code": code, "producer_id": producer_id, "producer_epoch": epoch}
