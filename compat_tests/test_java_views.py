"""The Java client (kafka-clients 3.9.1) reading kbroker's filtered views (docs/views.md).

Views are kbroker's own, so these run against the module's `kbroker start` only (no Apache Kafka
side). One source topic of two partitions holds records tagged with a `tag` header, written by
confluent-kafka with each codec (none, lz4, gzip, zstd), in batches of mixed tags (which a view
rebuilds), in batches of one tag (which a view passes whole or empties), in a committed and in an
aborted transaction, and ending with records no view keeps (so every view's answer ends with a
gap marker). A view per tag is read by the Java consumer with `isolation.level=read_committed`:

- with assign from the beginning: exactly the committed records of that tag, in order, with
  their source offsets, keys, values, headers and timestamps; the position reaches the high
  watermark;
- in a consumer group (subscribe): a member commits after part of the records and closes, and
  the next member resumes exactly there: no record twice, none missing, and its position and
  commit reach the high watermark;
- endOffsets / beginningOffsets / offsetsForTimes: the source's offsets, and a seek to the
  offset found by time gives the view's first matching record from there.

The view's batches are also fetched from Python and classified, so each test knows it went
through every layout a view serves (whole, rebuilt per codec, emptied, transaction markers, the
gap marker).

At scale (slow, on a broker of its own): the million-record source of tests/views_million.py (10
tags, every codec, aborted transactions) and a view per tag, each read by the Java consumer from
the beginning with read_committed: per partition exactly the expected offsets in order, the values
(compared through a SHA-256 over them in order), only the view's tag, and the position at the
high watermark.
"""

from __future__ import annotations

import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

from compat_tests.conftest import Target, create_topic
from compat_tests.harness import JavaHarness
from protocol.errors import ErrorCode
from protocol.record_batch import RecordBatch, decode_batches
from tests import views_million
from tests.brokers import BrokerProcess
from tests.rawclient import RawClient

pytestmark = pytest.mark.timeout(300)

FETCH = 1
PARTITIONS = 2
TAGS = ("paid", "refunded", "created")
# Rebuilt batches come in each of these codecs; whole and emptied batches are uncompressed.
EVERY_LAYOUT = {"whole", "emptied", "rebuilt-none", "rebuilt-lz4", "rebuilt-gzip", "rebuilt-zstd",
                "transaction-marker", "gap-marker"}


class ViewHarness(JavaHarness):
    """KafkaHarness's serve loop with ViewScenarios.java's scenarios added (same protocol)."""

    def _start(self) -> subprocess.Popen[bytes]:
        log = self.log_path.open("ab")
        try:
            proc = subprocess.Popen(
                [self.java, "-cp", self.classpath, "ViewScenarios", "--serve"],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log,
            )
        finally:
            log.close()
        self._buffer = b""
        return proc


@pytest.fixture(scope="module")
def java_views(java_classpath: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ViewHarness]:
    from compat_tests.java_deps import java_tools

    tools = java_tools()
    assert tools is not None
    harness = ViewHarness(tools[0], java_classpath, tmp_path_factory.mktemp("java-views") / "harness.log")
    yield harness
    harness.close()


# -- the source -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Sent:
    """A record produced to the source, where it landed, and whether read_committed sees it."""

    partition: int
    offset: int
    key: bytes | None
    value: bytes
    headers: tuple[tuple[str, bytes], ...]
    timestamp: int
    tag: str | None
    committed: bool

    def as_read(self) -> tuple[Any, ...]:
        return (self.partition, self.offset, self.key, self.value, self.headers, self.timestamp)


@dataclass(frozen=True)
class Planned:
    index: int
    partition: int
    tag: str | None


@dataclass(frozen=True)
class Source:
    name: str
    sent: list[Sent]  # ordered by (partition, offset)
    high_watermarks: dict[int, int]

    def expected(self, tag: str) -> list[Sent]:
        return [s for s in self.sent if s.committed and s.tag == tag]


def mixed_tag(i: int) -> str | None:
    return None if i % 9 == 0 else TAGS[i % len(TAGS)]


