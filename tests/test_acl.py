"""The authorizer's decisions, rule by rule, as Kafka's StandardAuthorizerData makes them."""

from __future__ import annotations

from kbroker.security.acl import (
    AccessControlEntry,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    Authorizer,
    PatternType,
    ResourcePattern,
    ResourceType,
)

Op, Allow, Deny = AclOperation, AclPermissionType.ALLOW, AclPermissionType.DENY
TOPIC, LITERAL, PREFIXED = ResourceType.TOPIC, PatternType.LITERAL, PatternType.PREFIXED


def _authorizer(*acls: tuple[str, PatternType, str, str, AclOperation, AclPermissionType], **kw: object) -> Authorizer:
    authorizer = Authorizer(**kw)  # type: ignore[arg-type]
    table: dict[ResourcePattern, set[AccessControlEntry]] = {}
    for name, pattern, principal, host, op, permission in acls:
        table.setdefault(ResourcePattern(TOPIC, name, pattern), set()).add(
            AccessControlEntry(principal, host, op, permission))
    authorizer.replace_all({p: frozenset(e) for p, e in table.items()})
    return authorizer


def _may(authorizer: Authorizer, op: AclOperation, name: str = "orders", principal: str = "User:alice",
         host: str = "10.0.0.1") -> bool:
    return authorizer.authorize(principal, host, op, TOPIC, name)


def test_allow_implies_describe_but_deny_implies_nothing() -> None:
    auth = _authorizer(("orders", LITERAL, "User:alice", "*", Op.WRITE, Allow))
    assert _may(auth, Op.WRITE) and _may(auth, Op.DESCRIBE)
    assert not _may(auth, Op.READ) and not _may(auth, Op.DESCRIBE_CONFIGS)
    auth = _authorizer(("orders", LITERAL, "User:alice", "*", Op.ALL, Allow),
                       ("orders", LITERAL, "User:alice", "*", Op.READ, Deny))
    assert not _may(auth, Op.READ) and _may(auth, Op.DESCRIBE) and _may(auth, Op.WRITE)


def test_alter_configs_implies_describe_configs() -> None:
    auth = _authorizer(("orders", LITERAL, "User:alice", "*", Op.ALTER_CONFIGS, Allow))
    assert _may(auth, Op.DESCRIBE_CONFIGS) and not _may(auth, Op.DESCRIBE)


def test_deny_beats_allow_across_patterns_and_wildcards() -> None:
    auth = _authorizer(("ord", PREFIXED, "User:alice", "*", Op.READ, Allow),
                       ("*", LITERAL, "User:*", "*", Op.READ, Deny))
    assert not _may(auth, Op.READ)


def test_prefixed_literal_and_wildcard_patterns() -> None:
    auth = _authorizer(("pre-", PREFIXED, "User:alice", "*", Op.READ, Allow),
                       ("exact", LITERAL, "User:alice", "*", Op.READ, Allow))
    assert _may(auth, Op.READ, "pre-x") and _may(auth, Op.READ, "pre-") and not _may(auth, Op.READ, "pr")
    assert _may(auth, Op.READ, "exact") and not _may(auth, Op.READ, "exactly")
    wildcard = _authorizer(("*", LITERAL, "User:alice", "*", Op.READ, Allow))
    assert _may(wildcard, Op.READ, "anything")


def test_host_and_principal_matching() -> None:
    auth = _authorizer(("orders", LITERAL, "User:alice", "10.0.0.1", Op.READ, Allow),
                       ("orders", LITERAL, "User:*", "*", Op.WRITE, Allow))
    assert _may(auth, Op.READ) and not _may(auth, Op.READ, host="10.0.0.2")
    assert not _may(auth, Op.READ, principal="User:bob")
    assert _may(auth, Op.WRITE, principal="User:bob", host="10.9.9.9")


def test_super_users_and_allow_everyone_if_no_acl_found() -> None:
    auth = _authorizer(("orders", LITERAL, "User:alice", "*", Op.ALL, Deny),
                       super_users=frozenset({"User:alice"}))
    assert _may(auth, Op.DELETE)
    open_auth = _authorizer(("guarded", LITERAL, "User:bob", "*", Op.READ, Allow),
                            allow_everyone_if_no_acl_found=True)
    assert _may(open_auth, Op.READ, "unguarded")  # no ACL at all on it
    assert not _may(open_auth, Op.WRITE, "guarded")  # it has ACLs, none for this


def test_nothing_is_allowed_before_the_acls_are_loaded() -> None:
    auth = Authorizer(super_users=frozenset({"User:admin"}), allow_everyone_if_no_acl_found=True)
    assert not _may(auth, Op.READ)
    assert _may(auth, Op.READ, principal="User:admin")


def test_by_resource_type_as_kip_679() -> None:
    assert _authorizer(("pre-", PREFIXED, "User:alice", "*", Op.WRITE, Allow)).authorize_by_resource_type(
        "User:alice", "10.0.0.1", Op.WRITE, TOPIC)
    denied = _authorizer(("pre-", PREFIXED, "User:alice", "*", Op.WRITE, Allow),
                         ("pre", PREFIXED, "User:alice", "*", Op.WRITE, Deny))
    assert not denied.authorize_by_resource_type("User:alice", "10.0.0.1", Op.WRITE, TOPIC)
    assert not _authorizer().authorize_by_resource_type("User:alice", "10.0.0.1", Op.WRITE, TOPIC)


def test_filters_match_as_kafka_match_and_any() -> None:
    auth = _authorizer(("pre-", PREFIXED, "User:alice", "*", Op.READ, Allow),
                       ("pre-x", LITERAL, "User:bob", "*", Op.WRITE, Allow),
                       ("*", LITERAL, "User:carol", "*", Op.READ, Allow),
                       ("other", LITERAL, "User:dan", "*", Op.READ, Allow))
    match = auth.acls(AclBindingFilter(TOPIC, "pre-x", PatternType.MATCH))
    assert {b.entry.principal for b in match} == {"User:alice", "User:bob", "User:carol"}
    literal = auth.acls(AclBindingFilter(TOPIC, "pre-x", PatternType.ANY))
    assert {b.entry.principal for b in literal} == {"User:bob"}
    assert len(auth.acls(AclBindingFilter())) == 4
    assert [b.entry.principal for b in auth.acls(AclBindingFilter(principal="User:dan"))] == ["User:dan"]
