"""The group protocol on the wire: the error codes clients rely on, and bad input that must
not disturb the coordinator."""

from __future__ import annotations

import random
import struct
import threading
from typing import Any

import pytest

from protocol.errors import ErrorCode
from tests.brokers import BrokerProcess
from tests.conftest import create_topic
from tests.rawclient import RawClient

FIND_COORDINATOR, OFFSET_COMMIT, OFFSET_FETCH, JOIN_GROUP, HEARTBEAT, LEAVE_GROUP, SYNC_GROUP = 10, 8, 9, 11, 12, 13, 14
DESCRIBE_GROUPS, LIST_GROUPS, DELETE_GROUPS, OFFSET_DELETE = 15, 16, 42, 47
E = ErrorCode


@pytest.fixture(scope="module")
def quick_broker(tmp_path_factory: pytest.TempPathFactory):
    process = BrokerProcess(tmp_path_factory.mktemp("groups"), overrides={
        "group.initial.rebalance.delay.ms": "0", "group.min.session.timeout.ms": "1000"}).start()
    yield process
    process.kill()


def subscription(*topics: str) -> bytes:
    """A ConsumerProtocolSubscription v0: version, topics, user data."""
    body = struct.pack(">hi", 0, len(topics))
    for topic in topics:
        body += struct.pack(">h", len(topic)) + topic.encode()
    return body + struct.pack(">i", -1)


def join(client: RawClient, group: str, member_id: str = "", *, instance_id: str | None = None,
         protocols: list[tuple[str, bytes]] | None = None, protocol_type: str = "consumer",
         session_ms: int = 10000, rebalance_ms: int = 5000, version: int = 7) -> Any:
    body = {"group_id": group, "session_timeout_ms": session_ms, "rebalance_timeout_ms": rebalance_ms,
            "member_id": member_id, "group_instance_id": instance_id, "protocol_type": protocol_type,
            "protocols": [{"name": n, "metadata": m} for n, m in
                          (protocols if protocols is not None else [("range", subscription("t"))])]}
    return client.request(JOIN_GROUP, version, body)


def join_new(client: RawClient, group: str, **kwargs: Any) -> Any:
    """The v4+ two-step join: MEMBER_ID_REQUIRED, then join with the id handed out."""
    first = join(client, group, **kwargs)
    if first.error_code != E.MEMBER_ID_REQUIRED:
        return first
    return join(client, group, first.member_id, **kwargs)


def sync(client: RawClient, group: str, generation: int, member_id: str, assignments: dict[str, bytes] | None = None,
         instance_id: str | None = None) -> Any:
    body = {"group_id": group, "generation_id": generation, "member_id": member_id, "group_instance_id": instance_id,
            "protocol_type": "consumer", "protocol_name": "range",
            "assignments": [{"member_id": k, "assignment": v} for k, v in (assignments or {}).items()]}
    return client.request(SYNC_GROUP, 5, body)


def heartbeat(client: RawClient, group: str, generation: int, member_id: str, instance_id: str | None = None) -> int:
    body = {"group_id": group, "generation_id": generation, "member_id": member_id, "group_instance_id": instance_id}
    return client.request(HEARTBEAT, 4, body).error_code


def commit(client: RawClient, group: str, generation: int, member_id: str, topic: str, offset: int,
           metadata: str = "", *, instance_id: str | None = None, version: int = 8) -> int:
    body = {"group_id": group, "generation_id_or_member_epoch": generation, "member_id": member_id,
            "group_instance_id": instance_id, "topics": [{"name": topic, "partitions": [
                {"partition_index": 0, "committed_offset": offset, "committed_leader_epoch": -1,
                 "committed_metadata": metadata}]}]}
    return client.request(OFFSET_COMMIT, version, body).topics[0].partitions[0].error_code


def stable_single_member(client: RawClient, group: str, **kwargs: Any) -> tuple[str, int]:
    joined = join_new(client, group, **kwargs)
    assert joined.error_code == E.NO_ERROR
    assert sync(client, group, joined.generation_id, joined.member_id, {joined.member_id: b"a"},
                kwargs.get("instance_id")).error_code == E.NO_ERROR
    return joined.member_id, joined.generation_id


