"""What this broker knows of the cluster's metadata, in memory: every request path reads it here.

Kafka's brokers answer Metadata, Fetch by topic id, OffsetCommit's partition checks and the
admin APIs from their MetadataCache, never from ZooKeeper: a request must not wait on (or be
stalled by) the metadata store. `MetadataCache` is that cache: topics by name and by id, the
partitions' leadership states, the live brokers and the controller.

Who feeds it:
- In a ZooKeeper cluster, `Controller`'s watches (topics, partition states, brokers,
  controller) and `ConfigService`'s config-change notifications (topic overrides).
- On the embedded single node, `TopicManager`: the records at start, then its own writes.
- On every broker, `TopicManager` and `Controller` put what they have just written to the
  store, once the write has succeeded, so the request that made a change sees it when it is
  answered (read your writes); the watch brings the same value again later.

Filtered views (kbroker/views) are topics whose partitions are their source's: the cache
keeps each view's record with its source's current assignment, so every lookup of a view's
partitions follows the source (grown, reassigned) without asking which kind of topic it is.

It is touched on the event loop only.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Iterable

from kbroker.metadata.store import BrokerRegistration, PartitionState, TopicRecord
from kbroker.views.view import View, loaded_view
from protocol.errors import ErrorCode, KafkaError


class MetadataCache:
    def __init__(self) -> None:
        self.topics: dict[str, TopicRecord] = {}
        self._by_id: dict[uuid.UUID, TopicRecord] = {}
        self.states: dict[tuple[str, int], PartitionState] = {}
        self.brokers: dict[int, BrokerRegistration] = {}
        self.controller_id: int | None = None
        self.views: dict[str, View] = {}  # by the view's name

    # -- topics -----------------------------------------------------------------------------------

    def put_topic(self, record: TopicRecord) -> bool:
        """Take `record` unless a newer version of the same topic is known (a watch delivering a
        record read before a change that a later read has brought already); returns whether it
        was taken. A topic created again under its name is always taken."""
        previous = self.topics.get(record.name)
        if previous is not None and previous.topic_id == record.topic_id and record.version < previous.version:
            return False
        if previous is not None and previous.topic_id != record.topic_id:
            self.remove_topic(record.name)  # re-created: the old topic's states are not its own
        view = loaded_view(record.name, record.configs)
        if view is not None:
            self.views[record.name] = view
            record = self._following_source(record, view)
        else:
            self.views.pop(record.name, None)
        self.topics[record.name] = record
        self._by_id[record.topic_id] = record
        self._update_views_of(record.name)
        return True

    def _following_source(self, record: TopicRecord, view: View) -> TopicRecord:
        source = self.topics.get(view.source)
        if source is None or source.assignment == record.assignment:
            return record
        return dataclasses.replace(record, assignment={i: list(r) for i, r in source.assignment.items()})

    def _update_views_of(self, source: str) -> None:
        """A source's partitions changed (created, grown, reassigned): its views follow."""
        for view in self.views.values():
            if view.source == source and (record := self.topics.get(view.name)) is not None:
                followed = self._following_source(record, view)
                self.topics[view.name] = followed
                self._by_id[followed.topic_id] = followed

    def view(self, name: str | None) -> View | None:
        return self.views.get(name) if name is not None else None

    def views_of(self, source: str) -> list[str]:
        return sorted(v.name for v in self.views.values() if v.source == source)

    def remove_topic(self, name: str) -> TopicRecord | None:
        """Forget a topic and its partitions' states; returns what was known of it."""
        record = self.topics.pop(name, None)
        if record is None:
            return None
        self._by_id.pop(record.topic_id, None)
        self.views.pop(name, None)
        for index in record.assignment:
            self.states.pop((name, index), None)
        return record

    def topic(self, name: str) -> TopicRecord | None:
        return self.topics.get(name)

    def topic_by_id(self, topic_id: uuid.UUID) -> TopicRecord | None:
        return self._by_id.get(topic_id)

    def require(self, name: str) -> TopicRecord:
        record = self.topics.get(name)
        if record is None:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Topic '{name}' does not exist.")
        return record

    def partition_exists(self, name: str, index: int) -> bool:
        record = self.topics.get(name)
        return record is not None and index in record.assignment

    def topic_names(self) -> list[str]:
        return sorted(self.topics)

    def topic_records(self) -> Iterable[TopicRecord]:
        return list(self.topics.values())

    # -- partition states -------------------------------------------------------------------------

    def state_of(self, topic: str, index: int) -> PartitionState | None:
        return self.states.get((topic, index))

    def put_state(self, topic: str, index: int, state: PartitionState) -> bool:
        """Take `state` unless a newer version is known already (a watch delivering an older
        state after this broker wrote a newer one); returns whether it was taken."""
        known = self.states.get((topic, index))
        if known is not None and state.version < known.version:
            return False
        self.states[(topic, index)] = state
        return True

    # -- brokers ----------------------------------------------------------------------------------

    def set_brokers(self, brokers: dict[int, BrokerRegistration]) -> None:
        self.brokers = dict(brokers)

    def live_broker_ids(self) -> list[int]:
        return sorted(self.brokers)
