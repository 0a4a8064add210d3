"""The consumer group protocol's state machine (KIP-848, kbroker/coordinator/consumer_group.py)
driven by hand: epochs, incremental reconciliation, fencing, static members, regexes, offset
checks. The expected errors and messages are those Apache Kafka answers to the same requests
(checked against Kafka 3.9's coordinator with raw requests, and Kafka 4.0's source for v1)."""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence

import pytest

from kbroker.coordinator.assignors import RangeAssignor, UniformAssignor
from kbroker.coordinator.consumer_group import (
    REGEX_MIN_REFRESH_INTERVAL_MS,
    ConsumerGroupConfig,
    ConsumerGroups,
    ConsumerGroupState,
    Heartbeat,
    HeartbeatAnswer,
)
from kbroker.coordinator.reconciliation import MemberState
from protocol.errors import ErrorCode, KafkaError

E = ErrorCode
SESSION_MS = 45_000


class Topics:
    """An in-memory topic image: what the metadata cache gives the coordinator."""

    def __init__(self, **partitions: int) -> None:
        self.ids: dict[str, uuid.UUID] = {}
        self.counts: dict[str, int] = {}
        for name, count in partitions.items():
            self.create(name, count)

    def create(self, name: str, count: int) -> uuid.UUID:
        self.ids[name] = uuid.uuid4()
        self.counts[name] = count
        return self.ids[name]

    def topic_id(self, name: str) -> uuid.UUID | None:
        return self.ids.get(name)

    def topic_name(self, topic_id: uuid.UUID) -> str | None:
        return next((n for n, i in self.ids.items() if i == topic_id), None)

    def partition_count(self, name: str) -> int:
        return self.counts.get(name, 0)

    def topic_names(self) -> Iterable[str]:
        return self.ids.keys()


class Client:
    """One consumer-protocol member as a client drives it: it owns what it was given, revokes
    what it lost, and tells the coordinator so on its next heartbeat."""

    def __init__(self, groups: ConsumerGroups, member_id: str, group: str = "g", instance: str | None = None) -> None:
        self.groups, self.member_id, self.group, self.instance = groups, member_id, group, instance
        self.epoch = 0
        self.owned: dict[uuid.UUID, list[int]] = {}

    def join(self, now: int, topics: Sequence[str] | None = None, regex: str | None = None,
             assignor: str | None = None) -> HeartbeatAnswer:
        self.epoch, self.owned = 0, {}
        return self._send(Heartbeat("g" if self.group == "g" else self.group, self.member_id, 0, self.instance,
                                    rebalance_timeout_ms=30_000, subscribed_topic_names=topics,
                                    subscribed_topic_regex=regex, server_assignor=assignor, owned=[]), now)

    def beat(self, now: int) -> HeartbeatAnswer:
        owned = [(t, ps) for t, ps in self.owned.items()]
        return self._send(Heartbeat(self.group, self.member_id, self.epoch, self.instance, owned=owned), now)

    def leave(self, now: int, epoch: int = -1) -> HeartbeatAnswer:
        return self.groups.heartbeat(Heartbeat(self.group, self.member_id, epoch, self.instance), now)

    def _send(self, request: Heartbeat, now: int) -> HeartbeatAnswer:
        answer = self.groups.heartbeat(request, now)
        self.epoch = answer.member_epoch
        if answer.assignment is not None:
            self.owned = {t: list(ps) for t, ps in answer.assignment.items()}
        return answer

    def partitions(self, topics: Topics) -> set[tuple[str, int]]:
        return {(topics.topic_name(t) or "?", p) for t, ps in self.owned.items() for p in ps}


def engine(topics: Topics, **config: object) -> ConsumerGroups:
    return ConsumerGroups(ConsumerGroupConfig(**config), topics)  # type: ignore[arg-type]


def error_of(call: object) -> tuple[int, str | None]:
    with pytest.raises(KafkaError) as raised:
        call()  # type: ignore[operator]
    return raised.value.code, raised.value.message


def settle(clients: list[Client], now: int, rounds: int = 6) -> None:
    for _ in range(rounds):
        for client in clients:
            client.beat(now)


def no_partition_owned_twice(groups: ConsumerGroups, group_id: str = "g") -> None:
    seen: set[tuple[uuid.UUID, int]] = set()
    for member in groups.groups[group_id].members.values():
        for assignment in (member.assigned, member.pending_revocation):
            for topic, partitions in assignment.items():
                for p in partitions:
                    assert (topic, p) not in seen
                    seen.add((topic, p))


