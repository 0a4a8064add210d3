"""Consumer-protocol groups (KIP-848) survive their coordinator: confluent-kafka consumers
(`group.protocol=consumer`, their own processes) keep their member ids, epochs and partitions
when the broker restarts, and when the broker coordinating the group is killed (kill -9) in a
three-broker cluster and another takes over `__consumer_offsets`. They are not fenced (no
member loses or gains a partition), every record is read, none twice, and the committed offsets
reach the end of the log."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from kbroker.client import Client
from kbroker.coordinator.offsets_topic import TOPIC as OFFSETS_TOPIC
from kbroker.coordinator.offsets_topic import partition_for
from protocol.errors import ErrorCode
from tests.brokers import BrokerProcess, running_cluster
from tests.conftest import create_topic
from tests.integration.test_consumer_groups import partitions_of, produce, stop_all
from tests.members import MemberProcess, exclusive_cover
from tests.rawclient import RawClient
from tests.waiting import wait_until

pytestmark = pytest.mark.timeout(300)

CONSUMER_GROUP_DESCRIBE = 69
QUICK_HEARTBEATS = {"group.consumer.min.heartbeat.interval.ms": "500", "group.consumer.heartbeat.interval.ms": "500"}
PARTITIONS = 4
LATEST = -1
BATCH = 200


def member(bootstrap: str, group: str, topic: str, name: str) -> MemberProcess:
    return MemberProcess.python(bootstrap, group, topic, name, group_protocol="consumer")


def described(bootstrap: str, group: str) -> tuple[int, int, dict[str, tuple[int, Any, Any]]]:
    """(group epoch, assignment epoch, member id -> (epoch, assignment, target)) as the
    coordinator at `bootstrap` describes the group."""
    with RawClient(bootstrap) as client:
        [shown] = client.request(CONSUMER_GROUP_DESCRIBE, 0, {"group_ids": [group],
                                                              "include_authorized_operations": False}).groups
    assert shown.error_code == ErrorCode.NO_ERROR, shown
    members = {m.member_id: (m.member_epoch, _partitions(m.assignment), _partitions(m.target_assignment))
               for m in shown.members}
    return shown.group_epoch, shown.assignment_epoch, members


def _partitions(assignment: Any) -> list[tuple[str, list[int]]]:
    return sorted((t.topic_name, sorted(t.partitions)) for t in assignment.topic_partitions if t.partitions)


def settled(bootstrap: str, group: str, count: int) -> bool:
    """Every member at the group epoch with its target assignment (nothing moving)."""
    epoch, assignment_epoch, members = described(bootstrap, group)
    return (len(members) == count and epoch == assignment_epoch
            and all(e == epoch and mine == target for e, mine, target in members.values()))


def read_once(members: list[MemberProcess], values: list[str]) -> bool:
    seen = Counter(v for m in members for v in m.values())
    assert not [v for v, n in seen.items() if n > 1], "a record was read twice"
    return set(values) <= set(seen)


def committed_to_the_end(bootstrap: str, group: str, topic: str) -> bool:
    """The group's committed offsets are the log end offsets of every partition."""
    with Client(bootstrap) as client:
        ends = client.list_offsets(topic, range(PARTITIONS), LATEST)
        committed = client.fetch_offsets(group, [(topic, p) for p in range(PARTITIONS)])
    return {p: committed.get((topic, p)) for p in range(PARTITIONS)} == ends


def a_stable_group(bootstrap: str, coordinator_at: Callable[[], str], group: str,
                   topic: str) -> tuple[list[MemberProcess], list[str]]:
    """Two members sharing the topic after a third came and left (the group epoch past 3, which
    a group made anew by the same two members would not reach), the first batch read.
    `coordinator_at()` is the address of the group's coordinator."""
    members = [member(bootstrap, group, topic, f"m{i}") for i in range(3)]
    everything = partitions_of(topic, PARTITIONS)
    try:
        wait_until(lambda: exclusive_cover(members, everything) and settled(coordinator_at(), group, 3), 60,
                   "three members")
        members.pop().stop()
        wait_until(lambda: exclusive_cover(members, everything) and settled(coordinator_at(), group, 2), 60,
                   "two members after the third left")
        first = [f"before-{i}" for i in range(BATCH)]
        produce(bootstrap, topic, first)
        wait_until(lambda: read_once(members, first), 60, "the first batch read")
    except BaseException:
        stop_all(members)  # the caller never gets them to stop
        raise
    return members, first


