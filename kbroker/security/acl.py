"""ACLs and the authorizer, with Kafka's semantics (StandardAuthorizer / AclAuthorizer).

An ACL binds a resource pattern (resource type, name, LITERAL or PREFIXED) to an entry (principal,
host, operation, ALLOW or DENY). A request is authorized as Kafka's StandardAuthorizerData does:

- a super user (`super.users`) may do anything;
- the ACLs that apply are those of the resource's type whose pattern matches its name (LITERAL
  equal to it, LITERAL `*`, or PREFIXED a prefix of it), whose principal is the caller's or
  `User:*`, whose host is the caller's address or `*`, and whose operation is the one asked, ALL,
  or — for ALLOW entries only — one that implies it (READ, WRITE, DELETE and ALTER imply
  DESCRIBE; ALTER_CONFIGS implies DESCRIBE_CONFIGS);
- a DENY that applies wins over any ALLOW; else an ALLOW that applies allows;
- when no ACL at all exists for the resource (whatever principal, host or operation),
  `allow.everyone.if.no.acl.found` decides (false by default); otherwise it is denied.

Codes of the enums are Kafka's (org.apache.kafka.common.acl / resource), as on the wire.
"""

from __future__ import annotations

import enum
import re
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

WILDCARD = "*"
WILDCARD_PRINCIPAL = "User:*"
CLUSTER_NAME = "kafka-cluster"


