"""The archive at full scale (slow; docs/archive.md): a tiered topic with a local window of a few
segments receives 1 GiB; its local disk use comes down to, and stays within, that window, while
confluent-kafka, kafka-python and a Spark batch query read the whole GiB back exactly from offset
0, across broker restarts.

Run it with

    .venv/bin/python -m pytest tests/archive/test_archive_scale.py -m slow -s -q

(`-s` shows the throughput it measures). The Spark part needs pyspark, Java and Spark's Kafka
connector, as pyspark_examples/tests do (pyspark_examples/README.md), and skips without them.

The bound on the local disk is Kafka's (UnifiedLog.deleteRetentionSizeBreachedSegments, which
kbroker's LogTiering._delete_archived follows): a retention round deletes the oldest segment while
it is archived, not the active one, and the log without it is still at least
local.retention.bytes. So once the archive holds everything below the active segment and a round
has run, the partition's .log files sum to at least LOCAL_BYTES (nothing beyond the window is
deleted) and to less than LOCAL_BYTES plus its oldest segment's size, itself at most
SEGMENT_BYTES. While records arrive the disk also holds what the archive has not copied yet (the
active segment, segments closed since the last copy round): that excess is measured and reported.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import random
import resource
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import boto3
import pytest
from confluent_kafka import Consumer, KafkaError, Message, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from prometheus_client.parser import text_string_to_metric_families

from kbroker.s3_server import ACCESS_KEY_ID, SECRET_ACCESS_KEY, S3Server
from tests.archive.conftest import archiving, new_bucket_name
from tests.brokers import BrokerProcess, free_port
from tests.rawclient import RawClient
from tests.waiting import wait_until

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = [pytest.mark.slow, pytest.mark.timeout(3600)]

MIB = 1 << 20
VALUE_BYTES = 16 * 1024
RECORDS = 65_536  # VALUE_BYTES * RECORDS = 1 GiB of values
SEGMENT_BYTES = 16 * MIB
LOCAL_BYTES = 64 * MIB  # the local window: four segments
# Production pauses after each quarter until the archive has caught up, to check the window then.
CHECKPOINTS = (RECORDS // 4, RECORDS // 2, 3 * RECORDS // 4, RECORDS)
# The reader's chunk cache (remote.log.index.file.cache.total.size.bytes), far below the archive's
# size: every read of the GiB fetches most of it from the object store again.
CACHE_BYTES = 128 * MIB
SAMPLE_INTERVAL_S = 0.5
WAIT_S = 600.0
STALL_S = 120.0  # a read that gets no record for this long has failed
# The test process's peak RSS: 1 GiB passes through it several times, none of it may pile up.
MAX_TEST_RSS = 768 * MIB
EARLIEST, LATEST, EARLIEST_LOCAL, LATEST_TIERED = -2, -1, -4, -5


def value_of(offset: int) -> bytes:
    """Incompressible, and a function of the offset alone."""
    return random.Random(offset).randbytes(VALUE_BYTES)


def key_of(offset: int) -> bytes:
    return str(offset).encode()


# -- the partition on disk and in the broker ------------------------------------------------------


@dataclass(frozen=True)
class LocalLog:
    """The partition directory's segments (base offset, .log size), oldest first."""

    segments: list[tuple[int, int]]
    consistent: bool  # no segment came or went while it was measured

    @property
    def size(self) -> int:
        return sum(size for _, size in self.segments)

    @property
    def active_base(self) -> int:
        return self.segments[-1][0]


def local_log(broker: BrokerProcess, topic: str) -> LocalLog:
    directory = broker.log_dir / f"{topic}-0"
    names = sorted(p.name for p in directory.glob("*.log"))
    segments, consistent = [], True
    for name in names:
        try:
            segments.append((int(name.removesuffix(".log")), (directory / name).stat().st_size))
        except FileNotFoundError:  # deleted by local retention meanwhile
            consistent = False
    consistent = consistent and sorted(p.name for p in directory.glob("*.log")) == names
    return LocalLog(segments, consistent)


