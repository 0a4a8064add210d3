"""ListTransactions: transactional ids, filtered by state, producer id and (v1) duration."""

from __future__ import annotations

from typing import Any

from kbroker.clock import wall_clock_ms
from kbroker.coordinator.txn_coordinator import TxnState
from kbroker.handlers import RequestContext
from kbroker.handlers.authorize import Op, Resource, allowed
from protocol.errors import ErrorCode

API_KEY = 66
MIN_VERSION = 0
MAX_VERSION = 1

STATE_NAMES = {state.display for state in TxnState}


async def handle(ctx: RequestContext, request: Any) -> dict[str, Any]:
    states = set(request.state_filters)
    unknown = sorted(states - STATE_NAMES)
    longer_than = request.duration_filter if ctx.version >= 1 else -1
    now = wall_clock_ms()
    listed = [
        {"transactional_id": t.transactional_id, "producer_id": t.producer_id, "transaction_state": t.state.display}
        for t in ctx.broker.transactions.list(states & STATE_NAMES if states else set(), set(request.producer_id_filters))
        if longer_than < 0 or (t.state == TxnState.ONGOING and now - t.start_ms > longer_than)
        if allowed(ctx, Op.DESCRIBE, Resource.TRANSACTIONAL_ID, t.transactional_id)
    ]
    if states and not states & STATE_NAMES:
        listed = []  # only unknown states asked for: nothing matches
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NO_ERROR, "unknown_state_filters": unknown,
            "transaction_states": listed}
