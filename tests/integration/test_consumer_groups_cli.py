"""`kbroker consumer-groups`, run as the console script against a real broker process, with
confluent-kafka (librdkafka) consumers as the group members and as the reader of committed offsets."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from kbroker.client import Client
from tests.brokers import BrokerProcess, free_port
from tests.conftest import create_topic
from tests.waiting import wait_until

KBROKER = str(Path(sys.executable).parent / "kbroker")
GROUP_SETTINGS = {"group.initial.rebalance.delay.ms": "300"}
CLIENT_ID = "cg-cli-test"


@pytest.fixture
def group_broker(make_broker: Callable[..., BrokerProcess]) -> BrokerProcess:
    return make_broker(**GROUP_SETTINGS)


# -- helpers ----------------------------------------------------------------------------------


def groups_cli(bootstrap: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([KBROKER, "consumer-groups", "--bootstrap-server", bootstrap, *args],
                          capture_output=True, text=True, timeout=60)


def ok(bootstrap: str, *args: str) -> subprocess.CompletedProcess:
    result = groups_cli(bootstrap, *args)
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    return result


def fails(bootstrap: str, *args: str) -> str:
    """The one `error: ...` line of a command that failed as a tool should."""
    result = groups_cli(bootstrap, *args)
    assert result.returncode == 1, (result.returncode, result.stdout, result.stderr)
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    return lines[0]


def table(stdout: str, first_column: str = "GROUP", maxsplit: int = -1) -> list[dict[str, str]]:
    """The rows of the table whose header starts with `first_column`, by column name."""
    lines = [line for line in stdout.splitlines() if line.strip()]
    start = next(i for i, line in enumerate(lines) if line.split()[0] == first_column)
    header = lines[start].split()
    rows = []
    for line in lines[start + 1:]:
        cells = line.split(None, len(header) - 1 if maxsplit < 0 else maxsplit)
        rows.append(dict(zip(header, cells, strict=True)))
    return rows


@contextmanager
def member(bootstrap: str, group: str, topic: str) -> Iterator[Consumer]:
    """A live group member, returned once it has its assignment (the group is then Stable)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "client.id": CLIENT_ID,
                         "enable.auto.commit": False, "auto.offset.reset": "earliest",
                         "partition.assignment.strategy": "range"})
    consumer.subscribe([topic])
    try:
        yield consumer
    finally:
        consumer.close()


def wait_for_assignment(consumers: list[Consumer], partitions: int, timeout_s: float = 30) -> None:
    """Poll the members until together they own every partition (rebalance done)."""
    deadline = time.monotonic() + timeout_s
    while sum(len(c.assignment()) for c in consumers) != partitions:
        assert time.monotonic() < deadline, "timed out waiting for the group's assignment"
        for c in consumers:
            c.poll(0.05)


def group_state(bootstrap: str, group: str) -> str:
    with Client(bootstrap) as client:
        return client.describe_group(group).state


def wait_for_state(bootstrap: str, group: str, state: str) -> None:
    wait_until(lambda: group_state(bootstrap, group) == state, 30, f"group {group} to be {state}")


def committed(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    """The group's committed offsets as librdkafka reads them (-1001: none)."""
    reader = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        found = reader.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=30)
    finally:
        reader.close()
    return {tp.partition: tp.offset for tp in found}


def produce(bootstrap: str, topic: str, per_partition: dict[int, int]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for partition, count in per_partition.items():
        for i in range(count):
            producer.produce(topic, f"{partition}-{i}".encode(), partition=partition)
    assert producer.flush(30) == 0


def commit(consumer: Consumer, topic: str, offsets: dict[int, int]) -> None:
    consumer.commit(offsets=[TopicPartition(topic, p, o) for p, o in offsets.items()], asynchronous=False)


class BackgroundProducer:
    """Keeps producing to every partition; counts what was sent and what the broker acknowledged."""

    def __init__(self, bootstrap: str, topic: str, partitions: int) -> None:
        self.sent = dict.fromkeys(range(partitions), 0)
        self.acked = dict.fromkeys(range(partitions), 0)
        self._producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 2})
        self._topic = topic
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run)

    def _run(self) -> None:
        i = 0
        while not self._stop.is_set():
            partition = i % len(self.sent)
            self.sent[partition] += 1  # before producing: `sent` bounds the log from above
            self._producer.produce(self._topic, str(i).encode(), partition=partition, on_delivery=self._delivered)
            self._producer.poll(0.002)
            i += 1
        self._producer.flush(30)

    def _delivered(self, error: object, message: object) -> None:
        if error is None:
            self.acked[message.partition()] += 1  # type: ignore[attr-defined]

    def __enter__(self) -> BackgroundProducer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


# -- describe ---------------------------------------------------------------------------------


