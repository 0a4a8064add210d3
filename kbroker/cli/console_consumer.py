"""`kbroker console-consumer`: print a topic's records, like kafka-console-consumer.sh.

There are no consumer groups yet: the tool reads every partition of the topic (or the one given
with --partition) itself, fetching from each partition's leader.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass

from construct import Container

from kbroker.cli.common import (
    CommandError,
    add_bootstrap_argument,
    add_property_argument,
    connect,
    flag,
    parse_properties,
)
from kbroker.client import Client, Record
from kbroker.client.data import EARLIEST, LATEST
from kbroker.client.errors import check
from kbroker.client.records import LOG_APPEND_TIME, decode_batches
from protocol.errors import ErrorCode

ISOLATION_LEVELS = {"read_uncommitted": 0, "read_committed": 1}
_LEADER_MOVED = {ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.LEADER_NOT_AVAILABLE, ErrorCode.FENCED_LEADER_EPOCH,
                 ErrorCode.UNKNOWN_LEADER_EPOCH, ErrorCode.UNKNOWN_TOPIC_ID}
_POLL_MS = 500


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_bootstrap_argument(parser, config_aliases=("--consumer.config",))
    parser.add_argument("--topic", required=True, help="the topic to consume")
    parser.add_argument("--from-beginning", action="store_true",
                        help="start at the earliest offset instead of the latest")
    parser.add_argument("--partition", type=int, help="consume only this partition")
    parser.add_argument("--offset", help="where to start in --partition: earliest, latest (default) or an offset")
    parser.add_argument("--max-messages", type=int, help="exit after printing this many records")
    parser.add_argument("--timeout-ms", type=int, help="exit when no record arrives for this long")
    parser.add_argument("--isolation-level", choices=sorted(ISOLATION_LEVELS), default="read_uncommitted",
                        help="read_committed hides records of open and aborted transactions")
    add_property_argument(
        parser, "formatter property: print.timestamp, print.partition, print.offset, print.headers, print.key, "
                "print.value, key.separator, line.separator, headers.separator, headers.key.separator, "
                "null.literal")


def run(args: argparse.Namespace) -> int:
    _check_options(args)
    formatter = Formatter.from_properties(parse_properties(args.property))
    printer = Printer(formatter, args.max_messages)
    with connect(args.bootstrap_server, client_id="console-consumer", command_config=args.command_config) as client:
        reader = PartitionReader(client, args)
        try:
            _consume(reader, printer, args.timeout_ms)
        except KeyboardInterrupt:
            printer.report()  # as Kafka's tool does on Ctrl-C; not after an error, whose line stands alone
            raise
    printer.report()
    return 0


def _consume(reader: PartitionReader, printer: Printer, timeout_ms: int | None) -> None:
    """Print records until --max-messages is reached or none comes for --timeout-ms."""
    deadline = _deadline(timeout_ms)
    while not printer.done:
        if deadline is not None and time.monotonic() >= deadline:
            return
        records = reader.poll(_wait_ms(deadline))
        if records:
            deadline = _deadline(timeout_ms)
        printer.print(records)


def _check_options(args: argparse.Namespace) -> None:
    if args.offset is not None and args.partition is None:
        raise CommandError("the partition is required when offset is specified")
    if args.offset is not None and args.from_beginning:
        raise CommandError("options from-beginning and offset cannot be specified together")
    if args.offset is not None and args.offset not in ("earliest", "latest") and not _is_offset(args.offset):
        raise CommandError(f"invalid --offset {args.offset!r}: expected earliest, latest or a non-negative number")
    if args.max_messages is not None and args.max_messages < 0:
        raise CommandError("--max-messages must not be negative")


def _is_offset(text: str) -> bool:
    return text.isdigit()


def _deadline(timeout_ms: int | None) -> float | None:
    return None if timeout_ms is None else time.monotonic() + timeout_ms / 1000


def _wait_ms(deadline: float | None) -> int:
    if deadline is None:
        return _POLL_MS
    return max(0, min(_POLL_MS, int((deadline - time.monotonic()) * 1000)))


# -- fetching ---------------------------------------------------------------------------------


class PartitionReader:
    """Positions in the topic's partitions, advanced by Fetch requests to each leader."""

    def __init__(self, client: Client, args: argparse.Namespace) -> None:
        self.client = client
        self.topic = args.topic
        self.isolation_level = ISOLATION_LEVELS[args.isolation_level]
        meta = client.wait_for_topic(self.topic)
        self.topic_ids = {self.topic: meta.topic_id}
        if args.partition is not None and args.partition not in meta.partitions:
            raise CommandError(f"UNKNOWN_TOPIC_OR_PARTITION: partition {args.partition} of topic "
                               f"'{self.topic}' does not exist")
        partitions = sorted(meta.partitions) if args.partition is None else [args.partition]
        # Where a position out of the log's range resets to, as auto.offset.reset does.
        self.reset = EARLIEST if args.from_beginning else LATEST
        self.positions = self._start_positions(partitions, args)

    def _start_positions(self, partitions: list[int], args: argparse.Namespace) -> dict[int, int]:
        if args.offset is not None and _is_offset(args.offset):
            return {p: int(args.offset) for p in partitions}
        start = EARLIEST if args.from_beginning or args.offset == "earliest" else LATEST
        return self.client.list_offsets(self.topic, partitions, start, self.isolation_level)

    def poll(self, max_wait_ms: int) -> list[Record]:
        """Records fetched from each leader in turn (waiting at most `max_wait_ms` on each)."""
        by_leader: dict[int, dict[tuple[str, int], int]] = {}
        for partition, offset in self.positions.items():
            leader = self.client.leader(self.topic, partition)
            by_leader.setdefault(leader, {})[(self.topic, partition)] = offset
        records: list[Record] = []
        for node, positions in by_leader.items():
            response = self.client.fetch(node, positions, topic_ids=self.topic_ids, max_wait_ms=max_wait_ms,
                                         isolation_level=self.isolation_level)
            check(response.error_code, context="fetch")
            for topic in response.responses:
                for part in topic.partitions:
                    records += self._advance(part)
        return records

    def _advance(self, part: Container) -> list[Record]:
        partition = part.partition_index
        if part.error_code == ErrorCode.OFFSET_OUT_OF_RANGE:
            self.positions[partition] = self.client.list_offsets(self.topic, [partition], self.reset)[partition]
            return []
        if part.error_code in _LEADER_MOVED:
            self.client.wait_for_topic(self.topic)  # refreshes the leaders the next poll uses
            return []
        check(part.error_code, context=f"fetch from {self.topic}-{partition}")
        records, next_offset = decode_batches(part.records, partition)
        position = self.positions[partition]
        if next_offset is not None:
            self.positions[partition] = max(position, next_offset)
        # A fetch returns whole batches: skip the records before the position.
        return [r for r in records if r.offset >= position]