def produce(bootstrap: str, topic: str, base_ms: int, blocks: list[list[Planned]], codec: str,
            transactional_id: str | None = None, abort: bool = False) -> list[Sent]:
    """Each block is flushed before the next starts, so it is a batch (or a few) of its own."""
    config: dict[str, Any] = {"bootstrap.servers": bootstrap, "compression.type": codec, "linger.ms": 20}
    if transactional_id:
        config["transactional.id"] = transactional_id
    producer = Producer(config)
    if transactional_id:
        producer.init_transactions(30)
        producer.begin_transaction()
    sent: list[Sent] = []
    errors: list[KafkaError] = []

    def delivered(error: KafkaError | None, message: Any, plan: Planned, headers: tuple, ts: int) -> None:
        if error is not None:
            errors.append(error)
            return
        sent.append(Sent(message.partition(), message.offset(), message.key(), message.value(), headers, ts,
                         plan.tag, not abort))

    for block in blocks:
        for plan in block:
            i = plan.index
            headers: list[tuple[str, bytes]] = [("n", str(i).encode())]
            if plan.tag is not None:
                headers.insert(i % 2, ("tag", plan.tag.encode()))  # not always the first header
            key = None if i % 11 == 0 else f"user-{i % 13}".encode()
            ts = base_ms + i  # increasing with the offset in each partition
            producer.produce(topic, value=f"value-{i}-".encode() + b"x" * 60, key=key, headers=headers,
                             partition=plan.partition, timestamp=ts,
                             on_delivery=lambda e, m, p=plan, h=tuple(headers), t=ts: delivered(e, m, p, h, t))
        assert producer.flush(30) == 0
    if transactional_id:
        (producer.abort_transaction if abort else producer.commit_transaction)(30)
    assert producer.flush(30) == 0
    assert errors == []
    return sent


