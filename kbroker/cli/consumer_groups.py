"""`kbroker consumer-groups`: list, describe, reset offsets of and delete consumer groups,
like kafka-consumer-groups.sh (same options, same tables)."""

from __future__ import annotations

import argparse
import re
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime

from kbroker.cli.common import CommandError, add_bootstrap_argument, connect, describe_error
from kbroker.client import Client
from kbroker.client.data import EARLIEST, LATEST
from kbroker.client.groups import CONSUMER_PROTOCOL_TYPE, GroupDescription, GroupListing, GroupMember
from protocol.errors import ErrorCode, KafkaError

MISSING = "-"  # Kafka's MISSING_COLUMN_VALUE
TopicPartition = tuple[str, int]

_ACTIONS = ("list", "describe", "delete", "reset_offsets", "delete_offsets")
_SCENARIOS = ("to_earliest", "to_latest", "to_current", "to_offset", "to_datetime", "by_duration", "shift_by")
# The states Kafka's tool accepts for consumer groups, by lower-case name.
_STATES = {s.lower(): s for s in ("PreparingRebalance", "CompletingRebalance", "Stable", "Dead", "Empty",
                                  "Assigning", "Reconciling")}
_INACTIVE = ("Empty", "Dead")
_REBALANCING = ("PreparingRebalance", "CompletingRebalance", "Assigning", "Reconciling")
# Kafka's exception messages for the group errors a tool user meets.
_GROUP_MESSAGES = {
    ErrorCode.NON_EMPTY_GROUP: "The group is not empty.",
    ErrorCode.GROUP_ID_NOT_FOUND: "The group id does not exist.",
    ErrorCode.INVALID_GROUP_ID: "The configured groupId is invalid.",
    ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC: "The consumer group is actively subscribed to the topic",
    ErrorCode.GROUP_AUTHORIZATION_FAILED: "Group authorization failed.",
    ErrorCode.COORDINATOR_NOT_AVAILABLE: "The coordinator is not available.",
    ErrorCode.NOT_COORDINATOR: "This is not the correct coordinator.",
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS: "The coordinator is loading and hence can't process requests.",
    ErrorCode.REBALANCE_IN_PROGRESS: "The group is rebalancing, so a rejoin is needed.",
    ErrorCode.UNKNOWN_MEMBER_ID: "The coordinator is not aware of this member.",
    ErrorCode.ILLEGAL_GENERATION: "Specified group generation id is not valid.",
    ErrorCode.OFFSET_METADATA_TOO_LARGE: "The metadata field of the offset request was too large.",
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_bootstrap_argument(parser)
    actions = parser.add_mutually_exclusive_group(required=True)
    actions.add_argument("--list", action="store_true", help="list the consumer groups")
    actions.add_argument("--describe", action="store_true",
                         help="describe groups: offsets and lag (default), --members or --state")
    actions.add_argument("--delete", action="store_true", help="delete (empty) groups and their offsets")
    actions.add_argument("--reset-offsets", action="store_true", help="reset the committed offsets of an inactive group")
    actions.add_argument("--delete-offsets", action="store_true", help="delete a group's offsets of --topic")
    parser.add_argument("--group", action="append", default=[], help="a consumer group; repeatable")
    parser.add_argument("--all-groups", action="store_true", help="every consumer group")
    parser.add_argument("--topic", action="append", default=[], metavar="TOPIC[:P,P...]",
                        help="a topic, optionally with partitions (reset, delete offsets); repeatable")
    parser.add_argument("--all-topics", action="store_true", help="every topic the group has offsets for (reset)")
    parser.add_argument("--type", nargs="?", const="", default=None, metavar="TYPE[,TYPE...]",
                        help="with --list: show each group's protocol (classic, consumer), or only these")
    parser.add_argument("--members", action="store_true", help="describe the members")
    parser.add_argument("--offsets", action="store_true", help="describe offsets and lag (the default)")
    parser.add_argument("--state", nargs="?", const="", default=None, metavar="STATE[,STATE...]",
                        help="describe the group state; with --list, show (and filter by) states")
    parser.add_argument("--verbose", action="store_true", help="with --describe --members: show assignments")
    _add_reset_arguments(parser)
    parser.add_argument("--timeout", type=int, default=5000, metavar="MS", help="request timeout (default 5000)")


def _add_reset_arguments(parser: argparse.ArgumentParser) -> None:
    scenarios = parser.add_mutually_exclusive_group()
    scenarios.add_argument("--to-earliest", action="store_true", help="reset to the earliest offset")
    scenarios.add_argument("--to-latest", action="store_true", help="reset to the latest offset")
    scenarios.add_argument("--to-current", action="store_true", help="reset to the current committed offset")
    scenarios.add_argument("--to-offset", type=int, metavar="OFFSET", help="reset to this offset")
    scenarios.add_argument("--to-datetime", metavar="YYYY-MM-DDTHH:mm:SS.sss",
                           help="reset to the first offset at or after this time (UTC unless a zone is given)")
    scenarios.add_argument("--by-duration", metavar="PnDTnHnMnS", help="reset to this long ago")
    scenarios.add_argument("--shift-by", type=int, metavar="N", help="move the committed offsets by N (may be < 0)")
    modes = parser.add_mutually_exclusive_group()
    modes.add_argument("--dry-run", action="store_true", help="only show the new offsets (the default)")
    modes.add_argument("--execute", action="store_true", help="commit the new offsets")


def run(args: argparse.Namespace) -> int:
    action = next(a for a in _ACTIONS if getattr(args, a))
    _check_options(args, action)
    with connect(args.bootstrap_server, timeout=max(args.timeout, 1) / 1000, command_config=args.command_config) as client:
        {"list": _list, "describe": _describe, "delete": _delete, "reset_offsets": _reset_offsets,
         "delete_offsets": _delete_offsets}[action](client, args)
    return 0


def _check_options(args: argparse.Namespace, action: str) -> None:
    """Kafka's option rules, as one error line each."""
    option = "--" + action.replace("_", "-")
    if action in ("describe", "delete", "reset_offsets") and bool(args.group) == args.all_groups:
        raise CommandError(f"Option {option} takes one of these options: --all-groups, --group")
    if action == "delete_offsets" and (len(args.group) != 1 or not args.topic):
        raise CommandError("Option --delete-offsets takes exactly one --group and at least one --topic")
    if action == "describe" and sum((args.members, args.offsets, args.state is not None)) > 1:
        raise CommandError("Option --describe takes at most one of these options: --members, --offsets, --state")
    if action == "reset_offsets":
        _check_reset_options(args)
    elif any(getattr(args, s) not in (None, False) for s in _SCENARIOS) or args.all_topics:
        raise CommandError(f"Reset scenarios and --all-topics apply to --reset-offsets, not {option}")
    if args.type is not None and action != "list":
        raise CommandError(f"Option --type applies to --list, not {option}")
    if args.state is not None and action not in ("list", "describe"):
        raise CommandError(f"Option --state applies to --list and --describe, not {option}")


def _check_reset_options(args: argparse.Namespace) -> None:
    if bool(args.topic) == args.all_topics:
        raise CommandError("Option --reset-offsets takes one of these options: --all-topics, --topic")
    if not any(getattr(args, s) not in (None, False) for s in _SCENARIOS):
        raise CommandError("Option --reset-offsets takes one of these options: "
                           + ", ".join("--" + s.replace("_", "-") for s in _SCENARIOS))


# -- list -------------------------------------------------------------------------------------


def _list(client: Client, args: argparse.Namespace) -> None:
    if args.state is None and args.type is None:
        for listing in _consumer_groups(client):
            print(listing.group_id)
        return
    listings = _consumer_groups(client, _parse_states(args.state) if args.state is not None else ())
    if args.type:
        types = {t.strip().lower() for t in args.type.split(",") if t.strip()}
        listings = [g for g in listings if g.group_type in types]
    group_width = max((len(g.group_id) for g in listings), default=0)
    columns = [("GROUP", max(15, group_width) + 10)]
    columns += [("TYPE", 20)] if args.type is not None else []
    columns += [("STATE", 20)] if args.state is not None else []
    rows = [[g.group_id, *([g.group_type] if args.type is not None else []),
             *([g.state] if args.state is not None else [])] for g in listings]
    _print_table(columns, rows, blank_line=False)


def _consumer_groups(client: Client, states: Iterable[str] = ()) -> list[GroupListing]:
    """Groups of consumers (and groups that only hold offsets), as Kafka's --list shows."""
    return [g for g in client.list_groups(states) if g.protocol_type in (CONSUMER_PROTOCOL_TYPE, "")]


def _parse_states(text: str) -> list[str]:
    names = [s.strip() for s in text.split(",") if s.strip()]
    unknown = [s for s in names if s.lower() not in _STATES]
    if unknown:
        raise CommandError(f"Invalid state list '{text}'. Valid states are: {', '.join(_STATES.values())}")
    return [_STATES[s.lower()] for s in names]


# -- describe ---------------------------------------------------------------------------------


def _describe(client: Client, args: argparse.Namespace) -> None:
    missing = []
    for group_id in sorted(_group_ids(client, args)):
        group = client.describe_group(group_id)
        if group.state == "Dead":
            missing.append(group_id)  # Kafka describes an unknown group as Dead
            continue
        _warn_state(group)
        if args.members:
            _print_members(group, args.verbose)
        elif args.state is not None:
            _print_state(group)
        else:
            _print_offsets(client, group)
    if missing:
        raise CommandError(" ".join(f"Consumer group '{g}' does not exist." for g in missing))


def _warn_state(group: GroupDescription) -> None:
    if group.state == "Empty":
        _note(f"Consumer group '{group.group_id}' has no active members.")
    elif group.state in _REBALANCING:
        _note(f"Warning: Consumer group '{group.group_id}' is rebalancing.")


@dataclass
class _OffsetRow:
    topic: str
    partition: int
    offset: int | None  # committed; None when nothing is
    member: GroupMember | None


def _print_offsets(client: Client, group: GroupDescription) -> None:
    rows = _offset_rows(group, client.fetch_offsets(group.group_id))
    if not rows:
        return  # nothing assigned, nothing committed: Kafka prints no table
    log_ends = _log_offsets(client, [(r.topic, r.partition) for r in rows], LATEST, strict=False)
    table = []
    for r in rows:
        end = log_ends.get((r.topic, r.partition))
        lag = end - r.offset if end is not None and r.offset is not None else None
        member = [r.member.member_id, r.member.client_host, r.member.client_id] if r.member else [MISSING] * 3
        table.append([group.group_id, r.topic, str(r.partition), _text(r.offset), _text(end), _text(lag), *member])
    _print_table([("GROUP", 15), ("TOPIC", 15), ("PARTITION", 10), ("CURRENT-OFFSET", 15), ("LOG-END-OFFSET", 15),
                  ("LAG", 15), ("CONSUMER-ID", 15), ("HOST", 15), ("CLIENT-ID", 0)], table)


def _offset_rows(group: GroupDescription, committed: dict[TopicPartition, int]) -> list[_OffsetRow]:
    """Assigned partitions by member (most partitions first), then committed ones nobody owns: Kafka's order."""
    rows, assigned = [], set()
    for member in sorted((m for m in group.members if m.assignment), key=lambda m: -len(m.assignment)):
        for tp in sorted(member.assignment):
            assigned.add(tp)
            rows.append(_OffsetRow(*tp, committed.get(tp), member))
    rows += [_OffsetRow(*tp, offset, None) for tp, offset in sorted(committed.items()) if tp not in assigned]
    return rows


def _print_members(group: GroupDescription, verbose: bool) -> None:
    instance_ids = any(m.group_instance_id for m in group.members)
    columns = [("GROUP", 15), ("CONSUMER-ID", 15), *([("GROUP-INSTANCE-ID", 17)] if instance_ids else []),
               ("HOST", 15), ("CLIENT-ID", 15), ("#PARTITIONS", 15), *([("ASSIGNMENT", 0)] if verbose else [])]
    rows = []
    for m in group.members:
        instance = [m.group_instance_id or ""] if instance_ids else []
        assignment = [_assignment_text(m.assignment)] if verbose else []
        rows.append([group.group_id, m.member_id, *instance, m.client_host, m.client_id, str(len(m.assignment)),
                     *assignment])
    _print_table(columns, rows)


def _assignment_text(assignment: list[TopicPartition]) -> str:
    """`topic(0,1), other(2)`, as Kafka's --members --verbose shows an assignment."""
    if not assignment:
        return MISSING
    by_topic: dict[str, list[int]] = {}
    for topic, partition in assignment:
        by_topic.setdefault(topic, []).append(partition)
    return ", ".join(sorted(f"{t}({','.join(str(p) for p in sorted(ps))})" for t, ps in by_topic.items()))


def _print_state(group: GroupDescription) -> None:
    c = group.coordinator
    coordinator = f"{c.host}:{c.port}  ({c.node_id})"
    # Kafka's layout: the GROUP column is as wide as the coordinator's (at least 25), and an
    # empty group's assignment strategy is blank.
    _print_table([("GROUP", max(25, len(coordinator))), ("COORDINATOR (ID)", 25), ("ASSIGNMENT-STRATEGY", 20),
                  ("STATE", 15), ("#MEMBERS", 0)],
                 [[group.group_id, coordinator, group.protocol, group.state, str(len(group.members))]])


# -- reset offsets ----------------------------------------------------------------------------


def _reset_offsets(client: Client, args: argparse.Namespace) -> None:
    plans: dict[str, dict[TopicPartition, int]] = {}
    refused = []
    for group_id in _group_ids(client, args):
        state = client.describe_group(group_id).state
        if state not in _INACTIVE:
            refused.append(f"Assignments can only be reset if the group '{group_id}' is inactive, "
                           f"but the current state is {state}.")
            continue
        plans[group_id] = _plan_reset(client, group_id, args)
        if args.execute:
            _commit(client, group_id, plans[group_id])
    if plans:
        group_width = max(len(g) for g in plans)
        topic_width = max((len(t) for plan in plans.values() for t, _ in plan), default=0)
        _print_table([("GROUP", max(15, group_width)), ("TOPIC", max(15, topic_width)), ("PARTITION", 10),
                      ("NEW-OFFSET", 0)],
                     [[g, t, str(p), str(o)] for g, plan in plans.items() for (t, p), o in sorted(plan.items())])
    if refused:
        raise CommandError(" ".join(refused))


def _plan_reset(client: Client, group_id: str, args: argparse.Namespace) -> dict[TopicPartition, int]:
    """The new offset of each partition in scope, as the chosen scenario computes it."""
    if args.all_topics:
        partitions = list(client.fetch_offsets(group_id))
    else:
        partitions = _topic_partitions(client, args.topic)
    if not partitions:
        return {}
    if args.to_earliest:
        return _log_offsets(client, partitions, EARLIEST)
    if args.to_latest:
        return _log_offsets(client, partitions, LATEST)
    if args.to_current:
        current = client.fetch_offsets(group_id, partitions)
        return {**_log_offsets(client, [tp for tp in partitions if tp not in current], LATEST), **current}
    if args.to_offset is not None:
        return _clamp(client, dict.fromkeys(partitions, args.to_offset))
    if args.shift_by is not None:
        return _clamp(client, _shifted(client.fetch_offsets(group_id, partitions), partitions, args.shift_by))
    timestamp = _datetime_ms(args.to_datetime) if args.to_datetime else _duration_ago_ms(args.by_duration)
    return _offsets_for_time(client, partitions, timestamp)


def _shifted(current: dict[TopicPartition, int], partitions: list[TopicPartition], by: int) -> dict[TopicPartition, int]:
    unknown = [tp for tp in partitions if tp not in current]
    if unknown:
        raise CommandError(f"Cannot shift offset for partition {_tp(unknown[0])} since there is no current "
                           "committed offset")
    return {tp: current[tp] + by for tp in partitions}


def _clamp(client: Client, wanted: dict[TopicPartition, int]) -> dict[TopicPartition, int]:
    """Requested offsets kept within [log start, log end], as Kafka's tool does (it warns; so do we)."""
    starts = _log_offsets(client, list(wanted), EARLIEST)
    ends = _log_offsets(client, list(wanted), LATEST)
    result = {}
    for tp, offset in wanted.items():
        result[tp] = min(max(offset, starts[tp]), ends[tp])
        if result[tp] != offset:
            bound = "higher than latest" if offset > ends[tp] else "lower than earliest"
            _note(f"New offset ({offset}) is {bound} offset for topic partition {_tp(tp)}. "
                  f"Value will be set to {result[tp]}.")
    return result


def _offsets_for_time(client: Client, partitions: list[TopicPartition], timestamp: int) -> dict[TopicPartition, int]:
    found = _log_offsets(client, partitions, timestamp)
    empty = [tp for tp, offset in found.items() if offset < 0]
    for topic, partition in empty:
        _note(f"Warn: Partition {partition} from topic {topic} is empty. Falling back to latest known offset.")
    return {**found, **_log_offsets(client, empty, LATEST)}


def _commit(client: Client, group_id: str, offsets: dict[TopicPartition, int]) -> None:
    if not offsets:
        return
    failures = [f"{_tp(tp)}: {_group_error(code)}" for tp, code in client.commit_offsets(group_id, offsets).items()
                if code != ErrorCode.NO_ERROR]
    if failures:
        raise CommandError(f"Committing offsets of group '{group_id}' failed: " + "; ".join(failures))


def _datetime_ms(text: str) -> int:
    """Kafka's `Utils.getDateTime`: ISO 8601 with a 'T', UTC unless the text names a zone."""
    if "T" not in text:
        raise CommandError(f"Error parsing timestamp '{text}': it does not contain a 'T' according to ISO8601 format")
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise CommandError(f"Error parsing timestamp '{text}': expected YYYY-MM-DDTHH:mm:SS.sss") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp() * 1000)