# -- joining, epochs and reconciliation -----------------------------------------------------------

def test_a_first_member_gets_every_partition_and_later_heartbeats_repeat_nothing() -> None:
    topics = Topics(t=4)
    groups = engine(topics)
    a = Client(groups, "a")
    answer = a.join(0, ["t"])
    assert (answer.member_id, answer.member_epoch, answer.heartbeat_interval_ms) == ("a", 1, 5000)
    assert answer.assignment == {topics.ids["t"]: [0, 1, 2, 3]}
    again = a.beat(1)
    assert (again.member_epoch, again.assignment) == (1, None)  # nothing changed: no assignment sent
    assert groups.groups["g"].state is ConsumerGroupState.STABLE


def test_revocation_comes_before_assignment_and_no_partition_has_two_owners() -> None:
    topics = Topics(t=4)
    groups = engine(topics)
    a, b = Client(groups, "a"), Client(groups, "b")
    a.join(0, ["t"])
    joined = b.join(1, ["t"])
    assert joined.member_epoch == 2 and joined.assignment == {}  # its partitions are still a's
    assert groups.groups["g"].members["b"].state is MemberState.UNRELEASED_PARTITIONS

    revoking = a.beat(2)
    assert revoking.member_epoch == 1  # a stays at its epoch until it has let go
    assert a.partitions(topics) == {("t", 0), ("t", 1)}
    assert groups.groups["g"].state is ConsumerGroupState.RECONCILING
    assert b.beat(3).assignment is None  # a has not confirmed the revocation yet
    no_partition_owned_twice(groups)

    assert a.beat(4).member_epoch == 2  # it reported them gone: on to the target epoch
    assert b.beat(5).assignment == {topics.ids["t"]: [2, 3]}
    assert groups.groups["g"].state is ConsumerGroupState.STABLE
    no_partition_owned_twice(groups)


def test_a_member_joining_takes_partitions_only_from_members_above_their_share() -> None:
    topics = Topics(t=6)
    groups = engine(topics)
    a, b, c = Client(groups, "a"), Client(groups, "b"), Client(groups, "c")
    a.join(0, ["t"])
    b.join(1, ["t"])
    settle([a, b], 2)
    before = {"a": a.partitions(topics), "b": b.partitions(topics)}
    assert len(before["a"]) == len(before["b"]) == 3
    c.join(3, ["t"])
    settle([a, b, c], 4)
    for client in (a, b, c):
        assert len(client.partitions(topics)) == 2
    assert a.partitions(topics) <= before["a"] and b.partitions(topics) <= before["b"]  # they kept two each


def test_a_heartbeat_one_epoch_behind_owning_no_more_than_assigned_is_accepted() -> None:
    topics = Topics(t=2)
    groups = engine(topics)
    a, b = Client(groups, "a"), Client(groups, "b")
    a.join(0, ["t"])
    b.join(1, ["t"])
    a.beat(2)  # told to give one partition up
    kept = [(t, list(ps)) for t, ps in a.owned.items()]
    assert a.beat(3).member_epoch == 2
    # The answer that moved a to epoch 2 was lost: it still says 1, owning what it was left with.
    assert groups.heartbeat(Heartbeat("g", "a", 1, owned=kept), 4).member_epoch == 2
    too_much = [(topics.ids["t"], [0, 1])]
    assert error_of(lambda: groups.heartbeat(Heartbeat("g", "a", 1, owned=too_much), 5))[0] == E.FENCED_MEMBER_EPOCH


def test_kafkas_answers_to_wrong_epochs_and_unknown_members_and_groups() -> None:
    topics = Topics(t=4)
    groups = engine(topics)
    a = Client(groups, "a")
    a.join(0, ["t"])
    assert error_of(lambda: groups.heartbeat(Heartbeat("g", "a", 6), 1)) == (
        E.FENCED_MEMBER_EPOCH, "The consumer group member has a greater member epoch (6) than the one known by the "
        "group coordinator (1). The member must abandon all its partitions and rejoin.")
    assert error_of(lambda: groups.heartbeat(Heartbeat("g", "nobody", 3), 1)) == (
        E.UNKNOWN_MEMBER_ID, "Member nobody is not a member of group g.")
    assert error_of(lambda: groups.heartbeat(Heartbeat("nogroup", "nobody", 3), 1)) == (
        E.GROUP_ID_NOT_FOUND, "Consumer group nogroup not found.")
    assert error_of(lambda: groups.heartbeat(Heartbeat("nogroup", "nobody", -1), 1)) == (
        E.GROUP_ID_NOT_FOUND, "Group nogroup not found.")


