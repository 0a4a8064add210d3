"""`kbroker share-groups`: list, describe and delete share groups (KIP-932), describe, reset and
delete their offsets, like Kafka 4.1's kafka-share-groups.sh (same options, same tables).

A share group's offset is each share partition's start offset (DescribeShareGroupOffsets, with the
lag of KIP-1226); --reset-offsets (AlterShareGroupOffsets) and --delete-offsets
(DeleteShareGroupOffsets) need an empty group."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable

from kbroker.cli.common import CommandError, add_bootstrap_argument, connect, describe_error

# The offsets a reset computes follow the rules of Kafka's GroupOffsetsResetter, which both
# kafka-consumer-groups.sh and kafka-share-groups.sh use.
from kbroker.cli.consumer_groups import (
    _clamp,
    _datetime_ms,
    _duration_ago_ms,
    _log_offsets,
    _offsets_for_time,
    _print_table,
    _topic_partitions,
)
from kbroker.client import Client
from kbroker.client.data import EARLIEST, LATEST
from kbroker.client.groups import ShareGroupDescription
from kbroker.client.share_offsets import SharePartitionOffset
from protocol.errors import ErrorCode, KafkaError

SHARE = "share"
_STATES = {s.lower(): s for s in ("Dead", "Empty", "Stable", "Unknown")}  # GroupState.groupStatesForType(SHARE)
_SCENARIOS = ("to_earliest", "to_latest", "to_datetime", "by_duration", "to_offset")
MISSING = "-"  # Kafka's MISSING_COLUMN_VALUE


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_bootstrap_argument(parser)
    actions = parser.add_mutually_exclusive_group(required=True)
    actions.add_argument("--list", action="store_true", help="list the share groups")
    actions.add_argument("--describe", action="store_true",
                         help="describe share groups: --offsets (the default), --members or --state")
    actions.add_argument("--delete", action="store_true", help="delete (empty) share groups")
    actions.add_argument("--reset-offsets", action="store_true",
                         help="reset the start offsets of one (empty) share group")
    actions.add_argument("--delete-offsets", action="store_true",
                         help="delete one (empty) share group's offsets of --topic")
    parser.add_argument("--group", action="append", default=[], help="a share group; repeatable")
    parser.add_argument("--all-groups", action="store_true", help="every share group")
    parser.add_argument("--topic", action="append", default=[], metavar="TOPIC[:P,P...]",
                        help="a topic (optionally some partitions) for --reset-offsets / --delete-offsets")
    parser.add_argument("--all-topics", action="store_true",
                        help="every topic the group has offsets for (--reset-offsets)")
    parser.add_argument("--members", action="store_true", help="describe the members")
    parser.add_argument("--offsets", action="store_true", help="describe start offsets and lag (the default)")
    parser.add_argument("--state", nargs="?", const="", default=None, metavar="STATE[,STATE...]",
                        help="describe the group state; with --list, show (and filter by) states")
    parser.add_argument("--verbose", action="store_true", help="more columns: epochs")
    parser.add_argument("--timeout", type=int, default=5000, metavar="MS", help="request timeout (default 5000)")
    scenarios = parser.add_mutually_exclusive_group()
    scenarios.add_argument("--to-earliest", action="store_true", help="reset to the earliest offset")
    scenarios.add_argument("--to-latest", action="store_true", help="reset to the latest offset")
    scenarios.add_argument("--to-datetime", metavar="YYYY-MM-DDTHH:mm:SS.sss",
                           help="reset to the first offset at or after this time")
    scenarios.add_argument("--by-duration", metavar="PnDTnHnMnS", help="reset to this long ago")
    scenarios.add_argument("--to-offset", type=int, metavar="OFFSET", help="reset to this offset")
    modes = parser.add_mutually_exclusive_group()
    modes.add_argument("--dry-run", action="store_true", help="only show the new offsets (the default)")
    modes.add_argument("--execute", action="store_true", help="reset the offsets")


def run(args: argparse.Namespace) -> int:
    _check_options(args)
    with connect(args.bootstrap_server, timeout=args.timeout / 1000, command_config=args.command_config) as client:
        if args.list:
            _list(client, args.state)
        elif args.describe:
            _describe(client, args)
        elif args.reset_offsets:
            _reset_offsets(client, args)
        elif args.delete_offsets:
            return _delete_offsets(client, args)
        else:
            return _delete(client, args)
    return 0


def _check_options(args: argparse.Namespace) -> None:
    """kafka-share-groups.sh's option rules, one error line each."""
    if (args.describe or args.delete) and not (args.group or args.all_groups):
        raise CommandError("Option [describe] takes one of these options: [all-groups], [group]" if args.describe
                           else "Option [delete] takes one of these options: [all-groups], [group]")
    if args.describe and sum((args.members, args.offsets, args.state is not None)) > 1:
        raise CommandError("Option [describe] takes at most one of these options: [members], [offsets], [state]")
    if args.delete_offsets and (len(args.group) != 1 or not args.topic):
        raise CommandError("Option [delete-offsets] takes the following options: [group], [topic]")
    if args.reset_offsets:
        if len(args.group) != 1:
            raise CommandError("Option [reset-offsets] takes the option: [group]")
        if bool(args.topic) == args.all_topics:
            raise CommandError("Option [reset-offsets] takes one of these options: [all-topics], [topic]")
        if not any(getattr(args, s) not in (None, False) for s in _SCENARIOS):
            raise CommandError("Option [reset-offsets] takes one of these options: "
                               + ", ".join(f"[{s.replace('_', '-')}]" for s in _SCENARIOS))
    elif any(getattr(args, s) not in (None, False) for s in (*_SCENARIOS, "dry_run", "execute", "all_topics")):
        raise CommandError("Reset scenarios, --dry-run, --execute and --all-topics apply to [reset-offsets]")