# -- output -----------------------------------------------------------------------------------


@dataclass
class Formatter:
    """Kafka's DefaultMessageFormatter: the fields it prints, in its order, with its separators."""

    print_timestamp: bool = False
    print_partition: bool = False
    print_offset: bool = False
    print_headers: bool = False
    print_key: bool = False
    print_value: bool = True
    key_separator: bytes = b"\t"
    line_separator: bytes = b"\n"
    headers_separator: bytes = b","
    headers_key_separator: bytes = b":"
    null_literal: bytes = b"null"

    @classmethod
    def from_properties(cls, properties: dict[str, str]) -> Formatter:
        formatter = cls()
        for name in ("print.timestamp", "print.partition", "print.offset", "print.headers", "print.key",
                     "print.value"):
            attribute = name.replace(".", "_")
            setattr(formatter, attribute, flag(properties, name, getattr(formatter, attribute)))
        for name in ("key.separator", "line.separator", "headers.separator", "headers.key.separator",
                     "null.literal"):
            if name in properties:
                setattr(formatter, name.replace(".", "_"), properties[name].encode())
        return formatter

    def format(self, record: Record) -> bytes:
        columns: list[bytes] = []
        if self.print_timestamp:
            kind = "LogAppendTime" if record.timestamp_type == LOG_APPEND_TIME else "CreateTime"
            columns.append(f"{kind}:{record.timestamp}".encode() if record.timestamp >= 0 else b"NO_TIMESTAMP")
        if self.print_partition:
            columns.append(b"Partition:%d" % record.partition)
        if self.print_offset:
            columns.append(b"Offset:%d" % record.offset)
        if self.print_headers:
            columns.append(self._headers(record) if record.headers else b"NO_HEADERS")
        if self.print_key:
            columns.append(self._nullable(record.key))
        if self.print_value:
            columns.append(self._nullable(record.value))
        return self.key_separator.join(columns) + self.line_separator if columns else b""

    def _headers(self, record: Record) -> bytes:
        return self.headers_separator.join(
            key.encode() + self.headers_key_separator + self._nullable(value) for key, value in record.headers)

    def _nullable(self, data: bytes | None) -> bytes:
        return self.null_literal if data is None else data


class Printer:
    """Formatted records to stdout, counted, up to a limit."""

    def __init__(self, formatter: Formatter, limit: int | None) -> None:
        self.formatter = formatter
        self.limit = limit
        self.count = 0
        self.out = sys.stdout.buffer

    @property
    def done(self) -> bool:
        return self.limit is not None and self.count >= self.limit

    def print(self, records: list[Record]) -> None:
        if self.limit is not None:
            records = records[: self.limit - self.count]
        for record in records:
            self.out.write(self.formatter.format(record))
        self.count += len(records)
        self.out.flush()

    def report(self) -> None:
        print(f"Processed a total of {self.count} messages", file=sys.stderr)
