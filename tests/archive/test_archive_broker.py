"""The archive on a real broker (docs/archive.md): a tiered topic's closed segments go to a real
S3-compatible server (moto's, as a process), the broker's disk keeps only the local window, and
consumers read every record back from offset 0 — from the archive below the local log start —
across a restart; while the object store cannot be reached, nothing local is deleted, archived
offsets get a retriable error, and the archive catches up once it is back."""

from __future__ import annotations

import hashlib
import random
import threading
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourceType,
)
from prometheus_client.parser import text_string_to_metric_families

from kbroker.archive.object_store import ObjectNotFound, ObjectStore
from kbroker.client import Client
from kbroker.launcher import LaunchError
from kbroker.s3_server import S3Server
from protocol.errors import ErrorCode
from tests.archive.conftest import archiving, new_bucket_name, store_config
from tests.brokers import BrokerProcess, free_port
from tests.rawclient import RawClient
from tests.tcp_proxy import TcpProxy
from tests.waiting import wait_until

RECORDS = 2000
OUTAGE_S = 60  # the object store gone for a minute
# Record i is timestamped TS0 + i: ListOffsets by time has one right answer. An hour ago, well
# within the default retention.
TS0 = int(time.time() * 1000) - 3_600_000
VALUE_BYTES = 10_000  # 20 MB in all
SEGMENT_BYTES = 1 << 20
LOCAL_BYTES = 3 << 20
ROLL_RECORDS = SEGMENT_BYTES // VALUE_BYTES + 20  # enough to close the active segment
EARLIEST_LOCAL, LATEST_TIERED = -4, -5


def value_of(offset: int) -> bytes:
    """Incompressible, and different for every offset."""
    return random.Random(offset).randbytes(VALUE_BYTES)


@pytest.fixture
def archive(s3_server: S3Server, tmp_path: Path) -> Iterator[tuple[TcpProxy, ObjectStore, str]]:
    """A bucket on the S3 server, reached by the broker through a proxy the test can cut."""
    bucket = new_bucket_name()
    store = ObjectStore(store_config(s3_server.endpoint, bucket))
    store.ensure_bucket()
    with TcpProxy(s3_server.port) as proxy:
        yield proxy, store, bucket
    store.close()


@pytest.fixture
def broker(archive: tuple[TcpProxy, ObjectStore, str], tmp_path: Path) -> Iterator[BrokerProcess]:
    """A broker archiving to the bucket through the proxy; it must stop cleanly."""
    proxy, _, bucket = archive
    process = start_broker(tmp_path / "broker", proxy.endpoint, bucket)
    yield process
    assert process.stop() == 0, process.log_tail()


def start_broker(directory: Path, endpoint: str, bucket: str) -> BrokerProcess:
    return BrokerProcess(directory, overrides={
        **archiving(endpoint, bucket), "metrics.listener": f"http://127.0.0.1:{free_port()}"}).start()


def metric(broker: BrokerProcess, name: str) -> float:
    port = broker.overrides["metrics.listener"].rsplit(":", 1)[1]
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name:
                return sample.value
    raise AssertionError(f"no {name} in the metrics")


def create_tiered(bootstrap: str, topic: str | None = None) -> str:
    topic = topic or f"tiered-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1, config={
        "remote.storage.enable": "true", "segment.bytes": str(SEGMENT_BYTES),
        "local.retention.bytes": str(LOCAL_BYTES), "file.delete.delay.ms": "0"})])[topic].result(30)
    return topic


def produce(bootstrap: str, topic: str, start: int, count: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "enable.idempotence": True})
    for offset in range(start, start + count):
        producer.produce(topic, value_of(offset), partition=0, timestamp=TS0 + offset)
        producer.poll(0)
    assert producer.flush(60) == 0


def local_log_bytes(broker: BrokerProcess, topic: str) -> int:
    return sum(f.stat().st_size for f in (broker.log_dir / f"{topic}-0").glob("*.log"))