# -- a restart ---------------------------------------------------------------------------------------


def test_a_restarted_broker_keeps_the_group_and_its_members_go_on(make_broker) -> None:
    broker: BrokerProcess = make_broker(**QUICK_HEARTBEATS)
    topic = create_topic(broker.bootstrap, "restart-work", partitions=PARTITIONS)
    group = "restart-workers"
    members: list[MemberProcess] = []
    try:
        members, first = a_stable_group(broker.bootstrap, lambda: broker.bootstrap, group, topic)
        before = described(broker.bootstrap, group)
        assert before[0] >= 4
        assignments_seen = [m.assignments_seen for m in members]

        broker.restart()
        assert described(broker.bootstrap, group) == before  # same members, epochs and assignments

        second = [f"after-{i}" for i in range(BATCH)]
        produce(broker.bootstrap, topic, second)
        wait_until(lambda: read_once(members, first + second), 60, "the second batch read")
        assert [m.assignments_seen for m in members] == assignments_seen  # nobody fenced, nothing moved
        assert described(broker.bootstrap, group) == before
        wait_until(lambda: committed_to_the_end(broker.bootstrap, group, topic), 30, "the commits at the log end")
    finally:
        stop_all(members)


# -- a coordinator failover ------------------------------------------------------------------------

CLUSTER = {"replica.lag.time.max.ms": "3000", "replica.fetch.wait.max.ms": "100", "replica.fetch.backoff.ms": "100",
           "zookeeper.session.timeout.ms": "4000", "offsets.topic.num.partitions": "3",
           "offsets.topic.replication.factor": "3", **QUICK_HEARTBEATS}


@pytest.fixture
def cluster(tmp_path: Path, zk_connect: str) -> Iterator[list[BrokerProcess]]:
    with running_cluster(tmp_path, zk_connect, 3, CLUSTER) as started:
        yield started


def coordinator(brokers: list[BrokerProcess], group: str) -> int:
    """The broker id leading the group's `__consumer_offsets` partition."""
    alive = ",".join(b.bootstrap for b in brokers if b.alive)
    with Client(alive) as client:
        offsets = client.metadata([OFFSETS_TOPIC], refresh=True).topic(OFFSETS_TOPIC)
        leader = offsets.partitions[partition_for(group, len(offsets.partitions))].leader
    return leader


def test_the_group_survives_its_coordinator_being_killed(cluster: list[BrokerProcess]) -> None:
    bootstrap = ",".join(b.bootstrap for b in cluster)
    topic, group = "failover-work", "failover-workers"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, PARTITIONS, 3, config={"min.insync.replicas": "2"})])[topic].result(30)
    members: list[MemberProcess] = []
    try:
        members, first = a_stable_group(bootstrap, lambda: cluster[coordinator(cluster, group)].bootstrap, group,
                                        topic)
        old = coordinator(cluster, group)
        before = described(cluster[old].bootstrap, group)
        assignments_seen = [m.assignments_seen for m in members]

        cluster[old].kill()
        wait_until(lambda: coordinator(cluster, group) not in (old, -1), 60, "another coordinator")
        new = coordinator(cluster, group)
        assert described(cluster[new].bootstrap, group) == before  # the same member ids and epochs

        alive = ",".join(b.bootstrap for b in cluster if b.alive)
        second = [f"after-{i}" for i in range(BATCH)]
        produce(alive, topic, second)
        wait_until(lambda: read_once(members, first + second), 90, "the second batch read")
        assert [m.assignments_seen for m in members] == assignments_seen  # nobody fenced, nothing moved
        assert described(cluster[new].bootstrap, group) == before
        wait_until(lambda: committed_to_the_end(alive, group, topic), 60, "the commits at the log end")
    finally:
        stop_all(members)