class ResourceType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class AclOperation(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


class AclPermissionType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


_OP = AclOperation
# Kafka's AclEntry.supportedOperations: what an authorized-operations bitfield may hold.
SUPPORTED_OPERATIONS: dict[ResourceType, tuple[AclOperation, ...]] = {
    ResourceType.TOPIC: (_OP.READ, _OP.WRITE, _OP.CREATE, _OP.DESCRIBE, _OP.DELETE, _OP.ALTER, _OP.DESCRIBE_CONFIGS,
                         _OP.ALTER_CONFIGS),
    ResourceType.GROUP: (_OP.READ, _OP.DESCRIBE, _OP.DELETE),
    ResourceType.CLUSTER: (_OP.CREATE, _OP.CLUSTER_ACTION, _OP.DESCRIBE_CONFIGS, _OP.ALTER_CONFIGS,
                           _OP.IDEMPOTENT_WRITE, _OP.ALTER, _OP.DESCRIBE),
    ResourceType.TRANSACTIONAL_ID: (_OP.DESCRIBE, _OP.WRITE),
    ResourceType.DELEGATION_TOKEN: (_OP.DESCRIBE,),
    ResourceType.USER: (_OP.CREATE_TOKENS, _OP.DESCRIBE_TOKENS),
}
# ALLOW entries of these operations also allow DESCRIBE / DESCRIBE_CONFIGS (never DENY entries).
_IMPLIES_DESCRIBE = frozenset({_OP.DESCRIBE, _OP.READ, _OP.WRITE, _OP.DELETE, _OP.ALTER})
_IMPLIES_DESCRIBE_CONFIGS = frozenset({_OP.DESCRIBE_CONFIGS, _OP.ALTER_CONFIGS})


def _camel(name: str) -> str:
    return "".join(part.capitalize() for part in name.split("_"))


def _from_camel(text: str, enum_type: type[enum.IntEnum]) -> enum.IntEnum:
    """Kafka's names in ZooKeeper and tools ("TransactionalId", "ClusterAction", "Allow"), any case."""
    wanted = text.replace("_", "").replace("-", "").lower()
    for member in enum_type:
        if member.name.replace("_", "").lower() == wanted:
            return member
    raise ValueError(f"unknown {enum_type.__name__} {text!r}")


def resource_type_name(resource_type: ResourceType) -> str:
    return _camel(resource_type.name)


def operation_name(operation: AclOperation) -> str:
    return _camel(operation.name)


def permission_name(permission: AclPermissionType) -> str:
    return _camel(permission.name)


def parse_resource_type(text: str) -> ResourceType:
    return ResourceType(_from_camel(text, ResourceType))


def parse_operation(text: str) -> AclOperation:
    return AclOperation(_from_camel(text, AclOperation))


def parse_permission(text: str) -> AclPermissionType:
    return AclPermissionType(_from_camel(text, AclPermissionType))


def parse_pattern_type(text: str) -> PatternType:
    return PatternType(_from_camel(text, PatternType))


@dataclass(frozen=True, slots=True, order=True)
class ResourcePattern:
    resource_type: ResourceType
    name: str
    pattern_type: PatternType = PatternType.LITERAL

    def __str__(self) -> str:
        return f"{resource_type_name(self.resource_type)}:{self.pattern_type.name}:{self.name}"


@dataclass(frozen=True, slots=True, order=True)
class AccessControlEntry:
    principal: str  # "User:alice", "User:*"
    host: str  # an address or "*"
    operation: AclOperation
    permission: AclPermissionType


@dataclass(frozen=True, slots=True, order=True)
class AclBinding:
    pattern: ResourcePattern
    entry: AccessControlEntry


@dataclass(frozen=True, slots=True)
class AclBindingFilter:
    """Kafka's AclBindingFilter: None matches any name / principal / host; ANY matches any type,
    pattern type, operation or permission; MATCH matches the patterns that apply to `name`."""

    resource_type: ResourceType = ResourceType.ANY
    name: str | None = None
    pattern_type: PatternType = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: AclOperation = AclOperation.ANY
    permission: AclPermissionType = AclPermissionType.ANY

    def matches_pattern(self, pattern: ResourcePattern) -> bool:
        if self.resource_type != ResourceType.ANY and self.resource_type != pattern.resource_type:
            return False
        if self.pattern_type not in (PatternType.ANY, PatternType.MATCH) and self.pattern_type != pattern.pattern_type:
            return False
        if self.name is None:
            return True
        if self.pattern_type in (PatternType.ANY, pattern.pattern_type):
            return self.name == pattern.name
        if pattern.pattern_type == PatternType.LITERAL:  # MATCH
            return self.name == pattern.name or pattern.name == WILDCARD
        return self.name.startswith(pattern.name)

    def matches_entry(self, entry: AccessControlEntry) -> bool:
        return ((self.principal is None or self.principal == entry.principal)
                and (self.host is None or self.host == entry.host)
                and self.operation in (AclOperation.ANY, entry.operation)
                and self.permission in (AclPermissionType.ANY, entry.permission))

    def matches(self, binding: AclBinding) -> bool:
        return self.matches_pattern(binding.pattern) and self.matches_entry(binding.entry)

    def unknown(self) -> bool:
        """A filter with an UNKNOWN element matches nothing Kafka can name: refused."""
        return (self.resource_type == ResourceType.UNKNOWN or self.pattern_type == PatternType.UNKNOWN
                or self.operation == AclOperation.UNKNOWN or self.permission == AclPermissionType.UNKNOWN)


class InvalidAcl(ValueError):
    """An ACL that cannot be created (Kafka's InvalidRequestException)."""


_PRINCIPAL = re.compile(r"[^:]+:.*", re.DOTALL)


def validate_new_binding(binding: AclBinding) -> None:
    """Kafka's checks of an ACL to create (AclControlManager.validateNewAcl, AclApis)."""
    pattern, entry = binding.pattern, binding.entry
    if pattern.resource_type in (ResourceType.UNKNOWN, ResourceType.ANY):
        raise InvalidAcl(f"Invalid resourceType {pattern.resource_type.name}")
    if pattern.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
        raise InvalidAcl(f"Invalid patternType {pattern.pattern_type.name}")
    if entry.operation in (AclOperation.UNKNOWN, AclOperation.ANY):
        raise InvalidAcl(f"Invalid operation {entry.operation.name}")
    if entry.permission not in (AclPermissionType.ALLOW, AclPermissionType.DENY):
        raise InvalidAcl(f"Invalid permissionType {entry.permission.name}")
    if not pattern.name:
        raise InvalidAcl("Resource name should not be empty")
    if pattern.resource_type == ResourceType.CLUSTER and pattern.name != CLUSTER_NAME:
        raise InvalidAcl(f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}")
    if not _PRINCIPAL.fullmatch(entry.principal):
        raise InvalidAcl(f"Could not parse principal from `{entry.principal}` (no colon is present separating the "
                         "principal type from the principal name)")
    if not entry.host:
        raise InvalidAcl("Invalid empty host")


def parse_super_users(text: str | None) -> frozenset[str]:
    """`super.users`: principals separated by semicolons (User:alice;User:CN=broker,O=Example)."""
    if not text:
        return frozenset()
    return frozenset(p.strip() for p in text.split(";") if p.strip())


AclTable = Mapping[ResourcePattern, frozenset[AccessControlEntry]]


class Authorizer:
    """The ACLs in force on this broker and the decisions taken from them.

    Updates replace one resource's entries (`set_acls`) or all (`replace_all`); decisions read a
    snapshot, so a reader never sees half of a change. Until the ACLs are first loaded every
    caller except a super user is denied (Kafka's AuthorizerNotReadyException)."""

    def __init__(self, super_users: frozenset[str] = frozenset(), allow_everyone_if_no_acl_found: bool = False) -> None:
        self.super_users = super_users
        self.allow_everyone_if_no_acl_found = allow_everyone_if_no_acl_found
        self._acls: dict[ResourcePattern, frozenset[AccessControlEntry]] = {}
        self._prefixed: dict[ResourceType, tuple[ResourcePattern, ...]] = {}
        self._lock = threading.Lock()  # updates may come from the store's thread
        self.loaded = False

    # -- the ACLs -------------------------------------------------------------------------------

    def replace_all(self, table: AclTable) -> None:
        with self._lock:
            self._acls = {p: frozenset(e) for p, e in table.items() if e}
            self._reindex()
            self.loaded = True

    def set_acls(self, pattern: ResourcePattern, entries: Iterable[AccessControlEntry]) -> None:
        with self._lock:
            acls = dict(self._acls)
            found = frozenset(entries)
            if found:
                acls[pattern] = found
            else:
                acls.pop(pattern, None)
            self._acls = acls
            self._reindex()

    def _reindex(self) -> None:
        prefixed: dict[ResourceType, list[ResourcePattern]] = {}
        for pattern in self._acls:
            if pattern.pattern_type == PatternType.PREFIXED:
                prefixed.setdefault(pattern.resource_type, []).append(pattern)
        self._prefixed = {t: tuple(ps) for t, ps in prefixed.items()}

    def acls(self, acl_filter: AclBindingFilter) -> list[AclBinding]:
        """The bindings a DescribeAcls / DeleteAcls filter matches, in a stable order."""
        acls = self._acls
        return sorted(AclBinding(p, e) for p, entries in acls.items() if acl_filter.matches_pattern(p)
                      for e in entries if acl_filter.matches_entry(e))

    def entries_of(self, pattern: ResourcePattern) -> frozenset[AccessControlEntry]:
        return self._acls.get(pattern, frozenset())

    def count(self) -> int:
        return sum(len(e) for e in self._acls.values())

    # -- decisions ------------------------------------------------------------------------------

    def authorize(self, principal: str, host: str, operation: AclOperation, resource_type: ResourceType,
                  name: str) -> bool:
        if principal in self.super_users:
            return True
        if not self.loaded:
            return False
        acls, prefixed = self._acls, self._prefixed
        candidates = [ResourcePattern(resource_type, name, PatternType.LITERAL),
                      ResourcePattern(resource_type, WILDCARD, PatternType.LITERAL)]
        candidates += [p for p in prefixed.get(resource_type, ()) if name.startswith(p.name)]
        found_any = allowed = False
        for pattern in candidates:
            entries = acls.get(pattern)
            if not entries:
                continue
            found_any = True
            for entry in entries:
                result = _applies(entry, principal, host, operation)
                if result is AclPermissionType.DENY:
                    return False
                if result is AclPermissionType.ALLOW:
                    allowed = True
        if allowed:
            return True
        return not found_any and self.allow_everyone_if_no_acl_found

    def authorize_by_resource_type(self, principal: str, host: str, operation: AclOperation,
                                   resource_type: ResourceType) -> bool:
        """Whether the caller may do `operation` on at least one resource of the type (Kafka's
        Authorizer.authorizeByResourceType, which InitProducerId uses for KIP-679)."""
        if self.authorize(principal, host, operation, resource_type, "hardcode"):
            return True
        deny_literal: set[str] = set()
        deny_prefixed: set[str] = set()
        allow: list[ResourcePattern] = []
        for pattern, entries in self._acls.items():
            if pattern.resource_type != resource_type:
                continue
            for entry in entries:
                if entry.host not in (host, WILDCARD) or entry.principal not in (principal, WILDCARD_PRINCIPAL):
                    continue
                if entry.operation not in (operation, AclOperation.ALL):
                    continue
                if entry.permission == AclPermissionType.DENY:
                    if pattern.pattern_type == PatternType.LITERAL and pattern.name == WILDCARD:
                        return False
                    (deny_literal if pattern.pattern_type == PatternType.LITERAL else deny_prefixed).add(pattern.name)
                elif entry.permission == AclPermissionType.ALLOW:
                    allow.append(pattern)
        if any(p.pattern_type == PatternType.LITERAL and p.name == WILDCARD for p in allow):
            return True
        for pattern in allow:
            if pattern.pattern_type == PatternType.LITERAL and pattern.name in deny_literal:
                continue
            if not any(pattern.name[:i] in deny_prefixed for i in range(1, len(pattern.name) + 1)):
                return True
        return False

    def authorized_operations(self, principal: str, host: str, resource_type: ResourceType, name: str) -> int:
        """The bitfield of the resource type's operations the caller may do (Kafka's
        AuthHelper.authorizedOperations)."""
        return sum(1 << op for op in SUPPORTED_OPERATIONS.get(resource_type, ())
                   if self.authorize(principal, host, op, resource_type, name))


def _applies(entry: AccessControlEntry, principal: str, host: str, operation: AclOperation) -> AclPermissionType | None:
    """ALLOW or DENY when the entry applies to the caller and the operation, else None."""
    if entry.principal != principal and entry.principal != WILDCARD_PRINCIPAL:
        return None
    if entry.host != WILDCARD and entry.host != host:
        return None
    if entry.operation != AclOperation.ALL and entry.operation != operation:
        if entry.permission != AclPermissionType.ALLOW:
            return None
        if operation == AclOperation.DESCRIBE:
            if entry.operation not in _IMPLIES_DESCRIBE:
                return None
        elif operation == AclOperation.DESCRIBE_CONFIGS:
            if entry.operation not in _IMPLIES_DESCRIBE_CONFIGS:
                return None
        else:
            return None
    return entry.permission if entry.permission in (AclPermissionType.ALLOW, AclPermissionType.DENY) else None