_DURATION = re.compile(r"([-+]?)P(?:([-+]?\d+)D)?(?:T(?:([-+]?\d+)H)?(?:([-+]?\d+)M)?(?:([-+]?\d+(?:[.,]\d+)?)S)?)?",
                       re.IGNORECASE)


def _duration_ago_ms(text: str) -> int:
    """Now minus a Java `Duration` (PnDTnHnMn.nS)."""
    match = _DURATION.fullmatch(text.strip())
    if not match or not any(match.groups()[1:]) or text.strip().upper().endswith("T"):
        raise CommandError(f"Text cannot be parsed to a Duration: {text}")
    sign, days, hours, minutes, seconds = match.groups()
    total = (int(days or 0) * 86400 + int(hours or 0) * 3600 + int(minutes or 0) * 60
             + float((seconds or "0").replace(",", ".")))
    return int((time.time() - (-total if sign == "-" else total)) * 1000)


# -- delete -----------------------------------------------------------------------------------


def _delete(client: Client, args: argparse.Namespace) -> None:
    results = client.delete_groups(_group_ids(client, args))
    deleted = [g for g, code in results.items() if code == ErrorCode.NO_ERROR]
    failed = {g: code for g, code in results.items() if code != ErrorCode.NO_ERROR}
    if not failed:
        print(f"Deletion of requested consumer groups ({_quoted(deleted)}) was successful.")
        return
    if deleted:
        print(f"These consumer groups were deleted successfully: {_quoted(deleted)}")
    raise CommandError("Deletion of some consumer groups failed: " + "; ".join(
        f"Group '{g}' could not be deleted due to: {_group_error(code)}" for g, code in failed.items()))


