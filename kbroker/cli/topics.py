"""`kbroker topics`: create, list, describe, alter and delete topics, like kafka-topics.sh.

`--describe` prints what kafka-topics.sh prints; the partition lines of a tiered topic
(remote.storage.enable=true, docs/archive.md) go on with the leader's local window and what is
archived, from DescribeArchive (kbroker's own API), which Kafka's tool has no way to show.
"""

from __future__ import annotations

import argparse
import base64
import re
import sys
import uuid

from kbroker.cli.common import CommandError, add_bootstrap_argument, connect, describe_error, parse_properties
from kbroker.client import BrokerUnreachable, Client
from kbroker.client.admin import TOPIC_RESOURCE, ConfigEntry
from kbroker.client.archive import ArchivePartition
from kbroker.client.cluster import ClusterMetadata, PartitionMetadata, TopicMetadata
from kbroker.views.view import SOURCE_CONFIG as VIEW_SOURCE_CONFIG
from protocol.errors import ErrorCode, KafkaError

_ACTIONS = ("create", "list", "describe", "alter", "delete")
_DEFAULT_CONFIG = 5
DESCRIBE_TOPIC_PARTITIONS = 75
REMOTE_STORAGE_CONFIG = "remote.storage.enable"
# What a tiered partition's line adds, in DescribeArchive's order.
ARCHIVE_LABELS = ("LocalLogStartOffset", "LocalBytes", "LogStartOffset", "ArchivedBytes", "ArchivedSegments",
                  "HighestArchivedOffset")
NOT_AVAILABLE = "N/A"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_bootstrap_argument(parser)
    actions = parser.add_mutually_exclusive_group(required=True)
    actions.add_argument("--create", action="store_true", help="create a topic")
    actions.add_argument("--list", action="store_true", help="list the topics")
    actions.add_argument("--describe", action="store_true", help="describe topics")
    actions.add_argument("--alter", action="store_true", help="change a topic's number of partitions")
    actions.add_argument("--delete", action="store_true", help="delete topics")
    parser.add_argument("--topic", help="the topic; a regular expression except with --create")
    parser.add_argument("--partitions", type=int, help="number of partitions (create, alter)")
    parser.add_argument("--replication-factor", type=int, help="replicas of each partition (create)")
    parser.add_argument("--config", action="append", default=[], metavar="KEY=VALUE",
                        help="a topic config override (create); repeatable")
    parser.add_argument("--if-not-exists", action="store_true", help="create only if the topic is new")
    parser.add_argument("--if-exists", action="store_true", help="alter or delete only if the topic exists")
    parser.add_argument("--force", action="store_true",
                        help="delete: also delete the filtered views of the topics deleted (docs/views.md)")
    parser.add_argument("--exclude-internal", action="store_true", help="leave internal topics out")
    parser.add_argument("--under-replicated-partitions", action="store_true",
                        help="describe only partitions whose ISR is smaller than their replica set")
    parser.add_argument("--unavailable-partitions", action="store_true",
                        help="describe only partitions without a leader")


def run(args: argparse.Namespace) -> int:
    action = next(a for a in _ACTIONS if getattr(args, a))
    if action in ("create", "alter", "delete") and not args.topic:
        raise CommandError(f"--{action} needs --topic")
    with connect(args.bootstrap_server, command_config=args.command_config) as client:
        {"create": _create, "list": _list, "describe": _describe, "alter": _alter, "delete": _delete}[action](
            client, args)
    return 0


# -- actions ----------------------------------------------------------------------------------


def _create(client: Client, args: argparse.Namespace) -> None:
    configs = parse_properties(args.config, "--config")
    try:
        client.create_topic(args.topic, _or_default(args.partitions), _or_default(args.replication_factor), configs)
    except KafkaError as e:
        if e.code == ErrorCode.TOPIC_ALREADY_EXISTS and args.if_not_exists:
            return
        raise CommandError(describe_error(e)) from None
    print(f"Created topic {args.topic}.")


def _list(client: Client, args: argparse.Namespace) -> None:
    for name in _matching_topics(client, args.topic, args.exclude_internal):
        print(name)


