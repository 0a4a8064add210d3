"""Three real brokers on a real ZooKeeper: replicated topics, leader failover under load, and
min.insync.replicas. (Bounded versions of issue 5's acceptance tests; the soak repeats more.)"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from kbroker.client import Client
from kbroker.client.coordinators import TRANSACTION_KEY
from kbroker.security.client_config import ClientSecurity
from protocol.errors import ErrorCode, KafkaError
from protocol.record_batch import Record, encode_batch
from tests.brokers import BrokerProcess
from tests.waiting import wait_until

LAG_SETTINGS = {"replica.lag.time.max.ms": "3000", "replica.fetch.wait.max.ms": "100",
                "replica.fetch.backoff.ms": "100", "zookeeper.session.timeout.ms": "4000",
                "group.initial.rebalance.delay.ms": "0"}


class Cluster(list[BrokerProcess]):
    """The brokers, and what a client needs to reach them: nothing more on PLAINTEXT listeners; a
    secured cluster's tests set librdkafka's settings and kbroker's client security."""

    client_settings: dict[str, str] = {}
    security: ClientSecurity | None = None


def client_conf(brokers: list[BrokerProcess]) -> dict[str, str]:
    """librdkafka settings for the live brokers."""
    return {"bootstrap.servers": bootstrap(brokers), **getattr(brokers, "client_settings", {})}


@pytest.fixture
def cluster(tmp_path: Path, zk_connect: str, request: pytest.FixtureRequest) -> Iterator[list[BrokerProcess]]:
    marker = request.node.get_closest_marker("cluster_overrides")
    extra = marker.args[0] if marker else {}
    brokers = [BrokerProcess(tmp_path / f"b{i}", overrides={"broker.id": str(i), "zookeeper.connect": zk_connect,
                                                             **LAG_SETTINGS, **extra}).start()
               for i in range(3)]
    group = Cluster(brokers)  # a copy: tests append brokers they start to it
    yield group
    for broker in group:
        broker.kill()


def bootstrap(brokers: list[BrokerProcess]) -> str:
    return ",".join(b.bootstrap for b in brokers if b.alive)

def partition_info(brokers: list[BrokerProcess], topic: str) -> dict[int, tuple[int, list[int], list[int]]]:
    """partition -> (leader, replicas, isr) as a live broker's Metadata says."""
    with Client(bootstrap(brokers), security=getattr(brokers, "security", None)) as client:
        meta = client.metadata([topic], refresh=True).topic(topic)
        return {i: (p.leader, sorted(p.replicas), sorted(p.isr)) for i, p in meta.partitions.items()}


def create_replicated_topic(brokers: list[BrokerProcess], name: str, partitions: int) -> None:
    admin = AdminClient(client_conf(brokers))
    futures = admin.create_topics([NewTopic(name, partitions, 3, config={"min.insync.replicas": "2"})])
    futures[name].result(30)
    wait_until(lambda: all(len(isr) == 3 and leader >= 0
                           for leader, _, isr in partition_info(brokers, name).values()), what="a full ISR")


