"""Replica placement: spread over brokers, and over racks when brokers have them."""

from __future__ import annotations

from pathlib import Path

from kbroker.cluster.controller import rack_alternated
from kbroker.cluster.replica_manager import ReplicaManager
from kbroker.cluster.topics import TopicManager, TopicSpec
from kbroker.metadata.local_store import LocalMetadataStore
from kbroker.storage.log_manager import LogManager

RACKS = {1: "a", 2: "a", 3: "b", 4: "b", 5: "c", 6: "c"}


class FixedCluster:
    """The two things placement asks of the controller."""

    controller_epoch = 1

    def __init__(self, racks: dict[int, str | None]) -> None:
        self.racks = racks

    def live_broker_ids(self) -> list[int]:
        return sorted(self.racks)

    def placement_order(self) -> list[int]:
        return rack_alternated(self.racks)


def test_without_racks_brokers_go_by_id() -> None:
    assert rack_alternated({3: None, 1: None, 2: None}) == [1, 2, 3]


def test_the_order_alternates_racks() -> None:
    assert rack_alternated(RACKS) == [1, 3, 5, 2, 4, 6]
    assert rack_alternated({1: "a", 2: "a", 3: "b"}) == [1, 3, 2]  # uneven racks: the longer one last


def test_replicas_of_a_partition_land_on_different_racks(tmp_path: Path) -> None:
    store = LocalMetadataStore(tmp_path)
    topics = TopicManager(store, ReplicaManager(1, LogManager([tmp_path / "logs"])), 1, {}, 1, 1)
    topics.cluster = FixedCluster(RACKS)  # type: ignore[assignment]
    record = topics.create(TopicSpec("spread", 12, 3), validate_only=True)
    for replicas in record.assignment.values():
        assert len({RACKS[r] for r in replicas}) == 3, replicas
    leaders = [replicas[0] for replicas in record.assignment.values()]
    assert sorted(set(leaders)) == [1, 2, 3, 4, 5, 6]  # leaders spread over every broker
