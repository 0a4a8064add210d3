"""kbroker's consumer-protocol group records in `__consumer_offsets` against Apache Kafka 3.9's:

- Kafka's own `kafka-dump-log.sh --offsets-decoder` decodes a segment kbroker wrote, and every
  field it shows is what kbroker meant. Kafka 3.9 knows record types 3-8; the regex record (16)
  is Kafka 4.0's, which 3.9's tool reports as "Unknown record type 16" and skips, so those are
  only counted;
- kbroker rebuilds, from a segment Apache Kafka 3.9 wrote, the group Kafka itself describes
  (epochs, members, current and target assignments).

Kafka 3.9 serves the consumer protocol only with `group.coordinator.rebalance.protocols=
classic,consumer`, so the reference here is a broker of this module's own.
"""

from __future__ import annotations

import base64
import json
import re
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from compat_tests import kafka_local
from compat_tests.conftest import create_topic
from kbroker.coordinator.consumer_group_records import GroupReplay
from protocol import consumer_group_records as records
from protocol.consumer_group_records import (
    ClassicMemberMetadata,
    ConsumerGroupRecordKey,
    CurrentAssignment,
    GroupEpoch,
    MemberMetadata,
    PartitionMetadata,
    SubscribedTopic,
    TargetAssignment,
    TargetAssignmentEpoch,
)
from protocol.errors import ErrorCode
from protocol.record_batch import decode_batches
from tests.brokers import BrokerProcess
from tests.rawclient import RawClient
from tests.test_mixed_groups import subscription

CONSUMER_GROUP_HEARTBEAT, CONSUMER_GROUP_DESCRIBE, JOIN_GROUP = 68, 69, 11
_DUMPED = re.compile(r"\| offset: (\d+) .* key: (.*?)(?: payload: (.*))?$")


def _segments(log_dir: Path) -> list[Path]:
    return [p for p in sorted(log_dir.glob("__consumer_offsets-*/*.log")) if p.stat().st_size > 0]


def _records(segment: Path) -> Iterator[tuple[int, ConsumerGroupRecordKey, records.ConsumerGroupRecordValue | None]]:
    """The consumer-group records of a segment as kbroker reads them: (offset, key, value)."""
    for batch in decode_batches(segment.read_bytes()):
        for record in batch.records:
            if record.key is None or not records.is_consumer_group_key(record.key):
                continue
            key = records.decode_key(record.key)
            value = records.decode_value(key.record_type, record.value) if record.value is not None else None
            yield record.offset, key, value


def _heartbeat(client: RawClient, version: int, **fields: Any) -> Any:
    body = {"group_id": "g", "member_id": "", "member_epoch": 0, "instance_id": None, "rack_id": None,
            "rebalance_timeout_ms": 30_000, "subscribed_topic_names": ["events"], "subscribed_topic_regex": None,
            "server_assignor": None, "topic_partitions": [], **fields}
    answer = client.request(CONSUMER_GROUP_HEARTBEAT, version, body)
    assert answer.error_code == ErrorCode.NO_ERROR, answer
    return answer


def _owner_of_everything(client: RawClient, partitions: int = 4, timeout_s: float = 30.0) -> Any:
    """A first member, heartbeating until it is assigned every partition of `events`. Kafka's
    coordinator learns of a new topic from its metadata image a little after CreateTopics
    answers; until then it assigns nothing (seen on a loaded machine), and the second member
    would then find nothing to revoke."""
    answer = _heartbeat(client, 0)
    deadline = time.monotonic() + timeout_s
    while sum(len(t.partitions) for t in answer.assignment.topic_partitions) < partitions:
        assert time.monotonic() < deadline, f"the first member was never assigned all of events: {answer}"
        time.sleep(0.1)  # a member's heartbeat interval, between looks at the condition above
        again = _heartbeat(client, 0, member_id=answer.member_id, member_epoch=answer.member_epoch,
                           topic_partitions=_owned(answer))
        if again.assignment is not None:  # null: unchanged
            answer = again
        else:
            answer.member_epoch = again.member_epoch
    return answer


def _owned(answer: Any) -> list[dict[str, Any]]:
    return [{"topic_id": t.topic_id, "partitions": list(t.partitions)} for t in answer.assignment.topic_partitions]