def list_offsets(bootstrap: str, topic: str, *timestamps: int) -> list[int]:
    """ListOffsets v9 of partition 0, one request per timestamp, in the order given."""
    client = RawClient(bootstrap, timeout=30)
    try:
        offsets = []
        for timestamp in timestamps:
            answer = client.request(2, 9, {"replica_id": -1, "isolation_level": 0, "topics": [
                {"name": topic, "partitions": [{"partition_index": 0, "current_leader_epoch": -1,
                                                "timestamp": timestamp}]}]})
            partition = answer.topics[0].partitions[0]
            assert partition.error_code == 0, (timestamp, partition.error_code)
            offsets.append(partition.offset)
        return offsets
    finally:
        client.close()


def metric(broker: BrokerProcess, name: str) -> float:
    port = broker.overrides["metrics.listener"].rsplit(":", 1)[1]
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    return sum(sample.value for family in text_string_to_metric_families(text)
               for sample in family.samples if sample.name == name)


def peak_rss(pid: int | None = None) -> int:
    """Bytes: this process's peak RSS, or another's (VmHWM)."""
    if pid is None:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return 0


def directory_bytes(directory: Path) -> int:
    total = 0
    for path in directory.rglob("*"):
        with contextlib.suppress(FileNotFoundError):  # evicted meanwhile
            total += path.stat().st_size if path.is_file() else 0
    return total


def mb_per_s(size: int, seconds: float) -> str:
    return f"{size / MIB:.0f} MiB in {seconds:.1f} s, {size / MIB / seconds:.1f} MiB/s"


# -- the broker ---------------------------------------------------------------------------------------


@dataclass
class Archive:
    """The bucket the broker archives to, listed with object sizes (boto3 directly)."""

    endpoint: str
    bucket: str

    def segment_logs(self, topic: str) -> dict[int, list[int]]:
        """Base offset -> sizes of the archived segments' .log objects of the topic."""
        client = s3_client(self.endpoint)
        found: dict[int, list[int]] = {}
        try:
            for page in client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=f"{topic}."):
                for item in page.get("Contents", ()):
                    # <topic>.<topic id>-0/<base offset, 20 digits>-<segment id>.log
                    if item["Key"].endswith(".log"):
                        base = int(item["Key"].split("/")[1].split("-")[0])
                        found.setdefault(base, []).append(item["Size"])
        finally:
            client.close()
        return found


def s3_client(endpoint: str) -> Any:
    return boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id=ACCESS_KEY_ID,
                        aws_secret_access_key=SECRET_ACCESS_KEY)


@pytest.fixture(scope="module")
def archive(s3_server: S3Server) -> Archive:
    bucket = new_bucket_name()
    client = s3_client(s3_server.endpoint)
    client.create_bucket(Bucket=bucket)
    client.close()
    return Archive(s3_server.endpoint, bucket)


@pytest.fixture(scope="module")
def broker(archive: Archive, tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path_factory.mktemp("archive-scale"), overrides={
        **archiving(archive.endpoint, archive.bucket),
        "remote.log.index.file.cache.total.size.bytes": str(CACHE_BYTES),
        "metrics.listener": f"http://127.0.0.1:{free_port()}",
    }).start()
    yield process
    if process.alive:
        print(f"\nbroker peak RSS {peak_rss(process.pid) / MIB:.0f} MiB")
        assert process.stop() == 0, process.log_tail()
    assert not (errors := process.unknown_field_errors()), "\n".join(errors)


def restart(broker: BrokerProcess) -> float:
    """Stop (cleanly) and start again on the same data directory; the seconds it took."""
    started = time.monotonic()
    assert broker.stop() == 0, broker.log_tail()
    broker.start()
    return time.monotonic() - started


# -- the GiB in, and the window checked --------------------------------------------------------------


@dataclass
class Loaded:
    """The topic holding the GiB, and what was seen while it went in."""

    broker: BrokerProcess
    archive: Archive
    topic: str
    digests: list[bytes]  # SHA-256 of each offset's value
    windows: list[tuple[str, LocalLog]] = field(default_factory=list)  # the settled window at each check
    samples: int = 0  # measurements of the disk while production ran
    peak_while_producing: int = 0  # the largest local log then


