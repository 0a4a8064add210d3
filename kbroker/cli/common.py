"""What the client tools share: options, property parsing, and turning failures into one line."""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from kbroker.client import BrokerUnreachable, Client
from kbroker.properties import parse_properties as parse_properties_text
from kbroker.security.client_config import ClientConfigError, ClientSecurity
from protocol.errors import ErrorCode, KafkaError


class CommandError(Exception):
    """A user-facing failure: printed as one line, exit status 1."""


# Kafka's own exception messages for the codes a tool user is likely to meet.
_ERROR_MESSAGES = {
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: "This server does not host this topic-partition.",
    ErrorCode.LEADER_NOT_AVAILABLE: "There is no leader for this topic-partition as we are in the middle "
                                    "of a leadership election.",
    ErrorCode.NOT_LEADER_OR_FOLLOWER: "For requests intended only for the leader, this error indicates that "
                                      "the broker is not the current leader.",
    ErrorCode.REQUEST_TIMED_OUT: "The request timed out.",
    ErrorCode.MESSAGE_TOO_LARGE: "The request included a message larger than the max message size the "
                                 "server will accept.",
    ErrorCode.INVALID_TOPIC: "The request attempted to perform an operation on an invalid topic.",
    ErrorCode.RECORD_LIST_TOO_LARGE: "The request included message batch larger than the configured "
                                     "segment size on the server.",
    ErrorCode.NOT_ENOUGH_REPLICAS: "Messages are rejected since there are fewer in-sync replicas than "
                                   "required.",
    ErrorCode.UNSUPPORTED_VERSION: "The version of API is not supported.",
    ErrorCode.TOPIC_ALREADY_EXISTS: "Topic with this name already exists.",
    ErrorCode.INVALID_PARTITIONS: "Number of partitions is below 1.",
    ErrorCode.INVALID_REPLICATION_FACTOR: "Replication factor is below 1 or larger than the number of "
                                          "available brokers.",
    ErrorCode.INVALID_CONFIG: "Configuration is invalid.",
    ErrorCode.INVALID_REQUEST: "This most likely occurs because of a request being malformed by the "
                               "client library or the message was sent to an incompatible broker.",
    ErrorCode.POLICY_VIOLATION: "Request parameters do not satisfy the configured policy.",
    ErrorCode.UNSUPPORTED_COMPRESSION_TYPE: "The requesting client does not support the compression type "
                                            "of given partition.",
    ErrorCode.TOPIC_DELETION_DISABLED: "Topic deletion is disabled.",
    ErrorCode.RESOURCE_NOT_FOUND: "A request illegally referred to a resource that does not exist.",
    ErrorCode.UNKNOWN_TOPIC_ID: "This server does not host this topic ID.",
    ErrorCode.CORRUPT_MESSAGE: "This message has failed its CRC checksum, exceeds the valid size, has a "
                               "null key for a compacted topic, or is otherwise corrupt.",
}


def describe_error(error: KafkaError) -> str:
    """One line naming the Kafka error code and saying what went wrong."""
    name = error.code.name
    text = error.message if error.message and error.message != name else _ERROR_MESSAGES.get(error.code, "")
    return f"{name}: {text}" if text else name


def add_bootstrap_argument(parser: argparse.ArgumentParser, required: bool = True,
                           config_aliases: tuple[str, ...] = ()) -> None:
    """--bootstrap-server and --command-config (also under `config_aliases`, e.g. the console
    producer's --producer.config)."""
    parser.add_argument(
        "--bootstrap-server", required=required, metavar="HOST:PORT",
        help="the broker(s) to connect to, host:port[,host:port...]",
    )
    parser.add_argument(
        "--command-config", *config_aliases, dest="command_config", metavar="FILE",
        help="client properties for a secured listener, as Kafka's tools take them (security.protocol, "
             "sasl.mechanism, sasl.jaas.config, ssl.truststore.location, ...)",
    )


def add_property_argument(parser: argparse.ArgumentParser, help_text: str) -> None:
    parser.add_argument("--property", action="append", default=[], metavar="KEY=VALUE", help=help_text)


def parse_properties(items: list[str], option: str = "--property") -> dict[str, str]:
    """`key=value` strings (repeatable options) into a dict; the value may contain '='."""
    properties = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise CommandError(f"invalid {option} {item!r}: expected KEY=VALUE")
        properties[key.strip()] = value
    return properties


def flag(properties: dict[str, str], name: str, default: bool = False) -> bool:
    """A boolean property as Java's `Boolean.parseBoolean` reads it: only "true" (any case) is true."""
    value = properties.get(name)
    return default if value is None else value.strip().lower() == "true"


def load_command_config(path: str | None) -> ClientSecurity:
    """The security settings of `--command-config FILE` (plaintext without one)."""
    if path is None:
        return ClientSecurity()
    try:
        text = Path(path).read_text()
    except OSError as e:
        raise ClientConfigError(f"--command-config {path}: {e.strerror or e}") from None
    return ClientSecurity.from_properties(parse_properties_text(text))


@contextmanager
def connect(bootstrap: str, client_id: str = "kbroker-tools", timeout: float = 30.0,
            command_config: str | None = None) -> Iterator[Client]:
    """A client for the command's lifetime, secured as `command_config` says; broker and protocol
    failures become CommandErrors."""
    try:
        client = Client(bootstrap, client_id=client_id, timeout=timeout, security=load_command_config(command_config))
    except (BrokerUnreachable, ValueError, ClientConfigError) as e:
        raise CommandError(str(e)) from None
    except KafkaError as e:
        raise CommandError(describe_error(e)) from None
    try:
        yield client
    except BrokerUnreachable as e:
        raise CommandError(str(e)) from None
    except KafkaError as e:
        raise CommandError(describe_error(e)) from None
    finally:
        client.close()
