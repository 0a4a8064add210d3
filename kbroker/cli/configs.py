"""`kbroker configs`: describe and alter topic, broker and group configs, users' SCRAM
credentials (kbroker/cli/scram_users.py), and client quotas of users, client ids and users'
client ids (kbroker/cli/client_quotas.py), like kafka-configs.sh."""

from __future__ import annotations

import argparse
import re

from kbroker.cli import client_quotas, scram_users
from kbroker.cli.common import CommandError, add_bootstrap_argument, connect
from kbroker.client import Client
from kbroker.client.admin import (
    APPEND,
    BROKER_RESOURCE,
    CONFIG_SOURCES,
    DELETE,
    GROUP_RESOURCE,
    SET,
    SUBTRACT,
    TOPIC_RESOURCE,
    ConfigEntry,
)

USERS = -1  # not a config resource: users' SCRAM credentials and quotas have their own APIs
CLIENTS = -2  # client ids' quotas
ENTITY_TYPES = {"topics": TOPIC_RESOURCE, "brokers": BROKER_RESOURCE, "users": USERS, "clients": CLIENTS,
                "groups": GROUP_RESOURCE}
SCRAM_KEYS = ("SCRAM-SHA-256", "SCRAM-SHA-512")
BROKER_DEFAULT = ""  # the entity name of the cluster-wide broker defaults
# Without --all, describe shows only what was set on the entity itself.
_DYNAMIC_SOURCE = {TOPIC_RESOURCE: 1, BROKER_RESOURCE: 2, GROUP_RESOURCE: 8}
_ENTITY_WORD = {TOPIC_RESOURCE: "topic", BROKER_RESOURCE: "broker", GROUP_RESOURCE: "group"}
_DYNAMIC_DEFAULT_BROKER_SOURCE = 3
# Commas separate configs, except inside [ ] (list values such as cleanup.policy=[compact,delete]).
_OUTSIDE_BRACKETS = r"(?=[^\]]*(?:\[|$))"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_bootstrap_argument(parser, required=False)
    parser.add_argument("--zookeeper", metavar="HOST:PORT[/CHROOT]",
                        help="with --entity-type users: write SCRAM credentials to ZooKeeper directly (the first "
                             "credential of a cluster whose listeners all need SASL)")
    actions = parser.add_mutually_exclusive_group(required=True)
    actions.add_argument("--describe", action="store_true", help="show the entity's configs")
    actions.add_argument("--alter", action="store_true", help="change the entity's configs")
    parser.add_argument("--entity-type", choices=sorted(ENTITY_TYPES), action="append",
                        help="topics, brokers, users, clients or groups (users and clients together: a user's "
                             "client id)")
    parser.add_argument("--entity-name", action="append",
                        help="topic name, broker id, user name, client id or group id (one per --entity-type)")
    parser.add_argument("--entity-default", action="store_true",
                        help="the default entity: of brokers, users or clients (of those not named)")
    parser.add_argument("--topic", help="shorthand for --entity-type topics --entity-name TOPIC")
    parser.add_argument("--broker", help="shorthand for --entity-type brokers --entity-name BROKER")
    parser.add_argument("--broker-defaults", action="store_true",
                        help="shorthand for --entity-type brokers --entity-default")
    parser.add_argument("--all", action="store_true", help="describe every config, not only overrides")
    parser.add_argument("--add-config", metavar="K1=V1,K2=[V1,V2]", help="configs to set")
    parser.add_argument("--delete-config", metavar="K1,K2", help="overrides to remove")
    parser.add_argument("--append-config", metavar="K1=V1", help="values to append to list configs")
    parser.add_argument("--subtract-config", metavar="K1=V1", help="values to remove from list configs")


def run(args: argparse.Namespace) -> int:
    types, names = args.entity_type or [], args.entity_name or []
    if any(t in ("users", "clients") for t in types):
        return _run_quota_entities(args, types, names)
    if len(types) > 1 or len(names) > 1:
        raise CommandError("only users and clients may be named together (a user's client id)")
    args.entity_type, args.entity_name = (types or [None])[0], (names or [None])[0]
    resource_type, name = _entity(args)
    if args.zookeeper:
        raise CommandError("--zookeeper is only supported for --entity-type users (SCRAM credentials)")
    if not args.bootstrap_server:
        raise CommandError("--bootstrap-server is required")
    with connect(args.bootstrap_server, command_config=args.command_config) as client:
        if args.describe:
            _describe(client, resource_type, name, args.all)
        else:
            _alter(client, resource_type, name, args)
    return 0