def _delete_offsets(client: Client, args: argparse.Namespace) -> None:
    group_id = args.group[0]
    error, results = client.delete_offsets(group_id, _topic_partitions(client, args.topic))
    if error != ErrorCode.NO_ERROR:
        raise CommandError(_group_error(error))
    failed = any(code != ErrorCode.NO_ERROR for code in results.values())
    if not failed:
        print(f"Request succeeded for deleting offsets from group {group_id}.")
    topic_width = max((len(t) for t, _ in results), default=0)
    _print_table([("TOPIC", max(15, topic_width)), ("PARTITION", 10), ("STATUS", 0)],
                 [[t, str(p), "Successful" if code == ErrorCode.NO_ERROR else f"Error: {_group_error(code)}"]
                  for (t, p), code in sorted(results.items())])
    if failed:
        raise CommandError("Encountered some partition-level error, see the follow-up details.")


# -- helpers ----------------------------------------------------------------------------------


def _group_ids(client: Client, args: argparse.Namespace) -> list[str]:
    if args.all_groups:
        return [g.group_id for g in _consumer_groups(client)]
    return list(dict.fromkeys(args.group))


def _topic_partitions(client: Client, topics: list[str]) -> list[TopicPartition]:
    """`topic` (all its partitions) or `topic:0,2` arguments as (topic, partition) pairs that exist."""
    wanted: list[TopicPartition] = []
    for arg in topics:
        topic, sep, partitions = arg.partition(":")
        meta = client.metadata([topic]).topic(topic)
        if not sep:
            wanted += [(topic, p) for p in sorted(meta.partitions)]
            continue
        chosen = [(topic, _partition_number(p, arg)) for p in partitions.split(",")]
        absent = [_tp(tp) for tp in chosen if tp[1] not in meta.partitions]
        if absent:
            raise CommandError(f'UNKNOWN_TOPIC_OR_PARTITION: The partitions "{",".join(absent)}" do not exist')
        wanted += chosen
    return list(dict.fromkeys(wanted))


