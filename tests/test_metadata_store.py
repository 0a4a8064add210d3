"""The local metadata store keeps topics and configs across reopen and refuses bad changes."""

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

from kbroker.fsutil import temporary_path
from kbroker.metadata.local_store import STORE_FILE, LocalMetadataStore
from kbroker.metadata.store import (
    REMOTE_LOG_MAX_BYTES,
    MetadataConflict,
    MetadataStore,
    PartitionState,
    RemoteLogTooLarge,
    VersionConflict,
)
from kbroker.metadata.zk_store import ZooKeeperMetadataStore
from protocol.errors import ErrorCode, KafkaError


def test_topics_and_configs_survive_reopen(tmp_path: Path) -> None:
    store = LocalMetadataStore(tmp_path)
    topic_id = uuid.uuid4()
    store.create_topic("orders", topic_id, {0: [0], 1: [0]}, {"retention.ms": "1000"})
    store.add_partitions("orders", {2: [0]})
    store.set_topic_configs("orders", {"cleanup.policy": "compact"})
    store.set_broker_configs(None, {"log.retention.ms": "5"})
    store.set_broker_configs(0, {"message.max.bytes": "7"})
    store.create_topic("gone", uuid.uuid4(), {0: [0]}, {})
    store.delete_topic("gone")

    reopened = LocalMetadataStore(tmp_path)
    record = reopened.get_topic("orders")
    assert record is not None
    assert record.topic_id == topic_id
    assert record.assignment == {0: [0], 1: [0], 2: [0]}
    assert record.configs == {"cleanup.policy": "compact"}
    assert reopened.get_topic("gone") is None
    assert [t.name for t in reopened.list_topics()] == ["orders"]
    assert reopened.get_broker_configs(None) == {"log.retention.ms": "5"}
    assert reopened.get_broker_configs(0) == {"message.max.bytes": "7"}
    assert reopened.get_broker_configs(1) == {}


def test_duplicate_and_missing_topics_are_kafka_errors(tmp_path: Path) -> None:
    store = LocalMetadataStore(tmp_path)
    store.create_topic("t", uuid.uuid4(), {0: [0]}, {})
    with pytest.raises(KafkaError) as exists:
        store.create_topic("t", uuid.uuid4(), {0: [0]}, {})
    assert exists.value.code == ErrorCode.TOPIC_ALREADY_EXISTS
    for change in (
        lambda: store.delete_topic("nope"),
        lambda: store.add_partitions("nope", {1: [0]}),
        lambda: store.set_topic_configs("nope", {}),
    ):
        with pytest.raises(KafkaError) as missing:
            change()
        assert missing.value.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_an_interrupted_save_leaves_the_previous_state(tmp_path: Path) -> None:
    store = LocalMetadataStore(tmp_path)
    store.create_topic("kept", uuid.uuid4(), {0: [0]}, {})
    # A crash between writing the temporary file and renaming it leaves a stray .tmp behind.
    temporary_path(tmp_path / STORE_FILE).write_text("{ not json")
    assert [t.name for t in LocalMetadataStore(tmp_path).list_topics()] == ["kept"]


# -- remote log metadata, on both stores ----------------------------------------------------------


@dataclass
class Backend:
    """As in test_zk_store.py: `open` is a new session over the same metadata (for the local store,
    the store reopened from its directory); a `peer` is a second broker's view of it."""

    kind: str
    open: Callable[[], MetadataStore]

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