def _share_groups(client: Client, states: Iterable[str] = ()) -> list[tuple[str, str]]:
    return [(g.group_id, g.state) for g in client.list_groups(states, types=[SHARE])]


# -- list -------------------------------------------------------------------------------------


def _list(client: Client, state: str | None) -> None:
    if state is None:
        for group_id, _ in _share_groups(client):
            print(group_id)
        return
    listings = _share_groups(client, _parse_states(state) if state else ())
    width = max([15, *(len(g) for g, _ in listings)])
    print(f"{'GROUP':<{width}} STATE")
    for group_id, group_state in listings:
        print(f"{group_id:<{width}} {group_state}")


def _parse_states(text: str) -> list[str]:
    names = [s.strip() for s in text.split(",") if s.strip()]
    if any(s.lower() not in _STATES for s in names):
        raise CommandError(f"Invalid state list '{text}'. Valid states are: {', '.join(_STATES.values())}")
    return [_STATES[s.lower()] for s in names]


# -- describe ---------------------------------------------------------------------------------


def _describe(client: Client, args: argparse.Namespace) -> None:
    group_ids = [g for g, _ in _share_groups(client)] if args.all_groups else args.group
    descriptions = {}
    for group_id in sorted(set(group_ids)):
        try:
            descriptions[group_id] = client.describe_share_group(group_id)
        except KafkaError as e:
            raise CommandError(f"Executing share group command failed due to {e.message or e.code.name}") from None
    for description in descriptions.values():
        if args.members:
            _print_members(description, args.verbose)
        elif args.state is not None:
            _print_state(description, args.verbose)
        else:
            _print_offsets(description.group_id, _offsets(client, description.group_id), args.verbose)


def _offsets(client: Client, group_id: str) -> list[SharePartitionOffset]:
    try:
        return client.share_group_offsets(group_id)
    except KafkaError as e:
        raise CommandError(f"Executing share group command failed due to {e.message or e.code.name}") from None


