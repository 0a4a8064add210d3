"""One contract for both metadata stores: the local file store and ZooKeeper (a real server).

The controller is written against `MetadataStore` only, so each test runs against both
implementations. A "peer" is a second broker's view of the same metadata: another ZooKeeper
session, or, on the single node, the same store (its one process is the whole cluster). The
tests at the end are ZooKeeper's own: races between sessions, session expiry, Kafka's znodes.
"""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kazoo.client import KazooClient
from kazoo.recipe.watchers import DataWatch

from kbroker.metadata.local_store import STORE_FILE, LocalMetadataStore
from kbroker.metadata.store import (
    REMOTE_LOG_MAX_BYTES,
    BrokerEndpoint,
    BrokerIdInUse,
    BrokerRegistration,
    MetadataConflict,
    MetadataStore,
    PartitionState,
    RemoteLogTooLarge,
    VersionConflict,
)
from kbroker.metadata.zk_layout import kafka_uuid
from kbroker.metadata.zk_store import ZooKeeperMetadataStore
from protocol.errors import ErrorCode, KafkaError

WAIT_S = 10.0


@dataclass
class Backend:
    kind: str
    open: Callable[[], MetadataStore]  # a new session over the same metadata

    def peer(self, store: MetadataStore) -> MetadataStore:
        return self.open() if self.kind == "zookeeper" else store