def test_find_coordinator_single_and_batched(quick_broker: BrokerProcess) -> None:
    with RawClient(quick_broker.bootstrap) as client:
        old = client.request(FIND_COORDINATOR, 2, {"key": "g", "key_type": 0})
        assert (old.error_code, old.node_id, old.port) == (E.NO_ERROR, 0, quick_broker.port)
        batched = client.request(FIND_COORDINATOR, 4, {"key_type": 0, "coordinator_keys": ["a", "b"]})
        assert [(c.key, c.error_code, c.port) for c in batched.coordinators] == [
            ("a", E.NO_ERROR, quick_broker.port), ("b", E.NO_ERROR, quick_broker.port)]
        bad_type = client.request(FIND_COORDINATOR, 4, {"key_type": 7, "coordinator_keys": ["a"]})
        assert bad_type.coordinators[0].error_code == E.INVALID_REQUEST


def test_join_requires_member_id_then_completes(quick_broker: BrokerProcess) -> None:
    with RawClient(quick_broker.bootstrap) as client:
        first = join(client, "two-step")
        assert first.error_code == E.MEMBER_ID_REQUIRED and first.member_id
        second = join(client, "two-step", first.member_id)
        assert (second.error_code, second.leader, second.member_id) == (E.NO_ERROR, first.member_id, first.member_id)
        assert second.generation_id == 1 and second.protocol_name == "range"
        assert [m.member_id for m in second.members] == [first.member_id]


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        ({"protocols": []}, E.INCONSISTENT_GROUP_PROTOCOL),
        ({"protocol_type": ""}, E.INCONSISTENT_GROUP_PROTOCOL),
        ({"session_ms": 10}, E.INVALID_SESSION_TIMEOUT),
        ({"session_ms": 10**9}, E.INVALID_SESSION_TIMEOUT),
        ({"member_id": "made-up"}, E.UNKNOWN_MEMBER_ID),
    ],
    ids=["empty-protocols", "empty-type", "session-too-short", "session-too-long", "unknown-member"],
)
def test_join_errors(quick_broker: BrokerProcess, kwargs: dict[str, Any], expected: int) -> None:
    with RawClient(quick_broker.bootstrap) as client:
        assert join(client, f"bad-join-{expected}-{len(kwargs)}", **kwargs).error_code == expected


def test_invalid_group_id(quick_broker: BrokerProcess) -> None:
    with RawClient(quick_broker.bootstrap) as client:
        assert join(client, "").error_code == E.INVALID_GROUP_ID
        assert heartbeat(client, "", 1, "m") == E.INVALID_GROUP_ID


def test_inconsistent_protocols_between_members(quick_broker: BrokerProcess) -> None:
    with RawClient(quick_broker.bootstrap) as client:
        stable_single_member(client, "protocols")
        assert join(client, "protocols", protocols=[("roundrobin", b"")]).error_code == E.INCONSISTENT_GROUP_PROTOCOL
        assert join(client, "protocols", protocol_type="connect").error_code == E.INCONSISTENT_GROUP_PROTOCOL


def test_commit_and_heartbeat_with_wrong_generation_or_member(quick_broker: BrokerProcess) -> None:
    topic = create_topic(quick_broker.bootstrap, "generations")
    with RawClient(quick_broker.bootstrap) as client:
        member, generation = stable_single_member(client, "generations")
        assert heartbeat(client, "generations", generation, member) == E.NO_ERROR
        assert heartbeat(client, "generations", generation + 5, member) == E.ILLEGAL_GENERATION
        assert heartbeat(client, "generations", generation, "someone-else") == E.UNKNOWN_MEMBER_ID
        assert heartbeat(client, "no-such-group", 1, member) == E.UNKNOWN_MEMBER_ID
        assert commit(client, "generations", generation + 1, member, topic, 5) == E.ILLEGAL_GENERATION
        assert commit(client, "generations", generation, "someone-else", topic, 5) == E.UNKNOWN_MEMBER_ID
        assert commit(client, "generations", generation, member, "no-such-topic", 5) == E.UNKNOWN_TOPIC_OR_PARTITION
        assert commit(client, "generations", generation, member, topic, 5, "x" * 5000) == E.OFFSET_METADATA_TOO_LARGE
        assert commit(client, "generations", generation, member, topic, 5, "ok") == E.NO_ERROR
        assert sync(client, "generations", generation + 1, member).error_code == E.ILLEGAL_GENERATION
        # A group that does not exist cannot take a commit from some generation.
        assert commit(client, "never-joined", 3, "m", topic, 1) == E.ILLEGAL_GENERATION


