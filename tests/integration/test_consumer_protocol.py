"""Acceptance: the consumer group protocol (KIP-848, `group.protocol=consumer`) with
confluent-kafka consumers in their own processes — members join, leave and crash, every
rebalance is incremental (members keep the partitions they had), committed offsets resume
exactly, a regex subscription picks up a topic created later, and a rolling restart moves a
classic group to the consumer protocol through mixed membership."""

from __future__ import annotations

import threading
from collections import Counter

import pytest
from confluent_kafka import ConsumerGroupTopicPartitions, ConsumerGroupType, Producer
from confluent_kafka.admin import AdminClient

from tests.brokers import BrokerProcess
from tests.conftest import create_topic
from tests.integration.test_consumer_groups import partitions_of, produce, stop_all
from tests.integration.test_consumer_groups_cli import ok
from tests.members import MemberProcess, exclusive_cover
from tests.waiting import wait_until

# Quick heartbeats and a 6 s session, so a crash is noticed in seconds (Kafka's bounds allow it).
PROTOCOL_SETTINGS = {
    "group.consumer.min.heartbeat.interval.ms": "500",
    "group.consumer.heartbeat.interval.ms": "500",
    "group.consumer.min.session.timeout.ms": "6000",
    "group.consumer.session.timeout.ms": "6000",
}


@pytest.fixture
def protocol_broker(make_broker) -> BrokerProcess:
    return make_broker(**PROTOCOL_SETTINGS)


def member(broker: BrokerProcess, group: str, topic: str, name: str) -> MemberProcess:
    return MemberProcess.python(broker.bootstrap, group, topic, name, group_protocol="consumer")


def covered(members: list[MemberProcess], partitions: set[tuple[str, int]], each: int | None = None) -> bool:
    return exclusive_cover(members, partitions) and (each is None or all(len(m.assignment) == each for m in members))


def test_members_join_leave_and_crash_with_incremental_rebalances(protocol_broker: BrokerProcess) -> None:
    bootstrap = protocol_broker.bootstrap
    topic = create_topic(bootstrap, "work", partitions=6)
    everything = partitions_of(topic, 6)
    group = "kip848-workers"
    first = [f"a{i}" for i in range(300)]
    produce(bootstrap, topic, first)
    m1 = member(protocol_broker, group, topic, "m1")
    members = [m1]
    try:
        wait_until(lambda: covered([m1], everything) and len(m1.messages) >= 300, 60, "m1 to own and read everything")

        alone = set(m1.assignment)
        m2 = member(protocol_broker, group, topic, "m2")
        members.append(m2)
        wait_until(lambda: covered([m1, m2], everything, each=3), 60, "two members with three partitions each")
        with_two = {m.name: set(m.assignment) for m in (m1, m2)}
        m3 = member(protocol_broker, group, topic, "m3")
        members.append(m3)
        wait_until(lambda: covered([m1, m2, m3], everything, each=2), 60, "three members with two partitions each")
        # Incremental: each member kept part of what it had and only gave partitions up, never
        # stopping with nothing in between as an eager rebalance does.
        assert with_two["m1"] <= alone
        for m in (m1, m2):
            assert set(m.assignment) <= with_two[m.name], (m.name, m.history)
            assert all(m.history[m.history.index(with_two[m.name]):]), m.history

        admin = AdminClient({"bootstrap.servers": bootstrap})
        described = admin.describe_consumer_groups([group])[group].result(30)
        assert described.type == ConsumerGroupType.CONSUMER
        assert sorted(len(m.assignment.topic_partitions) for m in described.members) == [2, 2, 2]
        # kbroker consumer-groups shows the group's protocol, state and members.
        listed = ok(bootstrap, "--list", "--type", "--state").stdout.split("\n")
        assert [line.split() for line in listed if line.startswith(group)] == [[group, "consumer", "Stable"]]
        state = ok(bootstrap, "--describe", "--group", group, "--state").stdout.strip().splitlines()
        assert state[1].split()[-3:] == ["uniform", "Stable", "3"], state
        rows = ok(bootstrap, "--describe", "--group", group, "--members").stdout.strip().splitlines()[1:]
        assert sorted(row.split()[-1] for row in rows) == ["2", "2", "2"]

        second = [f"b{i}" for i in range(300)]
        produce(bootstrap, topic, second)
        wait_until(lambda: {v for m in members for v in m.values()} >= set(second), 60, "the second batch read")
        before_crash = {m.name: set(m.assignment) for m in (m1, m2)}
        m3.kill()  # a crash: its partitions move once its 6 s session runs out
        wait_until(lambda: covered([m1, m2], everything, each=3), 60, "m3's partitions to move after its session")
        for m in (m1, m2):
            assert set(m.assignment) >= before_crash[m.name]  # kept what they had, took m3's

        m2.stop()  # a clean leave: its partitions move at once
        wait_until(lambda: covered([m1], everything), 30, "m1 to take m2's partitions")
        read = [v for m in members for v in m.values()]
        assert set(read) >= set(first) | set(second)  # nothing lost (a crash may repeat some)
        m1.stop()

        # Everything read was committed: a new member resumes exactly after it.
        third = [f"c{i}" for i in range(300)]
        produce(bootstrap, topic, third)
        m4 = member(protocol_broker, group, topic, "m4")
        members.append(m4)
        wait_until(lambda: len(m4.messages) >= 300, 60, "m4 to read the third batch")
        assert sorted(m4.values()) == sorted(third)
    finally:
        stop_all(members)