def read_all(brokers: list[BrokerProcess], topic: str, partitions: int, expected: int) -> dict[int, list[bytes]]:
    consumer = Consumer({**client_conf(brokers), "group.id": f"check-{random.random()}",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    values: dict[int, list[bytes]] = {p: [] for p in range(partitions)}
    deadline = time.monotonic() + 60
    while sum(map(len, values.values())) < expected and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            values[message.partition()].append(message.value())
    consumer.close()
    return values


def test_replicated_topic_has_a_leader_and_full_isr_on_every_broker(cluster: list[BrokerProcess]) -> None:
    create_replicated_topic(cluster, "spread", 3)
    info = partition_info(cluster, "spread")
    assert sorted(leader for leader, _, _ in info.values()) == [0, 1, 2]  # leaders spread over the brokers
    assert all(replicas == [0, 1, 2] for _, replicas, _ in info.values())
    with Client(cluster[0].bootstrap) as client:
        assert sorted(client.metadata(refresh=True).brokers) == [0, 1, 2]


def replica_bytes(cluster: list[BrokerProcess], topic: str, partition: int) -> list[bytes]:
    """Each replica's whole log of the partition, as stored (segments concatenated)."""
    logs = []
    for broker in cluster:
        directory = broker.log_dir / f"{topic}-{partition}"
        logs.append(b"".join(path.read_bytes() for path in sorted(directory.glob("*.log"))))
    return logs


class ContinuousProducer:
    """A producer writing round-robin over the partitions from a thread until stopped."""

    def __init__(self, conf: dict[str, str], topic: str, partitions: int, acks: str) -> None:
        self.producer = Producer({**conf, "acks": acks, "enable.idempotence": acks == "all",
                                  "linger.ms": 5, "message.timeout.ms": 120000, "retry.backoff.ms": 100})
        self.topic, self.partitions = topic, partitions
        self.acked: dict[int, list[bytes]] = {p: [] for p in range(partitions)}
        self.failed: list[object] = []
        self.sent = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _delivered(self, error: object, message: object) -> None:
        if error is None:
            self.acked[message.partition()].append(message.value())  # type: ignore[attr-defined]
        else:
            self.failed.append(error)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.producer.produce(self.topic, f"m{self.sent}".encode(), partition=self.sent % self.partitions,
                                      on_delivery=self._delivered)
                self.sent += 1
            except BufferError:
                pass  # the local queue is full while a leader is moving: poll below drains it
            self.producer.poll(0.001)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        assert self.producer.flush(120) == 0


def kill_and_restart_rounds(cluster: list[BrokerProcess], topic: str, rounds: int, seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(rounds):
        victim_id = rng.randrange(len(cluster))
        victim = cluster[victim_id]
        victim.kill()
        wait_until(lambda victim_id=victim_id: all(leader not in (victim_id, -1)
                                                   for leader, _, _ in partition_info(cluster, topic).values()),
                   what="leadership moved off the killed broker")
        victim.start()
        wait_until(lambda: all(len(isr) == 3 for _, _, isr in partition_info(cluster, topic).values()),
                   what="the restarted broker back in the ISR")


def test_acknowledged_messages_survive_repeated_broker_kills(cluster: list[BrokerProcess]) -> None:
    """Issue 5 acceptance 1: rf=3, min.insync.replicas=2, an idempotent acks=all producer writing
    all the time while a random broker is killed with kill -9 and restarted, ten times."""
    acknowledged_messages_survive_broker_kills(cluster, rounds=10)


def acknowledged_messages_survive_broker_kills(cluster: list[BrokerProcess], rounds: int) -> None:
    """Kill -9 and restart a random broker `rounds` times under an acks=all producer: every
    acknowledged message is stored once, in order, and the replicas end identical."""
    topic, partitions = "durable", 2
    create_replicated_topic(cluster, topic, partitions)
    producer = ContinuousProducer(client_conf(cluster), topic, partitions, "all")
    kill_and_restart_rounds(cluster, topic, rounds=rounds, seed=5)
    producer.stop()
    assert producer.failed == []
    stored = read_all(cluster, topic, partitions, producer.sent)
    for p in range(partitions):
        assert stored[p] == producer.acked[p]  # every acknowledged message, once, in order
        wait_until(lambda p=p: len(set(replica_bytes(cluster, topic, p))) == 1, what="identical replicas")
    assert sum(map(len, stored.values())) == producer.sent > 0


def test_replicas_converge_after_leader_kills_with_acks_1(cluster: list[BrokerProcess]) -> None:
    """Acceptance 2: with acks=1 a killed leader may lose what it had not replicated, but the
    replicas end byte for byte identical (a returning leader truncates its divergent tail)."""
    topic = "loose"
    create_replicated_topic(cluster, topic, 1)
    producer = ContinuousProducer(client_conf(cluster), topic, 1, "1")
    for _ in range(3):
        leader = partition_info(cluster, topic)[0][0]
        cluster[leader].kill()
        wait_until(lambda leader=leader: partition_info(cluster, topic)[0][0] not in (leader, -1),
                   what="a new leader")
        cluster[leader].start()
        wait_until(lambda: len(partition_info(cluster, topic)[0][2]) == 3, what="a full ISR again")
    producer.stop()
    wait_until(lambda: len(set(replica_bytes(cluster, topic, 0))) == 1, what="identical replicas")
    watermarks = Consumer({"bootstrap.servers": bootstrap(cluster), "group.id": "hw"})
    _, high = watermarks.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
    watermarks.close()
    stored = read_all(cluster, topic, 1, high)[0]
    assert len(stored) == high
    positions = [int(v[1:]) for v in stored]
    assert positions == sorted(positions) and len(stored) > 0  # what survived is in order


def test_not_enough_replicas_when_two_of_three_are_down(cluster: list[BrokerProcess]) -> None:
    topic = "strict"
    create_replicated_topic(cluster, topic, 1)
    leader = partition_info(cluster, topic)[0][0]
    producer = Producer({"bootstrap.servers": bootstrap(cluster), "acks": "all", "message.timeout.ms": 5000})
    producer.produce(topic, b"before")
    assert producer.flush(30) == 0
    others = [b for i, b in enumerate(cluster) if i != leader]
    for broker in others:
        broker.kill()
    wait_until(lambda: partition_info(cluster, topic)[0][2] == [leader], what="the ISR shrinking to the leader")
    # Clients retry NOT_ENOUGH_REPLICAS until their timeout; the broker's answer itself is this:
    with Client(bootstrap(cluster)) as client, pytest.raises(KafkaError) as refused:
        client.produce(topic, 0, encode_batch([Record(0, int(time.time() * 1000), None, b"refused")]), acks=-1)
    assert refused.value.code == ErrorCode.NOT_ENOUGH_REPLICAS
    assert read_all(cluster, topic, 1, 1)[0] == [b"before"]  # committed data is still readable
    others[0].start()
    wait_until(lambda: len(partition_info(cluster, topic)[0][2]) == 2, what="a second ISR member")
    writer = Producer({"bootstrap.servers": bootstrap(cluster), "acks": "all"})
    writer.produce(topic, b"after")
    assert writer.flush(30) == 0  # writes resume once the ISR is back at min.insync.replicas


def test_a_consumer_group_and_a_transaction_survive_their_coordinators_death(cluster: list[BrokerProcess]) -> None:
    topic = "work"
    create_replicated_topic(cluster, topic, 3)
    producer = Producer({"bootstrap.servers": bootstrap(cluster), "acks": "all"})
    for i in range(300):
        producer.produce(topic, f"w{i}".encode(), partition=i % 3)
    assert producer.flush(30) == 0

    def consumer() -> Consumer:
        c = Consumer({"bootstrap.servers": bootstrap(cluster), "group.id": "survivors", "enable.auto.commit": False,
                      "auto.offset.reset": "earliest", "isolation.level": "read_committed"})
        c.subscribe([topic])
        return c

    first = consumer()
    seen: list[bytes] = []
    while len(seen) < 150:
        message = first.poll(1.0)
        if message is not None and message.error() is None:
            seen.append(message.value())
    first.commit(asynchronous=False)
    committed = {tp.partition: tp.offset for tp in first.committed([TopicPartition(topic, p) for p in range(3)])}
    first.close()
    with Client(bootstrap(cluster)) as client:
        coordinator = client.find_coordinator("survivors").node_id
    cluster[coordinator].kill()

    second = consumer()
    resumed = {tp.partition: tp.offset
               for tp in second.committed([TopicPartition(topic, p) for p in range(3)], timeout=30)}
    assert resumed == committed  # the new coordinator replayed the replicated offsets
    rest: list[bytes] = []
    deadline = time.monotonic() + 60
    while len(rest) < 300 - len(seen) and time.monotonic() < deadline:
        message = second.poll(1.0)
        if message is not None and message.error() is None:
            rest.append(message.value())
    second.close()
    assert sorted(seen + rest) == sorted(f"w{i}".encode() for i in range(300))  # nothing read twice

    # A transactional producer whose coordinator dies: a new incarnation fences the old one and commits.
    cluster[coordinator].start()  # min.insync.replicas=2 needs two brokers once the next one dies
    wait_until(lambda: all(len(isr) == 3 for _, _, isr in partition_info(cluster, topic).values()),
               what="the restarted broker back in the ISR")
    txn_id = "survivor-tx"
    tx = Producer({"bootstrap.servers": bootstrap(cluster), "transactional.id": txn_id})
    tx.init_transactions(30)
    tx.begin_transaction()
    tx.produce(topic, b"open", partition=0)
    tx.flush(30)
    with Client(bootstrap(cluster)) as client:
        deadline = time.monotonic() + 30
        while True:
            try:
                txn_coordinator = client._find_coordinator(txn_id, TRANSACTION_KEY).node_id
                break
            except KafkaError:
                assert time.monotonic() < deadline
                time.sleep(0.2)
    cluster[txn_coordinator].kill()
    again = Producer({"bootstrap.servers": bootstrap(cluster), "transactional.id": txn_id})
    again.init_transactions(60)  # the new coordinator aborts the open transaction
    again.begin_transaction()
    for p in range(3):  # leaders on every broker: markers go to other brokers as WriteTxnMarkers
        again.produce(topic, b"committed", partition=p)
    again.commit_transaction(60)
    stored = read_all(cluster, topic, 3, 303)  # read_committed (librdkafka's default): needs every marker
    assert [v for p in range(3) for v in stored[p] if not v.startswith(b"w")] == [b"committed"] * 3


def test_controlled_shutdown_moves_leadership_before_stopping(cluster: list[BrokerProcess]) -> None:
    topic = "handover"
    create_replicated_topic(cluster, topic, 3)
    before = partition_info(cluster, topic)
    led = [p for p, (leader, _, _) in before.items() if leader == 0]
    assert len(led) == 1
    assert cluster[0].stop() == 0  # SIGTERM
    assert "controlled shutdown: leadership of 1 partition(s) moved" in cluster[0].log_text()
    after = partition_info(cluster, topic)
    assert all(leader in (1, 2) and 0 not in isr for leader, _, isr in after.values())
    producer = Producer({"bootstrap.servers": bootstrap(cluster), "acks": "all", "message.timeout.ms": 10000})
    for p in range(3):
        producer.produce(topic, b"still writable", partition=p)
    assert producer.flush(30) == 0  # min.insync.replicas=2 with the two brokers left
    cluster[0].start()
    wait_until(lambda: all(len(isr) == 3 for _, _, isr in partition_info(cluster, topic).values()),
               what="the restarted broker back in the ISR")


def test_every_client_follows_a_leadership_change(cluster: list[BrokerProcess]) -> None:
    """Acceptance 6: kafka-python, confluent-kafka and kcat keep producing and consuming across
    a leader's death with no user action (they refresh metadata on NOT_LEADER_OR_FOLLOWER)."""
    from kafka import KafkaConsumer, KafkaProducer

    topic = "followers"
    create_replicated_topic(cluster, topic, 1)
    brokers = bootstrap(cluster)
    kp = KafkaProducer(bootstrap_servers=brokers, acks="all", retries=20, retry_backoff_ms=200,
                       request_timeout_ms=10000)
    cp = Producer({"bootstrap.servers": brokers, "acks": "all"})
    kc = KafkaConsumer(topic, bootstrap_servers=brokers, group_id="followers", auto_offset_reset="earliest",
                       consumer_timeout_ms=1000)

    def write_all(tag: str) -> None:
        kp.send(topic, f"kafka-python {tag}".encode()).get(timeout=60)
        cp.produce(topic, f"confluent {tag}".encode())
        assert cp.flush(60) == 0
        kcat = subprocess.run(["kcat", "-P", "-b", bootstrap(cluster), "-t", topic, "-X", "acks=all"],
                              input=f"kcat {tag}\n", capture_output=True, text=True, timeout=60)
        assert kcat.returncode == 0, kcat.stderr

    def read(count: int) -> list[str]:
        got: list[str] = []
        deadline = time.monotonic() + 60
        while len(got) < count and time.monotonic() < deadline:
            got += [m.value.decode() for m in kc]  # ends after a second without messages
        return got

    write_all("before")
    assert sorted(read(3)) == ["confluent before", "kafka-python before", "kcat before"]
    leader = partition_info(cluster, topic)[0][0]
    cluster[leader].kill()
    wait_until(lambda: partition_info(cluster, topic)[0][0] not in (leader, -1), what="a new leader")
    write_all("after")  # the long-lived producers find the new leader themselves
    assert sorted(read(3)) == ["confluent after", "kafka-python after", "kcat after"]
    kc.close()
    kp.close()


KBROKER = str(Path(sys.executable).parent / "kbroker")


def test_preferred_leader_election_brings_leadership_back(cluster: list[BrokerProcess]) -> None:
    topic = "preferred"
    create_replicated_topic(cluster, topic, 3)
    with Client(bootstrap(cluster)) as client:  # replicas in assignment order: the first is preferred
        preferred = {i: p.replicas[0] for i, p in client.metadata([topic], refresh=True).topic(topic).partitions.items()}
    led_by_0 = next(p for p, (leader, _, _) in partition_info(cluster, topic).items() if leader == 0)
    cluster[0].kill()
    wait_until(lambda: partition_info(cluster, topic)[led_by_0][0] not in (0, -1), what="leadership moved")
    cluster[0].start()
    wait_until(lambda: all(len(isr) == 3 for _, _, isr in partition_info(cluster, topic).values()),
               what="the restarted broker back in the ISR")
    assert partition_info(cluster, topic)[led_by_0][0] != 0  # not the preferred leader any more

    def elect() -> subprocess.CompletedProcess:
        return subprocess.run([KBROKER, "leader-election", "--bootstrap-server", bootstrap(cluster),
                               "--election-type", "preferred", "--all-topic-partitions"],
                              capture_output=True, text=True, timeout=60)

    moved = elect()
    assert moved.returncode == 0, moved.stderr
    assert f"Successfully completed leader election (PREFERRED) for partitions {topic}-{led_by_0}" in moved.stdout
    wait_until(lambda: {p: leader for p, (leader, _, _) in partition_info(cluster, topic).items()} == preferred,
               what="every partition led by its preferred replica")
    again = elect()
    # Asked for every partition, the answer names only those that needed an election (as Kafka's
    # controller answers): none now, so nothing is printed, as kafka-leader-election.sh prints nothing.
    assert (again.returncode, again.stdout) == (0, ""), again.stderr


@pytest.mark.cluster_overrides({"leader.imbalance.check.interval.seconds": "1"})
def test_auto_leader_rebalance_returns_leadership_to_preferred_replicas(cluster: list[BrokerProcess]) -> None:
    topic = "rebalanced"
    create_replicated_topic(cluster, topic, 3)
    with Client(bootstrap(cluster)) as client:
        preferred = {i: p.replicas[0] for i, p in client.metadata([topic], refresh=True).topic(topic).partitions.items()}
    led_by_1 = next(p for p, broker in preferred.items() if broker == 1)
    cluster[1].kill()
    wait_until(lambda: partition_info(cluster, topic)[led_by_1][0] not in (1, -1), what="leadership moved")
    cluster[1].start()
    # Broker 1 leads none of its preferred partitions (100 % > 10 %): the controller moves it back.
    wait_until(lambda: {p: leader for p, (leader, _, _) in partition_info(cluster, topic).items()} == preferred,
               what="leadership back on the preferred replicas")


def test_a_new_broker_takes_over_replicas_by_reassignment_while_producing(
        cluster: list[BrokerProcess], tmp_path: Path, zk_connect: str) -> None:
    """Acceptance 5: a fourth broker joins; a partition moves from [0, 1, 2] to [3, 1, 2] while a
    producer writes; nothing is lost and broker 0 no longer holds the partition."""
    topic = "moving"
    create_replicated_topic(cluster, topic, 1)
    fourth = BrokerProcess(tmp_path / "b3", overrides={"broker.id": "3", "zookeeper.connect": zk_connect,
                                                       **LAG_SETTINGS}).start()
    cluster.append(fourth)  # the fixture kills it too
    wait_until(lambda: len(partition_brokers(cluster)) == 4, what="four brokers")
    with Client(bootstrap(cluster)) as client:
        current = client.metadata([topic], refresh=True).topic(topic).partitions[0].replicas
    target = [3, *(r for r in current if r != 0)]
    producer = ContinuousProducer(client_conf(cluster), topic, 1, "all")
    plan = tmp_path / "move.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [{"topic": topic, "partition": 0, "replicas": target}]}))

    def reassign(action: str) -> subprocess.CompletedProcess:
        return subprocess.run([KBROKER, "reassign", "--bootstrap-server", bootstrap(cluster),
                               "--reassignment-json-file", str(plan), action],
                              capture_output=True, text=True, timeout=60)

    started = reassign("--execute")
    assert started.returncode == 0, started.stderr
    assert f"Successfully started partition reassignment for {topic}-0" in started.stdout
    wait_until(lambda: partition_info(cluster, topic)[0][1] == sorted(target), what="the reassignment to finish")
    wait_until(lambda: reassign("--verify").returncode == 0, what="--verify to report completion")
    assert f"Reassignment of partition {topic}-0 is completed." in reassign("--verify").stdout
    producer.stop()
    assert producer.failed == []
    stored = read_all(cluster, topic, 1, producer.sent)
    assert stored[0] == producer.acked[0] and len(stored[0]) == producer.sent > 0
    wait_until(lambda: not (cluster[0].log_dir / f"{topic}-0").exists(), what="broker 0 dropping its replica")
    logs = [b.log_dir / f"{topic}-0" for b in cluster[1:]]
    wait_until(lambda: len({b"".join(p.read_bytes() for p in sorted(d.glob("*.log"))) for d in logs}) == 1,
               what="identical replicas on brokers 1, 2 and 3")


def partition_brokers(cluster: list[BrokerProcess]) -> list[int]:
    with Client(bootstrap(cluster)) as client:
        return sorted(client.metadata(refresh=True).brokers)


def test_create_partitions_on_a_replicated_topic(cluster: list[BrokerProcess]) -> None:
    from confluent_kafka.admin import NewPartitions

    topic = "growing"
    create_replicated_topic(cluster, topic, 1)
    admin = AdminClient({"bootstrap.servers": bootstrap(cluster)})
    admin.create_partitions([NewPartitions(topic, 3)])[topic].result(30)
    wait_until(lambda: len(info := partition_info(cluster, topic)) == 3
               and all(len(isr) == 3 and leader >= 0 for leader, _, isr in info.values()),
               what="three replicated partitions with full ISRs")
    producer = Producer({"bootstrap.servers": bootstrap(cluster), "acks": "all"})
    for p in range(3):
        producer.produce(topic, f"p{p}".encode(), partition=p)
    assert producer.flush(30) == 0
    assert {p: values for p, values in read_all(cluster, topic, 3, 3).items()} == {0: [b"p0"], 1: [b"p1"], 2: [b"p2"]}


@pytest.mark.slow
def test_soak_many_broker_kills(cluster: list[BrokerProcess]) -> None:
    """The long version of the kill test, outside CI: `scripts/test.sh -m slow -k soak`
    (KBROKER_SOAK_ROUNDS rounds, 100 by default)."""
    topic, partitions = "soak", 4
    create_replicated_topic(cluster, topic, partitions)
    producer = ContinuousProducer(client_conf(cluster), topic, partitions, "all")
    kill_and_restart_rounds(cluster, topic, rounds=int(os.environ.get("KBROKER_SOAK_ROUNDS", "100")), seed=11)
    producer.stop()
    assert producer.failed == []
    stored = read_all(cluster, topic, partitions, producer.sent)
    for p in range(partitions):
        assert stored[p] == producer.acked[p]
        wait_until(lambda p=p: len(set(replica_bytes(cluster, topic, p))) == 1, what="identical replicas")