def test_describe_shows_the_right_lag_while_a_producer_runs(group_broker: BrokerProcess) -> None:
    bootstrap = group_broker.bootstrap
    topic = create_topic(bootstrap, "lagging", partitions=2)
    with BackgroundProducer(bootstrap, topic, 2) as producer, member(bootstrap, "lag-watchers", topic) as consumer:
        wait_for_assignment([consumer], 2)
        for round_ in range(3):
            wait_until(lambda r=round_: min(producer.acked.values()) > 20 * (r + 1), 30, "records to be acknowledged")
            offsets = {p: producer.acked[p] // 2 for p in (0, 1)}
            commit(consumer, topic, offsets)
            lower = dict(producer.acked)  # acknowledged: already below the log end
            rows = table(ok(bootstrap, "--describe", "--group", "lag-watchers").stdout)
            upper = dict(producer.sent)  # nothing beyond this was ever sent
            assert [(r["TOPIC"], int(r["PARTITION"])) for r in rows] == [(topic, 0), (topic, 1)]
            for row in rows:
                partition, end = int(row["PARTITION"]), int(row["LOG-END-OFFSET"])
                assert row["GROUP"] == "lag-watchers"
                assert int(row["CURRENT-OFFSET"]) == offsets[partition]
                assert lower[partition] <= end <= upper[partition]
                assert int(row["LAG"]) == end - offsets[partition]
                assert row["CONSUMER-ID"] == consumer.memberid()
                assert row["HOST"].endswith("127.0.0.1") and row["CLIENT-ID"] == CLIENT_ID


def test_describe_members_and_state_of_a_two_member_group(group_broker: BrokerProcess) -> None:
    bootstrap = group_broker.bootstrap
    topic = create_topic(bootstrap, "shared", partitions=4)
    with member(bootstrap, "pair", topic) as first, member(bootstrap, "pair", topic) as second:
        wait_for_assignment([first, second], 4)
        wait_for_state(bootstrap, "pair", "Stable")
        rows = table(ok(bootstrap, "--describe", "--group", "pair", "--members", "--verbose").stdout)
        owned = {c.memberid(): sorted(tp.partition for tp in c.assignment()) for c in (first, second)}
        assert {r["CONSUMER-ID"] for r in rows} == set(owned)
        for row in rows:
            partitions = owned[row["CONSUMER-ID"]]
            assert row["CLIENT-ID"] == CLIENT_ID and int(row["#PARTITIONS"]) == len(partitions) == 2
            assert row["ASSIGNMENT"] == f"{topic}({','.join(map(str, partitions))})"

        with Client(bootstrap) as client:
            [node] = client.metadata().brokers
        header, state = ok(bootstrap, "--describe", "--group", "pair", "--state").stdout.split("\n")[1:3]
        assert header.split() == ["GROUP", "COORDINATOR", "(ID)", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS"]
        assert state.split() == ["pair", bootstrap, f"({node})", "range", "Stable", "2"]

        # Without --members, every partition has a row naming its owner, and no commit shows "-".
        offsets = table(ok(bootstrap, "--describe", "--all-groups").stdout)
        assert {(int(r["PARTITION"]), r["CONSUMER-ID"]) for r in offsets} == {
            (p, m) for m, parts in owned.items() for p in parts}
        assert {(r["CURRENT-OFFSET"], r["LAG"]) for r in offsets} == {("-", "-")}


def test_list_with_states_and_an_empty_group(group_broker: BrokerProcess) -> None:
    bootstrap = group_broker.bootstrap
    topic = create_topic(bootstrap, "listed", partitions=1)
    produce(bootstrap, topic, {0: 5})
    with member(bootstrap, "active", topic) as consumer:
        wait_for_assignment([consumer], 1)
        with member(bootstrap, "finished", topic) as leaver:
            wait_for_assignment([leaver], 1)
            commit(leaver, topic, {0: 3})
        wait_for_state(bootstrap, "finished", "Empty")

        assert ok(bootstrap, "--list").stdout.split() == ["active", "finished"]
        states = {r["GROUP"]: r["STATE"] for r in table(ok(bootstrap, "--list", "--state").stdout)}
        assert states == {"active": "Stable", "finished": "Empty"}
        assert table(ok(bootstrap, "--list", "--state", "empty").stdout) == [{"GROUP": "finished", "STATE": "Empty"}]
        assert "Invalid state list 'Bored'" in fails(bootstrap, "--list", "--state", "Bored")

        result = ok(bootstrap, "--describe", "--group", "finished")
        assert result.stderr.strip() == "Consumer group 'finished' has no active members."
        [row] = table(result.stdout)
        assert (row["CURRENT-OFFSET"], row["LOG-END-OFFSET"], row["LAG"]) == ("3", "5", "2")
        assert (row["CONSUMER-ID"], row["HOST"], row["CLIENT-ID"]) == ("-", "-", "-")
        assert fails(bootstrap, "--describe", "--group", "nobody") == "error: Consumer group 'nobody' does not exist."


# -- reset offsets ----------------------------------------------------------------------------


def test_reset_offsets_refused_while_active_then_dry_run_and_execute(group_broker: BrokerProcess) -> None:
    bootstrap = group_broker.bootstrap
    topic = create_topic(bootstrap, "replay", partitions=2)
    produce(bootstrap, topic, {0: 10, 1: 6})
    reset = ("--reset-offsets", "--group", "replayers", "--topic")
    with member(bootstrap, "replayers", topic) as consumer:
        wait_for_assignment([consumer], 2)
        commit(consumer, topic, {0: 7, 1: 4})
        assert fails(bootstrap, *reset, topic, "--to-earliest", "--execute") == (
            "error: Assignments can only be reset if the group 'replayers' is inactive, "
            "but the current state is Stable.")
    wait_for_state(bootstrap, "replayers", "Empty")
    assert committed(bootstrap, "replayers", topic, 2) == {0: 7, 1: 4}

    def new_offsets(*args: str) -> dict[int, int]:
        rows = table(ok(bootstrap, *args).stdout)
        assert {r["GROUP"] for r in rows} == {"replayers"} and {r["TOPIC"] for r in rows} == {topic}
        return {int(r["PARTITION"]): int(r["NEW-OFFSET"]) for r in rows}

    # Dry run is the default, and --dry-run says so: the plan is printed, nothing is committed.
    assert new_offsets(*reset, topic, "--to-earliest") == {0: 0, 1: 0}
    assert new_offsets(*reset, topic, "--to-latest", "--dry-run") == {0: 10, 1: 6}
    assert committed(bootstrap, "replayers", topic, 2) == {0: 7, 1: 4}

    assert new_offsets(*reset, topic, "--to-earliest", "--execute") == {0: 0, 1: 0}
    assert committed(bootstrap, "replayers", topic, 2) == {0: 0, 1: 0}
    assert new_offsets(*reset, f"{topic}:1", "--to-offset", "5", "--execute") == {1: 5}
    assert new_offsets("--reset-offsets", "--group", "replayers", "--all-topics", "--shift-by", "-2",
                       "--execute") == {0: 0, 1: 3}  # clamped at the log start, as Kafka does
    assert new_offsets(*reset, f"{topic}:0", "--to-offset", "99", "--execute") == {0: 10}  # and at the end
    assert committed(bootstrap, "replayers", topic, 2) == {0: 10, 1: 3}
    assert new_offsets(*reset, topic, "--to-datetime", "2000-01-01T00:00:00.000") == {0: 0, 1: 0}

    # The describe view agrees with what librdkafka reads.
    rows = table(ok(bootstrap, "--describe", "--group", "replayers").stdout)
    assert {int(r["PARTITION"]): (int(r["CURRENT-OFFSET"]), int(r["LAG"])) for r in rows} == {0: (10, 0), 1: (3, 3)}
    assert "do not exist" in fails(bootstrap, *reset, f"{topic}:9", "--to-latest")


# -- delete -----------------------------------------------------------------------------------


def test_delete_groups_and_offsets(group_broker: BrokerProcess) -> None:
    bootstrap = group_broker.bootstrap
    topic = create_topic(bootstrap, "doomed", partitions=2)
    produce(bootstrap, topic, {0: 3, 1: 3})
    with member(bootstrap, "doomed-group", topic) as consumer:
        wait_for_assignment([consumer], 2)
        commit(consumer, topic, {0: 2, 1: 1})
        assert fails(bootstrap, "--delete", "--group", "doomed-group") == (
            "error: Deletion of some consumer groups failed: Group 'doomed-group' could not be deleted due to: "
            "NON_EMPTY_GROUP: The group is not empty.")
    assert fails(bootstrap, "--delete", "--group", "ghosts") == (
        "error: Deletion of some consumer groups failed: Group 'ghosts' could not be deleted due to: "
        "GROUP_ID_NOT_FOUND: The group id does not exist.")
    wait_for_state(bootstrap, "doomed-group", "Empty")

    result = ok(bootstrap, "--delete-offsets", "--group", "doomed-group", "--topic", f"{topic}:0")
    assert result.stdout.splitlines()[0] == "Request succeeded for deleting offsets from group doomed-group."
    assert table(result.stdout, "TOPIC") == [{"TOPIC": topic, "PARTITION": "0", "STATUS": "Successful"}]
    assert committed(bootstrap, "doomed-group", topic, 2) == {0: -1001, 1: 1}

    assert ok(bootstrap, "--delete", "--group", "doomed-group").stdout == (
        "Deletion of requested consumer groups ('doomed-group') was successful.\n")
    assert ok(bootstrap, "--list").stdout == ""
    assert committed(bootstrap, "doomed-group", topic, 2) == {0: -1001, 1: -1001}


# -- failures ---------------------------------------------------------------------------------


def test_unreachable_broker_is_one_error_line() -> None:
    line = fails(f"127.0.0.1:{free_port()}", "--list")
    assert "cannot connect to broker" in line


def test_option_errors_are_one_line_without_a_broker() -> None:
    nowhere = f"127.0.0.1:{free_port()}"
    assert "--all-groups, --group" in fails(nowhere, "--describe")
    assert "--all-topics, --topic" in fails(nowhere, "--reset-offsets", "--group", "g", "--to-earliest")
    assert "--to-earliest" in fails(nowhere, "--reset-offsets", "--group", "g", "--all-topics")
    assert "at most one" in fails(nowhere, "--describe", "--group", "g", "--members", "--state")
