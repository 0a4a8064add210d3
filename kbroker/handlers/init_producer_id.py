"""InitProducerId: a producer id and epoch, for idempotent and for transactional producers.

Idempotent producers get a fresh id each time; a transactional id keeps its producer id and
gets the next epoch, which fences any older producer using the same transactional id.
"""

from __future__ import annotations

from typing import Any

from kbroker.handlers import RequestContext
from kbroker.handlers.authorize import Op, Resource, allowed, any_topic_writable, cluster_allowed
from protocol.errors import ErrorCode, KafkaError

API_KEY = 22
MIN_VERSION = 0
MAX_VERSION = 5


async def handle(ctx: RequestContext, request: Any) -> dict[str, Any]:
    # Kafka: WRITE on the transactional id; an idempotent producer needs IDEMPOTENT_WRITE on the
    # cluster or WRITE on some topic (KIP-679).
    if request.transactional_id is not None:
        if not allowed(ctx, Op.WRITE, Resource.TRANSACTIONAL_ID, request.transactional_id):
            raise KafkaError(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    elif not (cluster_allowed(ctx, Op.IDEMPOTENT_WRITE) or any_topic_writable(ctx)):
        raise KafkaError(ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
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