@pytest.fixture(params=["local", "zookeeper"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    opened: list[MetadataStore] = []

    if request.param == "local":
        def open_store() -> MetadataStore:
            opened.append(LocalMetadataStore(tmp_path))
            return opened[-1]
    else:
        connect = request.getfixturevalue("zk_connect")

        def open_store() -> MetadataStore:
            opened.append(ZooKeeperMetadataStore(connect, session_timeout_ms=6000))
            return opened[-1]

    yield Backend(request.param, open_store)
    for store in opened:
        store.close()


@pytest.fixture
def store(backend: Backend) -> MetadataStore:
    return backend.open()


class Recorder:
    """What a watch reported, from whichever thread it runs on; waits on a condition, not a clock."""

    def __init__(self) -> None:
        self.calls: list[Any] = []
        self._changed = threading.Condition()

    def __call__(self, *args: Any) -> None:
        with self._changed:
            self.calls.append(args[0] if len(args) == 1 else args)
            self._changed.notify_all()

    def wait_latest(self, predicate: Callable[[Any], bool]) -> Any:
        with self._changed:
            ok = self._changed.wait_for(lambda: bool(self.calls) and predicate(self.calls[-1]), WAIT_S)
            assert ok, f"the watch never reported the expected value; it reported {self.calls}"
            return self.calls[-1]

    def wait_count(self, count: int) -> list[Any]:
        with self._changed:
            assert self._changed.wait_for(lambda: len(self.calls) >= count, WAIT_S), self.calls
            return list(self.calls)


def endpoint(port: int) -> tuple[BrokerEndpoint, ...]:
    return (BrokerEndpoint("PLAINTEXT", "127.0.0.1", port),)


def state(leader: int, epoch: int, isr: list[int], controller_epoch: int = 1) -> PartitionState:
    return PartitionState(leader, epoch, isr, controller_epoch)


# -- the contract, on both stores ------------------------------------------------------------------


def test_topics_and_configs_are_shared_and_kept(backend: Backend, store: MetadataStore) -> None:
    topic_id = uuid.uuid4()
    store.create_topic("orders", topic_id, {0: [1, 2], 1: [2, 3]}, {"retention.ms": "1000"})
    store.add_partitions("orders", {2: [3, 1]})
    store.set_topic_configs("orders", {"cleanup.policy": "compact"})
    store.create_topic("gone", uuid.uuid4(), {0: [1]}, {})
    store.delete_topic("gone")
    store.set_broker_configs(None, {"log.retention.ms": "5"})
    store.set_broker_configs(1, {"message.max.bytes": "7"})
    store.set_broker_configs(2, {"message.max.bytes": "8"})
    store.set_broker_configs(2, {})

    other = backend.open()  # a restarted broker, or another broker of the cluster
    record = other.get_topic("orders")
    assert record is not None
    assert record.topic_id == topic_id
    assert record.assignment == {0: [1, 2], 1: [2, 3], 2: [3, 1]}
    assert record.configs == {"cleanup.policy": "compact"}
    assert record.version == 1  # one more for the added partition; configs are not the assignment
    assert other.get_topic("gone") is None
    assert [(t.name, t.version) for t in other.list_topics()] == [("orders", 1)]
    assert other.get_broker_configs(None) == {"log.retention.ms": "5"}
    assert other.get_broker_configs(1) == {"message.max.bytes": "7"}
    assert other.get_broker_configs(2) == {}
    assert other.get_broker_configs(3) == {}


def test_duplicate_and_missing_topics_are_kafka_errors(store: MetadataStore) -> None:
    store.create_topic("t", uuid.uuid4(), {0: [1]}, {})
    with pytest.raises(KafkaError) as exists:
        store.create_topic("t", uuid.uuid4(), {0: [1]}, {})
    assert exists.value.code == ErrorCode.TOPIC_ALREADY_EXISTS
    for change in (
        lambda: store.delete_topic("nope"),
        lambda: store.add_partitions("nope", {1: [1]}),
        lambda: store.set_topic_configs("nope", {}),
        lambda: store.create_partition_states("nope", {0: state(1, 0, [1])}),
        lambda: store.create_partition_states("t", {5: state(1, 0, [1])}),
    ):
        with pytest.raises(KafkaError) as missing:
            change()
        assert missing.value.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert store.get_topic("nope") is None
    assert store.get_topic("no/such") is None


def test_partition_state_is_compare_and_set(backend: Backend, store: MetadataStore) -> None:
    store.create_topic("p", uuid.uuid4(), {0: [1, 2], 1: [2, 1]}, {})
    assert store.get_partition_state("p", 0) is None
    store.create_partition_states("p", {0: state(1, 0, [1, 2]), 1: state(2, 0, [2, 1])})
    first = store.get_partition_state("p", 0)
    assert first == PartitionState(1, 0, [1, 2], 1, version=0)

    # Two controllers read version 0; the first write wins, the second is refused.
    assert store.set_partition_state("p", 0, state(2, 1, [2], 2), expected_version=0) == 1
    with pytest.raises(VersionConflict) as stale:
        store.set_partition_state("p", 0, state(1, 1, [1], 2), expected_version=0)
    assert (stale.value.expected, stale.value.actual) == (0, 1)
    with pytest.raises(VersionConflict) as missing:
        store.set_partition_state("p", 7, state(1, 1, [1]), expected_version=0)
    assert missing.value.actual is None
    with pytest.raises(MetadataConflict):
        store.create_partition_states("p", {1: state(1, 0, [1])})

    # Versions live in the store: a new controller (or a restarted node) continues from them.
    other = backend.open()
    assert other.get_partition_state("p", 0) == PartitionState(2, 1, [2], 2, version=1)
    assert other.set_partition_state("p", 0, state(2, 2, [2, 1], 2), expected_version=1) == 2

    store.delete_topic("p")
    assert store.get_partition_state("p", 0) is None
    assert store.get_partition_state("p", 1) is None


def test_creating_partition_states_is_all_or_nothing(store: MetadataStore) -> None:
    store.create_topic("grown", uuid.uuid4(), {0: [1], 1: [1], 2: [1]}, {})
    store.create_partition_states("grown", {1: state(1, 0, [1])})
    with pytest.raises(MetadataConflict):
        store.create_partition_states("grown", {0: state(1, 0, [1]), 1: state(1, 0, [1]), 2: state(1, 0, [1])})
    assert store.get_partition_state("grown", 0) is None
    assert store.get_partition_state("grown", 2) is None


def test_watches_see_another_brokers_changes(backend: Backend, store: MetadataStore) -> None:
    peer = backend.peer(store)
    topics, partition, configs = Recorder(), Recorder(), Recorder()
    peer.watch_topics(topics)
    peer.watch_partition_state("w", 0, partition)
    peer.watch_config_changes(configs)
    assert topics.wait_count(1) == [set()]  # reported right away
    assert partition.wait_count(1) == [None]

    store.create_topic("w", uuid.uuid4(), {0: [1, 2]}, {})
    topics.wait_latest(lambda names: names == {"w"})
    store.create_partition_states("w", {0: state(1, 0, [1, 2])})
    partition.wait_latest(lambda s: s is not None and s.leader == 1)
    store.set_partition_state("w", 0, state(2, 1, [2]), expected_version=0)
    assert partition.wait_latest(lambda s: s is not None and s.version == 1) == PartitionState(2, 1, [2], 1, 1)

    store.set_topic_configs("w", {"retention.ms": "1"})
    store.set_broker_configs(None, {"log.retention.ms": "2"})
    store.set_broker_configs(3, {"log.retention.ms": "3"})
    assert configs.wait_count(3) == [("topics", "w"), ("brokers", "<default>"), ("brokers", "3")]

    store.delete_topic("w")
    topics.wait_latest(lambda names: names == set())
    partition.wait_latest(lambda s: s is None)


def test_a_cancelled_watch_hears_nothing_more(backend: Backend, store: MetadataStore) -> None:
    peer = backend.peer(store)
    cancelled, kept = Recorder(), Recorder()
    unwatch = peer.watch_topics(cancelled)
    peer.watch_topics(kept)
    cancelled.wait_count(1)
    unwatch()
    store.create_topic("after", uuid.uuid4(), {0: [1]}, {})
    kept.wait_latest(lambda names: names == {"after"})
    assert cancelled.calls == [set()]


def test_a_registration_lasts_as_long_as_its_session(backend: Backend, store: MetadataStore) -> None:
    peer = backend.peer(store)
    brokers = Recorder()
    peer.watch_brokers(brokers)
    store.register_broker(BrokerRegistration(1, endpoint(9092), rack="r1"))
    live = brokers.wait_latest(lambda b: 1 in b)
    assert live[1].endpoints == endpoint(9092)
    assert live[1].rack == "r1"
    assert live[1].timestamp_ms > 0
    assert peer.live_brokers() == live

    store.close()
    brokers.wait_latest(lambda b: b == {})
    assert peer.live_brokers() == {}


def test_one_controller_at_a_time_with_increasing_epochs(backend: Backend, store: MetadataStore) -> None:
    peer = backend.peer(store)
    controller = Recorder()
    peer.watch_controller(controller)
    assert controller.wait_count(1) == [None]
    assert store.controller_epoch() == 0

    assert store.try_become_controller(1) == 1
    assert peer.try_become_controller(2) is None  # broker 2 loses while broker 1's session lives
    assert store.try_become_controller(1) == 1  # asking again changes nothing
    assert peer.controller_id() == 1
    controller.wait_latest(lambda c: c == 1)

    store.close()  # the controller's session ends: the others hear it and elect a new one
    controller.wait_latest(lambda c: c is None)
    assert peer.try_become_controller(2) == 2
    controller.wait_latest(lambda c: c == 2)
    assert peer.controller_epoch() == 2
    assert backend.open().controller_epoch() == 2  # the epoch is kept, never reused


def test_the_cluster_id_is_chosen_once(backend: Backend, store: MetadataStore) -> None:
    assert store.get_or_create_cluster_id("first-id") == "first-id"
    assert backend.open().get_or_create_cluster_id("second-id") == "first-id"
    assert store.get_or_create_cluster_id() == "first-id"


# -- ZooKeeper's own -------------------------------------------------------------------------------


@pytest.fixture
def zk_raw(zk_connect: str) -> Iterator[KazooClient]:
    """A plain kazoo client on the test's chroot, to look at the znodes as an operator would."""
    ZooKeeperMetadataStore(zk_connect).close()  # creates the chroot
    client = KazooClient(zk_connect)
    client.start()
    yield client
    client.stop()
    client.close()


def read_json(client: KazooClient, path: str) -> Any:
    return json.loads(client.get(path)[0])


def test_znodes_are_kafkas(zk_connect: str, zk_raw: KazooClient) -> None:
    store = ZooKeeperMetadataStore(zk_connect)
    try:
        topic_id = uuid.uuid4()
        store.create_topic("orders", topic_id, {0: [1, 2], 1: [2, 1]}, {"retention.ms": "60000"})
        store.create_partition_states("orders", {0: state(1, 0, [1, 2], 3)})
        store.set_broker_configs(None, {"log.retention.ms": "5"})
        store.register_broker(BrokerRegistration(1, (BrokerEndpoint("PLAINTEXT", "127.0.0.1", 9092),
                                                     BrokerEndpoint("SECURE", "::1", 9093, "SSL"))))
        store.try_become_controller(1)
        cluster_id = store.get_or_create_cluster_id()

        assert read_json(zk_raw, "/brokers/topics/orders") == {
            "version": 3, "topic_id": kafka_uuid(topic_id), "partitions": {"0": [1, 2], "1": [2, 1]},
            "adding_replicas": {}, "removing_replicas": {},
        }
        assert len(kafka_uuid(topic_id)) == 22  # Kafka's Uuid: base64 without padding
        assert read_json(zk_raw, "/brokers/topics/orders/partitions/0/state") == {
            "controller_epoch": 3, "leader": 1, "version": 1, "leader_epoch": 0, "isr": [1, 2],
        }
        assert read_json(zk_raw, "/config/topics/orders") == {"version": 1, "config": {"retention.ms": "60000"}}
        assert read_json(zk_raw, "/config/brokers/<default>") == {"version": 1, "config": {"log.retention.ms": "5"}}
        [change] = zk_raw.get_children("/config/changes")
        assert change.startswith("config_change_")
        assert read_json(zk_raw, f"/config/changes/{change}") == {"version": 2, "entity_path": "brokers/<default>"}

        broker, broker_stat = zk_raw.get("/brokers/ids/1")
        assert broker_stat.ephemeralOwner == store.session_id
        registration = json.loads(broker)
        assert {k: v for k, v in registration.items() if k != "timestamp"} == {
            "version": 5, "host": "127.0.0.1", "port": 9092, "jmx_port": -1, "features": {},
            "endpoints": ["PLAINTEXT://127.0.0.1:9092", "SECURE://[::1]:9093"],
            "listener_security_protocol_map": {"PLAINTEXT": "PLAINTEXT", "SECURE": "SSL"},
        }
        assert registration["timestamp"].isdigit()
        assert store.live_brokers()[1].endpoints[1] == BrokerEndpoint("SECURE", "::1", 9093, "SSL")

        controller, controller_stat = zk_raw.get("/controller")
        assert controller_stat.ephemeralOwner == store.session_id
        assert {k: v for k, v in json.loads(controller).items() if k != "timestamp"} == {
            "version": 2, "brokerid": 1, "kraftControllerEpoch": -1,
        }
        assert zk_raw.get("/controller_epoch")[0] == b"1"
        assert read_json(zk_raw, "/cluster/id") == {"version": "1", "id": cluster_id}

        store.delete_topic("orders")
        assert zk_raw.exists("/brokers/topics/orders") is None
        assert zk_raw.exists("/config/topics/orders") is None
    finally:
        store.close()


def test_a_topic_written_by_kafka_is_read(zk_connect: str, zk_raw: KazooClient) -> None:
    """Kafka's own JSON, key order and all, including a pre-2.8 topic without an id."""
    zk_raw.create("/brokers/topics/legacy", b'{"version":1,"partitions":{"1":[2],"0":[1]}}')
    zk_raw.create("/brokers/topics/modern", b'{"removing_replicas":{},"partitions":{"0":[0]},'
                                            b'"topic_id":"ZOLr9CLNQjSW70hyIHx6BQ","adding_replicas":{},"version":3}')
    zk_raw.create("/config/topics/modern", b'{"version":1,"config":{"retention.ms":"100000"}}')
    store = ZooKeeperMetadataStore(zk_connect)
    try:
        legacy, modern = store.get_topic("legacy"), store.get_topic("modern")
        assert legacy is not None and modern is not None
        assert legacy.assignment == {0: [1], 1: [2]}
        assert legacy.topic_id == store.get_topic("legacy").topic_id  # stable without a stored id
        assert kafka_uuid(modern.topic_id) == "ZOLr9CLNQjSW70hyIHx6BQ"
        assert modern.configs == {"retention.ms": "100000"}
    finally:
        store.close()


def test_racing_elections_have_one_winner(zk_connect: str) -> None:
    stores = [ZooKeeperMetadataStore(zk_connect) for _ in range(5)]
    try:
        start = threading.Barrier(len(stores))
        results: dict[int, int | None] = {}

        def elect(broker_id: int) -> None:
            start.wait()
            results[broker_id] = stores[broker_id].try_become_controller(broker_id)

        threads = [threading.Thread(target=elect, args=(i,)) for i in range(len(stores))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        winners = {b: epoch for b, epoch in results.items() if epoch is not None}
        assert len(winners) == 1, results
        [(winner, epoch)] = winners.items()
        assert epoch == 1
        assert stores[0].controller_id() == winner
    finally:
        for store in stores:
            store.close()


def test_a_broker_id_is_taken_while_its_session_lives(zk_connect: str) -> None:
    first, second = ZooKeeperMetadataStore(zk_connect), ZooKeeperMetadataStore(zk_connect)
    try:
        first.register_broker(BrokerRegistration(1, endpoint(9092)))
        first.register_broker(BrokerRegistration(1, endpoint(9093)))  # its own: replaced
        with pytest.raises(BrokerIdInUse):
            second.register_broker(BrokerRegistration(1, endpoint(9094)))
        assert second.live_brokers()[1].endpoints == endpoint(9093)
        first.close()
        second.register_broker(BrokerRegistration(1, endpoint(9094)))
        assert second.live_brokers()[1].endpoints == endpoint(9094)
    finally:
        first.close()
        second.close()


def test_registration_wins_when_the_holder_expires_between_create_and_exists(zk_connect: str) -> None:
    """A restarted broker registers while its old session still holds the id; that session may end
    just after the create failed. The znode is then gone: create again, do not call it taken."""
    old, restarted = ZooKeeperMetadataStore(zk_connect), ZooKeeperMetadataStore(zk_connect)
    try:
        old.register_broker(BrokerRegistration(1, endpoint(9092)))
        real_exists = restarted._client.exists

        def exists_after_the_old_session_ends(path: str, *args: object, **kwargs: object) -> object:
            old.close()  # ZooKeeper deletes the old session's ephemeral node at once
            restarted._client.exists = real_exists
            return real_exists(path, *args, **kwargs)

        restarted._client.exists = exists_after_the_old_session_ends
        restarted.register_broker(BrokerRegistration(1, endpoint(9092)))
        assert restarted._client.exists is real_exists  # the interleaving did happen
        assert restarted.live_brokers()[1].endpoints == endpoint(9092)
    finally:
        old.close()
        restarted.close()


def test_a_broker_registers_again_after_its_session_expires(zk_connect: str, zk_raw: KazooClient) -> None:
    store = ZooKeeperMetadataStore(zk_connect)
    try:
        store.register_broker(BrokerRegistration(1, endpoint(9092)))
        owners = Recorder()
        DataWatch(zk_raw, "/brokers/ids/1", lambda data, stat: owners(stat.ephemeralOwner if stat else None))
        expired = store.session_id
        owners.wait_latest(lambda owner: owner == expired)

        # Expire the session as ZooKeeper would after a long partition: another client takes it
        # over with its id and password and closes it.
        thief = KazooClient(zk_connect, client_id=(expired, store._client.client_id[1]))
        thief.start()
        thief.stop()
        thief.close()

        owners.wait_latest(lambda owner: owner is not None and owner != expired)
        assert zk_raw.get("/brokers/ids/1")[1].ephemeralOwner == store.session_id
        assert store.live_brokers()[1].endpoints == endpoint(9092)
    finally:
        store.close()


def test_an_election_that_read_an_old_epoch_cannot_reuse_it(zk_connect: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The race the epoch's compare-and-set exists for: broker 1 reads epoch 0; meanwhile broker
    2 wins (epoch 1) and dies. Broker 1 must not then become controller with epoch 1 again."""
    slow, fast = ZooKeeperMetadataStore(zk_connect), ZooKeeperMetadataStore(zk_connect)
    try:
        read_epoch = slow._read_controller_epoch
        calls = 0

        def read_then_lose_the_race() -> tuple[int, int]:
            nonlocal calls
            calls += 1
            result = read_epoch()
            if calls == 1:
                assert fast.try_become_controller(2) == 1
                fast.close()
            return result

        monkeypatch.setattr(slow, "_read_controller_epoch", read_then_lose_the_race)
        assert slow.try_become_controller(1) == 2
        assert calls == 2
    finally:
        slow.close()
        fast.close()


# -- users' SCRAM credentials ----------------------------------------------------------------------


def test_user_configs_are_shared_and_announced(backend: Backend, store: MetadataStore) -> None:
    changes = Recorder()
    peer = backend.peer(store)
    unwatch = peer.watch_config_changes(changes)
    store.set_user_configs("alice", {"SCRAM-SHA-256": "salt=a,stored_key=b,server_key=c,iterations=4096"})
    store.set_user_configs("bob smith*", {"SCRAM-SHA-512": "salt=d,stored_key=e,server_key=f,iterations=8192"})
    store.set_user_configs("gone", {"SCRAM-SHA-512": "x"})
    store.set_user_configs("gone", {})
    # Kafka's sanitized entity names in the notifications (a space as %20, '*' as %2A).
    assert changes.wait_count(4)[:4] == [("users", "alice"), ("users", "bob%20smith%2A"), ("users", "gone"),
                                         ("users", "gone")]
    unwatch()
    other = backend.open()
    assert other.get_user_configs("alice") == {"SCRAM-SHA-256": "salt=a,stored_key=b,server_key=c,iterations=4096"}
    assert other.get_user_configs("nobody") == {}
    assert other.list_user_configs() == {
        "alice": {"SCRAM-SHA-256": "salt=a,stored_key=b,server_key=c,iterations=4096"},
        "bob smith*": {"SCRAM-SHA-512": "salt=d,stored_key=e,server_key=f,iterations=8192"},
    }


def test_user_znodes_are_kafkas(zk_connect: str, zk_raw: KazooClient) -> None:
    store = ZooKeeperMetadataStore(zk_connect)
    try:
        store.set_user_configs("carol@example.com", {"SCRAM-SHA-512": "salt=s,stored_key=k,server_key=v,iterations=4096"})
        assert read_json(zk_raw, "/config/users/carol%40example.com") == {
            "version": 1, "config": {"SCRAM-SHA-512": "salt=s,stored_key=k,server_key=v,iterations=4096"}}
        changes = sorted(zk_raw.get_children("/config/changes"))
        assert read_json(zk_raw, f"/config/changes/{changes[-1]}") == {
            "version": 2, "entity_path": "users/carol%40example.com"}
        # A user Kafka's kafka-configs.sh wrote is read, its sanitized name decoded.
        zk_raw.create("/config/users/dave%2Bops", b'{"version":1,"config":{"SCRAM-SHA-256":"salt=x"}}')
        assert store.list_user_configs()["dave+ops"] == {"SCRAM-SHA-256": "salt=x"}
    finally:
        store.close()


# -- remote log metadata (the archive's), on both stores -------------------------------------------


def segments(*offsets: int) -> dict[str, Any]:
    """A document shaped like the archive's: nested dicts and lists of ints and strings."""
    return {"format": 1, "leader_epoch": 3,
            "segments": [{"id": f"s{o}", "base_offset": o, "end_offset": o + 9, "state": "COPY_SEGMENT_FINISHED"}
                         for o in offsets]}


def test_remote_log_round_trip_with_versions(store: MetadataStore) -> None:
    assert store.get_remote_log("orders", 0) == (None, -1)
    assert store.set_remote_log("orders", 0, segments(0), expected_version=-1) == 0
    assert store.get_remote_log("orders", 0) == (segments(0), 0)
    assert store.set_remote_log("orders", 0, segments(0, 10), expected_version=0) == 1
    assert store.set_remote_log("orders", 0, segments(10), expected_version=1) == 2
    document, version = store.get_remote_log("orders", 0)
    assert (document, version) == (segments(10), 2)
    assert store.get_remote_log("orders", 1) == (None, -1)  # one document per partition

    assert document is not None
    document["segments"].clear()  # the caller's copy: the stored document does not change
    assert store.get_remote_log("orders", 0) == (segments(10), 2)


def test_a_stale_or_wrong_remote_log_version_is_refused(store: MetadataStore) -> None:
    store.set_remote_log("t", 0, segments(0), expected_version=-1)
    store.set_remote_log("t", 0, segments(0, 10), expected_version=0)
    with pytest.raises(VersionConflict) as stale:
        store.set_remote_log("t", 0, segments(99), expected_version=0)
    assert (stale.value.expected, stale.value.actual) == (0, 1)
    with pytest.raises(VersionConflict) as exists:
        store.set_remote_log("t", 0, segments(99), expected_version=-1)  # create, but it exists
    assert (exists.value.expected, exists.value.actual) == (-1, 1)
    with pytest.raises(VersionConflict) as missing:
        store.set_remote_log("t", 1, segments(99), expected_version=0)  # update, but there is none
    assert missing.value.actual is None
    assert store.get_remote_log("t", 0) == (segments(0, 10), 1)
    assert store.get_remote_log("t", 1) == (None, -1)
    for bad in (lambda: store.set_remote_log("t", -1, {}, -1), lambda: store.set_remote_log("t", 0, {}, -2)):
        with pytest.raises(ValueError):
            bad()  # -1 is "any version" to ZooKeeper's set: no other negative may pass for one
    assert store.get_remote_log("t", 0) == (segments(0, 10), 1)


def test_of_two_leaders_that_read_one_version_only_one_writes(backend: Backend, store: MetadataStore) -> None:
    deposed = backend.peer(store)  # a leader that has not noticed it lost the partition
    store.set_remote_log("p", 0, segments(0), expected_version=-1)
    _, seen_by_new = store.get_remote_log("p", 0)
    _, seen_by_deposed = deposed.get_remote_log("p", 0)
    assert seen_by_new == seen_by_deposed == 0

    assert store.set_remote_log("p", 0, segments(0, 10), expected_version=seen_by_new) == 1
    with pytest.raises(VersionConflict) as lost:
        deposed.set_remote_log("p", 0, segments(0, 20), expected_version=seen_by_deposed)
    assert (lost.value.expected, lost.value.actual) == (0, 1)
    assert deposed.get_remote_log("p", 0) == (segments(0, 10), 1)

    # Both creating the first document: one creates it, the other conflicts.
    assert store.set_remote_log("p", 1, segments(5), expected_version=-1) == 0
    with pytest.raises(VersionConflict):
        deposed.set_remote_log("p", 1, segments(6), expected_version=-1)
    assert deposed.get_remote_log("p", 1) == (segments(5), 0)


def test_remote_logs_survive_reopen(backend: Backend, store: MetadataStore) -> None:
    store.set_remote_log("kept", 0, segments(0), expected_version=-1)
    store.set_remote_log("kept", 0, segments(0, 10), expected_version=0)
    store.set_remote_log("kept", 3, segments(7), expected_version=-1)

    reopened = backend.open()  # a restarted node, or a new ZooKeeper session
    assert reopened.get_remote_log("kept", 0) == (segments(0, 10), 1)
    assert reopened.list_remote_logs("kept") == {0: (segments(0, 10), 1), 3: (segments(7), 0)}
    assert reopened.set_remote_log("kept", 0, segments(10), expected_version=1) == 2  # versions go on
    assert backend.open().get_remote_log("kept", 0) == (segments(10), 2)


def test_remote_logs_are_listed_and_deleted_per_topic(store: MetadataStore) -> None:
    # Names that share a prefix, with dots and underscores: each topic's documents are its own.
    for topic in ("my.topic_1", "my.topic_10", "my_topic.1"):
        for partition in (0, 1, 2):
            store.set_remote_log(topic, partition, segments(partition), expected_version=-1)
    store.set_remote_log("my.topic_1", 1, segments(1, 11), expected_version=0)
    assert store.list_remote_logs("my.topic_1") == {
        0: (segments(0), 0), 1: (segments(1, 11), 1), 2: (segments(2), 0)}
    assert store.list_remote_logs("none") == {}

    store.delete_remote_logs("my.topic_1")
    assert store.list_remote_logs("my.topic_1") == {}
    assert store.get_remote_log("my.topic_1", 1) == (None, -1)
    assert store.list_remote_logs("my.topic_10") == {p: (segments(p), 0) for p in (0, 1, 2)}
    assert store.list_remote_logs("my_topic.1") == {p: (segments(p), 0) for p in (0, 1, 2)}
    store.delete_remote_logs("my.topic_1")  # none left: nothing to do
    store.delete_remote_logs("never.had_any")
    assert store.set_remote_log("my.topic_1", 1, segments(1), expected_version=-1) == 0  # anew


def test_deleting_a_topic_keeps_its_remote_logs(backend: Backend, store: MetadataStore) -> None:
    """The documents find the archived objects: they go only once those are removed."""
    store.create_topic("tiered.t_1", uuid.uuid4(), {0: [1], 1: [1]}, {"remote.storage.enable": "true"})
    store.create_partition_states("tiered.t_1", {0: PartitionState(1, 0, [1], 1)})
    store.set_remote_log("tiered.t_1", 0, segments(0), expected_version=-1)
    store.set_remote_log("tiered.t_1", 1, segments(5), expected_version=-1)

    store.delete_topic("tiered.t_1")
    assert store.get_topic("tiered.t_1") is None
    assert store.list_remote_logs("tiered.t_1") == {0: (segments(0), 0), 1: (segments(5), 0)}
    assert backend.open().get_remote_log("tiered.t_1", 0) == (segments(0), 0)  # and kept so
    store.delete_remote_logs("tiered.t_1")
    assert backend.open().list_remote_logs("tiered.t_1") == {}


def padded(size: int) -> dict[str, Any]:
    """A document of exactly `size` bytes as compact JSON."""
    return {"pad": "x" * (size - len('{"pad":""}'))}


def test_an_oversize_remote_log_is_refused(backend: Backend, store: MetadataStore) -> None:
    assert store.set_remote_log("big", 0, padded(REMOTE_LOG_MAX_BYTES), expected_version=-1) == 0
    with pytest.raises(RemoteLogTooLarge) as refused:
        store.set_remote_log("big", 0, padded(REMOTE_LOG_MAX_BYTES + 1), expected_version=0)
    assert isinstance(refused.value, MetadataConflict)  # a refused write, as a lost race is
    assert refused.value.size == REMOTE_LOG_MAX_BYTES + 1
    assert "big-0" in str(refused.value) and str(REMOTE_LOG_MAX_BYTES) in str(refused.value)
    with pytest.raises(RemoteLogTooLarge):
        store.set_remote_log("big", 1, padded(2 * REMOTE_LOG_MAX_BYTES), expected_version=-1)

    other = backend.open()
    assert other.get_remote_log("big", 0) == (padded(REMOTE_LOG_MAX_BYTES), 0)  # unchanged
    assert other.get_remote_log("big", 1) == (None, -1)


# -- remote log metadata, each store's own --------------------------------------------------------


def test_the_local_file_keeps_remote_logs_under_an_optional_key(tmp_path: Path) -> None:
    store = LocalMetadataStore(tmp_path)
    store.create_topic("t", uuid.uuid4(), {0: [0]}, {})
    assert "remote_logs" not in json.loads((tmp_path / STORE_FILE).read_text())  # an older file's shape
    assert LocalMetadataStore(tmp_path).get_remote_log("t", 0) == (None, -1)  # and it loads

    store.set_remote_log("t", 0, {"segments": [1, 2]}, expected_version=-1)
    store.set_remote_log("t", 0, {"segments": [2]}, expected_version=0)
    assert json.loads((tmp_path / STORE_FILE).read_text())["remote_logs"] == {
        "t": {"0": {"version": 1, "document": {"segments": [2]}}}}
    store.delete_remote_logs("t")
    assert "remote_logs" not in json.loads((tmp_path / STORE_FILE).read_text())


def test_remote_log_znodes_are_kbrokers_own(zk_connect: str) -> None:
    store = ZooKeeperMetadataStore(zk_connect)
    raw = KazooClient(zk_connect)
    raw.start()
    try:
        store.set_remote_log("a.b_c", 4, {"segments": [], "leader_epoch": 2}, expected_version=-1)
        store.set_remote_log("a.b_c", 4, {"segments": [], "leader_epoch": 3}, expected_version=0)
        data, stat = raw.get("/kbroker/remote_log/a.b_c/4")
        assert data == b'{"segments":[],"leader_epoch":3}'
        assert stat.version == 1  # the znode's version is the document's
        assert raw.get_children("/brokers/topics") == []  # nothing of Kafka's layout
        with pytest.raises(KafkaError) as illegal:
            store.set_remote_log("a/b", 0, {}, expected_version=-1)  # would name another znode
        assert illegal.value.code == ErrorCode.INVALID_TOPIC
        assert store.get_remote_log("a/b", 0) == (None, -1)
        store.delete_remote_logs("a.b_c")
        assert raw.exists("/kbroker/remote_log/a.b_c") is None
        assert raw.exists("/kbroker/remote_log") is not None
    finally:
        raw.stop()
        raw.close()
        store.close()


def test_racing_zookeeper_sessions_have_one_remote_log_writer(zk_connect: str) -> None:
    stores = [ZooKeeperMetadataStore(zk_connect) for _ in range(4)]
    try:
        stores[0].set_remote_log("race", 0, segments(0), expected_version=-1)
        start = threading.Barrier(len(stores))
        results: dict[int, int | str] = {}

        def write(i: int) -> None:
            _, version = stores[i].get_remote_log("race", 0)
            start.wait()
            try:
                results[i] = stores[i].set_remote_log("race", 0, segments(i), expected_version=version)
            except VersionConflict:
                results[i] = "conflict"

        threads = [threading.Thread(target=write, args=(i,)) for i in range(len(stores))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        winners = [i for i, result in results.items() if result == 1]
        assert len(winners) == 1 and sorted(results.values(), key=str) == [1, *["conflict"] * 3], results
        assert stores[1].get_remote_log("race", 0) == (segments(winners[0]), 1)
    finally:
        for store in stores:
            store.close()