def _run_quota_entities(args: argparse.Namespace, types: list[str], names: list[str]) -> int:
    """Users (quotas and SCRAM credentials), clients (quotas), or a user's client id (quotas)."""
    if set(types) - {"users", "clients"} or len(set(types)) != len(types):
        raise CommandError("only users and clients may be named together, each once")
    if len(names) > len(types):
        raise CommandError("more --entity-name than --entity-type")
    if args.append_config or args.subtract_config:
        raise CommandError("--append-config and --subtract-config do not apply to users and clients")
    if args.alter and not (args.add_config or args.delete_config):
        raise CommandError("--alter needs --add-config or --delete-config")
    additions = parse_config_pairs(args.add_config) if args.add_config else {}
    deletions = [key.strip() for key in (args.delete_config or "").split(",") if key.strip()]
    if set(additions) & set(deletions):
        raise CommandError("a config may be changed only once per command")
    # Each type takes the name given in its place; those without one are the default entity with
    # --entity-default, else (for --describe) every named entity of the type.
    parts: list[tuple[str, object]] = []
    for i, entity_type in enumerate(types):
        name = names[i] if i < len(names) else (None if args.entity_default else client_quotas.ANY)
        if name is client_quotas.ANY and args.alter:
            raise CommandError("--alter needs --entity-name or --entity-default")
        parts.append((client_quotas.WIRE_TYPE[entity_type], name))
    scram = [k for k in (*additions, *deletions) if k in SCRAM_KEYS]
    unknown = [k for k in (*additions, *deletions) if k not in SCRAM_KEYS and k not in client_quotas.QUOTA_KEYS]
    if unknown:
        raise CommandError(f"Invalid config(s): {','.join(unknown)}")
    users_only = types == ["users"]
    if scram and (not users_only or parts[0][1] is None):
        raise CommandError("SCRAM credentials are configs of a named user only")
    if args.zookeeper:
        if not users_only or any(k in client_quotas.QUOTA_KEYS for k in (*additions, *deletions)):
            raise CommandError("--zookeeper is only supported for users' SCRAM credentials")
        return scram_users.run(args, names[0] if names else None, additions, deletions)
    if not args.bootstrap_server:
        raise CommandError("--bootstrap-server is required")
    quota_additions = {k: v for k, v in additions.items() if k not in SCRAM_KEYS}
    quota_deletions = [k for k in deletions if k not in SCRAM_KEYS]
    if args.describe:
        with connect(args.bootstrap_server, command_config=args.command_config) as client:
            client_quotas.describe_entity(client, parts)
        if users_only:  # and the users' SCRAM credentials, as kafka-configs.sh shows them
            name = parts[0][1]
            if name is not None:
                scram_users.run(args, None if name is client_quotas.ANY else str(name), {}, [])
        return 0
    entity = tuple((t, None if n is None else str(n)) for t, n in parts)
    if quota_additions or quota_deletions:
        with connect(args.bootstrap_server, command_config=args.command_config) as client:
            client_quotas.alter_entity(client, entity, quota_additions, quota_deletions)
    if scram:
        return scram_users.run(args, str(parts[0][1]), {k: v for k, v in additions.items() if k in SCRAM_KEYS},
                               [k for k in deletions if k in SCRAM_KEYS])
    if all(n is None for _, n in parts):
        print(f"Completed updating default config for {' and '.join(types)} in the cluster.")
    else:
        print("Completed updating config for "
              + ", ".join(f"{t[:-1]} {'<default>' if n is None else n}" for t, (_, n) in zip(types, parts, strict=True))
              + ".")
    return 0


# -- entity -----------------------------------------------------------------------------------


def _entity(args: argparse.Namespace) -> tuple[int, str | None]:
    """The resource type and name (None: every entity of the type) the options designate."""
    entity_type, name = args.entity_type, args.entity_name
    shorthands = [(args.topic, "topics", args.topic), (args.broker, "brokers", args.broker),
                  (args.broker_defaults, "brokers", BROKER_DEFAULT)]
    for given, shorthand_type, shorthand_name in shorthands:
        if given:
            if entity_type and entity_type != shorthand_type:
                raise CommandError("--topic/--broker/--broker-defaults conflict with --entity-type")
            entity_type, name = shorthand_type, shorthand_name
    if entity_type is None:
        raise CommandError("--entity-type is required (topics, brokers, users or groups)")
    if args.entity_default:
        if entity_type not in ("brokers", "users", "clients"):
            raise CommandError("--entity-default is only valid with --entity-type brokers, users or clients")
        if name:
            raise CommandError("--entity-name and --entity-default are mutually exclusive")
        name = BROKER_DEFAULT
    if name is not None and entity_type == "brokers" and name != BROKER_DEFAULT and not name.isdigit():
        raise CommandError(f"the entity name for brokers must be a broker id, not {name!r}")
    if args.alter and name is None:
        raise CommandError("--alter needs --entity-name or --entity-default")
    return ENTITY_TYPES[entity_type], name


