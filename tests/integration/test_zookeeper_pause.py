"""Request paths never wait for ZooKeeper: with ZooKeeper stopped (SIGSTOP) for a few seconds, a
three-broker cluster keeps answering Metadata, Produce (acks=all and acks=1), Fetch by topic id
in an incremental session, and OffsetCommit on existing topics at their usual latency, as
Kafka's brokers do from their metadata cache. Real processes: a ZooKeeper of the test's own
(the module's shared one must not be paused) and three `kbroker start` brokers."""

from __future__ import annotations

import os
import signal
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from kbroker.client import Client
from kbroker.metadata.zookeeper_process import ZooKeeperServer
from protocol.errors import ErrorCode
from protocol.record_batch import Record, encode_batch
from tests.brokers import BrokerProcess
from tests.conftest import require_zookeeper
from tests.rawclient import RawClient
from tests.waiting import wait_until

PRODUCE, FETCH, METADATA, OFFSET_COMMIT = 0, 1, 3, 8
PAUSE_S = 5.0
TOPIC = "steady"
GROUP = "steady-group"
# Sessions outlive the pause by far (kazoo declares the connection lost after 2/3 of it), so no
# broker loses its registration or its leaderships while ZooKeeper is stopped.
SETTINGS = {"zookeeper.session.timeout.ms": "30000", "replica.fetch.wait.max.ms": "100",
            "replica.fetch.backoff.ms": "100", "group.initial.rebalance.delay.ms": "0",
            "offsets.topic.num.partitions": "3", "offsets.topic.replication.factor": "3"}


@pytest.fixture
def own_zookeeper(tmp_path: Path) -> Iterator[ZooKeeperServer]:
    server = ZooKeeperServer(tmp_path / "zookeeper", install=require_zookeeper()).start()
    yield server
    if server.pid is not None and server.alive:
        os.kill(server.pid, signal.SIGCONT)  # never leave it stopped, whatever failed
    server.stop()


@pytest.fixture
def brokers(tmp_path: Path, own_zookeeper: ZooKeeperServer) -> Iterator[list[BrokerProcess]]:
    started: list[BrokerProcess] = []
    try:
        for i in range(3):
            started.append(BrokerProcess(tmp_path / f"b{i}", overrides={
                "broker.id": str(i), "zookeeper.connect": f"{own_zookeeper.connect}/pause", **SETTINGS}).start())
        yield started
    finally:
        for broker in started:
            broker.kill()


def batch(value: bytes) -> bytes:
    return encode_batch([Record(0, int(time.time() * 1000), None, value)])


def metadata(client: RawClient) -> Any:
    return client.request(METADATA, 12, {"topics": [{"name": TOPIC, "topic_id": None}],
                                         "allow_auto_topic_creation": False,
                                         "include_topic_authorized_operations": False})


def partitions_of(response: Any) -> dict[int, Any]:
    [topic] = response.topics
    assert topic.error_code == ErrorCode.NO_ERROR, topic
    return {p.partition_index: p for p in topic.partitions}