def _print_offsets(group_id: str, offsets: list[SharePartitionOffset], verbose: bool) -> None:
    """Kafka's table: GROUP TOPIC PARTITION [LEADER-EPOCH] START-OFFSET LAG, '-' where unknown."""
    if not offsets:
        print(f"\nShare group '{group_id}' has no offset information.")
        return
    header = ["GROUP", "TOPIC", "PARTITION"] + (["LEADER-EPOCH"] if verbose else []) + ["START-OFFSET", "LAG"]
    widths = [max(15, len(group_id)), max([15, *(len(o.topic) for o in offsets)]), 10] + ([13] if verbose else []) \
        + [13]
    print()
    print(_line(header, widths))
    for o in offsets:
        row = [group_id, o.topic, str(o.partition)] + ([_text(o.leader_epoch)] if verbose else []) \
            + [_text(o.start_offset), _text(o.lag)]
        print(_line(row, widths))


def _text(value: int | None) -> str:
    return MISSING if value is None else str(value)


def _note_empty(description: ShareGroupDescription) -> None:
    if description.state == "Empty":
        print(f"\nShare group '{description.group_id}' has no active members.", file=sys.stderr)


def _print_state(description: ShareGroupDescription, verbose: bool) -> None:
    _note_empty(description)
    coordinator = description.coordinator
    where = f"{coordinator.host}:{coordinator.port}  ({coordinator.node_id})"
    group_width, where_width = max(15, len(description.group_id)), max(25, len(where))
    header = ["GROUP", "COORDINATOR (ID)", "STATE"]
    row = [description.group_id, where, description.state]
    widths = [group_width, where_width, 15]
    if verbose:
        header += ["GROUP-EPOCH", "ASSIGNMENT-EPOCH"]
        row += [str(description.group_epoch), str(description.assignment_epoch)]
        widths += [12, 17]
    header.append("#MEMBERS")
    row.append(str(len(description.members)))
    print()
    print(_line(header, widths))
    print(_line(row, widths))


def _print_members(description: ShareGroupDescription, verbose: bool) -> None:
    _note_empty(description)
    members = sorted(description.members, key=lambda m: m.member_id)
    if not members:
        return
    widths = [max(15, len(description.group_id)), max([15, *(len(m.member_id) for m in members)]),
              max([15, *(len(m.client_host) for m in members)]), max([15, *(len(m.client_id) for m in members)]), 12]
    header = ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS"]
    if verbose:
        header.append("MEMBER-EPOCH")
        widths.append(13)
    header.append("ASSIGNMENT")
    print()
    print(_line(header, widths))
    for member in members:
        row = [description.group_id, member.member_id, member.client_host, member.client_id,
               str(len(member.assignment))]
        if verbose:
            row.append(str(member.member_epoch))
        row.append(_assignment(member.assignment))
        print(_line(row, widths))


def _assignment(partitions: list[tuple[str, int]]) -> str:
    """Kafka's `topic:0,1;other:2`."""
    by_topic: dict[str, list[int]] = {}
    for topic, index in partitions:
        by_topic.setdefault(topic, []).append(index)
    return ";".join(sorted(f"{t}:{','.join(str(p) for p in sorted(ps))}" for t, ps in by_topic.items()))


def _line(values: list[str], widths: list[int]) -> str:
    """Kafka's printf columns: each but the last left-aligned in its width, one space between."""
    return " ".join(f"{v:<{w}}" for v, w in zip(values[:-1], widths, strict=False)) + " " + values[-1]


# -- delete -----------------------------------------------------------------------------------


def _delete(client: Client, args: argparse.Namespace) -> int:
    listed = dict(_share_groups(client))
    wanted = list(listed) if args.all_groups else list(dict.fromkeys(args.group))
    failed: dict[str, str] = {}
    for group_id in wanted:
        if group_id not in listed:
            failed[group_id] = f"org.apache.kafka.common.errors.GroupIdNotFoundException: Group '{group_id}' is not " \
                               "a share group."
        elif listed[group_id] != "Empty":
            failed[group_id] = f"org.apache.kafka.common.errors.GroupNotEmptyException: Share group '{group_id}' is " \
                               "not EMPTY."
    to_delete = [g for g in wanted if g not in failed]
    deleted = []
    for group_id, code in client.delete_groups(to_delete).items():
        if code == ErrorCode.NO_ERROR:
            deleted.append(group_id)
        else:
            failed[group_id] = f"{ErrorCode(code).name}"
    names = ", ".join(f"'{g}'" for g in deleted)
    if not failed:
        print(f"Deletion of requested share groups ({names}) was successful.")
        return 0
    print("\nError: Deletion of some share groups failed:")
    for group_id, error in failed.items():
        print(f"* Group '{group_id}' could not be deleted due to: {error}")
    if deleted:
        print(f"\nThese share groups were deleted successfully: {names}")
    return 0  # as kafka-share-groups.sh, which reports the failures and exits 0


