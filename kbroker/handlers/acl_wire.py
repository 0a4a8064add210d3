"""ACLs between the wire and `kbroker.security.acl`: filters and bindings of the ACL APIs."""

from __future__ import annotations

from typing import Any

from kbroker.security.acl import (
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from protocol.errors import ErrorCode, KafkaError


def _enum(enum_type: Any, code: int) -> Any:
    """An enum member; codes Kafka does not define read as UNKNOWN, as Kafka's fromCode does."""
    try:
        return enum_type(code)
    except ValueError:
        return enum_type.UNKNOWN


def binding_of(creation: Any) -> AclBinding:
    return AclBinding(
        ResourcePattern(_enum(ResourceType, creation.resource_type), creation.resource_name,
                        _enum(PatternType, creation.resource_pattern_type)),
        AccessControlEntry(creation.principal, creation.host, _enum(AclOperation, creation.operation),
                           _enum(AclPermissionType, creation.permission_type)))


def filter_of(request: Any) -> AclBindingFilter:
    """A DescribeAcls request or DeleteAcls filter; UNKNOWN elements are refused (INVALID_REQUEST)."""
    acl_filter = AclBindingFilter(
        _enum(ResourceType, request.resource_type_filter), request.resource_name_filter,
        _enum(PatternType, request.pattern_type_filter), request.principal_filter, request.host_filter,
        _enum(AclOperation, request.operation), _enum(AclPermissionType, request.permission_type))
    if acl_filter.unknown():
        raise KafkaError(ErrorCode.INVALID_REQUEST, "The filter has an UNKNOWN element")
    return acl_filter
