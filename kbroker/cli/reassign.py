"""`kbroker reassign`: move partition replicas between brokers, like kafka-reassign-partitions.sh
(same JSON files, options and messages: --generate, --execute, --verify, --cancel)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from kbroker.cli.common import CommandError, add_bootstrap_argument, connect
from kbroker.client import Client
from protocol.errors import ErrorCode

Assignment = dict[tuple[str, int], list[int]]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_bootstrap_argument(parser)
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--generate", action="store_true", help="propose an assignment over --broker-list")
    action.add_argument("--execute", action="store_true", help="start the reassignment in the JSON file")
    action.add_argument("--verify", action="store_true", help="say whether the reassignment has completed")
    action.add_argument("--cancel", action="store_true", help="cancel the reassignment in the JSON file")
    parser.add_argument("--reassignment-json-file", type=Path,
                        help='{"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[1,2,3]}]}')
    parser.add_argument("--topics-to-move-json-file", type=Path,
                        help='(--generate) {"version":1,"topics":[{"topic":"t"}]}')
    parser.add_argument("--broker-list", help="(--generate) the brokers to place replicas on, e.g. 1,2,3")


def run(args: argparse.Namespace) -> int:
    with connect(args.bootstrap_server, command_config=args.command_config) as client:
        if args.generate:
            return _generate(client, args)
        wanted = _read_assignment(args.reassignment_json_file)
        if args.execute:
            return _execute(client, wanted)
        if args.verify:
            return _verify(client, wanted)
        return _cancel(client, wanted)


def _read_assignment(path: Path | None) -> Assignment:
    if path is None:
        raise CommandError("Missing required argument --reassignment-json-file")
    try:
        document = json.loads(path.read_text())
        return {(p["topic"], int(p["partition"])): [int(r) for r in p["replicas"]] for p in document["partitions"]}
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise CommandError(f"cannot read the reassignment JSON file {path}: {e}") from None


def _assignment_json(assignment: Assignment) -> str:
    partitions = [{"topic": t, "partition": p, "replicas": r, "log_dirs": ["any"] * len(r)}
                  for (t, p), r in sorted(assignment.items())]
    return json.dumps({"version": 1, "partitions": partitions}, separators=(",", ":"))


def _current(client: Client, topics: set[str]) -> Assignment:
    meta = client.metadata(sorted(topics), refresh=True)
    return {(t, i): list(p.replicas) for t in topics for i, p in meta.topic(t).partitions.items()}


def _generate(client: Client, args: argparse.Namespace) -> int:
    if args.topics_to_move_json_file is None or not args.broker_list:
        raise CommandError("--generate needs --topics-to-move-json-file and --broker-list")
    try:
        topics = {t["topic"] for t in json.loads(args.topics_to_move_json_file.read_text())["topics"]}
        brokers = [int(b) for b in args.broker_list.split(",")]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise CommandError(f"cannot read the topics to move: {e}") from None
    current = _current(client, topics)
    proposed: Assignment = {}
    for n, ((topic, index), replicas) in enumerate(sorted(current.items())):
        if len(replicas) > len(brokers):
            raise CommandError(f"Replication factor: {len(replicas)} larger than available brokers: {len(brokers)}.")
        proposed[(topic, index)] = [brokers[(n + r) % len(brokers)] for r in range(len(replicas))]
    print(f"Current partition replica assignment\n{_assignment_json(current)}\n")
    print(f"Proposed partition reassignment configuration\n{_assignment_json(proposed)}")
    return 0


def _execute(client: Client, wanted: Assignment) -> int:
    current = _current(client, {t for t, _ in wanted})
    print(f"Current partition replica assignment\n\n{_assignment_json(current)}\n\n"
          "Save this to use as the --reassignment-json-file option during rollback")
    results = client.alter_partition_reassignments(dict(wanted))
    return _report(results, "start partition reassignment")


def _cancel(client: Client, wanted: Assignment) -> int:
    results = client.alter_partition_reassignments({tp: None for tp in wanted})
    return _report(results, "cancel partition reassignment")


def _report(results: dict[tuple[str, int], int], what: str) -> int:
    failed = {tp: code for tp, code in results.items() if code != ErrorCode.NO_ERROR}
    done = sorted(tp for tp in results if tp not in failed)
    if done:
        print(f"Successfully {'started' if what.startswith('start') else 'cancelled'} partition reassignment"
              f"{'s' if len(done) > 1 else ''} for {', '.join(f'{t}-{p}' for t, p in done)}")
    if failed:
        details = ", ".join(f"{t}-{p}: {ErrorCode(code).name}" for (t, p), code in sorted(failed.items()))
        raise CommandError(f"Error reassigning partition(s): {details}")
    return 0


def _verify(client: Client, wanted: Assignment) -> int:
    ongoing = client.list_partition_reassignments()
    current = _current(client, {t for t, _ in wanted})
    print("Status of partition reassignment:")
    complete = True
    for (topic, index), replicas in sorted(wanted.items()):
        if (topic, index) in ongoing:
            status, complete = "is still in progress", False
        elif current.get((topic, index)) == replicas:
            status = "is completed"
        else:
            status, complete = "failed", False
        print(f"Reassignment of partition {topic}-{index} {status}.")
    return 0 if complete else 1