def settled_window(loaded: Loaded, when: str) -> LocalLog:
    """Wait until the archive holds everything below the active segment and local retention has
    run after that (its oldest segment is the active one, or the log without it is below the
    window); check the window is then Kafka's and the broker's offsets agree; return it."""
    broker, topic = loaded.broker, loaded.topic

    def settled() -> LocalLog | None:
        log = local_log(broker, topic)
        (tiered,) = list_offsets(broker.bootstrap, topic, LATEST_TIERED)
        if not log.consistent or tiered != log.active_base - 1:
            return None
        if len(log.segments) > 1 and log.size - log.segments[0][1] >= LOCAL_BYTES:
            return None
        return log

    waited = time.monotonic()
    log = wait_until(settled, WAIT_S, f"the archive caught up and the disk down to its window ({when})")
    waited = time.monotonic() - waited
    sizes = [size for _, size in log.segments]
    assert max(sizes) <= SEGMENT_BYTES, log.segments
    assert LOCAL_BYTES <= log.size < LOCAL_BYTES + SEGMENT_BYTES, (when, log.segments)
    earliest, local_start, tiered = list_offsets(broker.bootstrap, topic, EARLIEST, EARLIEST_LOCAL, LATEST_TIERED)
    assert (earliest, local_start, tiered) == (0, log.segments[0][0], log.active_base - 1), when
    # Each segment below the active one is in the archive exactly once, with the local file's size.
    archived = loaded.archive.segment_logs(topic)
    assert all(len(sizes) == 1 for sizes in archived.values()), {b: s for b, s in archived.items() if len(s) > 1}
    assert max(archived) < log.active_base, (when, max(archived), log.active_base)
    for base, size in log.segments[:-1]:
        assert archived.get(base) == [size], (when, base, size, archived.get(base))
    loaded.windows.append((when, log))
    print(f"  {when}: local {log.size / MIB:.1f} MiB in {len(log.segments)} segments "
          f"(window {LOCAL_BYTES / MIB:.0f} MiB + < {SEGMENT_BYTES / MIB:.0f} MiB), archive "
          f"{sum(s[0] for s in archived.values()) / MIB:.1f} MiB in {len(archived)} segments, "
          f"local log start {local_start}; settled in {waited:.1f} s")
    return log


def sample_while_producing(loaded: Loaded) -> None:
    """While records arrive: nothing unarchived is deleted (the local log start is at most one
    past the archive's last offset) and, once local retention has deleted anything, the disk
    never holds less than the window."""
    broker, topic = loaded.broker, loaded.topic
    # The local start first: both only grow, so the archive's offset read after it is no smaller.
    local_start, tiered = list_offsets(broker.bootstrap, topic, EARLIEST_LOCAL, LATEST_TIERED)
    assert local_start <= tiered + 1, (local_start, tiered)
    log = local_log(broker, topic)
    if log.consistent:
        assert max(size for _, size in log.segments) <= SEGMENT_BYTES, log.segments
        if log.segments[0][0] > 0:
            assert log.size >= LOCAL_BYTES, log.segments
    loaded.samples += 1
    loaded.peak_while_producing = max(loaded.peak_while_producing, log.size)


def produced_label(records: int) -> str:
    return f"after {records * VALUE_BYTES / MIB:.0f} MiB"


def produce(loaded: Loaded) -> None:
    """The GiB with confluent-kafka (idempotent, acks=all, a 64 MiB send buffer), checking each
    delivery's offset; after each quarter, the settled window."""
    broker, topic = loaded.broker, loaded.topic
    delivered = 0

    def on_delivery(error: KafkaError | None, message: Message) -> None:
        nonlocal delivered
        assert error is None, error
        assert message.offset() == int(message.key()), (message.offset(), message.key())
        delivered += 1

    producer = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True, "linger.ms": 5,
                         "queue.buffering.max.kbytes": 64 * 1024, "compression.type": "none"})
    started = next_sample = time.monotonic()
    paused = 0.0
    offset = 0
    for checkpoint in CHECKPOINTS:
        while offset < checkpoint:
            value = value_of(offset)
            loaded.digests.append(hashlib.sha256(value).digest())
            while True:
                try:
                    producer.produce(topic, value, key_of(offset), partition=0, on_delivery=on_delivery)
                    break
                except BufferError:  # the send buffer is full: wait for deliveries
                    producer.poll(0.05)
            producer.poll(0)
            offset += 1
            if time.monotonic() >= next_sample:
                sample_while_producing(loaded)
                next_sample = time.monotonic() + SAMPLE_INTERVAL_S
        assert producer.flush(WAIT_S) == 0
        assert delivered == offset
        pause = time.monotonic()
        settled_window(loaded, produced_label(offset))
        paused += time.monotonic() - pause
    elapsed = time.monotonic() - started
    print(f"  produced: {mb_per_s(RECORDS * VALUE_BYTES, elapsed - paused)} (not counting the {paused:.1f} s "
          f"of waits for the window; {elapsed:.1f} s with them); the local log while producing: at most "
          f"{loaded.peak_while_producing / MIB:.1f} MiB in {loaded.samples} samples")