def high_watermarks(bootstrap: str, topic: str) -> dict[int, int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused"})
    try:
        return {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(PARTITIONS)}
    finally:
        consumer.close()


@pytest.fixture(scope="module")
def source(kbroker_target: Target) -> Source:
    bootstrap = kbroker_target.bootstrap
    name = create_topic(bootstrap, f"orders-{uuid.uuid4().hex[:8]}", PARTITIONS)
    base_ms = int(time.time() * 1000) - 3_600_000
    counter = iter(range(1_000_000))

    def planned(count: int, tag_of: Any, partition_of: Any = lambda i: i % PARTITIONS) -> list[Planned]:
        indexes = [next(counter) for _ in range(count)]
        return [Planned(i, partition_of(i), tag_of(i)) for i in indexes]

    sent: list[Sent] = []
    # Mixed tags in every batch (rebuilt by a view), one codec each.
    sent += produce(bootstrap, name, base_ms, [planned(120, mixed_tag)], "none")
    sent += produce(bootstrap, name, base_ms, [planned(120, lambda i: TAGS[(i // 5) % 3])], "lz4")
    sent += produce(bootstrap, name, base_ms, [planned(100, mixed_tag)], "gzip")
    # Batches of one tag each (passed whole, or emptied): block b goes to partition b % 2, tag b % 3.
    sent += produce(bootstrap, name, base_ms, [planned(15, lambda i, b=b: TAGS[b % 3], lambda i, b=b: b % 2)
                                               for b in range(6)], "none")
    # A committed transaction (zstd), then an aborted one whose records are tagged like the others.
    txid = f"views-{name}"
    sent += produce(bootstrap, name, base_ms, [planned(60, mixed_tag)], "zstd", transactional_id=txid)
    aborted = produce(bootstrap, name, base_ms, [planned(60, mixed_tag)], "lz4", transactional_id=txid, abort=True)
    assert len(aborted) == 60 and all(not s.committed for s in aborted)
    sent += aborted
    # The newest records match no view: every view's read ends through a gap marker.
    sent += produce(bootstrap, name, base_ms, [planned(40, lambda i: None if i % 2 else "other")], "none")
    sent.sort(key=lambda s: (s.partition, s.offset))
    return Source(name, sent, high_watermarks(bootstrap, name))


def make_view(bootstrap: str, source: Source, tag: str) -> str:
    return create_topic(bootstrap, f"{tag}-{uuid.uuid4().hex[:8]}", PARTITIONS,
                        {"view.source.topic": source.name, "view.filter": f"tag = '{tag}'"})


# -- what the broker serves -------------------------------------------------------------------------


def fetched_batches(bootstrap: str, topic: str, partition: int) -> list[RecordBatch]:
    """Every batch a read_committed fetch of the partition gets, from offset 0 to its end."""
    batches: list[RecordBatch] = []
    offset = 0
    with RawClient(bootstrap) as client:
        while True:
            body = {
                "replica_id": -1, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": 50 << 20, "isolation_level": 1,
                "session_id": 0, "session_epoch": -1,
                "topics": [{"topic": topic, "partitions": [
                    {"partition": partition, "fetch_offset": offset, "partition_max_bytes": 50 << 20}]}],
            }
            part = client.request(FETCH, 12, body).responses[0].partitions[0]
            assert part.error_code == ErrorCode.NO_ERROR
            got = [b for b in decode_batches(part.records or b"") if b.last_offset >= offset]
            batches += got
            if not got or batches[-1].next_offset >= part.high_watermark:
                return batches
            offset = batches[-1].next_offset


def layouts(bootstrap: str, view: str, source: str) -> set[str]:
    """What the view's batches are, compared with the source's batch at the same offset."""
    found = set()
    for p in range(PARTITIONS):
        originals = {b.base_offset: b for b in fetched_batches(bootstrap, source, p)}
        for batch in fetched_batches(bootstrap, view, p):
            if batch.is_control:
                found.add("gap-marker" if batch.producer_id == -1 else "transaction-marker")
            elif not batch.records:
                found.add("emptied")
            elif len(batch.records) == len(originals[batch.base_offset].records):
                found.add("whole")
            else:
                found.add(f"rebuilt-{batch.compression.name.lower()}")
    return found


# -- helpers ----------------------------------------------------------------------------------------


def as_read(records: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    return [(r["partition"], r["offset"], r["key"], r["value"], tuple((k, v) for k, v in r["headers"]),
             r["timestamp"]) for r in records]


def in_partition(records: list[tuple[Any, ...]], partition: int) -> list[tuple[Any, ...]]:
    return [r for r in records if r[0] == partition]


def by_partition(offsets: dict[int, int]) -> dict[str, int]:
    return {str(p): offset for p, offset in offsets.items()}


# -- tests ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("tag", TAGS)
def test_java_assign_reads_exactly_the_committed_records_of_a_view(
        java_views: JavaHarness, kbroker_target: Target, source: Source, tag: str) -> None:
    bootstrap = kbroker_target.bootstrap
    view = make_view(bootstrap, source, tag)
    expected = [s.as_read() for s in source.expected(tag)]
    for p in range(PARTITIONS):
        # The premise: the partition's newest records are not the view's, and some of its records are.
        assert 0 < in_partition(expected, p)[-1][1] + 1 < source.high_watermarks[p]
    assert layouts(bootstrap, view, source.name) == EVERY_LAYOUT

    result = java_views.run("consume_all", bootstrap=bootstrap, topic=view, isolation="read_committed")
    got = as_read(result["records"])
    for p in range(PARTITIONS):
        assert in_partition(got, p) == in_partition(expected, p), f"partition {p}"
    assert len(got) == len(expected)
    assert {r["timestamp_type"] for r in result["records"]} == {"CREATE_TIME"}
    # The consumer's position reached the high watermark through the gap marker after the last record.
    assert result["end"] == by_partition(source.high_watermarks)
    assert result["positions"] == by_partition(source.high_watermarks)
    assert result["beginning"] == {str(p): 0 for p in range(PARTITIONS)}


@pytest.mark.parametrize("tag", TAGS)
def test_java_group_on_a_view_resumes_exactly_after_a_restart(
        java_views: JavaHarness, kbroker_target: Target, source: Source, tag: str) -> None:
    bootstrap = kbroker_target.bootstrap
    view = make_view(bootstrap, source, tag)
    expected = [s.as_read() for s in source.expected(tag)]
    group = f"java-view-group-{uuid.uuid4().hex[:8]}"
    # Small fetches (a batch or so per partition each) interleave the partitions, so the first
    # member stops inside both; with the default 1 MiB it would drain one partition first.
    result = java_views.run("group_resume", bootstrap=bootstrap, topic=view, partitions=PARTITIONS, group=group,
                            first=len(expected) // 3, max_poll_records=7,
                            **{"client.max.partition.fetch.bytes": 2048})
    topic_partitions = [f"{view}:{p}" for p in range(PARTITIONS)]

    assert result["committed_before"] == dict.fromkeys(topic_partitions)
    assert result["first_assignment"] == topic_partitions
    first, second = as_read(result["first_records"]), as_read(result["second_records"])
    assert len(expected) // 3 <= len(first) < len(expected), "the first member read part of the view"
    # The first member committed its positions ...
    committed = {p: result["first_committed"][f"{view}:{p}"]["offset"] for p in range(PARTITIONS)}
    assert committed == {p: result["first_positions"][str(p)] for p in range(PARTITIONS)}
    for p in range(PARTITIONS):
        # ... inside each partition ...
        assert 0 < len(in_partition(first, p)) < len(in_partition(expected, p)), f"p{p}"
        # ... and they split the view exactly: what it read lies below, what it did not at or above ...
        assert in_partition(first, p) == [r for r in in_partition(expected, p) if r[1] < committed[p]], f"p{p}"
        # ... and the next member started there.
        assert in_partition(second, p) == [r for r in in_partition(expected, p) if r[1] >= committed[p]], f"p{p}"
    assert sorted(first + second) == sorted(expected)
    assert not set(first) & set(second), "no record twice"

    hw = by_partition(source.high_watermarks)
    assert result["end"] == hw
    assert result["second_positions"] == hw
    assert result["second_committed"] == {f"{view}:{p}": {"offset": source.high_watermarks[p], "metadata": ""}
                                          for p in range(PARTITIONS)}, "the group's lag is 0"


def test_java_offsets_of_a_view_are_its_sources(java_views: JavaHarness, kbroker_target: Target,
                                                source: Source) -> None:
    bootstrap = kbroker_target.bootstrap
    tag = "paid"
    view = make_view(bootstrap, source, tag)
    expected = source.expected(tag)
    # In each partition, a committed record the view does not keep, between two it keeps.
    probes = {}
    for p in range(PARTITIONS):
        kept = [s for s in expected if s.partition == p]
        middle = kept[len(kept) // 2]
        probes[p] = next(s for s in reversed(source.sent)
                         if s.partition == p and s.offset < middle.offset and s.committed and s.tag != tag)
    times = ",".join(str(probes[p].timestamp) for p in range(PARTITIONS))
    result = java_views.run("topic_offsets", bootstrap=bootstrap, topics=f"{view},{source.name}",
                            partitions=PARTITIONS, times=times)

    hw = by_partition(source.high_watermarks)
    for topic in (view, source.name):
        assert result[topic]["beginning"] == {str(p): 0 for p in range(PARTITIONS)}, topic
        assert result[topic]["end_read_committed"] == hw, topic
        assert result[topic]["end_read_uncommitted"] == hw, topic
        # By time: the source's record at that time, though the view does not keep it.
        assert result[topic]["offsets_for_times"] == {
            str(p): {"offset": probes[p].offset, "timestamp": probes[p].timestamp} for p in range(PARTITIONS)}, topic
    for p in range(PARTITIONS):
        first_kept = next(s for s in expected if s.partition == p and s.offset > probes[p].offset)
        assert as_read([result[view]["first_record_from_found"][str(p)]]) == [first_kept.as_read()]
        assert as_read([result[source.name]["first_record_from_found"][str(p)]]) == [probes[p].as_read()]


# -- at scale (slow) --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def million_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path_factory.mktemp("java-views-1m"),
                            overrides=views_million.BROKER_OVERRIDES).start()
    yield process
    if process.alive:
        assert process.stop() == 0, process.log_tail()


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_java_reads_exactly_each_views_committed_records_of_a_million(
        java_views: JavaHarness, million_broker: BrokerProcess) -> None:
    bootstrap = million_broker.bootstrap
    name, expected = views_million.build_source(bootstrap)
    hw = views_million.high_watermarks(bootstrap, name)
    assert sum(len(rows) for rows in expected.values()) == views_million.RECORDS - (
        views_million.TRANSACTIONS // 2 * views_million.TXN_RECORDS), "the premise: the aborted records are no tag's"
    for tag in views_million.TAGS:
        view = views_million.view_name(name, tag)
        # ~95,000 records a view: answered as offsets and a digest per partition, not record by record.
        result = java_views.run("consume_digest", timeout=330, bootstrap=bootstrap, topic=view,
                                isolation="read_committed", wait_ms=300_000)
        assert result["beginning"] == {str(p): 0 for p in range(views_million.PARTITIONS)}, tag
        assert result["end"] == by_partition(hw), tag
        assert sorted(result["partitions"]) == [str(p) for p in range(views_million.PARTITIONS)], tag
        for p in range(views_million.PARTITIONS):
            rows = [row for row in expected[tag] if row[0] == p]
            assert rows, f"the premise: {tag} has records in partition {p}"
            got = result["partitions"][str(p)]
            # Exactly the committed records of the tag, each once, in offset order ...
            assert got["count"] == len(rows), f"{tag} p{p}"
            assert got["offsets"] == [offset for _, offset, _ in rows], f"{tag} p{p}"
            # ... with their values, byte for byte, and nothing of another tag ...
            assert got["sha256"] == views_million.values_digest(value for _, _, value in rows), f"{tag} p{p}"
            assert got["tags"] == {tag: len(rows)}, f"{tag} p{p}"
            # ... and the consumer's position reached the high watermark.
            assert got["position"] == hw[p], f"{tag} p{p}"