# -- Kafka reads kbroker's records ------------------------------------------------------------------


def _kbroker_group(bootstrap: str) -> str:
    """A mixed group: a static member with an assignor, one subscribed by regex (which then
    leaves), and a classic member; returns the classic member's id."""
    with RawClient(bootstrap) as client:
        _heartbeat(client, 1, member_id="member-a", instance_id="static-a", server_assignor="range")
        _heartbeat(client, 1, member_id="member-r", rack_id="rack-1", subscribed_topic_names=None,
                   subscribed_topic_regex="events-.*")
        join = {"group_id": "g", "session_timeout_ms": 10_000, "rebalance_timeout_ms": 30_000, "member_id": "",
                "group_instance_id": None, "protocol_type": "consumer",
                "protocols": [{"name": "range", "metadata": subscription(["events"])}]}
        first = client.request(JOIN_GROUP, 5, join)
        assert first.error_code == ErrorCode.MEMBER_ID_REQUIRED
        joined = client.request(JOIN_GROUP, 5, {**join, "member_id": first.member_id})
        assert joined.error_code == ErrorCode.NO_ERROR
        _heartbeat(client, 1, member_id="member-r", member_epoch=-1, rebalance_timeout_ms=-1,
                   subscribed_topic_names=None, topic_partitions=None)
        return first.member_id


def _kafka_id(text: str) -> uuid.UUID:
    return uuid.UUID(bytes=base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))


def _partitions(topics: list[dict[str, Any]]) -> dict[uuid.UUID, frozenset[int]]:
    return {_kafka_id(t["topicId"]): frozenset(t["partitions"]) for t in topics if t["partitions"]}


def _from_kafka_json(record_type: int, data: dict[str, Any]) -> records.ConsumerGroupRecordValue:
    """A value as Kafka's JSON converter shows it, in kbroker's terms."""
    if record_type == records.GROUP_METADATA:
        return GroupEpoch(data["epoch"])
    if record_type == records.PARTITION_METADATA:
        return PartitionMetadata(tuple(SubscribedTopic(_kafka_id(t["topicId"]), t["topicName"], t["numPartitions"])
                                       for t in data["topics"]))
    if record_type == records.MEMBER_METADATA:
        classic = data["classicMemberMetadata"]
        return MemberMetadata(
            data["instanceId"], data["rackId"], data["clientId"], data["clientHost"],
            tuple(sorted(data["subscribedTopicNames"])), data["subscribedTopicRegex"], data["rebalanceTimeoutMs"],
            data["serverAssignor"],
            None if classic is None else ClassicMemberMetadata(
                classic["sessionTimeoutMs"],
                tuple((p["name"], base64.b64decode(p["metadata"])) for p in classic["supportedProtocols"])))
    if record_type == records.TARGET_ASSIGNMENT_METADATA:
        return TargetAssignmentEpoch(data["assignmentEpoch"])
    if record_type == records.TARGET_ASSIGNMENT_MEMBER:
        return TargetAssignment(_partitions(data["topicPartitions"]))
    return CurrentAssignment(data["memberEpoch"], data["previousMemberEpoch"], data["state"],
                             _partitions(data["assignedPartitions"]), _partitions(data["partitionsPendingRevocation"]))


def _dumped(home: Path, segment: Path) -> dict[int, tuple[str, str | None]]:
    """Kafka's dump of a segment: offset -> (key, payload) as its offsets decoder prints them."""
    result = kafka_local.run_tool(home, "kafka-dump-log", "--offsets-decoder", "--files", str(segment))
    assert result.returncode == 0, result.stderr
    lines = {}
    for line in result.stdout.splitlines():
        match = _DUMPED.match(line)
        if match:
            lines[int(match.group(1))] = (match.group(2), match.group(3))
    return lines


