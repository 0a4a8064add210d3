"""Share groups in ListGroups (type "share", v5's type filter) and DeleteGroups (an empty one goes,
NON_EMPTY_GROUP otherwise), and `kbroker share-groups` (kafka-share-groups.sh's list, describe
--members/--state/--offsets, delete, --reset-offsets and --delete-offsets) against a real broker
and real ShareConsumers."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer, ShareConsumer

from protocol.errors import ErrorCode
from tests.brokers import BrokerProcess
from tests.conftest import create_topic
from tests.rawclient import RawClient
from tests.waiting import wait_until

pytestmark = pytest.mark.timeout(300)

LIST_GROUPS, DELETE_GROUPS, SHARE_GROUP_DESCRIBE = 16, 42, 77
GROUP = "cli-workers"


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path_factory.mktemp("share-cli"), overrides={
        "offsets.topic.num.partitions": "1"}).start()
    yield process
    process.kill()


def _listed(broker: BrokerProcess, types: list[str]) -> dict[str, tuple[str, str, str]]:
    with RawClient(broker.bootstrap) as client:
        answer = client.request(LIST_GROUPS, 5, {"states_filter": [], "types_filter": types})
    assert answer.error_code == ErrorCode.NO_ERROR
    return {g.group_id: (g.protocol_type, g.group_state, g.group_type) for g in answer.groups}


def _delete(broker: BrokerProcess, group: str) -> int:
    with RawClient(broker.bootstrap) as client:
        return client.request(DELETE_GROUPS, 2, {"groups_names": [group]}).results[0].error_code


def _kbroker(broker: BrokerProcess, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kbroker.cli.main", "share-groups", "--bootstrap-server",
                           broker.bootstrap, *args], capture_output=True, text=True, timeout=60,
                          cwd=Path(__file__).resolve().parents[2])


def _member(broker: BrokerProcess) -> Any | None:
    with RawClient(broker.bootstrap) as client:
        described = client.request(SHARE_GROUP_DESCRIBE, 1, {"group_ids": [GROUP],
                                                             "include_authorized_operations": False}).groups[0]
    members = [m for m in described.members if m.assignment.topic_partitions]
    return members[0] if described.group_state == "Stable" and members else None


def test_list_describe_and_delete_a_share_group(broker: BrokerProcess) -> None:
    topic = create_topic(broker.bootstrap, "cli-jobs")
    consumer = ShareConsumer({"bootstrap.servers": broker.bootstrap, "group.id": GROUP, "client.id": "worker-1"})
    consumer.subscribe([topic])
    try:
        wait_until(lambda: consumer.poll(0.2) is not None and _member(broker) is not None, 60,
                   "the member with its partition")
        member = _member(broker)
        assert _listed(broker, ["share"]) == {GROUP: ("share", "Stable", "share")}
        assert GROUP in _listed(broker, [])
        assert GROUP not in _listed(broker, ["classic", "consumer"])

        listed = _kbroker(broker, "--list")
        assert (listed.returncode, listed.stdout) == (0, f"{GROUP}\n"), listed.stderr
        listed = _kbroker(broker, "--list", "--state")
        assert listed.stdout.splitlines() == ["GROUP           STATE", f"{GROUP}     Stable"]

        members = _kbroker(broker, "--describe", "--group", GROUP, "--members")
        assert members.returncode == 0, members.stderr
        lines = members.stdout.splitlines()
        assert lines[0] == ""
        assert lines[1].split() == ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS", "ASSIGNMENT"]
        assert lines[2].split() == [GROUP, member.member_id, member.client_host, "worker-1", "1", f"{topic}:0"]

        state = _kbroker(broker, "--describe", "--group", GROUP, "--state", "--verbose")
        assert state.returncode == 0, state.stderr
        lines = state.stdout.splitlines()
        assert lines[1].split() == ["GROUP", "COORDINATOR", "(ID)", "STATE", "GROUP-EPOCH", "ASSIGNMENT-EPOCH",
                                    "#MEMBERS"]
        row = lines[2].split()
        assert (row[0], row[2], row[3], row[-1]) == (GROUP, "(0)", "Stable", "1")

        # A group with members stays.
        assert _delete(broker, GROUP) == ErrorCode.NON_EMPTY_GROUP
        refused = _kbroker(broker, "--delete", "--group", GROUP)
        assert f"* Group '{GROUP}' could not be deleted due to: " \
               f"org.apache.kafka.common.errors.GroupNotEmptyException: Share group '{GROUP}' is not EMPTY." \
               in refused.stdout
    finally:
        consumer.close()

    wait_until(lambda: _listed(broker, ["share"]).get(GROUP, ("", "", ""))[1] == "Empty", 30,
               "the group empty once its member left")
    deleted = _kbroker(broker, "--delete", "--group", GROUP)
    assert (deleted.returncode, deleted.stdout.strip()) == (0, f"Deletion of requested share groups ('{GROUP}') "
                                                               "was successful."), deleted.stderr
    assert GROUP not in _listed(broker, [])
    assert _delete(broker, GROUP) == ErrorCode.GROUP_ID_NOT_FOUND


OFFSETS_GROUP = "cli-offsets"


def _produce(broker: BrokerProcess, topic: str, values: list[bytes]) -> None:
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5})
    for value in values:
        producer.produce(topic, value)
    assert producer.flush(30) == 0


def _consume_all(broker: BrokerProcess, topic: str, expected: int, settle_s: float = 0.0) -> list[bytes]:
    """A new ShareConsumer of the group accepts what it gets until it has `expected` records
    (then, for `settle_s`, whatever else comes), and leaves: the values it got, in order."""
    consumer = ShareConsumer({"bootstrap.servers": broker.bootstrap, "group.id": OFFSETS_GROUP,
                              "share.acknowledgement.mode": "explicit"})
    consumer.subscribe([topic])
    got: list[bytes] = []
    try:
        deadline = time.monotonic() + 60
        while len(got) < expected and time.monotonic() < deadline:
            _accept(consumer, got)
        settled = time.monotonic() + settle_s
        while time.monotonic() < settled:
            _accept(consumer, got)
    finally:
        consumer.close()
    wait_until(lambda: _listed(broker, ["share"]).get(OFFSETS_GROUP, ("", "", ""))[1] == "Empty", 30,
               "the group empty once its member left")
    return got


def _accept(consumer: ShareConsumer, got: list[bytes]) -> None:
    messages = [m for m in consumer.poll(0.2) if m.error() is None]
    for message in messages:
        consumer.acknowledge(message)
        got.append(message.value())
    if messages:
        consumer.commit_sync(10)


def _offset_rows(broker: BrokerProcess, *extra: str) -> list[list[str]]:
    described = _kbroker(broker, "--describe", "--group", OFFSETS_GROUP, *extra)
    assert described.returncode == 0, described.stderr
    return [line.split() for line in described.stdout.splitlines() if line]


def test_describe_reset_and_delete_a_share_groups_offsets(broker: BrokerProcess) -> None:
    topic = create_topic(broker.bootstrap, "cli-offsets-jobs")
    _produce(broker, topic, [f"r{i}".encode() for i in range(4)])
    # The group does not exist yet: a reset to the earliest offset creates it there.
    planned = _kbroker(broker, "--reset-offsets", "--group", OFFSETS_GROUP, "--topic", topic, "--to-earliest")
    assert planned.returncode == 0, planned.stderr
    assert [line.split() for line in planned.stdout.splitlines() if line] == [
        ["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"], [OFFSETS_GROUP, topic, "0", "0"]]
    assert OFFSETS_GROUP not in _listed(broker, ["share"])  # --dry-run is the default
    assert _kbroker(broker, "--reset-offsets", "--group", OFFSETS_GROUP, "--topic", topic, "--to-earliest",
                    "--execute").returncode == 0
    assert _consume_all(broker, topic, 4) == [b"r0", b"r1", b"r2", b"r3"]

    # Accepted 0..3, then six more produced: start offset 4, lag 6.
    _produce(broker, topic, [f"r{i}".encode() for i in range(4, 10)])
    assert _offset_rows(broker) == [["GROUP", "TOPIC", "PARTITION", "START-OFFSET", "LAG"],
                                    [OFFSETS_GROUP, topic, "0", "4", "6"]]
    assert _offset_rows(broker, "--offsets", "--verbose")[1] == [OFFSETS_GROUP, topic, "0", "0", "4", "6"]

    # Back to the earliest offset: a new consumer gets everything again.
    reset = _kbroker(broker, "--reset-offsets", "--group", OFFSETS_GROUP, "--topic", f"{topic}:0", "--to-earliest",
                     "--execute")
    assert reset.returncode == 0, reset.stderr
    assert _offset_rows(broker)[1] == [OFFSETS_GROUP, topic, "0", "0", "10"]
    assert _consume_all(broker, topic, 10) == [f"r{i}".encode() for i in range(10)]

    # To the latest offset: nothing old comes back, only what is produced next.
    assert _kbroker(broker, "--reset-offsets", "--group", OFFSETS_GROUP, "--all-topics", "--to-latest",
                    "--execute").returncode == 0
    _produce(broker, topic, [b"new"])
    assert _consume_all(broker, topic, 1, settle_s=1.0) == [b"new"]

    # Deleted: the group starts the partition again where share.auto.offset.reset says.
    configs = subprocess.run([sys.executable, "-m", "kbroker.cli.main", "configs", "--bootstrap-server",
                              broker.bootstrap, "--entity-type", "groups", "--entity-name", OFFSETS_GROUP, "--alter",
                              "--add-config", "share.auto.offset.reset=earliest"],
                             capture_output=True, text=True, timeout=60, cwd=Path(__file__).resolve().parents[2])
    assert configs.returncode == 0, configs.stderr
    deleted = _kbroker(broker, "--delete-offsets", "--group", OFFSETS_GROUP, "--topic", topic)
    assert deleted.returncode == 0, deleted.stderr
    assert [line.split() for line in deleted.stdout.splitlines() if line] == [["TOPIC", "STATUS"],
                                                                             [topic, "Successful"]]
    nothing = _kbroker(broker, "--describe", "--group", OFFSETS_GROUP)
    assert nothing.stdout.strip() == f"Share group '{OFFSETS_GROUP}' has no offset information."
    assert _consume_all(broker, topic, 11) == [f"r{i}".encode() for i in range(10)] + [b"new"]


def test_offsets_of_a_group_with_members_stay(broker: BrokerProcess) -> None:
    topic = create_topic(broker.bootstrap, "cli-busy-jobs")
    consumer = ShareConsumer({"bootstrap.servers": broker.bootstrap, "group.id": "cli-busy"})
    consumer.subscribe([topic])
    try:
        wait_until(lambda: consumer.poll(0.2) is not None and _listed(broker, ["share"]).get("cli-busy", ("",) * 3)[1]
                   == "Stable", 60, "the member in the group")
        refused = _kbroker(broker, "--reset-offsets", "--group", "cli-busy", "--topic", topic, "--to-latest",
                           "--execute")
        assert (refused.returncode, refused.stderr.strip()) == (1, "error: Share group 'cli-busy' is not empty.")
        kept = _kbroker(broker, "--delete-offsets", "--group", "cli-busy", "--topic", topic)
        assert "NON_EMPTY_GROUP" in kept.stdout
    finally:
        consumer.close()
    missing = _kbroker(broker, "--describe", "--group", "no-such-group")
    assert missing.returncode == 1 and "no-such-group" in missing.stderr