@pytest.fixture(scope="module")
def loaded(broker: BrokerProcess, archive: Archive) -> Loaded:
    topic = f"scale-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})  # kept until the creation's answer
    admin.create_topics([NewTopic(topic, 1, 1, config={
        "remote.storage.enable": "true", "segment.bytes": str(SEGMENT_BYTES),
        "local.retention.bytes": str(LOCAL_BYTES), "file.delete.delay.ms": "0"})])[topic].result(30)
    loaded = Loaded(broker, archive, topic, [])
    print(f"\n1 GiB into {topic}:")
    produce(loaded)
    assert list_offsets(broker.bootstrap, topic, LATEST) == [RECORDS]
    print(f"  archive: {metric(broker, 'kbroker_archive_segments_copied_total'):.0f} segments, "
          f"{metric(broker, 'kbroker_archive_bytes_copied_total') / MIB:.1f} MiB copied, "
          f"{metric(broker, 'kbroker_archive_failures_total'):.0f} failed rounds; "
          f"broker peak RSS {peak_rss(broker.pid) / MIB:.0f} MiB")
    before = loaded.windows[-1][1]
    print(f"  restart: {restart(broker):.1f} s")
    after = settled_window(loaded, "after a restart")
    assert after.segments == before.segments, "the segments after the restart"
    return loaded


# -- reading it back --------------------------------------------------------------------------------


@dataclass
class Expected:
    """Checks records, in the order read, against the offsets and values produced."""

    digests: list[bytes]
    next: int = 0
    bytes: int = 0
    started: float = field(default_factory=time.monotonic)
    last_progress: float = field(default_factory=time.monotonic)

    def take(self, offset: int, key: bytes | None, value_digest: bytes, size: int) -> None:
        assert offset == self.next, f"offset {offset} where {self.next} was due"
        assert key == key_of(offset), (offset, key)
        assert size == VALUE_BYTES and value_digest == self.digests[offset], f"the value at offset {offset}"
        self.next += 1
        self.bytes += size
        self.last_progress = time.monotonic()

    def stalled(self) -> bool:
        return time.monotonic() - self.last_progress > STALL_S

    def done(self, who: str) -> str:
        assert self.next == RECORDS, (who, self.next)
        return f"  {who}: {RECORDS} records, {mb_per_s(self.bytes, time.monotonic() - self.started)}"


def check_window_kept(loaded: Loaded, when: str) -> None:
    """Reads go to the archive (through the bounded chunk cache), not to the local log: the
    window is as settled, and the cache within its size."""
    settled_window(loaded, when)
    cache = directory_bytes(loaded.broker.log_dir / "remote-log-cache")
    assert cache <= CACHE_BYTES, cache
    print(f"  chunk cache {cache / MIB:.0f} MiB; chunks fetched from the store "
          f"{metric(loaded.broker, 'kbroker_archive_reads_from_store_total'):.0f}; "
          f"test process peak RSS {peak_rss() / MIB:.0f} MiB")
    assert peak_rss() < MAX_TEST_RSS


def test_the_local_disk_keeps_its_window(loaded: Loaded) -> None:
    """Checked as the GiB went in (each sample, each quarter), then after a restart."""
    assert loaded.samples > 0
    assert [when for when, _ in loaded.windows[:len(CHECKPOINTS) + 1]] == [
        *(produced_label(records) for records in CHECKPOINTS), "after a restart"]
    assert loaded.windows[len(CHECKPOINTS)][1].segments[0][0] > 0, "local retention deleted archived segments"