def list_offset(bootstrap: str, topic: str, timestamp: int) -> int:
    client = RawClient(bootstrap)
    answer = client.request(2, 9, {"replica_id": -1, "isolation_level": 0, "topics": [
        {"name": topic, "partitions": [{"partition_index": 0, "current_leader_epoch": -1, "timestamp": timestamp}]}]})
    client.sock.close()
    partition = answer.topics[0].partitions[0]
    assert partition.error_code == 0
    return partition.offset


def fetch_error(bootstrap: str, topic: str, offset: int) -> int:
    client = RawClient(bootstrap, timeout=30)
    answer = client.request(1, 12, {"max_wait_ms": 0, "min_bytes": 0, "max_bytes": 1 << 20, "isolation_level": 0,
                                    "session_id": 0, "session_epoch": -1, "topics": [{"topic": topic, "partitions": [
                                        {"partition": 0, "fetch_offset": offset, "partition_max_bytes": 1 << 20,
                                         "current_leader_epoch": -1, "log_start_offset": -1}]}],
                                    "forgotten_topics_data": [], "rack_id": ""})
    client.sock.close()
    result = answer.responses[0].partitions[0]
    assert result.error_code != 0 or len(result.records) > 0
    return result.error_code


def digest_by_confluent(bootstrap: str, topic: str, count: int, timeout_s: float = 300) -> str:
    """The digest of the first `count` records' values; AssertionError after `timeout_s` (a
    reader in a background thread must not outlive a failed test for the rest of the run)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4().hex}",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, 0)])
    digest, expected = hashlib.sha256(), 0
    deadline = time.monotonic() + timeout_s
    try:
        while expected < count:
            assert time.monotonic() < deadline, f"{expected} of {count} records read in {timeout_s} s"
            for message in consumer.consume(500, timeout=10):
                assert message.error() is None, message.error()
                assert message.offset() == expected
                digest.update(message.value())
                expected += 1
    finally:
        consumer.close()
    return digest.hexdigest()


def digest_by_kafka_python(bootstrap: str, topic: str, count: int) -> str:
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KafkaTopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, consumer_timeout_ms=30_000)
    partition = KafkaTopicPartition(topic, 0)
    consumer.assign([partition])
    consumer.seek(partition, 0)
    digest, expected = hashlib.sha256(), 0
    try:
        for message in consumer:
            assert message.offset == expected
            digest.update(message.value)
            expected += 1
            if expected == count:
                break
    finally:
        consumer.close()
    assert expected == count
    return digest.hexdigest()


def expected_digest(count: int) -> str:
    digest = hashlib.sha256()
    for offset in range(count):
        digest.update(value_of(offset))
    return digest.hexdigest()


def archived_logs(store: ObjectStore, topic: str) -> list[str]:
    """The archived segments' .log objects of the topic (under `<topic>.<topic id>-0/`)."""
    return sorted(key for key in store.list_keys(f"{topic}.") if key.endswith(".log"))


