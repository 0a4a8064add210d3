"""EndTxn: commit or abort a transaction (markers go to every partition in it)."""

from __future__ import annotations

from typing import Any

from kbroker.handlers import RequestContext
from kbroker.handlers.authorize import Op, Resource, allowed
from protocol.errors import ErrorCode, KafkaError

API_KEY = 26
MIN_VERSION = 0
MAX_VERSION = 4  # v5 (KIP-890 part 2) is unstable in Kafka 3.9


async def handle(ctx: RequestContext, request: Any) -> dict[str, Any]:
    if not allowed(ctx, Op.WRITE, Resource.TRANSACTIONAL_ID, request.transactional_id):
        raise KafkaError(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    try:
        ctx.broker.transactions.end_transaction(
            request.transactional_id, request.producer_id, request.producer_epoch, request.committed
        )
    except KafkaError as e:
        return {"throttle_time_ms": 0, "error_code": ctx.fenced_code(e.code, known_since=2)}
    # The outcome is acknowledged once __transaction_state has it on every in-sync replica.
    code = await ctx.broker.transactions.topic.wait_replicated(request.transactional_id)
    return {"throttle_time_ms": 0, "error_code": code}
