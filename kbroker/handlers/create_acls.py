"""CreateAcls: ALTER on the cluster; each ACL checked as Kafka checks it, stored in the metadata
store and applied by every broker (kbroker/cluster/acls.py)."""

from __future__ import annotations

from typing import Any

from kbroker.handlers import RequestContext
from kbroker.handlers.acl_wire import binding_of
from kbroker.handlers.authorize import Op, require_cluster
from protocol.errors import ErrorCode, KafkaError
from protocol.messages.create_acls import CreateAclsResponse

API_KEY = 30
MIN_VERSION = 0
MAX_VERSION = 3


async def handle(ctx: RequestContext, request: Any) -> CreateAclsResponse:
    require_cluster(ctx, Op.ALTER)
    acls = ctx.broker.acls
    if acls is None:
        raise KafkaError(ErrorCode.SECURITY_DISABLED, "No Authorizer is configured.")
    if ctx.version == 0 and any(c.resource_pattern_type != 3 for c in request.creations):
        raise KafkaError(ErrorCode.UNSUPPORTED_VERSION, "Version 0 only supports literal resource pattern types")
    results = await acls.create([binding_of(c) for c in request.creations])
    return {"throttle_time_ms": 0,
            "results": [{"error_code": r.error, "error_message": r.message} for r in results]}