def test_heartbeat_from_removed_member_and_rebalance_in_progress(quick_broker: BrokerProcess) -> None:
    with RawClient(quick_broker.bootstrap) as a, RawClient(quick_broker.bootstrap) as b:
        first, generation = stable_single_member(a, "churn", session_ms=20000)
        # A second member joins: the group rebalances, and the first hears it in its heartbeat.
        joined: dict[str, Any] = {}
        second = threading.Thread(target=lambda: joined.update(result=join_new(b, "churn", session_ms=20000)))
        second.start()
        for _ in range(100):
            if heartbeat(a, "churn", generation, first) == E.REBALANCE_IN_PROGRESS:
                break
        else:
            pytest.fail("no REBALANCE_IN_PROGRESS")
        rejoined = join(a, "churn", first, session_ms=20000)
        second.join(10)
        assert rejoined.error_code == E.NO_ERROR and rejoined.generation_id == generation + 1
        assert joined["result"].generation_id == generation + 1
        leave = a.request(LEAVE_GROUP, 5, {"group_id": "churn", "members": [
            {"member_id": first, "group_instance_id": None, "reason": "test"},
            {"member_id": "ghost", "group_instance_id": None, "reason": None}]})
        assert [m.error_code for m in leave.members] == [E.NO_ERROR, E.UNKNOWN_MEMBER_ID]
        assert heartbeat(a, "churn", rejoined.generation_id, first) == E.UNKNOWN_MEMBER_ID


def test_session_timeout_removes_a_silent_member(quick_broker: BrokerProcess) -> None:
    with RawClient(quick_broker.bootstrap, timeout=30) as client:
        member, generation = stable_single_member(client, "silent", session_ms=1000, rebalance_ms=1000)
        body = {"groups": ["silent"], "include_authorized_operations": False}
        for _ in range(100):
            group = client.request(DESCRIBE_GROUPS, 5, body).groups[0]
            if group.group_state == "Empty":
                break
            threading.Event().wait(0.1)
        assert group.group_state == "Empty" and group.members == []
        assert heartbeat(client, "silent", generation, member) == E.UNKNOWN_MEMBER_ID


def test_static_members_fencing(quick_broker: BrokerProcess) -> None:
    with RawClient(quick_broker.bootstrap) as client:
        member, generation = stable_single_member(client, "statics", instance_id="i-1")
        # The same instance id rejoining without its member id replaces the old member: no rebalance.
        again = join(client, "statics", instance_id="i-1")
        assert (again.error_code, again.generation_id) == (E.NO_ERROR, generation)
        assert again.member_id != member
        # The old incarnation is now a zombie.
        assert heartbeat(client, "statics", generation, member, "i-1") == E.FENCED_INSTANCE_ID
        assert sync(client, "statics", generation, member, instance_id="i-1").error_code == E.FENCED_INSTANCE_ID
        assert sync(client, "statics", generation, again.member_id, instance_id="i-1").assignment == b"a"
        leave = client.request(LEAVE_GROUP, 5, {"group_id": "statics", "members": [
            {"member_id": "", "group_instance_id": "i-1", "reason": None}]})
        assert [m.error_code for m in leave.members] == [E.NO_ERROR]


def test_offsets_fetch_describe_list_delete(quick_broker: BrokerProcess) -> None:
    topic = create_topic(quick_broker.bootstrap, "lifecycle")
    with RawClient(quick_broker.bootstrap) as client:
        # Offsets-only commits (generation -1): a group the coordinator does not manage.
        assert commit(client, "standalone", -1, "", topic, 42, "meta") == E.NO_ERROR
        fetched = client.request(OFFSET_FETCH, 8, {"groups": [
            {"group_id": "standalone", "member_id": None, "member_epoch": -1, "topics": None},
            {"group_id": "nobody", "member_id": None, "member_epoch": -1,
             "topics": [{"name": topic, "partition_indexes": [0]}]}], "require_stable": False}).groups
        assert [(p.committed_offset, p.metadata) for t in fetched[0].topics for p in t.partitions] == [(42, "meta")]
        assert [p.committed_offset for t in fetched[1].topics for p in t.partitions] == [-1]
        old = client.request(OFFSET_FETCH, 5, {"group_id": "standalone", "topics": None, "require_stable": False})
        assert old.error_code == E.NO_ERROR and old.topics[0].partitions[0].committed_offset == 42

        member, _ = stable_single_member(client, "busy")
        listed = client.request(LIST_GROUPS, 5, {"states_filter": ["stable"], "types_filter": []}).groups
        assert "busy" in {g.group_id for g in listed} and "standalone" not in {g.group_id for g in listed}
        described = client.request(DESCRIBE_GROUPS, 5, {"groups": ["busy", "ghost-group"],
                                                        "include_authorized_operations": True}).groups
        assert (described[0].group_state, described[0].protocol_type, described[0].protocol_data) == (
            "Stable", "consumer", "range")
        assert described[0].members[0].member_assignment == b"a"
        assert described[0].authorized_operations > 0
        assert (described[1].error_code, described[1].group_state) == (E.NO_ERROR, "Dead")

        offset_delete = {"group_id": "standalone", "topics": [{"name": topic, "partitions": [{"partition_index": 0}]}]}
        response = client.request(OFFSET_DELETE, 0, offset_delete)
        assert (response.error_code, response.topics[0].partitions[0].error_code) == (E.NO_ERROR, E.NO_ERROR)
        busy_commit = commit(client, "busy", 1, member, topic, 3)
        assert busy_commit == E.NO_ERROR
        subscribed = {"group_id": "busy", "topics": [{"name": "t", "partitions": [{"partition_index": 0}]}]}
        # "t" does not exist here; a subscribed, existing topic is refused instead.
        assert client.request(OFFSET_DELETE, 0, subscribed).topics[0].partitions[0].error_code == \
            E.UNKNOWN_TOPIC_OR_PARTITION

        deleted = client.request(DELETE_GROUPS, 2, {"groups_names": ["busy", "standalone", "ghost-group"]}).results
        assert [(r.group_id, r.error_code) for r in deleted] == [
            ("busy", E.NON_EMPTY_GROUP), ("standalone", E.NO_ERROR), ("ghost-group", E.GROUP_ID_NOT_FOUND)]