def _describe(client: Client, args: argparse.Namespace) -> None:
    names = _existing_topics(client, args)
    metadata = client.metadata(names)
    elr = _eligible_leader_replicas(client, names)
    partition_filter = args.under_replicated_partitions or args.unavailable_partitions
    # The filters print no topic line: a topic whose configs cannot be read is then printed as
    # one that is not tiered, rather than failing a command that never needed its configs.
    configs = {name: _overrides(client, name, required=not partition_filter) for name in names}
    tiered = {name for name in names if _is_tiered(configs[name])}
    archive = _archive_sizes(client, metadata, sorted(tiered))  # the last request: see there
    for name in names:
        topic = metadata.topic(name)
        if not partition_filter:
            print(_topic_line(topic, configs[name]))
        for index in sorted(topic.partitions):
            p = topic.partitions[index]
            if args.under_replicated_partitions and len(p.isr) >= len(p.replicas):
                continue
            if args.unavailable_partitions and p.leader >= 0:
                continue
            line = _partition_line(name, index, p, elr.get((name, index), (NOT_AVAILABLE, NOT_AVAILABLE)))
            if name in tiered:
                line += _archive_fields(archive.get((name, index)))
            print(line)


def _partition_line(name: str, index: int, p: PartitionMetadata, elr: tuple[str, str]) -> str:
    eligible, last_known = elr
    return (f"\tTopic: {name}\tPartition: {index}\tLeader: {_node(p.leader)}\t"
            f"Replicas: {_ids(p.replicas)}\tIsr: {_ids(p.isr)}\tElr: {eligible}\tLastKnownElr: {last_known}")


def _is_tiered(configs: list[ConfigEntry]) -> bool:
    return any(e.name == REMOTE_STORAGE_CONFIG and (e.value or "").lower() == "true" for e in configs)


def _archive_sizes(client: Client, metadata: ClusterMetadata, tiered: list[str]
                   ) -> dict[tuple[str, int], ArchivePartition]:
    """Each tiered partition's local window and archive, from its leader (DescribeArchive). A
    partition without a leader has none to ask. When they cannot be had (a broker that does not
    serve the API, such as Kafka's, closes the connection) the reason goes to stderr and the
    lines show N/A: the rest of the description is still worth printing. The last request of
    the command, so that a connection closed by it serves no other."""
    wanted = [(name, index) for name in tiered for index, p in metadata.topic(name).partitions.items()
              if p.leader >= 0]
    if not wanted:
        return {}
    try:
        found = client.describe_archive_of(wanted)
    except BrokerUnreachable as e:
        reason = str(e)
    except KafkaError as e:
        reason = describe_error(e)
    else:
        return {(p.topic, p.partition): p for p in found}
    print(f"warning: the local and archived sizes of tiered partitions cannot be shown: {reason}", file=sys.stderr)
    return {}


def _archive_fields(p: ArchivePartition | None) -> str:
    values = [NOT_AVAILABLE] * len(ARCHIVE_LABELS) if p is None else [
        p.local_log_start_offset, p.local_size, p.log_start_offset, p.archived_size, p.archived_segment_count,
        p.highest_archived_offset]
    return "".join(f"\t{label}: {value}" for label, value in zip(ARCHIVE_LABELS, values, strict=True))


def _eligible_leader_replicas(client: Client, names: list[str]) -> dict[tuple[str, int], tuple[str, str]]:
    """Each partition's eligible leader replicas (KIP-966) and last known ones, as kafka-topics.sh
    prints them: from DescribeTopicPartitions where the broker has it; where it has not (it
    answers Metadata only) the tool prints N/A, and so do we (by leaving the partition out)."""
    try:
        client.version(DESCRIBE_TOPIC_PARTITIONS)
    except KafkaError:
        return {}
    found: dict[tuple[str, int], tuple[str, str]] = {}
    cursor = None
    while names:
        body = {"topics": [{"name": n} for n in names], "response_partition_limit": 2000, "cursor": cursor}
        response = client.request(DESCRIBE_TOPIC_PARTITIONS, body)
        for topic in response.topics:
            for p in topic.partitions:
                found[(topic.name, p.partition_index)] = (_ids(p.eligible_leader_replicas or []),
                                                          _ids(p.last_known_elr or []))
        cursor = response.next_cursor
        if cursor is None:
            break
        cursor = {"topic_name": cursor.topic_name, "partition_index": cursor.partition_index}
    return found


