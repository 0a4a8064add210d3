"""The Java client's consumer group protocol (KIP-848, `group.protocol=consumer`; early access
in kafka-clients 3.9) against kbroker and against Apache Kafka 3.9, side by side: two members
share a topic's partitions incrementally, commit, and later members resume at the committed
offsets.

Kafka 3.9 serves the protocol only with `group.coordinator.rebalance.protocols=classic,consumer`,
so its reference here is a broker of this module's own (the session's is started without it).
Both brokers hand out a 500 ms heartbeat interval (Kafka's is 5 s by default), so the members
learn of a rebalance quickly; nothing else differs.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from compat_tests import kafka_local
from compat_tests.conftest import Target, create_topic, kbroker_meta
from compat_tests.harness import JavaHarness
from tests.brokers import BrokerProcess

TARGETS = ["kbroker", "kafka"]
PARTITIONS = 4
FIRST, SECOND = 2, 2
QUICK_HEARTBEATS = {"group.consumer.heartbeat.interval.ms": "500", "group.consumer.min.heartbeat.interval.ms": "500",
                    "group.initial.rebalance.delay.ms": "0"}


def _kbroker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Target]:
    process = BrokerProcess(tmp_path_factory.mktemp("kip848-kbroker"), overrides=QUICK_HEARTBEATS).start()
    try:
        yield Target(name="kbroker", bootstrap=process.bootstrap, port=process.port, node_id=0,
                     cluster_id=kbroker_meta(process)["cluster.id"], retention_hours=336, client_host="/127.0.0.1")
    finally:
        if process.alive:
            assert process.stop() == 0, process.log_text()


def _kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Target]:
    home = kafka_local.kafka_home_or_skip()
    kafka = kafka_local.LocalKafka(home, tmp_path_factory.mktemp("kip848-kafka"), overrides={
        "group.coordinator.rebalance.protocols": "classic,consumer", **QUICK_HEARTBEATS}).start()
    try:
        yield Target(name="kafka", bootstrap=kafka.bootstrap, port=kafka.port, node_id=kafka.node_id,
                     cluster_id=kafka.cluster_id, retention_hours=168, client_host="/127.0.0.1")
    finally:
        kafka.stop()


@pytest.fixture(scope="module", params=TARGETS)
def protocol_target(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Target]:
    brokers = _kbroker(tmp_path_factory) if request.param == "kbroker" else _kafka(tmp_path_factory)
    yield next(brokers)
    brokers.close()


def _partitions(topic: str, numbers: range | list[int]) -> list[str]:
    return [f"{topic}:{p}" for p in numbers]


def test_two_members_share_incrementally_and_resume_at_committed_offsets(
    java: JavaHarness, protocol_target: Target
) -> None:
    topic = create_topic(protocol_target.bootstrap, f"java-kip848-{uuid.uuid4().hex[:8]}", partitions=PARTITIONS)
    group = f"java-kip848-group-{uuid.uuid4().hex[:8]}"
    result = java.run("consumer_protocol_group", timeout=180, bootstrap=protocol_target.bootstrap, topic=topic,
                      group=group, partitions=PARTITIONS, first=FIRST, second=SECOND)
    everything = _partitions(topic, range(PARTITIONS))

    # The first member is alone: every partition, group epoch 1, and it commits what it read.
    assert result["first_assignment"] == everything
    assert sorted((r["partition"], r["offset"]) for r in result["first_records"]) == [
        (p, o) for p in range(PARTITIONS) for o in range(FIRST)]
    assert result["first_group"] == {"group_id": group, "generation": 1, "member_id_set": True}
    assert result["committed_first"] == {tp: {"offset": FIRST, "metadata": ""} for tp in everything}

    # The second member joins: half the partitions move, incrementally. The first member gives up
    # only those (committing them first) and never loses the others; the second only gains.
    one, two = result["assignment_1"], result["assignment_2"]
    assert len(one) == len(two) == PARTITIONS // 2 and sorted(one + two) == everything
    assert result["rebalances_1"][:2] == [{"assigned": everything}, {"revoked": two}]
    assert result["rebalances_2"][0] == {"assigned": two}
    assert result["rebalances_2"][1:] in ([], [{"revoked": two}])  # its leave, at close
    assert result["generation_2"] >= 2
    # Each new record was read once, by one member, and the second started where the first committed.
    read = [(r["partition"], r["offset"], member) for member in (1, 2) for r in result[f"second_records_{member}"]]
    assert sorted((p, o) for p, o, _ in read) == [(p, o) for p in range(PARTITIONS) for o in range(FIRST, FIRST + SECOND)]
    # (The first may read a moving partition's new records before giving it up; the second reads
    # only what it was given.)
    assert all(f"{topic}:{p}" in two for p, _, member in read if member == 2)
    assert result["committed_second"] == {tp: {"offset": FIRST + SECOND, "metadata": ""} for tp in everything}

    # After both left, a third member resumes at the committed offsets: only the newest records.
    assert sorted((r["partition"], r["offset"]) for r in result["third_records"]) == [
        (p, FIRST + SECOND) for p in range(PARTITIONS)]
    assert result["committed_third"] == {tp: {"offset": FIRST + SECOND + 1, "metadata": ""} for tp in everything}
