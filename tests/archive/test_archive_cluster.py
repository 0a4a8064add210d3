"""The archive on three brokers (docs/archive.md): the leader of a tiered partition is killed
while it archives; the new leader goes on from what the partition's remote log metadata says is
archived, so the object store ends up holding every offset exactly once; the old leader, back
after the new one's local window moved past its log, starts over from the archive and becomes
a replica that can lead and serve everything from offset 0."""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from kbroker.archive.object_store import ObjectStore
from kbroker.archive.remote_log import SEGMENT_FILES
from kbroker.s3_server import S3Server
from protocol.records import read_header
from tests.archive.conftest import archiving, new_bucket_name
from tests.archive.test_archive_broker import (
    archived_logs,
    base_of,
    digest_by_confluent,
    list_offset,
    local_log_bytes,
    value_of,
)
from tests.brokers import BrokerProcess, bootstrap_of, running_cluster
from tests.integration.test_replicated_cluster import LAG_SETTINGS, partition_info
from tests.waiting import wait_until

SEGMENT_BYTES = 1 << 20
LOCAL_BYTES = 3 << 20
EARLIEST_LOCAL = -4


@pytest.fixture
def bucket(make_store: Callable[..., ObjectStore]) -> tuple[ObjectStore, str]:
    name = new_bucket_name()
    return make_store(name), name


class PacedProducer(threading.Thread):
    """Produces value_of(0), value_of(1), ... with acks=all until told to stop, a flush every
    100 records: at most that many unacknowledged when a broker dies."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        super().__init__(daemon=True)
        # Small batches: segments of the leader and its followers then end at different offsets.
        self.producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5,
                                  "batch.size": 64 * 1024, "message.timeout.ms": 120_000})
        self.topic = topic
        self.acked = 0
        self.errors: list[str] = []
        self.stopping = threading.Event()

    def run(self) -> None:
        sent = 0
        while not self.stopping.is_set():
            for offset in range(sent, sent + 37):
                self.producer.produce(self.topic, value_of(offset), partition=0, on_delivery=self._delivered)
            sent += 37
            self.producer.flush(120)

    def _delivered(self, error: object, _message: object) -> None:
        if error is None:
            self.acked += 1
        else:
            self.errors.append(str(error))

    def finish(self) -> int:
        self.stopping.set()
        self.join(180)
        assert not self.is_alive() and self.producer.flush(60) == 0
        assert not self.errors, self.errors[:3]
        return self.acked


def leader_of(brokers: list[BrokerProcess], topic: str) -> BrokerProcess | None:
    leader = partition_info(brokers, topic)[0][0]
    return next((b for b in brokers if b.overrides["broker.id"] == str(leader)), None)


def archived_ranges(store: ObjectStore, topic: str) -> list[tuple[int, int]]:
    """(first, last) offset of every archived .log object, from its batches; every segment with
    all its files."""
    keys = set(store.list_keys(f"{topic}."))
    ranges = []
    for key in archived_logs(store, topic):
        stem = key.removesuffix(".log")
        assert all(stem + suffix in keys for suffix in SEGMENT_FILES), f"{stem} lacks files"
        data = store.get_bytes(key)
        position, first, last = 0, None, -1
        while position < len(data):
            header = read_header(data, position)
            first = header.base_offset if first is None else first
            last = header.last_offset
            position += header.size
        assert first == base_of(key), key  # named by its first offset
        ranges.append((first, last))
    return sorted(ranges)


def test_a_killed_leader_loses_and_duplicates_nothing_and_comes_back_from_the_archive(
        bucket: tuple[ObjectStore, str], s3_server: S3Server, tmp_path: Path, zk_connect: str) -> None:
    store, name = bucket
    settings = {**LAG_SETTINGS, **archiving(s3_server.endpoint, name)}
    topic = "tiered"
    with running_cluster(tmp_path, zk_connect, 3, settings) as brokers:
        admin = AdminClient({"bootstrap.servers": bootstrap_of(brokers)})
        admin.create_topics([NewTopic(topic, 1, 3, config={
            "remote.storage.enable": "true", "segment.bytes": str(SEGMENT_BYTES), "min.insync.replicas": "2",
            "local.retention.bytes": str(LOCAL_BYTES), "file.delete.delay.ms": "0"})])[topic].result(30)
        wait_until(lambda: len(partition_info(brokers, topic)[0][2]) == 3, 60, "a full ISR")
        producer = PacedProducer(bootstrap_of(brokers), topic)
        producer.start()

        # The leader dies while it archives and production goes on.
        wait_until(lambda: len(archived_logs(store, topic)) >= 3, 180, "segments archived")
        old = leader_of(brokers, topic)
        assert old is not None
        old.kill()
        end_of_old = producer.acked + 200  # at most 100 in flight beyond what was acknowledged
        new = wait_until(lambda: (b := leader_of(brokers, topic)) not in (None, old) and b, 60, "a new leader")
        # Its local window moves past all the old leader held: that one must start over.
        wait_until(lambda: list_offset(new.bootstrap, topic, EARLIEST_LOCAL) > end_of_old, 300,
                   "the new leader's local log past the old leader's end")
        count = producer.finish()

        old.start()
        wait_until(lambda: len(partition_info(brokers, topic)[0][2]) == 3, 180, "the old leader back in the ISR")
        assert "starting over at" in old.log_text()
        # It holds only what it fetched since, not what it had (nor the archive's part).
        first_local = min(int(p.name.split(".")[0]) for p in (old.log_dir / f"{topic}-0").glob("*.log"))
        assert first_local > end_of_old - 200

        # Everything archived exactly once: the objects' offset ranges tile 0..the highest.
        wait_until(lambda: len(archived_logs(store, topic)) >= count * 10_000 // SEGMENT_BYTES - 3, 180,
                   "the archive caught up")
        # Followers delete archived segments too: every replica's disk comes down to the window.
        for broker in brokers:
            wait_until(lambda b=broker: local_log_bytes(b, topic) <= LOCAL_BYTES + 2 * SEGMENT_BYTES, 180,
                       f"broker {broker.overrides['broker.id']}'s disk down to the window")
        ranges = archived_ranges(store, topic)
        assert ranges[0][0] == 0
        for (_, last), (first, _) in zip(ranges, ranges[1:], strict=False):
            assert first == last + 1, ranges

        # The old leader alone serves every record from offset 0.
        for broker in brokers:
            if broker is not old:
                broker.kill()
        wait_until(lambda: partition_info([old], topic)[0][0] == int(old.overrides["broker.id"]), 60,
                   "the old leader leading again")
        expected = hashlib.sha256()
        for offset in range(count):
            expected.update(value_of(offset))
        assert digest_by_confluent(old.bootstrap, topic, count) == expected.hexdigest()
