"""`kbroker acls`: add, remove and list ACLs, with kafka-acls.sh's options and output."""

from __future__ import annotations

import argparse
from typing import Any

from kbroker.cli.common import CommandError, add_bootstrap_argument, connect
from kbroker.security.acl import (
    CLUSTER_NAME,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
    parse_operation,
    parse_pattern_type,
)

Op = AclOperation


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_bootstrap_argument(parser)
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--add", action="store_true", help="add the ACLs described")
    action.add_argument("--remove", action="store_true", help="remove the ACLs described")
    action.add_argument("--list", action="store_true", help="list the ACLs of the resources given (all without)")
    parser.add_argument("--allow-principal", action="append", default=[], help="principal allowed, User:<name>")
    parser.add_argument("--deny-principal", action="append", default=[], help="principal denied, User:<name>")
    parser.add_argument("--allow-host", action="append", default=[], help="host allowed (default *)")
    parser.add_argument("--deny-host", action="append", default=[], help="host denied (default *)")
    parser.add_argument("--principal", action="append", default=[], help="with --list: only this principal's ACLs")
    parser.add_argument("--operation", action="append", default=[],
                        help="Read, Write, Create, Delete, Alter, Describe, ClusterAction, DescribeConfigs, "
                             "AlterConfigs, IdempotentWrite, All")
    parser.add_argument("--topic", action="append", default=[], help="a topic (* for all)")
    parser.add_argument("--group", action="append", default=[], help="a consumer group (* for all)")
    parser.add_argument("--transactional-id", action="append", default=[], help="a transactional id (* for all)")
    parser.add_argument("--cluster", action="store_true", help="the cluster")
    parser.add_argument("--resource-pattern-type", default=None,
                        help="literal, prefixed (for --add/--remove; default literal), any or match (--list/--remove)")
    parser.add_argument("--producer", action="store_true",
                        help="producer ACLs: WRITE, DESCRIBE, CREATE on --topic (and WRITE, DESCRIBE on "
                             "--transactional-id; IDEMPOTENT_WRITE on the cluster with --idempotent)")
    parser.add_argument("--idempotent", action="store_true", help="with --producer")
    parser.add_argument("--consumer", action="store_true",
                        help="consumer ACLs: READ, DESCRIBE on --topic and READ on --group")
    parser.add_argument("--force", action="store_true", help="remove without asking")


def run(args: argparse.Namespace) -> int:
    pattern_type = _pattern_type(args)
    resources = _resources(args, pattern_type)
    with connect(args.bootstrap_server, command_config=args.command_config) as client:
        if args.list:
            return _list(client, resources, args.principal)
        bindings = _bindings(args, resources)
        if not bindings:
            raise CommandError("You must specify one of: --allow-principal, --deny-principal when trying to add "
                               "or remove ACLs.")
        if args.add:
            for resource, entries in _by_resource(bindings).items():
                print(f"Adding ACLs for resource `{_resource_text(resource)}`: \n "
                      + "\n ".join(_entry_text(e) for e in entries) + " \n")
            errors = [e for e in client.create_acls([_creation(r, e) for r, e in bindings]) if e is not None]
            if errors:
                raise CommandError(f"Error while adding ACLs: {errors[0]}")
        else:
            if not args.force and input("Are you sure you want to remove ACLs? (y/n)\n").strip().lower() != "y":
                return 0
            for result in client.delete_acls([_filter(r, e) for r, e in bindings]):
                if result.error_code:
                    raise CommandError(f"Error while removing ACLs: {result.error_message or result.error_code}")
        return _list(client, [r for r in resources], [])


def _pattern_type(args: argparse.Namespace) -> PatternType:
    if args.resource_pattern_type is None:
        return PatternType.ANY if args.list else PatternType.LITERAL
    try:
        pattern_type = parse_pattern_type(args.resource_pattern_type)
    except ValueError:
        raise CommandError(f"Invalid --resource-pattern-type {args.resource_pattern_type}") from None
    if args.add and pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
        raise CommandError("A '--resource-pattern-type' value of 'literal' or 'prefixed' is required with --add")
    return pattern_type


Resource = tuple[ResourceType, str, PatternType]
Entry = tuple[str, str, AclOperation, AclPermissionType]


