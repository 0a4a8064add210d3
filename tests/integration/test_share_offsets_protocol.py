"""The share-group offset APIs on the wire (DescribeShareGroupOffsets 90, AlterShareGroupOffsets 91,
DeleteShareGroupOffsets 92): the answers and error codes a client gets, against a real broker,
through kbroker's raw client."""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import Any

import pytest

from protocol.errors import ErrorCode
from tests.brokers import BrokerProcess
from tests.integration.test_share_protocol import (
    _ack,
    _acknowledge,
    _coordinated_heartbeat,
    _fetch,
    _heartbeat,
    _produce,
    _topic_id,
)
from tests.rawclient import RawClient

DESCRIBE_OFFSETS, ALTER_OFFSETS, DELETE_OFFSETS = 90, 91, 92
ACCEPT, RELEASE = 1, 2


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path_factory.mktemp("share-offsets"),
                            overrides={"offsets.topic.num.partitions": "1", "num.partitions": "1"}).start()
    yield process
    if process.alive:
        assert process.stop() == 0, process.log_tail()


def _describe(client: RawClient, group: str, topics: list[tuple[str, list[int]]] | None, version: int = 1) -> Any:
    wanted = None if topics is None else [{"topic_name": t, "partitions": parts} for t, parts in topics]
    return client.request(DESCRIBE_OFFSETS, version, {"groups": [{"group_id": group, "topics": wanted}]}).groups[0]


def _alter(client: RawClient, group: str, topic: str, offsets: dict[int, int]) -> Any:
    return client.request(ALTER_OFFSETS, 0, {"group_id": group, "topics": [
        {"topic_name": topic, "partitions": [{"partition_index": p, "start_offset": o} for p, o in offsets.items()]}]})


def _delete(client: RawClient, group: str, topics: list[str]) -> Any:
    return client.request(DELETE_OFFSETS, 0, {"group_id": group, "topics": [{"topic_name": t} for t in topics]})


def _rows(described: Any) -> list[tuple[str, int, int, int, int]]:
    return [(t.topic_name, p.partition_index, p.start_offset, p.lag, p.error_code)
            for t in described.topics for p in t.partitions]


def _consume_and_leave(client: RawClient, group: str, topic: str, accept_through: int) -> None:
    """A member reads the topic, accepts offsets 0..accept_through, and leaves (its share
    session closed with the final acknowledgement, its membership with epoch -1)."""
    topic_id = _topic_id(client, topic)
    _coordinated_heartbeat(client, group, "m1", [topic])
    fetched = _fetch(client, group, "m1", 0, topic_id, max_wait_ms=5000)
    assert fetched.responses[0].partitions[0].acquired_records
    assert _heartbeat(client, group, "m1", -1, None).error_code == 0
    final = _acknowledge(client, group, "m1", -1, topic_id, [_ack(0, accept_through, ACCEPT)])
    assert final.responses[0].partitions[0].error_code == 0


def test_api_versions_advertises_the_offset_apis(broker: BrokerProcess) -> None:
    with RawClient(broker.bootstrap) as client:
        keys = {k.api_key: (k.min_version, k.max_version) for k in client.request(18, 3, {
            "client_software_name": "t", "client_software_version": "1"}).api_keys}
    assert (keys[90], keys[91], keys[92]) == ((0, 1), (0, 0), (0, 0))
    assert 86 not in keys  # DeleteShareGroupState is between brokers only


def test_describe_alter_and_delete_an_empty_groups_offsets(broker: BrokerProcess) -> None:
    with RawClient(broker.bootstrap) as client:
        topic_id = _topic_id(client, "offsets-topic")
        _coordinated_heartbeat(client, "warm", "m", ["offsets-topic"])  # the group coordinator exists
        _produce(client, "offsets-topic", [b"a", b"b", b"c", b"d", b"e"])
        # "latest" would start past them: start at the beginning instead.
        assert _alter(client, "workers", "offsets-topic", {0: 0}).error_code == 0
        _consume_and_leave(client, "workers", "offsets-topic", accept_through=2)

        described = _describe(client, "workers", None)
        assert (described.error_code, _rows(described)) == (0, [("offsets-topic", 0, 3, 2, 0)])
        assert described.topics[0].topic_id == topic_id
        v0 = _describe(client, "workers", None, version=0)
        assert _rows(v0) == [("offsets-topic", 0, 3, -1, 0)]  # no lag before v1

        altered = _alter(client, "workers", "offsets-topic", {0: 1})
        assert (altered.error_code, altered.responses[0].partitions[0].error_code) == (0, 0)
        assert _rows(_describe(client, "workers", [("offsets-topic", [0])])) == [("offsets-topic", 0, 1, 4, 0)]
        # The new start offset takes effect: a new member gets offsets 1.. again.
        _coordinated_heartbeat(client, "workers", "m2", ["offsets-topic"])
        fetched = _fetch(client, "workers", "m2", 0, topic_id, max_wait_ms=5000)
        acquired = fetched.responses[0].partitions[0].acquired_records
        assert [(r.first_offset, r.last_offset) for r in acquired] == [(1, 4)]
        # Not while it has a member.
        refused = _alter(client, "workers", "offsets-topic", {0: 0})
        assert (refused.error_code, list(refused.responses)) == (ErrorCode.NON_EMPTY_GROUP, [])
        assert _delete(client, "workers", ["offsets-topic"]).error_code == ErrorCode.NON_EMPTY_GROUP
        assert _heartbeat(client, "workers", "m2", -1, None).error_code == 0
        assert _acknowledge(client, "workers", "m2", -1, topic_id, [_ack(1, 4, RELEASE)]).error_code == 0

        deleted = _delete(client, "workers", ["offsets-topic", "no-such-topic"])
        assert deleted.error_code == 0
        assert {(r.topic_name, r.error_code) for r in deleted.responses} == {
            ("offsets-topic", 0), ("no-such-topic", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)}
        assert _describe(client, "workers", None).topics == []
        assert _rows(_describe(client, "workers", [("offsets-topic", [0])])) == [("offsets-topic", 0, -1, -1, 0)]