@pytest.mark.parametrize(("request_", "message"), [
    (Heartbeat("g", "m", 0, rebalance_timeout_ms=1, subscribed_topic_names=["t"], owned=None),
     "TopicPartitions must be empty when (re-)joining."),
    (Heartbeat("g", "m", 0, subscribed_topic_names=["t"], owned=[]), "RebalanceTimeoutMs must be provided in first request."),
    (Heartbeat("g", "m", 0, rebalance_timeout_ms=1, owned=[]),
     "Either SubscribedTopicNames or SubscribedTopicRegex must be non-null when (re-)joining."),
    (Heartbeat("g", "m", -3), "MemberEpoch is invalid."),
    (Heartbeat("", "m", 1), "GroupId can't be empty."),
    (Heartbeat("g", "", 0, rebalance_timeout_ms=1, subscribed_topic_names=["t"], owned=[]), "MemberId can't be empty."),
    (Heartbeat("g", "m", 1, instance_id=""), "InstanceId can't be empty."),
    (Heartbeat("g", "m", 1, rack_id=""), "RackId can't be empty."),
    (Heartbeat("g", "m", -2), "InstanceId can't be null."),
], ids=["null-owned", "no-rebalance-timeout", "no-subscription", "epoch-3", "empty-group", "empty-member-v1",
        "empty-instance", "empty-rack", "static-leave-without-instance"])
def test_bad_heartbeats_get_invalid_request_with_kafkas_reason(request_: Heartbeat, message: str) -> None:
    groups = engine(Topics(t=1))
    assert error_of(lambda: groups.heartbeat(request_, 0)) == (E.INVALID_REQUEST, message)
    assert groups.groups == {}  # nothing was created


def test_v0_joins_may_leave_the_member_id_to_the_coordinator_but_v1_may_not() -> None:
    groups = engine(Topics(t=1))
    join = Heartbeat("g", "", 0, rebalance_timeout_ms=1, subscribed_topic_names=["t"], owned=[], version=0)
    groups.validate(join)  # v0: accepted (the coordinator makes one up)


def test_unsupported_assignor_and_a_full_group_are_refused() -> None:
    groups = engine(Topics(t=1), max_size=1, assignors=(UniformAssignor(), RangeAssignor()))
    join = Heartbeat("g", "a", 0, rebalance_timeout_ms=1, subscribed_topic_names=["t"], owned=[], server_assignor="foo")
    assert error_of(lambda: groups.heartbeat(join, 0)) == (
        E.UNSUPPORTED_ASSIGNOR, "ServerAssignor foo is not supported. Supported assignors: uniform, range.")
    Client(groups, "a").join(0, ["t"])
    assert error_of(lambda: Client(groups, "b").join(1, ["t"]))[0] == E.GROUP_MAX_SIZE_REACHED


def test_the_range_assignor_when_members_ask_for_it() -> None:
    topics = Topics(t=4, u=4)
    groups = engine(topics, assignors=(UniformAssignor(), RangeAssignor()))
    a, b = Client(groups, "a"), Client(groups, "b")
    a.join(0, ["t", "u"], assignor="range")
    b.join(1, ["t", "u"], assignor="range")
    settle([a, b], 2)
    # Co-partitioned: the same partition numbers of both topics go to the same member.
    assert a.partitions(topics) == {("t", 0), ("t", 1), ("u", 0), ("u", 1)}
    assert b.partitions(topics) == {("t", 2), ("t", 3), ("u", 2), ("u", 3)}
    assert groups.groups["g"].assignor_name == "range"


# -- leaving and fencing ----------------------------------------------------------------------------

def test_a_member_that_leaves_is_gone_and_its_partitions_go_to_the_others() -> None:
    topics = Topics(t=4)
    groups = engine(topics)
    a, b = Client(groups, "a"), Client(groups, "b")
    a.join(0, ["t"])
    b.join(1, ["t"])
    settle([a, b], 2)
    epoch = groups.groups["g"].group_epoch
    left = a.leave(3)
    assert (left.member_id, left.member_epoch, left.heartbeat_interval_ms) == ("a", -1, 0)
    assert groups.groups["g"].group_epoch == epoch + 1
    assert error_of(lambda: a.leave(4)) == (E.UNKNOWN_MEMBER_ID, "Member a is not a member of group g.")
    settle([b], 5)
    assert b.partitions(topics) == {("t", p) for p in range(4)}


