"""The ACL checks of the handlers: each handler asks what Kafka's KafkaApis asks, here.

Without an authorizer (`authorizer.class.name` unset) everything is allowed, as in Kafka.
"""

from __future__ import annotations

from collections.abc import Iterable

from kbroker.handlers import RequestContext
from kbroker.security.acl import CLUSTER_NAME, SUPPORTED_OPERATIONS, AclOperation, Authorizer, ResourceType
from protocol.errors import ErrorCode, KafkaError

Op = AclOperation
Resource = ResourceType
# What a client gets when it did not ask for authorized operations (Integer.MIN_VALUE).
NOT_REQUESTED = -2147483648


def authorizer(ctx: RequestContext) -> Authorizer | None:
    acls = ctx.broker.acls
    return acls.authorizer if acls is not None else None


def allowed(ctx: RequestContext, operation: AclOperation, resource_type: ResourceType, name: str) -> bool:
    auth = authorizer(ctx)
    return auth is None or auth.authorize(ctx.principal, ctx.host, operation, resource_type, name)


def allowed_names(ctx: RequestContext, operation: AclOperation, resource_type: ResourceType,
                  names: Iterable[str]) -> set[str]:
    """The names among `names` the caller may do `operation` on (Kafka's filterByAuthorized)."""
    return {n for n in set(names) if allowed(ctx, operation, resource_type, n)}


def cluster_allowed(ctx: RequestContext, operation: AclOperation) -> bool:
    return allowed(ctx, operation, ResourceType.CLUSTER, CLUSTER_NAME)


def require_cluster(ctx: RequestContext, operation: AclOperation) -> None:
    """Kafka's authorizeClusterOperation: the whole request fails with CLUSTER_AUTHORIZATION_FAILED."""
    if not cluster_allowed(ctx, operation):
        raise KafkaError(ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                         f"Request requires {operation.name} on the cluster, which {ctx.principal} lacks")


def any_topic_writable(ctx: RequestContext) -> bool:
    auth = authorizer(ctx)
    return auth is None or auth.authorize_by_resource_type(ctx.principal, ctx.host, Op.WRITE, ResourceType.TOPIC)


def operations(ctx: RequestContext, resource_type: ResourceType, name: str) -> int:
    """The authorized-operations bitfield of a resource for the caller: every supported
    operation without an authorizer."""
    auth = authorizer(ctx)
    if auth is None:
        return sum(1 << op for op in SUPPORTED_OPERATIONS[resource_type])
    return auth.authorized_operations(ctx.principal, ctx.host, resource_type, name)