def test_a_regex_subscription_picks_up_a_new_topic(protocol_broker: BrokerProcess) -> None:
    bootstrap = protocol_broker.bootstrap
    create_topic(bootstrap, "prefix-a", partitions=2)
    create_topic(bootstrap, "unrelated", partitions=1)
    m1 = member(protocol_broker, "kip848-regex", "^prefix-.*", "m1")
    try:
        wait_until(lambda: set(m1.assignment) == partitions_of("prefix-a", 2), 60, "prefix-a assigned")
        create_topic(bootstrap, "prefix-b", partitions=2)
        # The coordinator looks for new topics at most every 10 s: well within the deadline.
        wanted = partitions_of("prefix-a", 2) | partitions_of("prefix-b", 2)
        wait_until(lambda: set(m1.assignment) == wanted, 60, "prefix-b assigned too")
        assert all(h <= wanted for h in m1.history) and partitions_of("prefix-a", 2) <= m1.history[-1]
        produce(bootstrap, "prefix-b", ["new-topic-message"])
        wait_until(lambda: "new-topic-message" in m1.values(), 30, "the new topic's message")
    finally:
        m1.stop()


class SteadyProducer:
    """Produces distinct values to a topic from a thread until stopped; keeps what was delivered."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
        self.topic = topic
        self.delivered: list[str] = []
        self.errors: list[object] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        sent = 0
        while not self._stop.is_set():
            for _ in range(20):
                value = f"r{sent}"
                sent += 1
                self.producer.produce(self.topic, value.encode(), on_delivery=self._delivered)
            self.producer.poll(0)
            self._stop.wait(0.1)  # about 200 records a second

    def _delivered(self, error: object, message: object) -> None:
        if error is not None:
            self.errors.append(error)
        else:
            self.delivered.append(message.value().decode())  # type: ignore[attr-defined]

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)
        assert self.producer.flush(30) == 0


class CommittedOffsets:
    """Samples the group's committed offsets from a thread, keeping every value seen per partition."""

    def __init__(self, bootstrap: str, group: str) -> None:
        self.admin = AdminClient({"bootstrap.servers": bootstrap})
        self.group = group
        self.seen: dict[int, list[int]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                request = [ConsumerGroupTopicPartitions(self.group)]
                result = self.admin.list_consumer_group_offsets(request)[self.group].result(10)
            except Exception:  # noqa: BLE001 - a coordinator busy in a rebalance: sample again
                self._stop.wait(0.2)
                continue
            for tp in result.topic_partitions:
                if tp.offset >= 0:
                    history = self.seen.setdefault(tp.partition, [])
                    if not history or history[-1] != tp.offset:
                        history.append(tp.offset)
            self._stop.wait(0.2)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(15)


def test_a_rolling_restart_moves_a_classic_group_to_the_consumer_protocol(make_broker) -> None:
    """Three classic consumers (eager `range`) consume and commit while a producer keeps
    producing; they are restarted one by one with group.protocol=consumer. The group goes through
    mixed membership (classic members inside a consumer group) to a consumer group, and no
    committed offset goes backwards, no record is lost, and a record is read twice only when the
    commit after its first reading failed (the uncommitted window of a rebalance)."""
    broker = make_broker(**PROTOCOL_SETTINGS, **{"group.initial.rebalance.delay.ms": "0"})
    bootstrap = broker.bootstrap
    topic = create_topic(bootstrap, "rolling", partitions=6)
    group = "rolling-upgrade"
    everything = partitions_of(topic, 6)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    producer = SteadyProducer(bootstrap, topic)
    committed = CommittedOffsets(bootstrap, group)
    members = [MemberProcess.python(bootstrap, group, topic, f"classic{i}") for i in range(3)]
    everyone = list(members)
    try:
        wait_until(lambda: covered(members, everything, each=2), 60, "three classic members with two partitions each")
        wait_until(lambda: all(m.messages for m in members), 60, "every classic member consuming")
        produced_at_restart = []
        for i in range(3):
            produced_at_restart.append(len(producer.delivered))
            old = members[i]
            old.stop()  # a clean leave
            new = member(broker, group, topic, f"consumer{i}")
            members[i] = new
            everyone.append(new)
            wait_until(lambda: covered(members, everything), 90, f"all partitions owned after restart {i}")
            seen = len(new.messages)
            wait_until(lambda: len(new.messages) > seen + 10, 60, f"consumer{i} consuming")  # noqa: B023
            described = admin.describe_consumer_groups([group])[group].result(30)
            assert described.type == ConsumerGroupType.CONSUMER  # mixed, then all consumer-protocol
        wait_until(lambda: covered(members, everything, each=2), 60, "three consumer-protocol members, two each")
        producer.stop()
        produced = set(producer.delivered)
        assert producer.errors == [] and len(produced) == len(producer.delivered)
        produced_at_restart.append(len(produced))
        assert produced_at_restart == sorted(set(produced_at_restart)), "production went on through every restart"
        wait_until(lambda: produced <= {v for m in everyone for v in m.values()}, 60, "every record consumed")
    finally:
        stop_all(everyone)
        committed.stop()
        if not producer._stop.is_set():
            producer.stop()

    # The group went through mixed membership: converted with its classic members, who then
    # rejoined it through JoinGroup.
    log = broker.log_text()
    assert "the classic group of 2 members becomes a consumer group" in log
    assert "classic member" in log
    # No committed offset ever went backwards.
    assert set(committed.seen) == {p for _, p in everything}
    for partition, history in committed.seen.items():
        assert history == sorted(history), (partition, history)
    # Every record consumed at least once; duplicates only where a commit after the first reading
    # failed: a record committed once is never read again.
    readings = Counter((p, o) for m in everyone for p, o, _ in m.messages)
    successful = Counter((p, o - 1) for m in everyone for p, o, error in m.commits if error is None)
    failed = sum(1 for m in everyone for _, _, error in m.commits if error is not None)
    duplicates = sum(n - 1 for n in readings.values())
    assert max(successful.values()) == 1, [r for r, n in successful.items() if n > 1]
    assert duplicates <= failed, (duplicates, failed)
    print(f"rolling restart: {len(readings)} records, {duplicates} read twice, {failed} failed commits")