def _partition_number(text: str, arg: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise CommandError(f"Invalid partition '{text}' specified in topic arg '{arg}'") from None


def _log_offsets(client: Client, partitions: list[TopicPartition], spec: int,
                 strict: bool = True) -> dict[TopicPartition, int]:
    """ListOffsets for `spec` (EARLIEST, LATEST or a time); unless `strict`, topics that fail are left out."""
    offsets: dict[TopicPartition, int] = {}
    by_topic: dict[str, list[int]] = {}
    for topic, partition in partitions:
        by_topic.setdefault(topic, []).append(partition)
    for topic, parts in by_topic.items():
        try:
            offsets.update(((topic, p), o) for p, o in client.list_offsets(topic, parts, spec).items())
        except KafkaError:
            if strict:
                raise
    return offsets


def _print_table(columns: list[tuple[str, int]], rows: list[list[str]], blank_line: bool = True) -> None:
    """Left-aligned columns at least as wide as Kafka's, the last one unpadded; a blank line first, as Kafka."""
    widths = [max([minimum, len(title)] + [len(r[i]) for r in rows]) for i, (title, minimum) in enumerate(columns)]
    lines = [[title for title, _ in columns], *rows]
    if blank_line:
        print()
    for line in lines:
        cells = [cell.ljust(width) for cell, width in zip(line[:-1], widths, strict=False)]
        print(" ".join([*cells, line[-1]]).rstrip())


def _note(text: str) -> None:
    """Kafka's warnings and notes go to stderr, in order with what is already printed."""
    sys.stdout.flush()
    print(text, file=sys.stderr)


def _group_error(code: int) -> str:
    try:
        error = ErrorCode(code)
    except ValueError:
        error = ErrorCode.UNKNOWN_SERVER_ERROR
    return describe_error(KafkaError(error, _GROUP_MESSAGES.get(error, error.name)))


def _quoted(groups: list[str]) -> str:
    return ", ".join(f"'{g}'" for g in groups)


def _tp(tp: TopicPartition) -> str:
    return f"{tp[0]}-{tp[1]}"


def _text(value: int | None) -> str:
    return MISSING if value is None else str(value)

