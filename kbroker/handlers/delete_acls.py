"""DeleteAcls: ALTER on the cluster; every ACL each filter matches is removed, everywhere."""

from __future__ import annotations

from typing import Any

from kbroker.handlers import RequestContext
from kbroker.handlers.acl_wire import filter_of
from kbroker.handlers.authorize import Op, require_cluster
from kbroker.security.acl import AclBindingFilter, AclOperation
from protocol.errors import ErrorCode, KafkaError
from protocol.messages.delete_acls import DeleteAclsResponse

API_KEY = 31
MIN_VERSION = 0
MAX_VERSION = 3


async def handle(ctx: RequestContext, request: Any) -> DeleteAclsResponse:
    require_cluster(ctx, Op.ALTER)
    acls = ctx.broker.acls
    if acls is None:
        raise KafkaError(ErrorCode.SECURITY_DISABLED, "No Authorizer is configured.")
    filters: list[AclBindingFilter] = []
    for each in request.filters:
        try:
            filters.append(filter_of(each))
        except KafkaError:
            # Matches nothing Kafka can name: refused by the results below.
            filters.append(AclBindingFilter(operation=AclOperation.UNKNOWN))
    results = await acls.delete(filters)
    return {"throttle_time_ms": 0, "filter_results": [
        {"error_code": r.error, "error_message": r.message, "matching_acls": [
            {"error_code": ErrorCode.NO_ERROR, "error_message": None, "resource_type": b.pattern.resource_type,
             "resource_name": b.pattern.name, "pattern_type": b.pattern.pattern_type, "principal": b.entry.principal,
             "host": b.entry.host, "operation": b.entry.operation, "permission_type": b.entry.permission}
            for b in r.deleted]}
        for r in results]}
