"""The embedded single node's metadata store: one JSON document, replaced atomically on change."""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from kbroker.metadata.store import MetadataStore, TopicRecord
from protocol.errors import ErrorCode, KafkaError

STORE_FILE = "__kbroker_metadata.json"
FORMAT_VERSION = 1
CLUSTER_DEFAULT = "<default>"


class LocalMetadataStore(MetadataStore):
    def __init__(self, directory: Path) -> None:
        self.path = Path(directory) / STORE_FILE
        self._topics: dict[str, TopicRecord] = {}
        self._broker_configs: dict[str, dict[str, str]] = {}
        if self.path.exists():
            self._load()

    def _load(self) -> None:
        document = json.loads(self.path.read_text())
        if document.get("version") != FORMAT_VERSION:
            raise ValueError(f"{self.path}: unknown metadata format {document.get('version')!r}")
        for entry in document["topics"]:
            record = TopicRecord(
                name=entry["name"],
                topic_id=uuid.UUID(entry["topic_id"]),
                assignment={int(p): list(r) for p, r in entry["assignment"].items()},
                configs=dict(entry["configs"]),
            )
            self._topics[record.name] = record
        self._broker_configs = {k: dict(v) for k, v in document.get("broker_configs", {}).items()}

    def _save(self) -> None:
        document: dict[str, Any] = {
            "version": FORMAT_VERSION,
            "topics": [
                {
                    "name": r.name,
                    "topic_id": str(r.topic_id),
                    "assignment": {str(p): replicas for p, replicas in sorted(r.assignment.items())},
                    "configs": r.configs,
                }
                for r in self._topics.values()
            ],
            "broker_configs": self._broker_configs,
        }
        tmp = self.path.with_suffix(".tmp")
        with open(tmp, "w") as f:
            json.dump(document, f, indent=1, sort_keys=True)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)
        _fsync_dir(self.path.parent)

    def create_topic(
        self, name: str, topic_id: uuid.UUID, assignment: Mapping[int, list[int]], configs: Mapping[str, str]
    ) -> None:
        if name in self._topics:
            raise KafkaError(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists.")
        self._topics[name] = TopicRecord(name, topic_id, {p: list(r) for p, r in assignment.items()}, dict(configs))
        self._save()

    def delete_topic(self, name: str) -> None:
        if self._topics.pop(name, None) is None:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Topic '{name}' does not exist.")
        self._save()

    def get_topic(self, name: str) -> TopicRecord | None:
        return self._topics.get(name)

    def list_topics(self) -> list[TopicRecord]:
        return list(self._topics.values())

    def add_partitions(self, name: str, assignment: Mapping[int, list[int]]) -> None:
        record = self._require(name)
        merged = {**record.assignment, **{p: list(r) for p, r in assignment.items()}}
        self._topics[name] = TopicRecord(record.name, record.topic_id, merged, record.configs)
        self._save()

    def set_topic_configs(self, name: str, configs: Mapping[str, str]) -> None:
        record = self._require(name)
        self._topics[name] = TopicRecord(record.name, record.topic_id, record.assignment, dict(configs))
        self._save()

    def get_broker_configs(self, broker_id: int | None) -> dict[str, str]:
        return dict(self._broker_configs.get(_entity(broker_id), {}))

    def set_broker_configs(self, broker_id: int | None, configs: Mapping[str, str]) -> None:
        if configs:
            self._broker_configs[_entity(broker_id)] = dict(configs)
        else:
            self._broker_configs.pop(_entity(broker_id), None)
        self._save()

    def _require(self, name: str) -> TopicRecord:
        record = self._topics.get(name)
        if record is None:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Topic '{name}' does not exist.")
        return record


def _entity(broker_id: int | None) -> str:
    return CLUSTER_DEFAULT if broker_id is None else str(broker_id)


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
