"""`kbroker console-producer`: one record per line of stdin, like kafka-console-producer.sh.

Lines are read as Kafka's `LineMessageReader` reads them ([headers<delimiter>][key<separator>]value)
and sent in batches: a batch goes out when it is full, when stdin pauses for `--timeout` ms
(Kafka's linger), and at the end of input. Keyed records go where Kafka's default partitioner
puts them (murmur2 of the key); unkeyed ones stick to one partition per batch.
"""

from __future__ import annotations

import argparse
import os
import random
import select
import sys
from collections.abc import Iterator
from dataclasses import dataclass

from kbroker.cli.common import (
    CommandError,
    add_bootstrap_argument,
    add_property_argument,
    connect,
    flag,
    parse_properties,
)
from kbroker.client import Client, Record
from kbroker.client.records import COMPRESSION_CODECS, encode_batch
from kbroker.partitioner import partition_for_key

_ACKS = {"all": -1, "-1": -1, "0": 0, "1": 1}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_bootstrap_argument(parser, config_aliases=("--producer.config",))
    parser.add_argument("--topic", required=True, help="the topic to produce to")
    add_property_argument(
        parser, "line reader property: parse.key, key.separator, parse.headers, headers.delimiter, "
                "headers.separator, headers.key.separator, null.marker, ignore.error")
    parser.add_argument("--compression-codec", nargs="?", const="gzip", default="none",
                        choices=sorted(COMPRESSION_CODECS), help="compression of the batches (gzip if no value)")
    parser.add_argument("--partition", type=int, help="send every record to this partition")
    parser.add_argument("--request-required-acks", default="-1", choices=sorted(_ACKS),
                        help="acks the broker waits for (default -1, all in-sync replicas)")
    parser.add_argument("--request-timeout-ms", type=int, default=1500,
                        help="how long the broker may wait for acks (default 1500)")
    parser.add_argument("--batch-size", type=int, default=16384, help="bytes of records per batch (default 16384)")
    parser.add_argument("--timeout", type=int, default=1000, metavar="MS",
                        help="send what is batched when no input comes for this long (default 1000)")
    parser.add_argument("--sync", action="store_true", help="send each record on its own and wait for it")


def run(args: argparse.Namespace) -> int:
    reader = LineReader.from_properties(parse_properties(args.property))
    with connect(args.bootstrap_server, client_id="console-producer", command_config=args.command_config) as client:
        producer = BatchingProducer(client, args)
        try:
            for number, line in enumerate_lines(read_lines(sys.stdin.fileno(), args.timeout / 1000)):
                if line is None:
                    producer.flush()
                else:
                    producer.add(reader.parse(line, number))
                    if args.sync:
                        producer.flush()
        finally:
            # Also on Ctrl-C: what was read is sent, as Kafka's producer flushes when closed.
            producer.flush()
    return 0


# -- reading ----------------------------------------------------------------------------------


def read_lines(fd: int, linger_s: float) -> Iterator[bytes | None]:
    """Lines of `fd` without their line ends; None whenever input pauses for `linger_s`."""
    pending = b""
    waiting = False  # after a pause has been reported, wait for input without a limit
    while True:
        ready, _, _ = select.select([fd], [], [], None if waiting else linger_s)
        if not ready:
            waiting = True
            yield None
            continue
        waiting = False
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            break
        *lines, pending = (pending + chunk).split(b"\n")
        yield from (line.removesuffix(b"\r") for line in lines)
    if pending:
        yield pending.removesuffix(b"\r")


def enumerate_lines(lines: Iterator[bytes | None]) -> Iterator[tuple[int, bytes | None]]:
    """Number the lines from 1 (for error messages); pauses keep the last number."""
    number = 0
    for line in lines:
        if line is not None:
            number += 1
        yield number, line