def _entities(client: Client, resource_type: int, name: str | None) -> list[str]:
    if name is not None:
        return [name]
    if resource_type == GROUP_RESOURCE:
        return [group.group_id for group in client.list_groups()]
    metadata = client.metadata(refresh=True)
    if resource_type == TOPIC_RESOURCE:
        return sorted(metadata.topics)
    return [str(b) for b in sorted(metadata.brokers)] + [BROKER_DEFAULT]


# -- describe ---------------------------------------------------------------------------------


def _describe(client: Client, resource_type: int, name: str | None, show_all: bool) -> None:
    for entity in _entities(client, resource_type, name):
        print(_heading(resource_type, entity, show_all))
        wanted = _source_shown(resource_type, entity)
        entries = client.describe_configs(resource_type, entity)
        for entry in sorted(entries, key=lambda e: e.name):
            if show_all or entry.source == wanted:
                print(f"  {entry.name}={_text(entry.value)} sensitive={str(entry.is_sensitive).lower()} "
                      f"synonyms={{{_synonyms(entry)}}}")


def _heading(resource_type: int, entity: str, show_all: bool) -> str:
    if resource_type == BROKER_RESOURCE and entity == BROKER_DEFAULT:
        return "Default configs for brokers in the cluster are:"
    return f"{'All' if show_all else 'Dynamic'} configs for {_ENTITY_WORD[resource_type]} {entity} are:"


def _source_shown(resource_type: int, entity: str) -> int:
    if resource_type == BROKER_RESOURCE and entity == BROKER_DEFAULT:
        return _DYNAMIC_DEFAULT_BROKER_SOURCE
    return _DYNAMIC_SOURCE[resource_type]


def _synonyms(entry: ConfigEntry) -> str:
    return ", ".join(f"{CONFIG_SOURCES.get(source, 'UNKNOWN')}:{name}={_text(value)}"
                     for name, value, source in entry.synonyms)


def _text(value: str | None) -> str:
    return "null" if value is None else value  # as Kafka prints a null (e.g. sensitive) value


# -- alter ------------------------------------------------------------------------------------


def _alter(client: Client, resource_type: int, name: str, args: argparse.Namespace) -> None:
    operations = _operations(args)
    if not operations:
        raise CommandError("--alter needs --add-config, --delete-config, --append-config or --subtract-config")
    deleted = [key for key, op, _ in operations if op == DELETE]
    if deleted:
        known = {entry.name for entry in client.describe_configs(resource_type, name)}
        unknown = [key for key in deleted if key not in known]
        if unknown:
            raise CommandError(f"INVALID_CONFIG: Invalid config(s): {','.join(unknown)}")
    client.incremental_alter_configs(resource_type, name, operations)
    if resource_type == BROKER_RESOURCE and name == BROKER_DEFAULT:
        print("Completed updating default config for brokers in the cluster.")
    else:
        print(f"Completed updating config for {_ENTITY_WORD[resource_type]} {name}.")


def _operations(args: argparse.Namespace) -> list[tuple[str, int, str | None]]:
    operations: list[tuple[str, int, str | None]] = []
    for option, op in ((args.add_config, SET), (args.append_config, APPEND), (args.subtract_config, SUBTRACT)):
        if option:
            operations += [(key, op, value) for key, value in parse_config_pairs(option).items()]
    if args.delete_config:
        operations += [(key.strip(), DELETE, None) for key in args.delete_config.split(",") if key.strip()]
    names = [key for key, _, _ in operations]
    if len(names) != len(set(names)):
        raise CommandError("a config may be changed only once per command")
    return operations


def parse_config_pairs(text: str) -> dict[str, str]:
    """`k1=v1,k2=[a,b]` as kafka-configs.sh reads it: brackets group a list value and are dropped."""
    pairs = {}
    for item in re.split("," + _OUTSIDE_BRACKETS, text):
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise CommandError(f"invalid config {item!r}: configs must be in the format key=value")
        value = value.strip()
        if value.startswith("[") and value.endswith("]"):
            value = value[1:-1]
        pairs[key.strip()] = value
    return pairs
