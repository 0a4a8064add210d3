"""The share-group APIs on the wire, request by request: the answers and error codes a client
gets for each misuse (KIP-932's rules), through kbroker's raw client."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from protocol.errors import ErrorCode
from protocol.record_batch import Record, encode_batch
from tests.brokers import BrokerProcess
from tests.rawclient import RawClient
from tests.waiting import wait_until

HEARTBEAT, DESCRIBE, FETCH, ACKNOWLEDGE = 76, 77, 78, 79
ACCEPT, RELEASE, RENEW = 1, 2, 4
INCREMENTAL_ALTER_CONFIGS, GROUP_RESOURCE, SET = 44, 32, 0


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path_factory.mktemp("share-protocol"),
                            overrides={"offsets.topic.num.partitions": "1", "num.partitions": "1"}).start()
    yield process
    if process.alive:
        assert process.stop() == 0, process.log_tail()


def _heartbeat(client: RawClient, group: str, member: str, epoch: int, topics: list[str] | None) -> Any:
    return client.request(HEARTBEAT, 1, {"group_id": group, "member_id": member, "member_epoch": epoch,
                                         "rack_id": None, "subscribed_topic_names": topics})


def _coordinated_heartbeat(client: RawClient, group: str, member: str, topics: list[str]) -> Any:
    """The first heartbeat, once `__consumer_offsets` exists (the first asks create it)."""
    answers: list[Any] = []

    def joined() -> bool:
        answers.append(_heartbeat(client, group, member, 0, topics))
        return answers[-1].error_code != ErrorCode.COORDINATOR_NOT_AVAILABLE

    wait_until(joined, 30, "the group coordinator")
    return answers[-1]


def _topic_id(client: RawClient, topic: str) -> uuid.UUID:
    answer = client.request(3, 12, {"topics": [{"name": topic, "topic_id": None}], "allow_auto_topic_creation": True,
                                    "include_topic_authorized_operations": False})
    assert answer.topics[0].error_code == 0
    return answer.topics[0].topic_id


def _produce(client: RawClient, topic: str, values: list[bytes]) -> None:
    batch = encode_batch([Record(i, int(time.time() * 1000), None, v) for i, v in enumerate(values)])
    answer = client.request(0, 9, {"transactional_id": None, "acks": -1, "timeout_ms": 5000, "topic_data": [
        {"name": topic, "partition_data": [{"index": 0, "records": batch}]}]})
    assert answer.responses[0].partition_responses[0].error_code == 0


def _fetch(client: RawClient, group: str, member: str, epoch: int, topic_id: uuid.UUID,
           acks: list[dict[str, Any]] | None = None, max_wait_ms: int = 0) -> Any:
    return client.request(FETCH, 1, {
        "group_id": group, "member_id": member, "share_session_epoch": epoch, "max_wait_ms": max_wait_ms,
        "min_bytes": 1, "max_bytes": 1 << 20, "max_records": 500, "batch_size": 500,
        "topics": [{"topic_id": topic_id, "partitions": [{"partition_index": 0,
                                                           "acknowledgement_batches": acks or []}]}],
        "forgotten_topics_data": []})


def _acknowledge(client: RawClient, group: str, member: str, epoch: int, topic_id: uuid.UUID,
                 acks: list[dict[str, Any]], version: int = 1) -> Any:
    return client.request(ACKNOWLEDGE, version, {
        "group_id": group, "member_id": member, "share_session_epoch": epoch,
        "is_renew_ack": any(RENEW in a["acknowledge_types"] for a in acks),
        "topics": [{"topic_id": topic_id, "partitions": [{"partition_index": 0, "acknowledgement_batches": acks}]}]})


def _ack(first: int, last: int, kind: int) -> dict[str, Any]:
    return {"first_offset": first, "last_offset": last, "acknowledge_types": [kind]}


def test_heartbeat_joins_fences_and_leaves(broker: BrokerProcess) -> None:
    with RawClient(broker.bootstrap) as client:
        topic_id = _topic_id(client, "hb-topic")
        joined = _coordinated_heartbeat(client, "hb", "m1", ["hb-topic"])
        assert (joined.error_code, joined.member_epoch, joined.member_id) == (0, 1, "m1")
        assert [(t.topic_id, list(t.partitions)) for t in joined.assignment.topic_partitions] == [(topic_id, [0])]
        assert joined.heartbeat_interval_ms == 5000
        assert _heartbeat(client, "hb", "m1", 1, None).assignment is None  # unchanged: not repeated
        assert _heartbeat(client, "hb", "m1", 7, None).error_code == ErrorCode.FENCED_MEMBER_EPOCH
        assert _heartbeat(client, "hb", "", 0, ["hb-topic"]).error_code == ErrorCode.INVALID_REQUEST
        assert _heartbeat(client, "hb", "m2", 0, None).error_code == ErrorCode.INVALID_REQUEST
        assert _heartbeat(client, "hb", "m3", 4, None).error_code == ErrorCode.UNKNOWN_MEMBER_ID
        described = client.request(DESCRIBE, 1, {"group_ids": ["hb", "no-such-group"],
                                                 "include_authorized_operations": False})
        group, missing = described.groups
        assert (group.error_code, group.group_state, group.assignor_name) == (0, "Stable", "simple")
        assert [(m.member_id, list(m.subscribed_topic_names)) for m in group.members] == [("m1", ["hb-topic"])]
        assert group.members[0].assignment.topic_partitions[0].topic_name == "hb-topic"
        assert missing.error_code == ErrorCode.GROUP_ID_NOT_FOUND
        left = _heartbeat(client, "hb", "m1", -1, None)
        assert (left.error_code, left.member_epoch) == (0, -1)
        empty = client.request(DESCRIBE, 1, {"group_ids": ["hb"], "include_authorized_operations": False}).groups[0]
        assert (empty.group_state, list(empty.members)) == ("Empty", [])


def test_a_classic_groups_id_is_not_a_share_group(broker: BrokerProcess) -> None:
    with RawClient(broker.bootstrap) as client:
        _topic_id(client, "classic-topic")
        _coordinated_heartbeat(client, "warm-up", "m", ["classic-topic"])  # the coordinator exists
        joined = client.request(11, 5, {"group_id": "classic", "session_timeout_ms": 30000,
                                        "rebalance_timeout_ms": 30000, "member_id": "", "group_instance_id": None,
                                        "protocol_type": "consumer", "protocols": [{"name": "range", "metadata": b""}]})
        assert joined.error_code == ErrorCode.MEMBER_ID_REQUIRED  # the classic group exists from here on
        assert _heartbeat(client, "classic", "m", 0, ["classic-topic"]).error_code == ErrorCode.GROUP_ID_NOT_FOUND


def test_share_sessions_and_acknowledgements(broker: BrokerProcess) -> None:
    with RawClient(broker.bootstrap) as client:
        topic_id = _topic_id(client, "acks-topic")
        _coordinated_heartbeat(client, "acks", "m1", ["acks-topic"])
        _produce(client, "acks-topic", [b"a", b"b", b"c"])
        # No session yet: only epoch 0 opens one, and it cannot acknowledge.
        assert _fetch(client, "acks", "m1", 1, topic_id).error_code == ErrorCode.SHARE_SESSION_NOT_FOUND
        refused = _fetch(client, "acks", "m1", 0, topic_id, acks=[_ack(0, 0, ACCEPT)])
        assert refused.error_code == ErrorCode.INVALID_REQUEST
        opened = _fetch(client, "acks", "m1", 0, topic_id)
        assert opened.error_code == 0 and opened.acquisition_lock_timeout_ms == 30000
        partition = opened.responses[0].partitions[0]
        assert [(r.first_offset, r.last_offset, r.delivery_count) for r in partition.acquired_records] == [(0, 2, 1)]
        assert _fetch(client, "acks", "m1", 5, topic_id).error_code == ErrorCode.INVALID_SHARE_SESSION_EPOCH
        # Another member may not settle m1's records; m1 may, once.
        other = _acknowledge(client, "acks", "m2", 1, topic_id, [_ack(0, 0, ACCEPT)])
        assert other.error_code == ErrorCode.SHARE_SESSION_NOT_FOUND
        settled = _acknowledge(client, "acks", "m1", 1, topic_id, [_ack(0, 0, ACCEPT), _ack(1, 1, RELEASE)])
        assert settled.responses[0].partitions[0].error_code == 0
        again = _acknowledge(client, "acks", "m1", 2, topic_id, [_ack(0, 0, ACCEPT)])
        assert again.responses[0].partitions[0].error_code == ErrorCode.INVALID_RECORD_STATE
        # The released record comes back first, delivered twice; piggybacked acks are answered too.
        fetched = _fetch(client, "acks", "m1", 3, topic_id, acks=[_ack(2, 2, ACCEPT)])
        partition = fetched.responses[0].partitions[0]
        assert partition.acknowledge_error_code == 0
        assert [(r.first_offset, r.last_offset, r.delivery_count) for r in partition.acquired_records] == [(1, 1, 2)]
        # The final epoch settles and closes: the session is gone.
        closed = _acknowledge(client, "acks", "m1", -1, topic_id, [_ack(1, 1, ACCEPT)])
        assert closed.responses[0].partitions[0].error_code == 0
        assert _fetch(client, "acks", "m1", 4, topic_id).error_code == ErrorCode.SHARE_SESSION_NOT_FOUND


def _acknowledge_error(answer: Any) -> int:
    assert answer.error_code == 0
    return answer.responses[0].partitions[0].error_code


def test_renew_keeps_a_record_held_from_version_2_on(broker: BrokerProcess) -> None:
    with RawClient(broker.bootstrap) as client:
        topic_id = _topic_id(client, "renew-topic")
        _coordinated_heartbeat(client, "renewers", "m1", ["renew-topic"])
        _produce(client, "renew-topic", [b"slow", b"quick"])
        opened = _fetch(client, "renewers", "m1", 0, topic_id)
        assert [(r.first_offset, r.last_offset) for r in opened.responses[0].partitions[0].acquired_records] == [(0, 1)]
        # Before KIP-1222 there is no RENEW: an unknown type, the partition's acknowledgements refused.
        assert _acknowledge_error(_acknowledge(client, "renewers", "m1", 1, topic_id,
                                               [_ack(0, 0, RENEW)])) == ErrorCode.INVALID_REQUEST
        renewed = _acknowledge(client, "renewers", "m1", 2, topic_id, [_ack(0, 0, RENEW), _ack(1, 1, ACCEPT)],
                               version=2)
        assert _acknowledge_error(renewed) == 0 and renewed.acquisition_lock_timeout_ms == 30000
        # Renewed, the record is still m1's: nobody else gets it, and m1 settles it.
        other = _fetch(client, "renewers", "m2", 0, topic_id)
        assert not other.responses or not other.responses[0].partitions[0].acquired_records
        assert _acknowledge_error(_acknowledge(client, "renewers", "m1", 3, topic_id,
                                               [_ack(0, 0, ACCEPT)], version=2)) == 0


def test_a_group_may_turn_renewing_off(broker: BrokerProcess) -> None:
    with RawClient(broker.bootstrap) as client:
        topic_id = _topic_id(client, "no-renew-topic")
        _coordinated_heartbeat(client, "no-renewers", "m1", ["no-renew-topic"])
        altered = client.request(INCREMENTAL_ALTER_CONFIGS, 1, {"validate_only": False, "resources": [
            {"resource_type": GROUP_RESOURCE, "resource_name": "no-renewers", "configs": [
                {"name": "share.renew.acknowledge.enable", "config_operation": SET, "value": "false"}]}]})
        assert altered.responses[0].error_code == 0
        _produce(client, "no-renew-topic", [b"a"])
        _fetch(client, "no-renewers", "m1", 0, topic_id)
        refused = _acknowledge(client, "no-renewers", "m1", 1, topic_id, [_ack(0, 0, RENEW)], version=2)
        assert _acknowledge_error(refused) == ErrorCode.INVALID_RECORD_STATE  # as Kafka answers
        assert _acknowledge_error(_acknowledge(client, "no-renewers", "m1", 2, topic_id,
                                               [_ack(0, 0, ACCEPT)], version=2)) == 0


def test_unknown_topics_and_a_waiting_fetch(broker: BrokerProcess) -> None:
    with RawClient(broker.bootstrap) as client:
        topic_id = _topic_id(client, "wait-topic")
        _coordinated_heartbeat(client, "waiters", "m1", ["wait-topic"])
        unknown = _fetch(client, "waiters", "m1", 0, uuid.uuid4())
        assert unknown.responses[0].partitions[0].error_code == ErrorCode.UNKNOWN_TOPIC_ID
        started = time.monotonic()
        empty = _fetch(client, "waiters", "m2", 0, topic_id, max_wait_ms=300)
        assert time.monotonic() - started >= 0.29  # waited for records that never came
        assert empty.error_code == 0 and all(not p.acquired_records for t in empty.responses for p in t.partitions)


def test_a_leaving_members_final_acknowledgement_still_counts(broker: BrokerProcess) -> None:
    """Clients send the leave heartbeat and the final ShareAcknowledge at once, on different
    connections: the leave must not release what the acknowledgement settles."""
    with RawClient(broker.bootstrap) as client:
        topic_id = _topic_id(client, "leave-topic")
        _coordinated_heartbeat(client, "leavers", "m1", ["leave-topic"])
        _produce(client, "leave-topic", [b"a", b"b"])
        held = _fetch(client, "leavers", "m1", 0, topic_id).responses[0].partitions[0].acquired_records
        assert [(r.first_offset, r.last_offset) for r in held] == [(0, 1)]
        assert _heartbeat(client, "leavers", "m1", -1, None).error_code == 0
        final = _acknowledge(client, "leavers", "m1", -1, topic_id, [_ack(0, 1, ACCEPT)])
        assert (final.error_code, final.responses[0].partitions[0].error_code) == (0, 0)
        # Accepted: another member gets only what is produced next.
        _coordinated_heartbeat(client, "leavers", "m2", ["leave-topic"])
        _produce(client, "leave-topic", [b"c"])
        fetched = _fetch(client, "leavers", "m2", 0, topic_id, max_wait_ms=5000)
        records = fetched.responses[0].partitions[0].acquired_records
        assert [(r.first_offset, r.last_offset, r.delivery_count) for r in records] == [(2, 2, 1)]
