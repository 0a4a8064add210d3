"""Client quotas from the command line, through DescribeClientQuotas and AlterClientQuotas.

`kbroker configs --entity-type users|clients` (kafka-configs.sh's way; SCRAM credentials of users
go to kbroker/cli/scram_users.py) uses `describe_entity` and `alter_entity`; `kbroker
client-quotas` is a tool of its own, shaped like the kafka-client-quotas.sh of KIP-546:

    kbroker client-quotas --bootstrap-server HOST:PORT --describe [--user U | --user-default | --any-user]
        [--client-id C | --client-id-default | --any-client-id] [--strict]
    kbroker client-quotas --bootstrap-server HOST:PORT --alter (--user U | --user-default)
        [--client-id C | --client-id-default] [--add-config producer_byte_rate=1048576,...]
        [--delete-config consumer_byte_rate,...] [--validate-only]
"""

from __future__ import annotations

import argparse

from kbroker.cli.common import CommandError, add_bootstrap_argument, connect
from kbroker.client import Client
from kbroker.client.errors import check
from kbroker.client.quotas import ANY, DEFAULT, Entity

QUOTA_KEYS = ("producer_byte_rate", "consumer_byte_rate", "request_percentage", "controller_mutation_rate")
WIRE_TYPE = {"users": "user", "clients": "client-id"}


def entity_text(entity: Entity) -> str:
    """As kafka-configs.sh names an entity: `user-principal 'alice', client-id 'c1'`."""
    words = {"user": "user-principal", "client-id": "client-id"}
    return ", ".join(f"the default {words.get(t, t)}" if name is None else f"{words.get(t, t)} '{name}'"
                     for t, name in entity)


def values_text(values: dict[str, float]) -> str:
    return ",".join(f"{key}={value!r}" for key, value in sorted(values.items()))


# -- kbroker configs --entity-type users / clients ------------------------------------------------


def describe_entity(client: Client, parts: list[tuple[str, str | None | object]]) -> None:
    """kafka-configs.sh's describe of quota entities: `parts` are (wire type, name, None for the
    default, or ANY for every named entity of that type), matched strictly."""
    components = [(t, DEFAULT if name is None else name) for t, name in parts]
    for entity, values in sorted(client.describe_client_quotas(components, strict=True).items(), key=_order):
        print(f"Quota configs for {entity_text(entity)} are {values_text(values)}")


def alter_entity(client: Client, entity: Entity, additions: dict[str, str], deletions: list[str]) -> None:
    ops: dict[str, float | None] = {}
    for key, text in additions.items():
        try:
            ops[key] = float(text)
        except ValueError:
            raise CommandError(f"Invalid value {text!r} of {key}: a number is expected") from None
    for key in deletions:
        ops[key] = None
    [result] = client.alter_client_quotas([(entity, ops)])
    check(result.error_code, result.error_message)


def _order(item: tuple[Entity, dict[str, float]]) -> tuple:
    return tuple((t, "" if n is None else "\x01" + n) for t, n in item[0])


# -- kbroker client-quotas ----------------------------------------------------------------------------


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_bootstrap_argument(parser)
    actions = parser.add_mutually_exclusive_group(required=True)
    actions.add_argument("--describe", action="store_true", help="list the quotas of the entities that match")
    actions.add_argument("--alter", action="store_true", help="set or remove quotas of one entity")
    user = parser.add_mutually_exclusive_group()
    user.add_argument("--user", help="a user principal's name")
    user.add_argument("--user-default", action="store_true", help="the default user")
    user.add_argument("--any-user", action="store_true", help="with --describe: any named or default user")
    client = parser.add_mutually_exclusive_group()
    client.add_argument("--client-id", help="a client id")
    client.add_argument("--client-id-default", action="store_true", help="the default client id")
    client.add_argument("--any-client-id", action="store_true", help="with --describe: any client id")
    parser.add_argument("--strict", action="store_true",
                        help="with --describe: only entities of exactly the types named (no users' client ids "
                             "when only users are named)")
    parser.add_argument("--add-config", metavar="K1=V1,K2=V2", help=f"quotas to set ({', '.join(QUOTA_KEYS)})")
    parser.add_argument("--delete-config", metavar="K1,K2", help="quotas to remove")
    parser.add_argument("--validate-only", action="store_true", help="with --alter: check, change nothing")


def run(args: argparse.Namespace) -> int:
    from kbroker.cli.configs import parse_config_pairs

    user: object = ANY if args.any_user else (DEFAULT if args.user_default else args.user)
    client_id: object = ANY if args.any_client_id else (DEFAULT if args.client_id_default else args.client_id)
    with connect(args.bootstrap_server, command_config=args.command_config) as client:
        if args.describe:
            components = [(t, m) for t, m in (("user", user), ("client-id", client_id)) if m is not None]
            for entity, values in sorted(client.describe_client_quotas(components, args.strict).items(), key=_order):
                print(f"{_names(entity)}: {values_text(values)}")
            return 0
        if ANY in (user, client_id):
            raise CommandError("--alter names one entity: --any-user and --any-client-id are for --describe")
        entity: Entity = tuple((t, None if m is DEFAULT else str(m))
                               for t, m in (("user", user), ("client-id", client_id)) if m is not None)
        if not entity:
            raise CommandError("--alter needs --user, --user-default, --client-id or --client-id-default")
        additions = parse_config_pairs(args.add_config) if args.add_config else {}
        deletions = [k.strip() for k in (args.delete_config or "").split(",") if k.strip()]
        if not additions and not deletions:
            raise CommandError("--alter needs --add-config or --delete-config")
        if set(additions) & set(deletions):
            raise CommandError("a quota may be changed only once per command")
        ops: dict[str, float | None] = {k: None for k in deletions}
        for key, text in additions.items():
            try:
                ops[key] = float(text)
            except ValueError:
                raise CommandError(f"Invalid value {text!r} of {key}: a number is expected") from None
        [result] = client.alter_client_quotas([(entity, ops)], validate_only=args.validate_only)
        check(result.error_code, result.error_message)
        print(f"{'Validated' if args.validate_only else 'Altered'} the quotas of {_names(entity)}.")
    return 0


def _names(entity: Entity) -> str:
    return ", ".join(f"{t}={'<default>' if n is None else n}" for t, n in entity)