def test_unknown_groups_topics_and_offsets(broker: BrokerProcess) -> None:
    with RawClient(broker.bootstrap) as client:
        _topic_id(client, "other-topic")
        _coordinated_heartbeat(client, "warm", "m", ["other-topic"])
        # All topics of a group that does not exist: GROUP_ID_NOT_FOUND; named ones: no data (as Kafka).
        missing = _describe(client, "nobody", None)
        assert missing.error_code == ErrorCode.GROUP_ID_NOT_FOUND and missing.error_message
        assert _rows(_describe(client, "nobody", [("other-topic", [0]), ("ghost", [3])])) == [
            ("other-topic", 0, -1, -1, 0), ("ghost", 3, -1, -1, 0)]
        assert _describe(client, "nobody", []).topics == []
        assert _delete(client, "nobody", ["other-topic"]).error_code == ErrorCode.GROUP_ID_NOT_FOUND
        # Per partition: an unknown topic or partition, a negative offset.
        altered = _alter(client, "newcomers", "ghost", {0: 0})
        assert (altered.error_code, altered.responses[0].partitions[0].error_code) == (
            0, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        bad = _alter(client, "newcomers", "other-topic", {0: -5, 7: 0})
        assert [p.error_code for p in bad.responses[0].partitions] == [
            ErrorCode.INVALID_REQUEST, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]
        # An empty group id.
        assert _alter(client, "", "other-topic", {0: 0}).error_code == ErrorCode.INVALID_GROUP_ID
        # A classic group's id is not a share group's.
        joined = client.request(11, 5, {"group_id": "classic-offsets", "session_timeout_ms": 30000,
                                        "rebalance_timeout_ms": 30000, "member_id": "", "group_instance_id": None,
                                        "protocol_type": "consumer", "protocols": [{"name": "range", "metadata": b""}]})
        assert joined.error_code == ErrorCode.MEMBER_ID_REQUIRED
        assert _alter(client, "classic-offsets", "other-topic", {0: 0}).error_code == ErrorCode.GROUP_ID_NOT_FOUND
        assert _describe(client, "classic-offsets", None).error_code == ErrorCode.GROUP_ID_NOT_FOUND


def test_a_malformed_request_is_answered_or_closed_never_a_crash(broker: BrokerProcess) -> None:
    for api_key, version in ((DESCRIBE_OFFSETS, 1), (ALTER_OFFSETS, 0), (DELETE_OFFSETS, 0)):
        with RawClient(broker.bootstrap) as client:
            header = struct.pack(">hhi", api_key, version, 7) + struct.pack(">h", 1) + b"t" + b"\x00"
            client.send_raw(header + b"\x05\xff")  # an array of 4 entries, then nothing
            frame = client.read_frame()
            assert frame is None or frame[:4] == struct.pack(">i", 7)
    with RawClient(broker.bootstrap) as client:  # still serving
        assert _describe(client, "nobody", []).error_code == 0
    assert broker.alive


def test_delete_share_group_state_between_brokers(broker: BrokerProcess) -> None:
    """DeleteShareGroupState (86, v0), which a group coordinator sends to the share coordinator
    leading the state's partition elsewhere: served (to brokers), the state gone after it."""
    with RawClient(broker.bootstrap) as client:
        topic_id = _topic_id(client, "state-topic")
        _coordinated_heartbeat(client, "warm", "m", ["state-topic"])
        assert _alter(client, "state-group", "state-topic", {0: 0}).error_code == 0
        assert _rows(_describe(client, "state-group", [("state-topic", [0])]))[0][2] == 0
        answer = client.request(86, 0, {"group_id": "state-group", "topics": [
            {"topic_id": topic_id, "partitions": [{"partition": 0}, {"partition": 5}]}]})
        assert [p.error_code for p in answer.results[0].partitions] == [0, 0]  # none to forget is no error
        assert _rows(_describe(client, "state-group", [("state-topic", [0])])) == [("state-topic", 0, -1, -1, 0)]
