"""`AdminClient`: topics, configs and partition placement, sent to the controller (or, for
a broker's own configs, to that broker). Topic creation, deletion and growth, DescribeConfigs
and IncrementalAlterConfigs, ElectLeaders and partition reassignments."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from construct import Container

from kbroker.client.cluster import ClusterClient
from kbroker.client.errors import check, error_for
from protocol.errors import KafkaError
from protocol.primitives import ZERO_UUID

CREATE_TOPICS = 19
DESCRIBE_ACLS, CREATE_ACLS, DELETE_ACLS = 29, 30, 31
DELETE_TOPICS = 20
DESCRIBE_CONFIGS = 32
CREATE_PARTITIONS = 37
ELECT_LEADERS = 43
INCREMENTAL_ALTER_CONFIGS = 44
DESCRIBE_LOG_DIRS = 35
ALTER_PARTITION_REASSIGNMENTS = 45
LIST_PARTITION_REASSIGNMENTS = 46
# Config resource types and IncrementalAlterConfigs operations, as numbered on the wire.
TOPIC_RESOURCE, BROKER_RESOURCE, GROUP_RESOURCE = 2, 4, 32
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3
CONFIG_SOURCES = {
    0: "UNKNOWN", 1: "DYNAMIC_TOPIC_CONFIG", 2: "DYNAMIC_BROKER_CONFIG", 3: "DYNAMIC_DEFAULT_BROKER_CONFIG",
    4: "STATIC_BROKER_CONFIG", 5: "DEFAULT_CONFIG", 6: "DYNAMIC_BROKER_LOGGER_CONFIG",
    7: "CLIENT_METRICS_CONFIG", 8: "GROUP_CONFIG",
}


@dataclass
class ConfigEntry:
    name: str
    value: str | None
    source: int
    read_only: bool = False
    is_sensitive: bool = False
    synonyms: list[tuple[str, str | None, int]] = field(default_factory=list)  # (name, value, source)


class AdminClient(ClusterClient):
    """Topic, config and partition-placement administration."""

    # -- topics and configs ------------------------------------------------------------------

    def create_topic(self, name: str, partitions: int = -1, replication_factor: int = -1,
                     configs: dict[str, str] | None = None, timeout_ms: int = 30000) -> None:
        """Create one topic (-1 takes the broker's default); raises the topic's KafkaError."""
        body = {
            "topics": [{
                "name": name, "num_partitions": partitions, "replication_factor": replication_factor,
                "assignments": [],
                "configs": [{"name": k, "value": v} for k, v in (configs or {}).items()],
            }],
            "timeout_ms": timeout_ms,
            "validate_only": False,
        }
        result = self.request(CREATE_TOPICS, body, node=self.controller()).topics[0]
        check(result.error_code, result.error_message)

    def delete_topics(self, names: list[str], timeout_ms: int = 30000) -> dict[str, KafkaError | None]:
        """Delete topics by name; the error (or None) of each."""
        body = {"topic_names": names, "topics": [{"name": n, "topic_id": ZERO_UUID} for n in names],
                "timeout_ms": timeout_ms}
        response = self.request(DELETE_TOPICS, body, node=self.controller())
        return {r.name: error_for(r.error_code, r.error_message) if r.error_code else None
                for r in response.responses}

    def create_partitions(self, topic: str, count: int, timeout_ms: int = 30000) -> None:
        """Grow `topic` to `count` partitions in total."""
        body = {"topics": [{"name": topic, "count": count, "assignments": None}],
                "timeout_ms": timeout_ms, "validate_only": False}
        result = self.request(CREATE_PARTITIONS, body, node=self.controller()).results[0]
        check(result.error_code, result.error_message)

    def describe_configs(self, resource_type: int, name: str) -> list[ConfigEntry]:
        """Every config of a topic, broker ("" for the broker defaults) or group, with synonyms."""
        body = {"resources": [{"resource_type": resource_type, "resource_name": name,
                               "configuration_keys": None}],
                "include_synonyms": True, "include_documentation": False}
        result = self.request(DESCRIBE_CONFIGS, body, node=_broker_node(resource_type, name)).results[0]
        check(result.error_code, result.error_message)
        return [
            ConfigEntry(c.name, c.value, _config_source(c), c.read_only, c.is_sensitive,
                        [(s.name, s.value, s.source) for s in c.synonyms])
            for c in result.configs
        ]

    def incremental_alter_configs(self, resource_type: int, name: str,
                                  operations: list[tuple[str, int, str | None]]) -> None:
        """Apply (config name, SET/DELETE/APPEND/SUBTRACT, value) operations to one resource."""
        body = {"resources": [{"resource_type": resource_type, "resource_name": name,
                               "configs": [{"name": k, "config_operation": op, "value": v}
                                           for k, op, v in operations]}],
                "validate_only": False}
        node = _broker_node(resource_type, name)
        result = self.request(INCREMENTAL_ALTER_CONFIGS, body, node=node).responses[0]
        check(result.error_code, result.error_message)

    # -- partition placement ----------------------------------------------------------------

    def elect_leaders(self, unclean: bool, partitions: list[tuple[str, int]] | None
                      ) -> dict[tuple[str, int], int]:
        """ElectLeaders (preferred, or unclean) for `partitions` (None: all); error code per partition."""
        topics: dict[str, list[int]] | None = None
        if partitions is not None:
            topics = {}
            for topic, index in partitions:
                topics.setdefault(topic, []).append(index)
        body = {"election_type": 1 if unclean else 0, "timeout_ms": int(self.timeout * 1000),
                "topic_partitions": None if topics is None else
                [{"topic": t, "partitions": ps} for t, ps in topics.items()]}
        controller = self.controller()
        response = self.request(ELECT_LEADERS, body, node=controller)
        check(response.error_code, context="ElectLeaders")
        return {(t.topic, r.partition_id): r.error_code for t in response.replica_election_results
                for r in t.partition_result}

    def alter_partition_reassignments(self, targets: dict[tuple[str, int], list[int] | None]
                                      ) -> dict[tuple[str, int], int]:
        """Move partitions to these replicas (None cancels); error code per partition."""
        topics: dict[str, list[dict[str, Any]]] = {}
        for (topic, index), replicas in targets.items():
            topics.setdefault(topic, []).append({"partition_index": index, "replicas": replicas})
        body = {"timeout_ms": int(self.timeout * 1000),
                "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]}
        response = self.request(ALTER_PARTITION_REASSIGNMENTS, body, node=self.controller())
        check(response.error_code, response.error_message, "AlterPartitionReassignments")
        return {(t.name, p.partition_index): p.error_code for t in response.responses for p in t.partitions}

    def list_partition_reassignments(self) -> dict[tuple[str, int], tuple[list[int], list[int], list[int]]]:
        """(replicas, adding, removing) of the reassignments in progress, from every broker."""
        ongoing = {}
        for node in sorted(self.metadata(refresh=True).brokers):
            response = self.request(LIST_PARTITION_REASSIGNMENTS, {"timeout_ms": 30000, "topics": None}, node=node)
            check(response.error_code, response.error_message, "ListPartitionReassignments")
            ongoing.update({(t.name, p.partition_index): (list(p.replicas), list(p.adding_replicas),
                                                          list(p.removing_replicas))
                            for t in response.topics for p in t.partitions})
        return ongoing

    def replica_sizes(self, node: int) -> dict[tuple[str, int], int]:
        """Bytes on disk of each partition replica `node` keeps (DescribeLogDirs of all topics);
        a replica being moved between its log dirs counts once, in its current dir."""
        response = self.request(DESCRIBE_LOG_DIRS, {"topics": None}, node=node)
        sizes: dict[tuple[str, int], int] = {}
        for result in response.results:
            if result.error_code:
                continue  # an offline log dir: its replicas have no size to show
            for topic in result.topics:
                for p in topic.partitions:
                    if not p.is_future_key:
                        sizes[(topic.name, p.partition_index)] = p.partition_size
        return sizes


class AclAdmin(ClusterClient):
    """CreateAcls, DescribeAcls, DeleteAcls. Bindings and filters are the wire's dicts (codes of
    Kafka's ResourceType, PatternType, AclOperation, AclPermissionType)."""

    def create_acls(self, creations: list[dict[str, Any]]) -> list[KafkaError | None]:
        response = self.request(CREATE_ACLS, {"creations": creations})
        return [error_for(r.error_code, r.error_message) if r.error_code else None for r in response.results]

    def describe_acls(self, acl_filter: dict[str, Any]) -> list[Container]:
        """The resources (type, name, pattern type) with their matching ACLs; raises the error."""
        response = self.request(DESCRIBE_ACLS, acl_filter)
        check(response.error_code, response.error_message)
        return list(response.resources)

    def delete_acls(self, filters: list[dict[str, Any]]) -> list[Container]:
        """Per filter, its error code and the ACLs it removed."""
        return list(self.request(DELETE_ACLS, {"filters": filters}).filter_results)


def _broker_node(resource_type: int, name: str) -> int | None:
    """A broker's own configs are described and altered on that broker, as Kafka requires."""
    if resource_type == BROKER_RESOURCE and name.isdigit():
        return int(name)
    return None


def _config_source(entry: Container) -> int:
    # DescribeConfigs v0 has no config_source, only is_default.
    if entry.config_source == -1:
        return 5 if entry.is_default else 0
    return entry.config_source