# -- reset and delete offsets -----------------------------------------------------------------


def _reset_offsets(client: Client, args: argparse.Namespace) -> None:
    """Plan (and with --execute, set) the start offsets of one group, which must be empty or not
    exist yet (then it is created), as Kafka's tool does."""
    group_id = args.group[0]
    try:
        state = client.describe_share_group(group_id).state
    except KafkaError as e:
        if e.code != ErrorCode.GROUP_ID_NOT_FOUND:
            raise CommandError(f"Executing share group command failed due to {e.message or e.code.name}") from None
        state = "Dead"
    if state not in ("Empty", "Dead"):
        raise CommandError(f"Share group '{group_id}' is not empty.")
    plan = _plan_reset(client, group_id, args)
    if args.execute and plan:
        try:
            results = client.alter_share_group_offsets(group_id, plan)
        except KafkaError as e:
            raise CommandError(f"Executing share group command failed due to {describe_error(e)}") from None
        failures = [f"{t}-{p}: {describe_error(KafkaError(ErrorCode(code)))}"
                    for (t, p), code in sorted(results.items()) if code != ErrorCode.NO_ERROR]
        if failures:
            raise CommandError(f"Resetting offsets of share group '{group_id}' failed: " + "; ".join(failures))
    if plan:
        _print_table([("GROUP", max(15, len(group_id))), ("TOPIC", 15), ("PARTITION", 10), ("NEW-OFFSET", 0)],
                     [[group_id, t, str(p), str(o)] for (t, p), o in sorted(plan.items())])


def _plan_reset(client: Client, group_id: str, args: argparse.Namespace) -> dict[tuple[str, int], int]:
    """The new start offset of each partition in scope, as the chosen scenario computes it."""
    if args.all_topics:
        try:
            partitions = [(o.topic, o.partition) for o in client.share_group_offsets(group_id)]
        except KafkaError as e:
            if e.code != ErrorCode.GROUP_ID_NOT_FOUND:
                raise
            partitions = []
    else:
        partitions = _topic_partitions(client, args.topic)
    if not partitions:
        return {}
    if args.to_earliest:
        return _log_offsets(client, partitions, EARLIEST)
    if args.to_latest:
        return _log_offsets(client, partitions, LATEST)
    if args.to_offset is not None:
        return _clamp(client, dict.fromkeys(partitions, args.to_offset))
    timestamp = _datetime_ms(args.to_datetime) if args.to_datetime else _duration_ago_ms(args.by_duration)
    return _offsets_for_time(client, partitions, timestamp)


def _delete_offsets(client: Client, args: argparse.Namespace) -> int:
    """Kafka's TOPIC STATUS table; a group-level error is printed as Kafka's tool prints it. Like
    kafka-share-groups.sh, it exits 0 either way: the output says what failed."""
    group_id = args.group[0]
    topics = list(dict.fromkeys(t.partition(":")[0] for t in args.topic))
    try:
        results = client.delete_share_group_offsets(group_id, topics)
    except KafkaError as e:
        print(f"\nError: {describe_error(e)}")
        return 0
    width = max([15, *(len(t) for t in results)])
    print(f"\n{'TOPIC':<{width}} STATUS", end="")
    for topic, code in sorted(results.items()):
        status = "Successful" if code == ErrorCode.NO_ERROR else f"Error: {describe_error(KafkaError(ErrorCode(code)))}"
        print(f"\n{topic:<{width}} {status}", end="")
    print()
    return 0
