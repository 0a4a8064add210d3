"""`kbroker delayed --describe` against real brokers: the table of pending delayed records after
confluent-kafka produced some, `--all`, the count going to zero once the records are delivered,
clear errors for an unknown topic and an unreachable broker, and on two brokers (ZooKeeper)
each partition described by its own leader."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from protocol.errors import ErrorCode
from tests.brokers import PROJECT_ROOT, BrokerProcess, free_port
from tests.conftest import create_topic
from tests.integration.test_delayed_delivery import DELAY, DELIVER_AT, _now_ms, _produce
from tests.integration.test_delayed_describe import describe, partitions_of
from tests.waiting import wait_until

COLUMNS = ["TOPIC", "PARTITION", "LEADER", "PENDING", "PENDING-BYTES", "HELD", "NEXT-DUE"]
MINUTE_MS = 60_000


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path_factory.mktemp("delayed-cli"), overrides={
        "offsets.topic.num.partitions": "1", "transaction.state.log.num.partitions": "1"}).start()
    yield process
    if process.alive:
        assert process.stop() == 0, process.log_tail()


def delayed_cli(bootstrap: str, *args: str) -> subprocess.CompletedProcess[str]:
    # `-m` from the project's root: the command of this checkout, as the brokers run.
    return subprocess.run([sys.executable, "-m", "kbroker.cli.main", "delayed", "--bootstrap-server", bootstrap,
                           *args], cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=60)


def rows(bootstrap: str, *args: str) -> list[dict[str, str]]:
    """The table as dicts by column (the last one, NEXT-DUE, holds spaces)."""
    result = delayed_cli(bootstrap, "--describe", *args)
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr
    header, *lines = result.stdout.splitlines()
    assert header.split() == COLUMNS
    return [dict(zip(COLUMNS, line.split(maxsplit=len(COLUMNS) - 1), strict=True)) for line in lines]


def iso(ms: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ms // 1000)) + f".{ms % 1000:03d}Z"


def test_shows_partitions_with_pending_records(broker: BrokerProcess) -> None:
    topic = create_topic(broker.bootstrap, "cli-pending", partitions=3)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5})
    now = _now_ms()
    dues = [now + 11 * MINUTE_MS, now + 10 * MINUTE_MS]
    for due in dues:
        _produce(producer, topic, b"later", [(DELIVER_AT, b"%d" % due)], partition=2)
    assert producer.flush(15) == 0
    _produce(producer, topic, b"now", partition=0)
    assert producer.flush(15) == 0

    [row] = rows(broker.bootstrap, "--topic", topic)
    raw = partitions_of(describe(broker.bootstrap, [{"name": topic, "partition_indexes": [2]}]), topic)[2]
    assert row | {"NEXT-DUE": ""} == {"TOPIC": topic, "PARTITION": "2", "LEADER": "0", "PENDING": "2",
                                       "PENDING-BYTES": str(raw.pending_bytes), "HELD": "0", "NEXT-DUE": ""}
    moment, _, wait = row["NEXT-DUE"].partition(" ")
    assert moment == iso(min(dues))
    assert wait.startswith(("(in 9m", "(in 10m")) and wait.endswith("s)"), wait

    every = rows(broker.bootstrap, "--topic", topic, "--all")
    assert [(r["PARTITION"], r["PENDING"], r["HELD"]) for r in every] == [("0", "0", "0"), ("1", "0", "0"),
                                                                          ("2", "2", "0")]
    assert [r["NEXT-DUE"].split(" ")[0] for r in every] == ["-", "-", moment]
    assert topic in {r["TOPIC"] for r in rows(broker.bootstrap)}  # no --topic: every topic


def test_the_count_goes_to_zero_once_delivered(broker: BrokerProcess) -> None:
    topic = create_topic(broker.bootstrap, "cli-delivered")
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5})
    sent = _now_ms()
    delay_ms = 8000
    for value in (b"a", b"b", b"c"):
        _produce(producer, topic, value, [(DELAY, b"%d" % delay_ms)], timestamp=sent)
    assert producer.flush(15) == 0
    asked = _now_ms()
    pending = rows(broker.bootstrap, "--topic", topic)
    if asked < sent + delay_ms:  # asked in time (a loaded machine may not have been)
        assert [(r["PENDING"], r["HELD"]) for r in pending] == [("3", "0")]
        assert pending[0]["NEXT-DUE"].startswith(iso(sent + delay_ms))

    wait_until(lambda: rows(broker.bootstrap, "--topic", topic) == [], 60, "the records delivered")
    [row] = rows(broker.bootstrap, "--topic", topic, "--all")
    assert (row["PENDING"], row["PENDING-BYTES"], row["HELD"], row["NEXT-DUE"]) == ("0", "0", "0", "-")
    result = delayed_cli(broker.bootstrap, "--describe", "--topic", topic)
    assert "No partition has delayed records pending." in result.stderr


def test_unknown_topic_and_unreachable_broker_fail_clearly(broker: BrokerProcess) -> None:
    unknown = delayed_cli(broker.bootstrap, "--describe", "--topic", "cli-no-such-topic")
    assert unknown.returncode == 1 and unknown.stdout == ""
    assert unknown.stderr == "error: UNKNOWN_TOPIC_OR_PARTITION: Topic 'cli-no-such-topic' does not exist\n"
    port = free_port()
    unreachable = delayed_cli(f"127.0.0.1:{port}", "--describe")
    assert unreachable.returncode == 1 and "Traceback" not in unreachable.stderr
    assert unreachable.stderr.startswith(f"error: cannot connect to broker 127.0.0.1:{port}: ")
    missing = delayed_cli(broker.bootstrap)
    assert missing.returncode == 2 and "--describe" in missing.stderr


# -- two brokers: each partition from its own leader ------------------------------------------


@pytest.fixture
def two_brokers(tmp_path: Path, zk_connect: str) -> Iterator[list[BrokerProcess]]:
    started = [BrokerProcess(tmp_path / f"b{i}", overrides={
        "broker.id": str(i), "zookeeper.connect": zk_connect, "offsets.topic.num.partitions": "1",
        "replica.fetch.wait.max.ms": "100"}).start() for i in range(2)]
    yield started
    for process in started:
        process.kill()


def test_each_partition_is_described_by_its_leader(two_brokers: list[BrokerProcess]) -> None:
    first, second = (b.bootstrap for b in two_brokers)
    admin = AdminClient({"bootstrap.servers": f"{first},{second}"})
    topics = [NewTopic("spread", num_partitions=2, replica_assignment=[[0, 1], [1, 0]]),
              NewTopic("only-on-1", num_partitions=1, replica_assignment=[[1]])]
    for future in admin.create_topics(topics).values():
        future.result(30)
    producer = Producer({"bootstrap.servers": f"{first},{second}", "acks": "all", "linger.ms": 5})
    now = _now_ms()
    for partition, count in ((0, 1), (1, 2)):
        for i in range(count):
            _produce(producer, "spread", b"v", [(DELIVER_AT, b"%d" % (now + (20 + i) * MINUTE_MS))],
                     partition=partition)
    assert producer.flush(30) == 0

    # Through the first broker only: the second broker's partition must be asked of it.
    table = wait_until(lambda: rows(first, "--topic", "spread", "--topic", "only-on-1", "--all"), 30,
                       "the table")
    assert [(r["TOPIC"], r["PARTITION"], r["LEADER"], r["PENDING"]) for r in table] == \
        [("only-on-1", "0", "1", "0"), ("spread", "0", "0", "1"), ("spread", "1", "1", "2")]
    assert table[2]["NEXT-DUE"].startswith(iso(now + 20 * MINUTE_MS))

    # Broker 0 follows spread-1 and does not host only-on-1: neither is its to describe.
    answer = describe(first, [{"name": "spread", "partition_indexes": [0, 1]},
                              {"name": "only-on-1", "partition_indexes": [0]}])
    assert [[(p.partition_index, p.error_code) for p in t.partitions] for t in answer.topics] == \
        [[(0, 0), (1, ErrorCode.NOT_LEADER_OR_FOLLOWER)], [(0, ErrorCode.NOT_LEADER_OR_FOLLOWER)]]
    # A full listing names only the partitions the broker leads.
    assert partitions_of(describe(second, None), "spread").keys() == {1}