def test_confluent_kafka_reads_the_gib_from_offset_0_across_a_restart(loaded: Loaded) -> None:
    """The broker restarts half way through the read; the consumer carries on."""
    broker = loaded.broker
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"g-{uuid.uuid4().hex}",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(loaded.topic, 0, 0)])
    expected, restarted, transient = Expected(loaded.digests), False, 0
    try:
        while expected.next < RECORDS:
            if not restarted and expected.next >= RECORDS // 2:
                print(f"  restart at offset {expected.next}: {restart(broker):.1f} s")
                restarted = True
            for message in consumer.consume(500, timeout=1):
                if (error := message.error()) is not None:
                    # The broker away while it restarts: librdkafka reconnects by itself.
                    assert restarted and not error.fatal() and error.code() in (
                        KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN), error
                    transient += 1
                    continue
                value = message.value()
                expected.take(message.offset(), message.key(), hashlib.sha256(value).digest(), len(value))
            assert not expected.stalled(), f"no record after offset {expected.next - 1} for {STALL_S} s"
    finally:
        consumer.close()
    print(expected.done("confluent-kafka") + f" ({transient} transient errors while the broker restarted)")
    check_window_kept(loaded, "after the confluent-kafka read")


def test_kafka_python_reads_the_gib_from_offset_0(loaded: Loaded) -> None:
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KafkaTopicPartition

    consumer = KafkaConsumer(bootstrap_servers=loaded.broker.bootstrap, enable_auto_commit=False)
    partition = KafkaTopicPartition(loaded.topic, 0)
    consumer.assign([partition])
    consumer.seek(partition, 0)
    expected = Expected(loaded.digests)
    try:
        while expected.next < RECORDS:
            for records in consumer.poll(timeout_ms=1000).values():
                for record in records:
                    expected.take(record.offset, record.key, hashlib.sha256(record.value).digest(),
                                  len(record.value))
            assert not expected.stalled(), f"no record after offset {expected.next - 1} for {STALL_S} s"
    finally:
        consumer.close()
    print(expected.done("kafka-python"))
    check_window_kept(loaded, "after the kafka-python read")


@pytest.fixture(scope="module")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkSession]:
    """A local SparkSession with Spark's Kafka connector (the run's own, when pyspark_examples/tests'
    is running already), or a skip saying what is missing: pyspark, Java, the connector's jars
    (pyspark_examples/tests' rules, which fail instead in CI). A test asks for it before `loaded`,
    so that run alone it skips before producing the GiB."""
    from pyspark_examples.tests.conftest import pinned_kafka_clients, require_spark
    from pyspark_examples.tests.connector import find_connector, require_connector

    connector = find_connector(require_spark(), fallback_kafka_clients=pinned_kafka_clients)
    require_connector(connector)
    from pyspark.sql import SparkSession

    if (running := SparkSession.getActiveSession()) is not None:
        yield running
        return
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    scratch = tmp_path_factory.mktemp("spark")
    conf = {
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.driver.host": "127.0.0.1",
        "spark.driver.bindAddress": "127.0.0.1",
        "spark.local.dir": str(scratch / "local"),
        "spark.sql.warehouse.dir": str(scratch / "warehouse"),
        **connector.spark_conf(),
    }
    builder = SparkSession.builder.master("local[2]").appName("kbroker-archive-scale")
    for key, value in conf.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


def test_spark_batch_read_of_the_gib_from_offset_0(spark: SparkSession, loaded: Loaded) -> None:
    """spark.read.format("kafka"), earliest to latest: Spark hashes each value (SHA-256) and the
    hashes come to the test a partition at a time, in offset order; the GiB stays in Spark."""
    from pyspark.sql import functions as F

    rows = (spark.read.format("kafka").option("kafka.bootstrap.servers", loaded.broker.bootstrap)
            .option("subscribe", loaded.topic)
            .option("startingOffsets", "earliest").option("endingOffsets", "latest")
            .option("failOnDataLoss", "true").load()
            .select("partition", "offset", "key", F.length("value").alias("size"),
                    F.unhex(F.sha2("value", 256)).alias("sha256"))
            .sortWithinPartitions("partition", "offset"))
    expected = Expected(loaded.digests)
    for row in rows.toLocalIterator():
        assert row.partition == 0
        expected.take(row.offset, bytes(row.key), bytes(row.sha256), row.size)
    print(expected.done("Spark batch read"))
    check_window_kept(loaded, "after the Spark read")
