"""`kbroker leader-election`: move leadership to preferred (or, unclean, any live) replicas,
like kafka-leader-election.sh (same options and messages)."""

from __future__ import annotations

import argparse

from kbroker.cli.common import CommandError, add_bootstrap_argument, connect
from protocol.errors import ErrorCode


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_bootstrap_argument(parser)
    parser.add_argument("--election-type", required=True, type=str.upper, choices=("PREFERRED", "UNCLEAN"),
                        help="PREFERRED: the first assigned replica, if in sync; UNCLEAN: any live replica "
                             "of a partition without a leader")
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--all-topic-partitions", action="store_true", help="every partition of the cluster")
    which.add_argument("--topic", help="the topic (with --partition)")
    parser.add_argument("--partition", type=int, help="the partition of --topic")


def run(args: argparse.Namespace) -> int:
    if args.topic is not None and args.partition is None:
        raise CommandError("Missing required option(s): partition")
    partitions = None if args.all_topic_partitions else [(args.topic, args.partition)]
    with connect(args.bootstrap_server, command_config=args.command_config) as client:
        results = client.elect_leaders(args.election_type == "UNCLEAN", partitions)
    done = sorted(tp for tp, code in results.items() if code == ErrorCode.NO_ERROR)
    not_needed = sorted(tp for tp, code in results.items() if code == ErrorCode.ELECTION_NOT_NEEDED)
    failed = sorted((tp, code) for tp, code in results.items()
                    if code not in (ErrorCode.NO_ERROR, ErrorCode.ELECTION_NOT_NEEDED))
    if done:
        print(f"Successfully completed leader election ({args.election_type}) for partitions {_names(done)}")
    if not_needed:
        print(f"Valid replica already elected for partitions {_names(not_needed)}")
    if failed:
        print(f"Error completing leader election ({args.election_type}) for partitions: "
              + ", ".join(f"{t}-{p}: {ErrorCode(code).name}" for (t, p), code in failed))
        return 1
    return 0


def _names(partitions: list[tuple[str, int]]) -> str:
    return ", ".join(f"{t}-{p}" for t, p in partitions)
