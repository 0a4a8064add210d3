"""Acceptance: consumer groups with real clients — pub-sub, point-to-point, rebalances, crashes,
mixed clients, restarts and static membership."""

from __future__ import annotations

import threading

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from tests.brokers import BrokerProcess
from tests.conftest import create_topic
from tests.members import MemberProcess, exclusive_cover
from tests.waiting import wait_until

GROUP_SETTINGS = {"group.initial.rebalance.delay.ms": "300"}


@pytest.fixture
def group_broker(make_broker) -> BrokerProcess:
    return make_broker(**GROUP_SETTINGS)


def produce(bootstrap: str, topic: str, values: list[str]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    errors: list[object] = []
    for value in values:
        producer.produce(topic, value.encode(), key=value.encode(), on_delivery=lambda e, _m: e and errors.append(e))
    assert producer.flush(30) == 0
    assert errors == []


def partitions_of(topic: str, count: int) -> set[tuple[str, int]]:
    return {(topic, p) for p in range(count)}


def stop_all(members: list[MemberProcess]) -> None:
    for member in members:
        member.stop()


def test_pub_sub_two_groups_each_receive_every_message_once(group_broker: BrokerProcess) -> None:
    topic = create_topic(group_broker.bootstrap, "news", partitions=6)
    values = [f"m{i}" for i in range(600)]
    produce(group_broker.bootstrap, topic, values)
    members = [MemberProcess.python(group_broker.bootstrap, group, topic, f"{group}-{i}")
               for group in ("billing", "audit") for i in range(2)]
    try:
        for group in ("billing", "audit"):
            pair = [m for m in members if m.name.startswith(group)]
            wait_until(lambda pair=pair: sum(len(m.messages) for m in pair) >= 600, 60, f"{group} to read all")
            received = [v for m in pair for v in m.values()]
            assert sorted(received) == sorted(values)  # every message, once per group
            assert exclusive_cover(pair, partitions_of(topic, 6))
    finally:
        stop_all(members)


@pytest.mark.parametrize("commit", ["after", "before"], ids=["at-least-once", "at-most-once"])
def test_point_to_point_rebalances_and_crashed_member(group_broker: BrokerProcess, commit: str) -> None:
    bootstrap = group_broker.bootstrap
    topic = create_topic(bootstrap, f"jobs-{commit}", partitions=6)
    group = f"workers-{commit}"
    everything = partitions_of(topic, 6)
    produced: list[str] = []
    stop_producing = threading.Event()

    def keep_producing() -> None:
        producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "all"})
        i = 0
        while not stop_producing.is_set():
            value = f"job-{i}"
            producer.produce(topic, value.encode(), key=value.encode(),
                             on_delivery=lambda e, m: None if e else produced.append(m.value().decode()))
            producer.poll(0.01)
            i += 1
        assert producer.flush(30) == 0

    writer = threading.Thread(target=keep_producing)
    writer.start()
    members = [MemberProcess.python(bootstrap, group, topic, f"w{i}", commit=commit) for i in range(3)]
    try:
        wait_until(lambda: exclusive_cover(members, everything), 60, "three members to share six partitions")
        assert sorted(len(m.assignment) for m in members) == [2, 2, 2]

        members.append(MemberProcess.python(bootstrap, group, topic, "w3", commit=commit))
        wait_until(lambda: exclusive_cover(members, everything) and all(m.assignment for m in members), 60,
                   "the fourth member to get partitions")

        crashed = members.pop(1)
        crashed_partitions = set(crashed.assignment)
        crashed.kill()
        wait_until(lambda: exclusive_cover(members, everything), 60,
                   "the crashed member's partitions to move after its session timeout")
        assert crashed_partitions <= {tp for m in members for tp in m.assignment}
    finally:
        stop_producing.set()
        writer.join()
    try:
        total = set(produced)
        survivors_read = lambda: {v for m in members for v in m.values()}  # noqa: E731
        if commit == "after":
            # At-least-once: everything produced is processed by someone (the crash may cause repeats).
            wait_until(lambda: total <= survivors_read() | set(crashed.values()), 60, "every message to be read")
        else:
            # At-most-once: nothing is processed twice, even across the crash and the rebalances.
            wait_until(lambda: sum(len(m.messages) for m in members) + len(crashed.messages) >= len(total) - 50,
                       60, "the survivors to catch up")
            everyone = [v for m in [*members, crashed] for v in m.values()]
            assert len(everyone) == len(set(everyone))
    finally:
        stop_all(members)


def test_mixed_clients_share_one_group(group_broker: BrokerProcess) -> None:
    bootstrap = group_broker.bootstrap
    topic = create_topic(bootstrap, "mixed", partitions=6)
    values = [f"v{i}" for i in range(300)]
    produce(bootstrap, topic, values)
    members = [
        MemberProcess.python(bootstrap, "mixed-group", topic, "confluent", client="confluent"),
        MemberProcess.python(bootstrap, "mixed-group", topic, "kafka-python", client="kafka-python"),
        MemberProcess.kcat(bootstrap, "mixed-group", topic, "kcat"),
    ]
    try:
        wait_until(lambda: sum(len(m.messages) for m in members) >= 300, 90, "the group to read everything")
        received = [v for m in members for v in m.values()]
        assert sorted(received) == sorted(values)
        partitions_by_member = [{p for p, _, _ in m.messages} for m in members]
        assert all(partitions_by_member), "each client should own partitions"
        seen = [p for parts in partitions_by_member for p in parts]
        assert len(seen) == len(set(seen)) == 6  # no partition read by two members
    finally:
        stop_all(members)