def test_a_member_whose_session_times_out_is_fenced() -> None:
    topics = Topics(t=2)
    groups = engine(topics)
    a, b = Client(groups, "a"), Client(groups, "b")
    a.join(0, ["t"])
    b.join(0, ["t"])
    settle([a, b], 10_000)
    assert groups.expire("g", "a", 10_000 + SESSION_MS - 1) == 10_000 + SESSION_MS  # not yet: look again then
    b.beat(40_000)
    assert groups.expire("g", "a", 10_000 + SESSION_MS) is None  # its last heartbeat was 45 s ago
    assert "a" not in groups.groups["g"].members
    assert error_of(lambda: a.beat(56_000))[0] == E.UNKNOWN_MEMBER_ID
    settle([b], 56_000)
    assert b.partitions(topics) == {("t", 0), ("t", 1)}


def test_a_member_that_does_not_revoke_within_its_rebalance_timeout_is_fenced() -> None:
    topics = Topics(t=2)
    groups = engine(topics)
    a, b = Client(groups, "a"), Client(groups, "b")
    a.join(0, ["t"])
    b.join(1, ["t"])
    stubborn = Heartbeat("g", "a", 1, owned=[(topics.ids["t"], [0, 1])])  # keeps reporting both
    groups.heartbeat(stubborn, 2)
    assert groups.groups["g"].members["a"].state is MemberState.UNREVOKED_PARTITIONS
    groups.heartbeat(stubborn, 20_000)  # its session is fine...
    assert groups.expire("g", "a", 2 + 30_000) is None  # ...but its 30 s rebalance timeout is not
    settle([b], 30_003)
    assert b.partitions(topics) == {("t", 0), ("t", 1)}


# -- static members ---------------------------------------------------------------------------------

def test_a_static_member_restarting_gets_its_partitions_back_without_a_rebalance() -> None:
    topics = Topics(t=4)
    groups = engine(topics)
    a, b = Client(groups, "a1", instance="i-a"), Client(groups, "b", instance="i-b")
    a.join(0, ["t"])
    b.join(1, ["t"])
    settle([a, b], 2)
    owned_before, epoch = a.partitions(topics), groups.groups["g"].group_epoch

    assert a.leave(3, epoch=-2).member_epoch == -2  # leaving for a restart
    settle([b], 4)
    assert not b.partitions(topics) & owned_before  # its partitions wait for it
    assert error_of(lambda: Client(groups, "x", instance="i-b").join(5, ["t"]))[0] == E.UNRELEASED_INSTANCE_ID

    restarted = Client(groups, "a2", instance="i-a")
    answer = restarted.join(6, ["t"])
    assert answer.member_epoch == epoch and restarted.partitions(topics) == owned_before
    assert groups.groups["g"].group_epoch == epoch  # no rebalance
    assert "a1" not in groups.groups["g"].members
    assert error_of(lambda: a.beat(7)) == (E.FENCED_INSTANCE_ID,
                                           "Static member a1 with instance id i-a was fenced by member a2.")


def test_a_static_member_that_does_not_come_back_is_fenced_after_its_session() -> None:
    topics = Topics(t=2)
    groups = engine(topics)
    a, b = Client(groups, "a", instance="i-a"), Client(groups, "b")
    a.join(0, ["t"])
    b.join(0, ["t"])
    settle([a, b], 1)
    a.leave(2, epoch=-2)
    b.beat(SESSION_MS)
    assert groups.expire("g", "a", 1 + SESSION_MS) is None
    settle([b], SESSION_MS + 2)
    assert b.partitions(topics) == {("t", 0), ("t", 1)}


# -- regex subscriptions ----------------------------------------------------------------------------

def test_a_regex_subscription_picks_up_a_new_topic_within_the_refresh_interval() -> None:
    topics = Topics(**{"orders-eu": 2, "audit": 1})
    groups = engine(topics)
    a = Client(groups, "a")
    a.join(0, regex="orders-.*")
    assert a.partitions(topics) == {("orders-eu", 0), ("orders-eu", 1)}
    topics.create("orders-us", 1)
    a.beat(1_000)
    assert a.partitions(topics) == {("orders-eu", 0), ("orders-eu", 1)}  # topics are looked at every 10 s
    a.beat(REGEX_MIN_REFRESH_INTERVAL_MS + 1)
    assert a.partitions(topics) == {("orders-eu", 0), ("orders-eu", 1), ("orders-us", 0)}