def test_a_tiered_topic_keeps_its_local_window_and_reads_back_from_offset_0(
        archive: tuple[TcpProxy, ObjectStore, str], broker: BrokerProcess) -> None:
    _, store, _ = archive
    topic = create_tiered(broker.bootstrap)
    produce(broker.bootstrap, topic, 0, RECORDS)
    # The disk down to the window (plus the active segment, which is never archived, and the one
    # being filled when retention last ran). The window's closed segments may still be on their
    # way to the store when the disk gets there, so the archive is waited for as well.
    wait_until(lambda: local_log_bytes(broker, topic) <= LOCAL_BYTES + 2 * SEGMENT_BYTES, 180,
               "the local log down to its window")
    wait_until(lambda: len(archived_logs(store, topic)) >= RECORDS * VALUE_BYTES // SEGMENT_BYTES - 2, 180,
               "every closed segment archived")
    segments = archived_logs(store, topic)
    assert len({key.split("/")[1].split("-")[0] for key in segments}) == len(segments)  # no base offset twice
    local_start = list_offset(broker.bootstrap, topic, EARLIEST_LOCAL)
    assert list_offset(broker.bootstrap, topic, -2) == 0 < local_start
    assert list_offset(broker.bootstrap, topic, LATEST_TIERED) >= local_start - 1
    # By time: in the archive, at its first offset, and in the local log.
    for offset in (0, 7, local_start // 2, local_start - 1, local_start, RECORDS - 1):
        assert list_offset(broker.bootstrap, topic, TS0 + offset) == offset
    expected = expected_digest(RECORDS)
    assert digest_by_confluent(broker.bootstrap, topic, RECORDS) == expected
    assert digest_by_kafka_python(broker.bootstrap, topic, RECORDS) == expected
    broker.restart()
    assert list_offset(broker.bootstrap, topic, -2) == 0
    assert digest_by_confluent(broker.bootstrap, topic, RECORDS) == expected


def test_a_minute_without_the_object_store_loses_nothing_and_catches_up(
        archive: tuple[TcpProxy, ObjectStore, str], broker: BrokerProcess) -> None:
    """The object store unreachable (connections refused, as a stopped server's) for a minute
    while production goes on: nothing local is deleted, every archiver retry fails and is
    counted, a fetch of archived offsets gets a retriable error, and a consumer reading from
    offset 0 meanwhile gets every record once the store is back."""
    proxy, _, _ = archive
    topic = create_tiered(broker.bootstrap)
    first_half = RECORDS // 2
    produce(broker.bootstrap, topic, 0, first_half)
    wait_until(lambda: list_offset(broker.bootstrap, topic, EARLIEST_LOCAL) > 0, 180, "archived segments deleted")
    copied = metric(broker, "kbroker_archive_segments_copied_total")
    proxy.cut()
    cut_at = time.monotonic()
    reader = ReadInBackground(broker.bootstrap, topic, first_half)
    reader.start()
    # Every closed segment may already be archived: the archiver only touches the store (and
    # fails) once a new segment has closed, so a segment's worth and more is written first.
    produce(broker.bootstrap, topic, first_half, ROLL_RECORDS)
    produced = first_half + ROLL_RECORDS
    while time.monotonic() - cut_at < OUTAGE_S:
        failures = metric(broker, "kbroker_archive_failures_total")
        wait_until(lambda before=failures: metric(broker, "kbroker_archive_failures_total") > before, 60,
                   "an archiver retry")
        produce(broker.bootstrap, topic, produced, 20)
        produced += 20
        # Nothing archived meanwhile, so nothing more deleted: the disk holds all that came since.
        assert local_log_bytes(broker, topic) >= (produced - first_half) * VALUE_BYTES
        assert fetch_error(broker.bootstrap, topic, 0) == ErrorCode.KAFKA_STORAGE_ERROR
    assert reader.is_alive()  # still waiting for the archive
    assert "archiving" in broker.log_text() and "failed" in broker.log_text()
    proxy.restore()
    reader.join(180)
    assert reader.digest == expected_digest(first_half)
    wait_until(lambda: local_log_bytes(broker, topic) <= LOCAL_BYTES + 2 * SEGMENT_BYTES, 180,
               "the archive caught up and the disk down to its window")
    assert fetch_error(broker.bootstrap, topic, 0) == 0
    assert metric(broker, "kbroker_archive_segments_copied_total") > copied
    assert digest_by_confluent(broker.bootstrap, topic, produced) == expected_digest(produced)


class ReadInBackground(threading.Thread):
    """A confluent-kafka consumer reading the first `count` records from offset 0."""

    def __init__(self, bootstrap: str, topic: str, count: int) -> None:
        super().__init__(daemon=True)
        self.args = (bootstrap, topic, count)
        self.digest: str | BaseException | None = None

    def run(self) -> None:
        try:
            self.digest = digest_by_confluent(*self.args)
        except BaseException as e:  # the test's thread reports it
            self.digest = e


@pytest.mark.parametrize("overrides, reason", [
    ({}, "remote.log.storage.system.enable=true needs remote.log.storage.s3.bucket"),
    ({"remote.log.storage.s3.bucket": "b", "log.encryption.key.file": "KEYS"},
     "remote.log.storage.system.enable=true with log.encryption.key.file is not supported"),
])
def test_archiving_that_cannot_work_stops_the_start(tmp_path: Path, overrides: dict[str, str], reason: str) -> None:
    keys = tmp_path / "keys"
    keys.write_text("1:" + "A" * 43 + "=\n")
    keys.chmod(0o600)
    settings = {name: str(keys) if value == "KEYS" else value for name, value in overrides.items()}
    broker = BrokerProcess(tmp_path / "broker", overrides={"remote.log.storage.system.enable": "true", **settings})
    with pytest.raises(LaunchError):
        broker.start()
    assert f"refusing to start: {reason}" in broker.log_text()


def test_tiered_topic_configs_are_checked(broker: BrokerProcess, tmp_path: Path) -> None:
    plain = BrokerProcess(tmp_path / "plain").start()
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})

        def refusal(configs: dict[str, str], on: AdminClient = admin) -> str:
            topic = f"bad-{uuid.uuid4().hex[:8]}"
            partitions = -1 if "view.source.topic" in configs else 1
            with pytest.raises(KafkaException) as raised:
                on.create_topics([NewTopic(topic, partitions, config=configs)])[topic].result(30)
            error = raised.value.args[0]
            assert error.code() == KafkaError.INVALID_CONFIG
            return error.str()

        assert "Tiered Storage functionality is disabled in the broker" in refusal(
            {"remote.storage.enable": "true"}, AdminClient({"bootstrap.servers": plain.bootstrap}))
        assert "unsupported for the compacted topics" in refusal(
            {"remote.storage.enable": "true", "cleanup.policy": "compact"})
        assert "must not be more than retention.bytes" in refusal(
            {"remote.storage.enable": "true", "retention.bytes": "1000", "local.retention.bytes": "2000"})
        assert "must not be -1 as retention.ms" in refusal(
            {"remote.storage.enable": "true", "local.retention.ms": "-1"})
        topic = create_tiered(broker.bootstrap)
        # Views do not read the archive: a tiered topic has none, a topic with views is not tiered.
        assert "is a tiered topic" in refusal({"view.source.topic": topic, "view.filter": "tag exists"})
        plain_topic = f"plain-{uuid.uuid4().hex[:8]}"
        admin.create_topics([NewTopic(plain_topic, 1, 1)])[plain_topic].result(30)
        view = f"view-{uuid.uuid4().hex[:8]}"
        admin.create_topics([NewTopic(view, -1, config={"view.source.topic": plain_topic,
                                                        "view.filter": "tag exists"})])[view].result(30)
        tier = ConfigResource(ResourceType.TOPIC, plain_topic, incremental_configs=[
            ConfigEntry("remote.storage.enable", "true", incremental_operation=AlterConfigOpType.SET)])
        with pytest.raises(KafkaException) as raised:
            admin.incremental_alter_configs([tier])[tier].result(30)
        assert f"has views ({view})" in raised.value.args[0].str()
        off = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[
            ConfigEntry("remote.storage.enable", "false", incremental_operation=AlterConfigOpType.SET)])
        with pytest.raises(KafkaException) as raised:
            admin.incremental_alter_configs([off])[off].result(30)
        assert "cannot be turned off" in raised.value.args[0].str()
    finally:
        assert plain.stop() == 0, plain.log_tail()


