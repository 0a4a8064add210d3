"""DescribeAcls: DESCRIBE on the cluster; the ACLs a filter matches, grouped by resource pattern."""

from __future__ import annotations

from itertools import groupby
from typing import Any

from kbroker.handlers import RequestContext
from kbroker.handlers.acl_wire import filter_of
from kbroker.handlers.authorize import Op, require_cluster
from protocol.errors import ErrorCode, KafkaError
from protocol.messages.describe_acls import DescribeAclsResponse

API_KEY = 29
MIN_VERSION = 0
MAX_VERSION = 3


async def handle(ctx: RequestContext, request: Any) -> DescribeAclsResponse:
    require_cluster(ctx, Op.DESCRIBE)
    acls = ctx.broker.acls
    if acls is None:
        return {"throttle_time_ms": 0, "error_code": ErrorCode.SECURITY_DISABLED,
                "error_message": "No Authorizer is configured on the broker", "resources": []}
    try:
        bindings = acls.authorizer.acls(filter_of(request))
    except KafkaError as e:
        return {"throttle_time_ms": 0, "error_code": e.code, "error_message": e.message, "resources": []}
    resources = [
        {"resource_type": pattern.resource_type, "resource_name": pattern.name, "pattern_type": pattern.pattern_type,
         "acls": [{"principal": b.entry.principal, "host": b.entry.host, "operation": b.entry.operation,
                   "permission_type": b.entry.permission} for b in group]}
        for pattern, group in groupby(bindings, key=lambda b: b.pattern)
    ]
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NO_ERROR, "error_message": None, "resources": resources}
