"""Acceptance: the consumer group protocol (KIP-848, `group.protocol=consumer`) with
confluent-kafka consumers in their own processes — members join, leave and crash, every
rebalance is incremental (members keep the partitions they had), committed offsets resume
exactly, and a regex subscription picks up a topic created later."""

from __future__ import annotations

import pytest
from confluent_kafka import ConsumerGroupType
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