def test_random_group_requests_never_break_the_coordinator(quick_broker: BrokerProcess) -> None:
    """Nonsense field values in every group API: errors come back, and a real member still works."""
    rng = random.Random(7)
    topic = create_topic(quick_broker.bootstrap, "fuzzed")
    groups = ["", "f", "f2", "x" * 300]
    members = ["", "m", "ghost", "\u00e9"]
    with RawClient(quick_broker.bootstrap) as client:
        for _ in range(300):
            group, member = rng.choice(groups), rng.choice(members)
            generation = rng.choice([-5, -1, 0, 1, 2**31 - 1])
            call = rng.randrange(5)
            if call == 0:
                protocols = rng.choice([[], [("range", b"")], [("range", rng.randbytes(20))], [("x", b""), ("y", b"")]])
                response = join(client, group, member, protocols=protocols, protocol_type=rng.choice(["", "consumer"]),
                                session_ms=rng.choice([-1, 0, 1000, 1500]), rebalance_ms=rng.choice([-1, 0, 100]),
                                version=rng.choice([0, 4, 5, 9]))
                assert response.error_code in {e.value for e in ErrorCode}
            elif call == 1:
                sync(client, group, generation, member, {member: rng.randbytes(5)})
            elif call == 2:
                heartbeat(client, group, generation, member)
            elif call == 3:
                commit(client, group, generation, member, rng.choice([topic, "nope"]), rng.choice([-3, 0, 10]))
            else:
                client.request(LEAVE_GROUP, 5, {"group_id": group, "members": [
                    {"member_id": member, "group_instance_id": rng.choice([None, "i"]), "reason": None}]})
        # Members that joined during the fuzzing time out on their own; a real one still gets in.
        member_id, _ = stable_single_member(client, "after-fuzz")
        assert member_id