def _alter(client: Client, args: argparse.Namespace) -> None:
    if args.partitions is None:
        raise CommandError("--alter needs --partitions (use `kbroker configs` to change topic configs)")
    for name in _existing_topics(client, args):
        try:
            client.create_partitions(name, args.partitions)
        except KafkaError as e:
            raise CommandError(f"{name}: {describe_error(e)}") from None


def _delete(client: Client, args: argparse.Namespace) -> None:
    names = _existing_topics(client, args)
    if args.force:
        # A source with views is refused; its views go first, in their own request.
        views = _views_of(client, names)
        _delete_now(client, [v for v in views if v not in names])
    _delete_now(client, names)


def _delete_now(client: Client, names: list[str]) -> None:
    if not names:
        return
    failures = [f"{name}: {describe_error(error)}"
                for name, error in client.delete_topics(names).items() if error is not None]
    if failures:
        raise CommandError("; ".join(failures))


# -- helpers ----------------------------------------------------------------------------------


def _or_default(value: int | None) -> int:
    return -1 if value is None else value  # -1 asks the broker for its default


def _matching_topics(client: Client, pattern: str | None, exclude_internal: bool) -> list[str]:
    """Topic names matching `pattern` as Kafka's tools match --topic: a whole-name regex, commas as |."""
    topics = client.metadata(refresh=True).topics.values()
    names = sorted(t.name for t in topics if not (exclude_internal and t.is_internal))
    if pattern is None:
        return names
    try:
        regex = re.compile(pattern.strip().strip("\"'").replace(",", "|"))
    except re.error as e:
        raise CommandError(f"invalid --topic pattern {pattern!r}: {e}") from None
    return [n for n in names if n == pattern or regex.fullmatch(n)]


def _existing_topics(client: Client, args: argparse.Namespace) -> list[str]:
    names = _matching_topics(client, args.topic, args.exclude_internal)
    if not names and args.topic is not None and not args.if_exists:
        raise CommandError(f"UNKNOWN_TOPIC_OR_PARTITION: Topic '{args.topic}' does not exist as expected")
    return names


def _views_of(client: Client, sources: list[str]) -> list[str]:
    """The filtered views that read any of `sources`: the topics whose view.source.topic names one."""
    wanted = set(sources)
    views = []
    for name in _matching_topics(client, None, exclude_internal=True):
        source = next((e.value for e in _overrides(client, name) if e.name == VIEW_SOURCE_CONFIG), None)
        if source in wanted:
            views.append(name)
    return views


def _overrides(client: Client, topic: str, required: bool = True) -> list[ConfigEntry]:
    """Configs that differ from the defaults, as kafka-topics.sh shows them; [] if the broker can't
    say (or, unless `required`, refuses to)."""
    try:
        entries = client.describe_configs(TOPIC_RESOURCE, topic)
    except KafkaError as e:
        if e.code == ErrorCode.UNSUPPORTED_VERSION or not required:
            return []
        raise
    return sorted((e for e in entries if e.source != _DEFAULT_CONFIG and not e.is_sensitive), key=lambda e: e.name)


def _topic_line(topic: TopicMetadata, configs: list[ConfigEntry]) -> str:
    replication = max((len(p.replicas) for p in topic.partitions.values()), default=0)
    line = f"Topic: {topic.name}"
    if topic.topic_id != uuid.UUID(int=0):
        line += f"\tTopicId: {kafka_uuid(topic.topic_id)}"
    configs_text = ",".join(f"{e.name}={e.value}" for e in configs)
    return line + f"\tPartitionCount: {len(topic.partitions)}\tReplicationFactor: {replication}\tConfigs: {configs_text}"


def kafka_uuid(value: uuid.UUID) -> str:
    """Kafka's `Uuid.toString()`: URL-safe base64 of the 16 bytes, without padding."""
    return base64.urlsafe_b64encode(value.bytes).decode().rstrip("=")


def _ids(nodes: list[int]) -> str:
    return ",".join(str(n) for n in nodes)


def _node(node: int) -> str:
    return "none" if node < 0 else str(node)