def _resources(args: argparse.Namespace, pattern_type: PatternType) -> list[Resource]:
    resources = [(ResourceType.TOPIC, t, pattern_type) for t in args.topic]
    resources += [(ResourceType.GROUP, g, pattern_type) for g in args.group]
    resources += [(ResourceType.TRANSACTIONAL_ID, t, pattern_type) for t in args.transactional_id]
    if args.cluster or (args.producer and args.idempotent):
        resources.append((ResourceType.CLUSTER, CLUSTER_NAME, PatternType.LITERAL))
    return resources


def _operations_for(args: argparse.Namespace, resource_type: ResourceType) -> list[AclOperation]:
    """kafka-acls.sh's conveniences, else --operation."""
    if args.producer or args.consumer:
        ops: list[AclOperation] = []
        if args.producer:
            ops += {ResourceType.TOPIC: [Op.WRITE, Op.DESCRIBE, Op.CREATE],
                    ResourceType.TRANSACTIONAL_ID: [Op.WRITE, Op.DESCRIBE],
                    ResourceType.CLUSTER: [Op.IDEMPOTENT_WRITE] if args.idempotent else []}.get(resource_type, [])
        if args.consumer:
            ops += {ResourceType.TOPIC: [Op.READ, Op.DESCRIBE], ResourceType.GROUP: [Op.READ]}.get(resource_type, [])
        return list(dict.fromkeys(ops))
    try:
        return [parse_operation(o) for o in args.operation] or [Op.ALL]
    except ValueError as e:
        raise CommandError(str(e)) from None


def _bindings(args: argparse.Namespace, resources: list[Resource]) -> list[tuple[Resource, Entry]]:
    entries: list[tuple[str, str, AclPermissionType]] = []
    for principals, hosts, permission in ((args.allow_principal, args.allow_host, AclPermissionType.ALLOW),
                                          (args.deny_principal, args.deny_host, AclPermissionType.DENY)):
        entries += [(p, h, permission) for p in principals for h in (hosts or ["*"])]
    if not resources:
        raise CommandError("You must provide at least one resource: --topic <topic> or --cluster or "
                           "--group <group> or --transactional-id <id>")
    return [(r, (p, h, op, perm)) for r in resources for op in _operations_for(args, r[0]) for p, h, perm in entries]


def _by_resource(bindings: list[tuple[Resource, Entry]]) -> dict[Resource, list[Entry]]:
    grouped: dict[Resource, list[Entry]] = {}
    for resource, entry in bindings:
        grouped.setdefault(resource, []).append(entry)
    return grouped


def _creation(resource: Resource, entry: Entry) -> dict[str, Any]:
    return {"resource_type": resource[0], "resource_name": resource[1], "resource_pattern_type": resource[2],
            "principal": entry[0], "host": entry[1], "operation": entry[2], "permission_type": entry[3]}


def _filter(resource: Resource, entry: Entry | None) -> dict[str, Any]:
    principal, host, operation, permission = entry or (None, None, Op.ANY, AclPermissionType.ANY)
    return {"resource_type_filter": resource[0], "resource_name_filter": resource[1],
            "pattern_type_filter": resource[2], "principal_filter": principal, "host_filter": host,
            "operation": operation, "permission_type": permission}


def _list(client: Any, resources: list[Resource], principals: list[str]) -> int:
    filters = [_filter(r, None) for r in resources] or [_filter((ResourceType.ANY, None, PatternType.ANY), None)]  # type: ignore[arg-type]
    found: dict[Resource, list[Entry]] = {}
    for acl_filter in filters:
        for each in client.describe_acls(acl_filter):
            resource = (ResourceType(each.resource_type), each.resource_name, PatternType(each.pattern_type))
            entries = found.setdefault(resource, [])
            entries += [(a.principal, a.host, AclOperation(a.operation), AclPermissionType(a.permission_type))
                        for a in each.acls if not principals or a.principal in principals]
    for resource, entries in found.items():
        if entries:
            print(f"Current ACLs for resource `{_resource_text(resource)}`: \n "
                  + "\n ".join(_entry_text(e) for e in entries) + " \n")
    return 0


def _resource_text(resource: Resource) -> str:
    return f"ResourcePattern(resourceType={resource[0].name}, name={resource[1]}, patternType={resource[2].name})"


def _entry_text(entry: Entry) -> str:
    return f"\t(principal={entry[0]}, host={entry[1]}, operation={entry[2].name}, permissionType={entry[3].name})"