def commit_answers_through_a_rebalance(bootstrap: str, topic: str, group: str, version: int) -> dict[str, int]:
    """OffsetCommit at `version` (and v0) from a member, a stale member and strangers in each state of a
    group's rebalance (Stable → PreparingRebalance → CompletingRebalance → Stable → Empty): the
    answers, by case. Session timeouts of 10 s, so Kafka's default minimum takes them too."""
    answers: dict[str, int] = {}

    def ask(case: str, generation: int, member: str, *, to: str = topic, instance: str | None = None) -> None:
        answers[case] = commit(a, group, generation, member, to, 1, instance_id=instance, version=version)

    with RawClient(bootstrap, timeout=30) as a, RawClient(bootstrap, timeout=30) as b:
        first, generation = stable_single_member(a, group)
        ask("stable/member", generation, first)
        ask("stable/no-member", -1, "")
        joined: dict[str, Any] = {}
        second = threading.Thread(target=lambda: joined.update(result=join_new(b, group)))
        second.start()
        for _ in range(100):  # the second member's join puts the group in PreparingRebalance
            if heartbeat(a, group, generation, first) == E.REBALANCE_IN_PROGRESS:
                break
        else:
            pytest.fail("no REBALANCE_IN_PROGRESS")
        ask("preparing/member", generation, first)  # allowed: the heartbeat tells of the rebalance
        ask("preparing/old-generation", generation - 1, first)
        ask("preparing/unknown-member", generation, "ghost")
        ask("preparing/no-member", -1, "")

        rejoined = join(a, group, first)  # every member has joined: CompletingRebalance
        second.join(30)
        assert rejoined.error_code == E.NO_ERROR and joined["result"].error_code == E.NO_ERROR
        new_generation = rejoined.generation_id
        ask("completing/old-generation", generation, first)
        ask("completing/unknown-member", new_generation, "ghost")
        ask("completing/unknown-member-old-generation", generation, "ghost")
        ask("completing/member", new_generation, first)
        ask("completing/no-member", -1, "")
        ask("completing/member-without-generation", -1, first)
        ask("completing/unknown-instance", new_generation, first, instance="nobody")
        ask("completing/unknown-topic", generation, first, to="no-such-topic")
        # v0 (no member, no generation) is refused whatever the group's state, unless no partition exists.
        answers["completing/v0"] = commit(a, group, 0, "", topic, 1, version=0)
        answers["completing/v0-unknown-topic"] = commit(a, group, 0, "", "no-such-topic", 1, version=0)

        members = [first, joined["result"].member_id]
        synced = sync(a, group, new_generation, first, {m: b"" for m in members})
        assert synced.error_code == E.NO_ERROR
        ask("stable-again/old-generation", generation, first)
        ask("stable-again/member", new_generation, first)

        a.request(LEAVE_GROUP, 5, {"group_id": group, "members": [
            {"member_id": m, "group_instance_id": None, "reason": None} for m in members]})
        ask("empty/no-member", -1, "")
        ask("empty/former-member", new_generation, first)
        answers["empty/v0"] = commit(a, group, 0, "", topic, 1, version=0)
        answers["no-group/generation"] = commit(a, f"{group}-never-joined", 3, "m", topic, 1, version=version)
    return answers


# What Apache Kafka 3.9.0 answers (its classic group coordinator, checked on the reference broker
# for versions 1, 5, 8 and 9): member and generation are checked before the group's state, so
# only a current member learns of a rebalance from its commit. (Before v7 a request carries no
# group instance id: that case is then a current member's commit.) Kafka 3.9 keeps v0 commits in
# ZooKeeper, so without it (KRaft, as the reference runs) they get UNSUPPORTED_VERSION.
KAFKA_COMMIT_ANSWERS = {
    "stable/member": E.NO_ERROR,
    "stable/no-member": E.UNKNOWN_MEMBER_ID,
    "preparing/member": E.NO_ERROR,
    "preparing/old-generation": E.ILLEGAL_GENERATION,
    "preparing/unknown-member": E.UNKNOWN_MEMBER_ID,
    "preparing/no-member": E.UNKNOWN_MEMBER_ID,
    "completing/old-generation": E.ILLEGAL_GENERATION,
    "completing/unknown-member": E.UNKNOWN_MEMBER_ID,
    "completing/unknown-member-old-generation": E.UNKNOWN_MEMBER_ID,
    "completing/member": E.REBALANCE_IN_PROGRESS,
    "completing/no-member": E.UNKNOWN_MEMBER_ID,
    "completing/member-without-generation": E.ILLEGAL_GENERATION,
    "completing/unknown-instance": E.UNKNOWN_MEMBER_ID,
    "completing/unknown-topic": E.UNKNOWN_TOPIC_OR_PARTITION,
    "completing/v0": E.UNSUPPORTED_VERSION,
    "completing/v0-unknown-topic": E.UNKNOWN_TOPIC_OR_PARTITION,
    "stable-again/old-generation": E.ILLEGAL_GENERATION,
    "stable-again/member": E.NO_ERROR,
    "empty/no-member": E.NO_ERROR,
    "empty/former-member": E.UNKNOWN_MEMBER_ID,
    "empty/v0": E.UNSUPPORTED_VERSION,
    "no-group/generation": E.ILLEGAL_GENERATION,
}


@pytest.mark.parametrize("version", [1, 5, 8, 9])
def test_offset_commit_checks_member_and_generation_before_the_rebalance(
    quick_broker: BrokerProcess, version: int
) -> None:
    topic = create_topic(quick_broker.bootstrap, f"commit-order-{version}")
    answers = commit_answers_through_a_rebalance(quick_broker.bootstrap, topic, f"commit-order-{version}", version)
    expected = dict(KAFKA_COMMIT_ANSWERS)
    if version < 7:
        expected["completing/unknown-instance"] = E.REBALANCE_IN_PROGRESS
    assert answers == expected