def test_deleting_a_tiered_topic_deletes_its_archive(archive: tuple[TcpProxy, ObjectStore, str],
                                                    broker: BrokerProcess) -> None:
    """Its objects go; a topic created again under its name archives apart from the old one."""
    _, store, _ = archive
    topic = create_tiered(broker.bootstrap)
    produce(broker.bootstrap, topic, 0, RECORDS // 4)
    wait_until(lambda: len(archived_logs(store, topic)) >= 2, 180, "segments archived")
    old_keys = store.list_keys(f"{topic}.")
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.delete_topics([topic])[topic].result(30)
    wait_until(lambda: not store.list_keys(f"{topic}."), 180, "the deleted topic's archive gone")
    wait_until(lambda: topic not in admin.list_topics(timeout=10).topics, 30, "the topic gone")
    create_tiered(broker.bootstrap, topic)
    produce(broker.bootstrap, topic, 0, RECORDS // 4)
    wait_until(lambda: len(archived_logs(store, topic)) >= 2, 180, "the new topic's segments archived")
    assert not set(store.list_keys(f"{topic}.")) & set(old_keys)
    assert digest_by_confluent(broker.bootstrap, topic, RECORDS // 4) == expected_digest(RECORDS // 4)


def test_delete_records_and_the_total_retention_clean_the_archive(archive: tuple[TcpProxy, ObjectStore, str],
                                                                  broker: BrokerProcess) -> None:
    _, store, _ = archive
    topic = create_tiered(broker.bootstrap)
    produce(broker.bootstrap, topic, 0, RECORDS // 2)
    wait_until(lambda: list_offset(broker.bootstrap, topic, EARLIEST_LOCAL) > 0, 180, "archived segments deleted")
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    # DeleteRecords into the archive: the partition starts there; the segments wholly below go.
    cut = list_offset(broker.bootstrap, topic, EARLIEST_LOCAL) // 2
    deleted = admin.delete_records([TopicPartition(topic, 0, cut)])
    assert next(iter(deleted.values())).result(30).low_watermark == cut
    assert list_offset(broker.bootstrap, topic, -2) == cut
    wait_until(lambda: sum(base_of(key) <= cut for key in archived_logs(store, topic)) == 1, 60,
               "the archived segments below the log start deleted")
    assert first_offset_read(broker.bootstrap, topic) == cut
    # retention.bytes over the archive and the disk: the oldest archived segments go, as long as
    # what is left stays at or over the limit (Kafka's rule).
    limit = LOCAL_BYTES + 2 * SEGMENT_BYTES
    assert whole_log_bytes(broker, store, topic)[0] > limit
    retention = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[
        ConfigEntry("retention.bytes", str(limit), incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([retention])[retention].result(30)
    wait_until(lambda: (sizes := whole_log_bytes(broker, store, topic))[0] - sizes[1] < limit, 60,
               "the archive within retention", interval_s=0.5)
    assert whole_log_bytes(broker, store, topic)[0] >= limit
    start = list_offset(broker.bootstrap, topic, -2)
    assert start == min(base_of(key) for key in archived_logs(store, topic)) > cut
    assert first_offset_read(broker.bootstrap, topic) == start


def whole_log_bytes(broker: BrokerProcess, store: ObjectStore, topic: str) -> tuple[int, int]:
    """What retention.bytes counts (the archived segments and the local ones not archived), and
    the oldest archived segment's size."""
    with Client(broker.bootstrap) as client:
        archived = client.describe_archive_of([(topic, 0)])[0]
    local_only = sum(path.stat().st_size for path in (broker.log_dir / f"{topic}-0").glob("*.log")
                     if int(path.stem) > archived.highest_archived_offset)
    oldest = min(archived_logs(store, topic), key=base_of)
    try:
        oldest_size = len(store.get_bytes(oldest))
    except ObjectNotFound:  # deleted since the listing: counted as nothing, and asked again
        oldest_size = 0
    return archived.archived_size + local_only, oldest_size


def base_of(key: str) -> int:
    """The base offset in an archived object's name (`<topic key>-<partition>/<base>-<id>.log`)."""
    return int(key.split("/")[1].split("-")[0])


def first_offset_read(bootstrap: str, topic: str) -> int:
    """The first offset a consumer starting at the earliest offset gets."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4().hex}",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe([topic])
    try:
        message = wait_until(lambda: consumer.poll(1), 60, "a record")
        assert message.error() is None, message.error()
        return message.offset()
    finally:
        consumer.close()
