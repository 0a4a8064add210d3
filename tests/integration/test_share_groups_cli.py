"""Share groups in ListGroups (type "share", v5's type filter) and DeleteGroups (an empty one goes,
NON_EMPTY_GROUP otherwise), and `kbroker share-groups` (kafka-share-groups.sh's list, describe
--members/--state and delete) against a real broker and a real ShareConsumer."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import ShareConsumer

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


def test_offsets_are_refused_as_not_served(broker: BrokerProcess) -> None:
    for args in (["--describe", "--group", GROUP], ["--reset-offsets", "--group", GROUP],
                 ["--delete-offsets", "--group", GROUP]):
        result = _kbroker(broker, *args)
        assert result.returncode == 1
        assert "which kbroker does not serve yet" in result.stderr
