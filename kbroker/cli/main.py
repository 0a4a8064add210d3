"""`kbroker` command line: subcommands mirror Kafka's tools."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable

from kbroker.bench import cli as bench
from kbroker.cli import (
    acls,
    client_quotas,
    cluster,
    configs,
    console,
    console_consumer,
    console_producer,
    consumer_groups,
    delayed,
    leader_election,
    reassign,
    share_groups,
    start,
    topics,
    transactions,
)
from kbroker.cli.common import CommandError, describe_error
from kbroker.client import BrokerUnreachable
from protocol.errors import KafkaError

__all__ = ["COMMANDS", "CommandError", "build_parser", "main"]

COMMANDS: dict[str, tuple[str, Callable[[argparse.ArgumentParser], None], Callable[[argparse.Namespace], int]]] = {
    "start": ("start a broker (like kafka-server-start.sh)", start.add_arguments, start.run),
    "cluster": ("start or stop a local ZooKeeper and N brokers for development (cluster start --brokers 3)",
                cluster.add_arguments, cluster.run),
    "topics": ("create, list, describe, alter and delete topics (like kafka-topics.sh)",
               topics.add_arguments, topics.run),
    "configs": ("describe and alter topic, broker, group, user and client configs (like kafka-configs.sh)",
                configs.add_arguments, configs.run),
    "client-quotas": ("describe and alter client quotas of users and client ids (like kafka-client-quotas.sh, KIP-546)",
                      client_quotas.add_arguments, client_quotas.run),
    "console-producer": ("produce lines from stdin (like kafka-console-producer.sh)",
                         console_producer.add_arguments, console_producer.run),
    "console-consumer": ("print records to stdout (like kafka-console-consumer.sh)",
                         console_consumer.add_arguments, console_consumer.run),
    "consumer-groups": ("list, describe, reset offsets of and delete consumer groups (like kafka-consumer-groups.sh)",
                        consumer_groups.add_arguments, consumer_groups.run),
    "share-groups": ("list, describe and delete share groups (like kafka-share-groups.sh)",
                     share_groups.add_arguments, share_groups.run),
    "leader-election": ("elect preferred (or unclean) leaders (like kafka-leader-election.sh)",
                        leader_election.add_arguments, leader_election.run),
    "reassign": ("move partition replicas between brokers (like kafka-reassign-partitions.sh)",
                 reassign.add_arguments, reassign.run),
    "transactions": ("list, describe and abort hanging transactions (like kafka-transactions.sh)",
                     transactions.add_arguments, transactions.run),
    "delayed": ("describe what partitions hold for delayed delivery: pending records, next due time",
                delayed.add_arguments, delayed.run),
    "console": ("serve a read-only web console of the cluster: brokers, topics, groups and their lag, live charts",
                console.add_arguments, console.run),
    "acls": ("add, remove and list ACLs (like kafka-acls.sh)", acls.add_arguments, acls.run),
    "bench": ("benchmark kbroker against librdkafka's mock cluster (throughput, latency, memory)",
              bench.add_arguments, bench.run),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kbroker", description="A broker that speaks the Kafka protocol.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, (help_text, add_arguments, run) in COMMANDS.items():
        command = sub.add_parser(name, help=help_text, description=help_text)
        add_arguments(command)
        command.set_defaults(run=run)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.run(args)
    except CommandError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    # Commands translate these themselves; this is the backstop against a traceback.
    except BrokerUnreachable as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except KafkaError as e:
        print(f"error: {describe_error(e)}", file=sys.stderr)
        return 1
    except BrokenPipeError:
        # The reader went away (`| head`): stop quietly, and keep Python from complaining at exit.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