@dataclass
class LineReader:
    """Kafka's LineMessageReader: its properties, defaults and error messages."""

    parse_key: bool = False
    key_separator: bytes = b"\t"
    parse_headers: bool = False
    headers_delimiter: bytes = b"\t"
    headers_separator: bytes = b","
    headers_key_separator: bytes = b":"
    ignore_error: bool = False
    null_marker: bytes | None = None

    @classmethod
    def from_properties(cls, properties: dict[str, str]) -> LineReader:
        reader = cls(parse_key=flag(properties, "parse.key"), parse_headers=flag(properties, "parse.headers"),
                     ignore_error=flag(properties, "ignore.error"))
        for name in ("key.separator", "headers.delimiter", "headers.separator", "headers.key.separator"):
            if name in properties:
                if not properties[name]:
                    raise CommandError(f"{name} must not be empty")
                setattr(reader, name.replace(".", "_"), properties[name].encode())
        if "null.marker" in properties:
            reader.null_marker = properties["null.marker"].encode()
        return reader

    def parse(self, line: bytes, number: int) -> Record:
        headers_text = self._field(self.parse_headers, line, 0, self.headers_delimiter, "headers delimiter", number)
        start = 0 if headers_text is None else len(headers_text) + len(self.headers_delimiter)
        key = self._field(self.parse_key, line, start, self.key_separator, "key separator", number)
        if key is not None:
            start += len(key) + len(self.key_separator)
        headers = [] if headers_text is None or headers_text == self.null_marker else self._headers(
            headers_text, number)
        return Record(self._nullable(key), self._nullable(line[start:]), headers)

    def _field(self, enabled: bool, line: bytes, start: int, separator: bytes, what: str,
               number: int) -> bytes | None:
        if not enabled:
            return None
        end = line.find(separator, start)
        if end < 0:
            if self.ignore_error:
                return None
            raise CommandError(f"No {what} found on line number {number}: '{_text(line)}'")
        return line[start:end]

    def _headers(self, text: bytes, number: int) -> list[tuple[str, bytes | None]]:
        headers = []
        for pair in _java_split(text, self.headers_separator):
            key, sep, value = pair.partition(self.headers_key_separator)
            if not sep:
                if not self.ignore_error:
                    raise CommandError(f"No header key separator found in pair '{_text(pair)}' "
                                       f"on line number {number}")
                headers.append((_text(pair), None))
                continue
            if key == self.null_marker:
                raise CommandError(f"Header keys should not be equal to the null marker "
                                   f"'{_text(key)}' as they can't be null")
            headers.append((_text(key), self._nullable(value)))
        return headers

    def _nullable(self, data: bytes | None) -> bytes | None:
        return None if data is None or data == self.null_marker else data


def _java_split(text: bytes, separator: bytes) -> list[bytes]:
    """Java's `String.split`, as Kafka splits headers: no match gives [text] (even when empty),
    otherwise trailing empty strings are dropped."""
    if separator not in text:
        return [text]
    parts = text.split(separator)
    while parts and not parts[-1]:
        parts.pop()
    return parts


def _text(data: bytes) -> str:
    return data.decode("utf-8", "replace")


# -- sending ----------------------------------------------------------------------------------


class BatchingProducer:
    """Records grouped per partition, sent as one RecordBatch per partition and leader."""

    def __init__(self, client: Client, args: argparse.Namespace) -> None:
        self.client = client
        self.topic = args.topic
        self.acks = _ACKS[args.request_required_acks]
        self.timeout_ms = args.request_timeout_ms
        self.compression = COMPRESSION_CODECS[args.compression_codec]
        self.batch_size = args.batch_size
        self.partitions = len(client.wait_for_topic(self.topic, auto_create=True).partitions)
        self.fixed_partition = args.partition
        if self.fixed_partition is not None and not 0 <= self.fixed_partition < self.partitions:
            raise CommandError(f"UNKNOWN_TOPIC_OR_PARTITION: partition {self.fixed_partition} of topic "
                               f"'{self.topic}' does not exist (it has {self.partitions})")
        self.sticky = random.randrange(self.partitions)
        self.pending: dict[int, list[Record]] = {}
        self.pending_bytes: dict[int, int] = {}

    def add(self, record: Record) -> None:
        partition = self._partition(record)
        self.pending.setdefault(partition, []).append(record)
        size = len(record.key or b"") + len(record.value or b"") + sum(
            len(k) + len(v or b"") for k, v in record.headers)
        self.pending_bytes[partition] = self.pending_bytes.get(partition, 0) + size
        if self.pending_bytes[partition] >= self.batch_size:
            self._send({partition: self.pending.pop(partition)})
            del self.pending_bytes[partition]

    def flush(self) -> None:
        if self.pending:
            batches, self.pending, self.pending_bytes = self.pending, {}, {}
            self._send(batches)

    def _partition(self, record: Record) -> int:
        if self.fixed_partition is not None:
            return self.fixed_partition
        if record.key is not None:
            return partition_for_key(record.key, self.partitions)
        return self.sticky

    def _send(self, batches: dict[int, list[Record]]) -> None:
        encoded = {p: encode_batch(records, self.compression) for p, records in batches.items()}
        self.client.produce_batches(self.topic, encoded, self.acks, self.timeout_ms)
        if self.sticky in batches and self.partitions > 1:
            # A new sticky partition once the current one's batch has gone, as Kafka's producer does.
            self.sticky = random.choice([p for p in range(self.partitions) if p != self.sticky])