def test_a_regex_matches_whole_names_only_and_never_internal_topics() -> None:
    topics = Topics(**{"__consumer_offsets": 50, "xorders": 1, "orders": 1})
    groups = engine(topics)
    a = Client(groups, "a")
    a.join(0, regex=".*orders")
    assert a.partitions(topics) == {("xorders", 0), ("orders", 0)}
    b = Client(groups, "b", group="all")
    b.join(0, regex=".*")
    assert {t for t, _ in b.partitions(topics)} == {"xorders", "orders"}


@pytest.mark.parametrize("regex", ["(?=x)y", "(a)\\1", "a++", "(?<!a)b", "[", "a\\Z"])
def test_regexes_re2_refuses_get_invalid_regular_expression(regex: str) -> None:
    groups = engine(Topics(t=1))
    code, message = error_of(lambda: Client(groups, "a").join(0, regex=regex))
    assert code == ErrorCode.INVALID_REGULAR_EXPRESSION == 128  # Kafka's code (Errors.java)
    assert message is not None and message.startswith(f"SubscribedTopicRegex `{regex}` is not a valid regular")
    assert groups.groups == {}


def test_re2s_end_of_text_is_understood() -> None:
    topics = Topics(orders=1, orders2=1)
    groups = engine(topics)
    a = Client(groups, "a")
    a.join(0, regex="orders\\z")
    assert a.partitions(topics) == {("orders", 0)}


# -- offsets -----------------------------------------------------------------------------------------

def test_offset_commits_and_fetches_check_the_member_epoch() -> None:
    groups = engine(Topics(t=1))
    Client(groups, "a").join(0, ["t"])
    group = groups.groups["g"]
    groups.validate_offset_commit(group, "a", 1, False, 9)
    assert error_of(lambda: groups.validate_offset_commit(group, "a", 0, False, 9))[0] == E.STALE_MEMBER_EPOCH
    assert error_of(lambda: groups.validate_offset_commit(group, "a", 99, False, 9))[0] == E.STALE_MEMBER_EPOCH
    assert error_of(lambda: groups.validate_offset_commit(group, "a", 1, False, 8))[0] == E.UNSUPPORTED_VERSION
    assert error_of(lambda: groups.validate_offset_commit(group, "", -1, False, 9))[0] == E.UNKNOWN_MEMBER_ID
    groups.validate_offset_fetch(group, None, -1)  # the admin client
    groups.validate_offset_fetch(group, "a", 1)
    assert error_of(lambda: groups.validate_offset_fetch(group, "a", 0))[0] == E.STALE_MEMBER_EPOCH
    assert error_of(lambda: groups.validate_offset_fetch(group, "", -1))[0] == E.UNKNOWN_MEMBER_ID
    Client(groups, "a").leave(1)
    groups.validate_offset_commit(group, "", -1, False, 9)  # an empty group takes anyone's offsets


# -- the assignors on their own -----------------------------------------------------------------------

def test_uniform_balances_mixed_subscriptions_and_keeps_what_it_can() -> None:
    from kbroker.coordinator.assignors import GroupSpec, MemberSpec

    t, u = uuid.uuid4(), uuid.uuid4()
    spec = GroupSpec({"a": MemberSpec(frozenset({t, u})), "b": MemberSpec(frozenset({t})),
                      "c": MemberSpec(frozenset({u}))}, {t: 3, u: 3})
    first = UniformAssignor().assign(spec)
    counts = sorted(sum(len(ps) for ps in a.values()) for a in first.values())
    assert counts == [2, 2, 2]
    assert all(t not in first["c"] and u not in first["b"] for _ in [0])  # only subscribed topics
    again = UniformAssignor().assign(GroupSpec(
        {m: MemberSpec(s.subscribed, first[m]) for m, s in spec.members.items()}, spec.partitions))
    assert again == first  # nothing moves when nothing changed


def test_before_v1_the_coordinator_names_each_new_member() -> None:
    groups = engine(Topics(t=2))
    join = Heartbeat("g", "", 0, rebalance_timeout_ms=30_000, subscribed_topic_names=["t"], owned=[], version=0)
    first, second = groups.heartbeat(join, 0), groups.heartbeat(join, 1)
    # Two members, each named as Kafka's Uuid.toString() names them (22 base64url characters).
    assert first.member_id != second.member_id and len(first.member_id) == len(second.member_id) == 22
    assert set(groups.groups["g"].members) == {first.member_id, second.member_id}
