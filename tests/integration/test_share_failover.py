"""Share groups through broker failures on three brokers (rf=3): the broker leading the data
partition and the one leading the group's `__share_group_state` partition are killed (kill -9)
and restarted while consumers accept records. Every record is processed at least once, and no
record whose ACCEPT was answered is ever delivered again."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from confluent_kafka import AcknowledgeType, Producer, ShareConsumer
from confluent_kafka.admin import AdminClient, NewTopic

from kbroker.client import Client
from kbroker.coordinator.offsets_topic import partition_for
from kbroker.coordinator.share_state_records import coordinator_key
from tests.brokers import BrokerProcess, running_cluster
from tests.waiting import wait_until

pytestmark = pytest.mark.timeout(300)

SETTINGS = {"replica.lag.time.max.ms": "3000", "replica.fetch.wait.max.ms": "100", "replica.fetch.backoff.ms": "100",
            "zookeeper.session.timeout.ms": "4000", "offsets.topic.num.partitions": "3",
            "share.coordinator.state.topic.num.partitions": "3", "group.share.record.lock.duration.ms": "10000"}
TOPIC, GROUP = "jobs", "workers"
JOBS = 1500


@pytest.fixture
def brokers(tmp_path: Path, zk_connect: str) -> Iterator[list[BrokerProcess]]:
    with running_cluster(tmp_path, zk_connect, 3, SETTINGS) as started:
        yield started


def bootstrap(brokers: list[BrokerProcess]) -> str:
    return ",".join(b.bootstrap for b in brokers)


@dataclass
class Log:
    """What the consumers saw, in one order: deliveries and answered ACCEPTs."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    events: list[tuple[str, int]] = field(default_factory=list)  # ("delivered" | "accepted", offset)
    failed_commits: int = 0

    def add(self, kind: str, offsets: list[int]) -> None:
        with self.lock:
            self.events.extend((kind, o) for o in offsets)

    def accepted(self) -> set[int]:
        with self.lock:
            return {o for kind, o in self.events if kind == "accepted"}

    def delivered(self) -> set[int]:
        with self.lock:
            return {o for kind, o in self.events if kind == "delivered"}


def consume(brokers: list[BrokerProcess], log: Log, stop: threading.Event) -> None:
    consumer = ShareConsumer({"bootstrap.servers": bootstrap(brokers), "group.id": GROUP,
                              "share.acknowledgement.mode": "explicit"})
    consumer.subscribe([TOPIC])
    try:
        while not stop.is_set():
            messages = [m for m in consumer.poll(0.2) if m.error() is None]
            if not messages:
                continue
            log.add("delivered", [m.offset() for m in messages])
            time.sleep(0.002 * len(messages))  # processing, so the kills land mid-stream
            for message in messages:
                consumer.acknowledge(message, AcknowledgeType.ACCEPT)
            try:
                answered = consumer.commit_sync(30)
            except Exception:
                answered = None
            if answered and all(error is None for error in answered.values()):
                log.add("accepted", [m.offset() for m in messages])
            else:
                with log.lock:
                    log.failed_commits += 1
    finally:
        consumer.close()


def produce(brokers: list[BrokerProcess], values: list[bytes]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap(brokers), "acks": "all", "linger.ms": 5})
    for value in values:
        producer.produce(TOPIC, value)
    assert producer.flush(60) == 0


def leaders(brokers: list[BrokerProcess]) -> tuple[int, int]:
    """(leader of jobs-0, leader of the group's __share_group_state partition), by broker id."""
    with Client(bootstrap([b for b in brokers if b.alive])) as client:
        meta = client.metadata([TOPIC, "__share_group_state"], refresh=True)
        data, state = meta.topic(TOPIC), meta.topic("__share_group_state")
        index = partition_for(coordinator_key(GROUP, data.topic_id, 0), len(state.partitions))
        return data.partitions[0].leader, state.partitions[index].leader


def kill_and_restart(brokers: list[BrokerProcess], broker_id: int, log: Log) -> None:
    """kill -9, wait until the consumers accept more records without it, start it again."""
    before = len(log.accepted())
    brokers[broker_id].kill()
    wait_until(lambda: len(log.accepted()) >= min(before + 100, JOBS), 90,
               f"records accepted again after broker {broker_id} died")
    brokers[broker_id].start()


def test_killing_the_data_and_state_leaders_loses_no_acceptance(brokers: list[BrokerProcess]) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap(brokers)})
    admin.create_topics([NewTopic(TOPIC, 1, 3, config={"min.insync.replicas": "2"})])[TOPIC].result(30)
    log, stop = Log(), threading.Event()
    workers = [threading.Thread(target=consume, args=(brokers, log, stop), daemon=True) for _ in range(2)]
    for worker in workers:
        worker.start()
    try:
        # The group starts at the log's end when it first reads: probe until it reads.
        probes = 0
        deadline = time.monotonic() + 90
        while not log.delivered() and time.monotonic() < deadline:
            produce(brokers, [b"probe"])
            probes += 1
            time.sleep(0.3)
        assert log.delivered(), "the group never read"
        first_job = probes  # offsets 0..probes-1 are probes
        produce(brokers, [f"job-{i}".encode() for i in range(JOBS)])
        jobs = set(range(first_job, first_job + JOBS))
        wait_until(lambda: len(log.accepted() & jobs) >= JOBS // 5, 60, "a fifth of the jobs accepted")
        data_leader, state_leader = leaders(brokers)
        kill_and_restart(brokers, data_leader, log)
        wait_until(lambda: all(b.alive for b in brokers), 10, "the broker back")
        _, state_leader = leaders(brokers)  # it may have moved with the first kill
        kill_and_restart(brokers, state_leader, log)
        wait_until(lambda: jobs <= log.delivered() and jobs <= log.accepted(), 120, "every job accepted")
    finally:
        stop.set()
        for worker in workers:
            worker.join(60)
    # Never delivered again once its ACCEPT was answered.
    settled: set[int] = set()
    again = []
    for kind, offset in log.events:
        if kind == "accepted":
            settled.add(offset)
        elif offset in settled:
            again.append(offset)
    assert not again, f"{len(again)} accepted record(s) delivered again, e.g. {sorted(again)[:10]}"
    assert jobs <= log.delivered()
