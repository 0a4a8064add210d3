"""`kbroker share-groups`: list, describe and delete share groups (KIP-932), like Kafka 4.1's
kafka-share-groups.sh (same options, same tables).

Describing offsets (the tool's default), --reset-offsets and --delete-offsets need
DescribeShareGroupOffsets, AlterShareGroupOffsets and DeleteShareGroupOffsets, which kbroker
does not serve yet: they are refused with a message saying so."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable

from kbroker.cli.common import CommandError, add_bootstrap_argument, connect
from kbroker.client import Client
from kbroker.client.groups import ShareGroupDescription
from protocol.errors import ErrorCode, KafkaError

SHARE = "share"
_STATES = {s.lower(): s for s in ("Dead", "Empty", "Stable", "Unknown")}  # GroupState.groupStatesForType(SHARE)
_NOT_SERVED = ("{} needs the share group offset APIs (DescribeShareGroupOffsets, AlterShareGroupOffsets, "
               "DeleteShareGroupOffsets), which kbroker does not serve yet")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_bootstrap_argument(parser)
    actions = parser.add_mutually_exclusive_group(required=True)
    actions.add_argument("--list", action="store_true", help="list the share groups")
    actions.add_argument("--describe", action="store_true",
                         help="describe share groups: --members or --state (offsets are not served yet)")
    actions.add_argument("--delete", action="store_true", help="delete (empty) share groups")
    actions.add_argument("--reset-offsets", action="store_true", help="not served yet")
    actions.add_argument("--delete-offsets", action="store_true", help="not served yet")
    parser.add_argument("--group", action="append", default=[], help="a share group; repeatable")
    parser.add_argument("--all-groups", action="store_true", help="every share group")
    parser.add_argument("--members", action="store_true", help="describe the members")
    parser.add_argument("--offsets", action="store_true", help="describe start offsets and lag (not served yet)")
    parser.add_argument("--state", nargs="?", const="", default=None, metavar="STATE[,STATE...]",
                        help="describe the group state; with --list, show (and filter by) states")
    parser.add_argument("--verbose", action="store_true", help="more columns: epochs")
    parser.add_argument("--timeout", type=int, default=5000, metavar="MS", help="request timeout (default 5000)")


def run(args: argparse.Namespace) -> int:
    if args.reset_offsets or args.delete_offsets or (args.describe and args.offsets):
        action = "--reset-offsets" if args.reset_offsets else "--delete-offsets" if args.delete_offsets else "--offsets"
        raise CommandError(_NOT_SERVED.format(action))
    if (args.describe or args.delete) and not (args.group or args.all_groups):
        raise CommandError("Option [describe] takes one of these options: [all-groups], [group]" if args.describe
                           else "Option [delete] takes one of these options: [all-groups], [group]")
    if args.describe and not (args.members or args.state is not None):
        raise CommandError(_NOT_SERVED.format("describing offsets (the default)") + "; use --members or --state")
    with connect(args.bootstrap_server, timeout=args.timeout / 1000, command_config=args.command_config) as client:
        if args.list:
            _list(client, args.state)
        elif args.describe:
            _describe(client, args)
        else:
            return _delete(client, args)
    return 0


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
        else:
            _print_state(description, args.verbose)


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
