"""The metadata store interface: topics, their partition assignment and configs, broker configs.

Two implementations: a local file store (the embedded single node) and, for clusters, a
ZooKeeper store. Controller code is written against this interface only.
"""

from __future__ import annotations

import uuid
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class TopicRecord:
    name: str
    topic_id: uuid.UUID
    assignment: dict[int, list[int]]  # partition -> replica broker ids, preferred leader first
    configs: dict[str, str] = field(default_factory=dict)  # topic-level overrides only


class MetadataStore(ABC):
    @abstractmethod
    def create_topic(
        self, name: str, topic_id: uuid.UUID, assignment: Mapping[int, list[int]], configs: Mapping[str, str]
    ) -> None:
        """Persist a new topic; raises TOPIC_ALREADY_EXISTS if the name is taken."""

    @abstractmethod
    def delete_topic(self, name: str) -> None: ...

    @abstractmethod
    def get_topic(self, name: str) -> TopicRecord | None: ...

    @abstractmethod
    def list_topics(self) -> list[TopicRecord]: ...

    @abstractmethod
    def add_partitions(self, name: str, assignment: Mapping[int, list[int]]) -> None: ...

    @abstractmethod
    def set_topic_configs(self, name: str, configs: Mapping[str, str]) -> None:
        """Replace the topic's config overrides."""

    @abstractmethod
    def get_broker_configs(self, broker_id: int | None) -> dict[str, str]:
        """Dynamic broker configs; `None` is the cluster-wide default entity."""

    @abstractmethod
    def set_broker_configs(self, broker_id: int | None, configs: Mapping[str, str]) -> None: ...