@pytest.mark.parametrize("client", ["kafka-python", "confluent"])
def test_cooperative_sticky_rebalance(group_broker: BrokerProcess, client: str) -> None:
    bootstrap = group_broker.bootstrap
    topic = create_topic(bootstrap, f"coop-{client}", partitions=4)
    everything = partitions_of(topic, 4)
    options = {"client": client, "assignor": "cooperative-sticky"}
    first = MemberProcess.python(bootstrap, f"coop-{client}", topic, "first", **options)
    members = [first]
    try:
        wait_until(lambda: set(first.assignment) == everything, 60, "the first member to own everything")
        before = set(first.assignment)
        members.append(MemberProcess.python(bootstrap, f"coop-{client}", topic, "second", **options))
        wait_until(lambda: exclusive_cover(members, everything) and len(members[1].assignment) == 2, 60,
                   "a cooperative handover of two partitions")
        # Sticky: the first member kept two of the partitions it had.
        assert set(first.assignment) < before
        produce(bootstrap, topic, [f"c{i}" for i in range(100)])
        wait_until(lambda: sum(len(m.messages) for m in members) >= 100, 60, "both members to consume")
    finally:
        stop_all(members)


def test_committed_offsets_survive_broker_restart(group_broker: BrokerProcess) -> None:
    bootstrap = group_broker.bootstrap
    topic = create_topic(bootstrap, "durable-offsets", partitions=2)
    produce(bootstrap, topic, [f"d{i}" for i in range(40)])
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "keeper", "enable.auto.commit": False})
    consumer.commit(offsets=[TopicPartition(topic, 0, 7), TopicPartition(topic, 1, 11)], asynchronous=False)
    consumer.close()
    group_broker.kill()  # no clean shutdown: the offsets must already be on disk
    group_broker.restart()
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "keeper"})
    try:
        committed = consumer.committed([TopicPartition(topic, 0), TopicPartition(topic, 1)], timeout=30)
        assert [(tp.partition, tp.offset) for tp in committed] == [(0, 7), (1, 11)]
    finally:
        consumer.close()


def test_static_member_rejoins_without_rebalance(group_broker: BrokerProcess) -> None:
    bootstrap = group_broker.bootstrap
    topic = create_topic(bootstrap, "static", partitions=4)
    everything = partitions_of(topic, 4)
    a = MemberProcess.python(bootstrap, "static-group", topic, "a", instance_id="member-a", session_timeout_ms=30000)
    b = MemberProcess.python(bootstrap, "static-group", topic, "b", instance_id="member-b", session_timeout_ms=30000)
    members = [a, b]
    try:
        wait_until(lambda: exclusive_cover(members, everything) and a.assignment and b.assignment, 60, "stable group")
        a_partitions, b_events = set(a.assignment), b.assignments_seen
        a.kill()  # a restart: the static member does not leave
        a2 = MemberProcess.python(bootstrap, "static-group", topic, "a2", instance_id="member-a",
                                  session_timeout_ms=30000)
        members.append(a2)
        a2.wait_for(lambda m: bool(m.assignment), 60, "the restarted member's assignment")
        assert set(a2.assignment) == a_partitions
        # The broker restarts too: the members carry on without a new assignment.
        group_broker.stop()
        group_broker.restart()
        produce(bootstrap, topic, [f"s{i}" for i in range(40)])
        wait_until(lambda: len(a2.messages) + len(b.messages) >= 40, 60, "both to consume after the restart")
        assert b.assignments_seen == b_events, "the other member saw a rebalance"
        assert set(a2.assignment) == a_partitions
    finally:
        stop_all(members)


def test_short_sessions_survive_the_initial_rebalance_delay(make_broker) -> None:
    """Four consumers with 3 s sessions and the default 3 s group.initial.rebalance.delay.ms:
    the delay grows as they arrive, past their session timeout, yet all four end up in one
    Stable generation (a new member's first join has Kafka's 5-minute allowance)."""
    from confluent_kafka.admin import AdminClient

    broker = make_broker(**{"group.min.session.timeout.ms": "1000"})
    bootstrap = broker.bootstrap
    topic = create_topic(bootstrap, "short-sessions", partitions=4)
    everything = partitions_of(topic, 4)
    members = [MemberProcess.python(bootstrap, "short-sessions", topic, f"{client}-{i}", client=client,
                                    session_timeout_ms=3000)
               for client in ("confluent", "kafka-python") for i in range(2)]
    admin = AdminClient({"bootstrap.servers": bootstrap})

    def stable_with_all_four() -> bool:
        group = admin.describe_consumer_groups(["short-sessions"])["short-sessions"].result(timeout=10)
        return group.state.name == "STABLE" and len(group.members) == 4

    try:
        wait_until(lambda: exclusive_cover(members, everything) and all(m.assignment for m in members), 60,
                   "all four members to get a partition")
        wait_until(stable_with_all_four, 30, "the group to be Stable with four members")
    finally:
        stop_all(members)
