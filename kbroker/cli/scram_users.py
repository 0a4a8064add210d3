"""`kbroker configs --entity-type users`: users' SCRAM credentials, as kafka-configs.sh manages them.

    kbroker configs --bootstrap-server HOST:PORT [--command-config client.properties] \\
        --entity-type users --entity-name alice --alter \\
        --add-config 'SCRAM-SHA-256=[iterations=8192,password=alice-secret],SCRAM-SHA-512=[password=alice-secret]'
    kbroker configs ... --entity-type users --entity-name alice --alter --delete-config SCRAM-SHA-512
    kbroker configs ... --entity-type users [--entity-name alice] --describe

Through a broker, with AlterUserScramCredentials: the password is salted and derived (PBKDF2)
here, and only the salt and derived key are sent. With `--zookeeper HOST:PORT[/chroot]` instead of
`--bootstrap-server`, the credential is written to ZooKeeper directly, as Kafka's
`kafka-configs.sh --zookeeper` does: the way to create the first credential of a cluster whose
listeners all need SASL (the brokers need not run; running ones pick it up at once).
"""

from __future__ import annotations

import argparse

from kbroker.cli.common import CommandError, connect
from kbroker.client import Client
from kbroker.client.errors import check
from kbroker.security.scram import (
    BY_WIRE_TYPE,
    DEFAULT_ITERATIONS,
    MAX_ITERATIONS,
    MECHANISMS,
    MIN_ITERATIONS,
    ScramCredential,
    ScramMechanism,
    new_salt,
    scram_credentials,
)
from protocol.errors import ErrorCode

DESCRIBE_USER_SCRAM_CREDENTIALS = 50
ALTER_USER_SCRAM_CREDENTIALS = 51


def run(args: argparse.Namespace, name: str | None, additions: dict[str, str], deletions: list[str]) -> int:
    if args.zookeeper:
        return _run_on_zookeeper(args, name, additions, deletions)
    if not args.bootstrap_server:
        raise CommandError("--bootstrap-server (or, for users, --zookeeper) is required")
    with connect(args.bootstrap_server, command_config=args.command_config) as client:
        if args.describe:
            _print_descriptions(_describe(client, name))
        else:
            assert name is not None
            _alter(client, name, _upsertions(additions), _mechanisms(deletions))
            print(f"Completed updating config for user {name}.")
    return 0


# -- the values of --add-config ---------------------------------------------------------------------


def _mechanisms(names: list[str]) -> list[ScramMechanism]:
    unknown = [n for n in names if n not in MECHANISMS]
    if unknown:
        raise CommandError(f"Invalid config(s): {','.join(unknown)} (users take {', '.join(MECHANISMS)})")
    return [MECHANISMS[n] for n in names]


def _upsertions(additions: dict[str, str]) -> list[tuple[ScramMechanism, int, str]]:
    """(mechanism, iterations, password) for each `SCRAM-SHA-xxx=[iterations=N,password=P]`."""
    result = []
    for mechanism in _mechanisms(list(additions)):
        fields = {}
        for item in additions[mechanism.name].split(","):
            key, sep, value = item.partition("=")
            if not sep:
                raise CommandError(f"Invalid credential property {item.strip()!r} for {mechanism.name}: expected "
                                   "iterations=N,password=P")
            fields[key.strip()] = value
        if "password" not in fields:
            raise CommandError(f"Invalid credential property for {mechanism.name}: password is required")
        if set(fields) - {"iterations", "password"}:
            raise CommandError(f"Invalid credential property for {mechanism.name}: "
                               f"{', '.join(sorted(set(fields) - {'iterations', 'password'}))}")
        try:
            iterations = int(fields.get("iterations", DEFAULT_ITERATIONS))
        except ValueError:
            raise CommandError(f"Invalid iterations for {mechanism.name}: {fields['iterations']!r}") from None
        result.append((mechanism, iterations, fields["password"]))
    return result


# -- through a broker ----------------------------------------------------------------------------------


def _alter(client: Client, user: str, upsertions: list[tuple[ScramMechanism, int, str]],
           deletions: list[ScramMechanism]) -> None:
    body = {"deletions": [{"name": user, "mechanism": m.wire_type} for m in deletions], "upsertions": []}
    for mechanism, iterations, password in upsertions:
        salt = new_salt()
        body["upsertions"].append({"name": user, "mechanism": mechanism.wire_type, "iterations": iterations,
                                   "salt": salt, "salted_password": mechanism.salted_password(password, salt, iterations)})
    response = client.request(ALTER_USER_SCRAM_CREDENTIALS, body)
    for result in response.results:
        check(result.error_code, result.error_message)


def _describe(client: Client, user: str | None) -> list[tuple[str, list[tuple[str, int]]]]:
    response = client.request(DESCRIBE_USER_SCRAM_CREDENTIALS, {"users": [{"name": user}] if user else None})
    check(response.error_code, response.error_message)
    described = []
    for result in response.results:
        if result.error_code == ErrorCode.RESOURCE_NOT_FOUND:
            continue  # a user without credentials: kafka-configs.sh prints nothing for it
        check(result.error_code, result.error_message)
        infos = [(BY_WIRE_TYPE[i.mechanism].name, i.iterations) for i in result.credential_infos
                 if i.mechanism in BY_WIRE_TYPE]
        described.append((result.user, infos))
    return described


def _print_descriptions(described: list[tuple[str, list[tuple[str, int]]]]) -> None:
    for user, infos in described:
        text = ", ".join(f"{mechanism}=iterations={iterations}" for mechanism, iterations in infos)
        print(f"SCRAM credential configs for user-principal '{user}' are {text}")


# -- straight to ZooKeeper ------------------------------------------------------------------------------


def _run_on_zookeeper(args: argparse.Namespace, name: str | None, additions: dict[str, str],
                      deletions: list[str]) -> int:
    from kbroker.metadata.store import MetadataUnavailable
    from kbroker.metadata.zk_store import ZooKeeperMetadataStore

    if args.bootstrap_server:
        raise CommandError("--zookeeper and --bootstrap-server are mutually exclusive")
    try:
        store = ZooKeeperMetadataStore(args.zookeeper, session_timeout_ms=30_000)
    except MetadataUnavailable as e:
        raise CommandError(str(e)) from None
    try:
        if args.describe:
            users = {name: store.get_user_configs(name)} if name else store.list_user_configs()
            _print_descriptions([(user, _stored_infos(configs)) for user, configs in sorted(users.items())
                                 if _stored_infos(configs)])
            return 0
        assert name is not None
        configs = store.get_user_configs(name)
        for mechanism in _mechanisms(deletions):
            configs.pop(mechanism.name, None)
        for mechanism, iterations, password in _upsertions(additions):
            _check_iterations(mechanism, iterations)
            configs[mechanism.name] = ScramCredential.from_password(mechanism, password, iterations).to_text()
        store.set_user_configs(name, configs)
        print(f"Completed updating config for entity: user-principal '{name}'.")
        return 0
    finally:
        store.close()


def _stored_infos(configs: dict[str, str]) -> list[tuple[str, int]]:
    return [(mechanism, credential.iterations) for mechanism, credential in scram_credentials(configs).items()]


def _check_iterations(mechanism: ScramMechanism, iterations: int) -> None:
    """AlterUserScramCredentials' bounds, which a direct write to ZooKeeper must keep too."""
    if not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
        raise CommandError(f"Iterations {iterations} for {mechanism.name} must be between {MIN_ITERATIONS} and "
                           f"{MAX_ITERATIONS}")