class Workload:
    """One persistent connection per broker, as clients keep them, and the requests to time."""

    def __init__(self, brokers: list[BrokerProcess]) -> None:
        self.conns = {i: RawClient(b.bootstrap) for i, b in enumerate(brokers)}
        response = metadata(self.conns[0])
        self.topic_id: uuid.UUID = response.topics[0].topic_id
        self.leaders = {i: p.leader_id for i, p in partitions_of(response).items()}
        with Client(brokers[0].bootstrap) as client:
            self.coordinator = client.find_coordinator(GROUP).node_id
        self.session_id = 0
        self.session_epoch = 0
        self.committed = 0

    def close(self) -> None:
        for conn in self.conns.values():
            conn.close()

    def requests(self) -> dict[str, Callable[[], None]]:
        return {"Metadata": self.metadata, "Produce acks=all": lambda: self.produce(0, -1),
                "Produce acks=1": lambda: self.produce(1, 1), "Fetch (session)": self.fetch,
                "OffsetCommit": self.commit}

    def metadata(self) -> None:
        found = partitions_of(metadata(self.conns[1]))
        assert all(p.leader_id >= 0 for p in found.values()), found

    def produce(self, partition: int, acks: int) -> None:
        body = {"transactional_id": None, "acks": acks, "timeout_ms": 10000,
                "topic_data": [{"name": TOPIC, "partition_data": [{"index": partition, "records": batch(b"v")}]}]}
        response = self.conns[self.leaders[partition]].request(PRODUCE, 9, body)
        result = response.responses[0].partition_responses[0]
        assert result.error_code == ErrorCode.NO_ERROR, result

    def fetch(self) -> None:
        """Fetch v13 by topic id in a session: a full fetch opens it, later ones are incremental
        (they name nothing: the session remembers the partition)."""
        leader = self.leaders[2]
        partitions = [] if self.session_id else [{
            "partition": 2, "current_leader_epoch": -1, "fetch_offset": 0, "last_fetched_epoch": -1,
            "log_start_offset": -1, "partition_max_bytes": 1 << 20}]
        body = {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": 1 << 20, "isolation_level": 0,
                "session_id": self.session_id, "session_epoch": self.session_epoch,
                "topics": [{"topic_id": self.topic_id, "partitions": partitions}] if partitions else [],
                "forgotten_topics_data": [], "rack_id": ""}
        response = self.conns[leader].request(FETCH, 13, body)
        assert response.error_code == ErrorCode.NO_ERROR, response
        for topic in response.responses:
            assert all(p.error_code == ErrorCode.NO_ERROR for p in topic.partitions), topic
        if not self.session_id:
            assert response.session_id > 0, "no fetch session opened"
            self.session_id = response.session_id
        self.session_epoch += 1

    def commit(self) -> None:
        self.committed += 1
        body = {"group_id": GROUP, "generation_id_or_member_epoch": -1, "member_id": "", "group_instance_id": None,
                "retention_time_ms": -1, "topics": [{"name": TOPIC, "partitions": [
                    {"partition_index": 0, "committed_offset": self.committed, "committed_leader_epoch": -1,
                     "committed_metadata": "", "commit_timestamp": -1}]}]}
        response = self.conns[self.coordinator].request(OFFSET_COMMIT, 8, body)
        codes = [p.error_code for t in response.topics for p in t.partitions]
        assert codes == [ErrorCode.NO_ERROR], codes


def timed(call: Callable[[], None]) -> float:
    start = time.monotonic()
    call()
    return time.monotonic() - start


def sees_every_broker(broker: BrokerProcess, count: int) -> bool:
    with Client(broker.bootstrap) as client:
        return len(client.metadata(refresh=True).brokers) == count


def create_topic(brokers: list[BrokerProcess], name: str) -> None:
    wait_until(lambda: all(sees_every_broker(b, len(brokers)) for b in brokers), what="every broker registered")
    with Client(brokers[0].bootstrap) as client:
        client.create_topic(name, 3, 3, {"min.insync.replicas": "2"})

    def full_isr() -> bool:
        with RawClient(brokers[2].bootstrap) as conn:
            response = conn.request(METADATA, 12, {"topics": [{"name": name, "topic_id": None}],
                                                  "allow_auto_topic_creation": False,
                                                  "include_topic_authorized_operations": False})
        topic = response.topics[0]
        return topic.error_code == ErrorCode.NO_ERROR and len(topic.partitions) == 3 and all(
            p.leader_id >= 0 and len(p.isr_nodes) == 3 for p in topic.partitions)
    wait_until(full_isr, what=f"{name}: leaders and a full ISR")


def test_requests_on_existing_topics_are_answered_while_zookeeper_is_stopped(
        brokers: list[BrokerProcess], own_zookeeper: ZooKeeperServer) -> None:
    create_topic(brokers, TOPIC)
    with Client(brokers[0].bootstrap) as client:
        client.commit_offsets(GROUP, {(TOPIC, 0): 0})  # __consumer_offsets exists, and the group
    workload = Workload(brokers)
    try:
        requests = workload.requests()
        baseline = {name: max(timed(call) for _ in range(5)) for name, call in requests.items()}
        limit = {name: max(1.0, 5 * took) for name, took in baseline.items()}

        assert own_zookeeper.pid is not None
        os.kill(own_zookeeper.pid, signal.SIGSTOP)
        slow: list[str] = []
        answered = 0
        try:
            paused_until = time.monotonic() + PAUSE_S
            while time.monotonic() < paused_until and not slow:
                for name, call in requests.items():
                    try:
                        took = timed(call)
                    except TimeoutError:  # the socket's 10 s: held up for the whole pause and more
                        slow.append(f"{name}: no answer")
                        break
                    answered += 1
                    if took >= limit[name]:
                        slow.append(f"{name}: {took:.2f} s (baseline {baseline[name] * 1000:.1f} ms)")
        finally:
            os.kill(own_zookeeper.pid, signal.SIGCONT)
        assert not slow, f"requests held up while ZooKeeper was stopped: {slow}"
        assert answered >= 5 * len(requests), answered  # requests kept coming through the pause

        # Healthy afterwards: a store write goes through, and the old topic still takes acks=all.
        create_topic(brokers, "after-pause")
        workload.produce(0, -1)
        workload.commit()
    finally:
        workload.close()
    assert all(b.alive for b in brokers)