def test_kafkas_dump_log_decodes_kbrokers_consumer_group_records(tmp_path: Path) -> None:
    home = kafka_local.kafka_home_or_skip()
    broker = BrokerProcess(tmp_path / "kbroker").start()
    try:
        create_topic(broker.bootstrap, "events", 2)
        create_topic(broker.bootstrap, "events-x", 1)
        classic_member = _kbroker_group(broker.bootstrap)
    finally:
        assert broker.stop() == 0, broker.log_tail()
    [segment] = _segments(broker.log_dir)
    dumped = _dumped(home, segment)
    checked: set[int] = set()
    unknown_to_kafka_39 = 0
    for offset, key, value in _records(segment):
        dumped_key, payload = dumped[offset]
        if key.record_type == records.REGULAR_EXPRESSION:
            assert dumped_key == f"Unknown record type 16 at offset {offset}, skipping."
            unknown_to_kafka_39 += 1
            continue
        shown = json.loads(dumped_key)
        assert shown["type"] == str(key.record_type)
        assert shown["data"]["groupId"] == key.group_id
        assert shown["data"].get("memberId", "") == key.subject
        if value is None:
            assert payload == "<DELETE>"
        else:
            shown_value = json.loads(payload or "")
            assert shown_value["version"] == "0"
            assert _from_kafka_json(key.record_type, shown_value["data"]) == value
        checked.add(key.record_type)
    assert checked == {3, 4, 5, 6, 7, 8} and unknown_to_kafka_39 == 2  # the regex resolved, then deleted
    epochs = [json.loads(p or "")["data"]["epoch"] for k, p in dumped.values() if k.startswith('{"type":"3"')]
    assert epochs == [1, 2, 3, 4]
    members = {json.loads(k)["data"]["memberId"]: json.loads(p)["data"] for k, p in dumped.values()
               if k.startswith('{"type":"5"') and p != "<DELETE>" and p is not None}
    assert members["member-a"]["instanceId"] == "static-a" and members["member-a"]["serverAssignor"] == "range"
    assert members["member-a"]["classicMemberMetadata"] is None
    assert members["member-r"]["subscribedTopicRegex"] == "events-.*"
    classic = members[classic_member]["classicMemberMetadata"]
    assert classic["sessionTimeoutMs"] == 10_000
    assert [(p["name"], base64.b64decode(p["metadata"])) for p in classic["supportedProtocols"]] == [
        ("range", subscription(["events"]))]


# -- kbroker reads Kafka's records --------------------------------------------------------------------


def test_kbroker_rebuilds_the_group_kafka_wrote(tmp_path: Path) -> None:
    home = kafka_local.kafka_home_or_skip()
    kafka = kafka_local.LocalKafka(home, tmp_path / "kafka",
                                   overrides={"group.coordinator.rebalance.protocols": "classic,consumer"}).start()
    try:
        create_topic(kafka.bootstrap, "events", 4)
        with RawClient(kafka.bootstrap) as client:
            a = _owner_of_everything(client)
            _heartbeat(client, 0, instance_id="static-b", rack_id="rack-1", server_assignor="range")
            # a reports owning everything: half of it is now pending revocation.
            _heartbeat(client, 0, member_id=a.member_id, member_epoch=a.member_epoch, rebalance_timeout_ms=-1,
                       subscribed_topic_names=None, topic_partitions=_owned(a))
            [described] = client.request(CONSUMER_GROUP_DESCRIBE, 0, {"group_ids": ["g"],
                                                                      "include_authorized_operations": False}).groups
    finally:
        kafka.stop()
    replay = GroupReplay()
    for segment in _segments(tmp_path / "kafka" / "log"):
        for _, key, value in _records(segment):
            replay.apply(key, value)
    [group] = replay.build()
    assert (group.group_id, group.group_epoch, group.assignment_epoch) == ("g", described.group_epoch,
                                                                           described.assignment_epoch)
    assert len(described.members) == 2 and set(group.members) == {m.member_id for m in described.members}
    for shown in described.members:
        member = group.members[shown.member_id]
        assert (member.member_epoch, member.instance_id, member.rack_id, member.client_id, member.client_host) == (
            shown.member_epoch, shown.instance_id, shown.rack_id, shown.client_id, shown.client_host)
        assert member.subscribed_topic_names == frozenset(shown.subscribed_topic_names)
        assert member.assigned == _described(shown.assignment)
        assert group.target[member.member_id] == _described(shown.target_assignment)
    revoking = group.members[a.member_id]
    assert revoking.pending_revocation and revoking.state.value == "unrevoked_partitions"
    assert group.subscription_metadata["events"][1] == 4


def _described(assignment: Any) -> dict[uuid.UUID, frozenset[int]]:
    return {t.topic_id: frozenset(t.partitions) for t in assignment.topic_partitions if t.partitions}
