"""Kafka's znode layout in ZooKeeper: the paths and their JSON documents.

The layout and JSON are Kafka's (`kafka.zk.ZkData`), so an operator's habits (`zkCli.sh get
/controller`, `ls /brokers/ids`) work on a kbroker cluster:

    /cluster/id                                   {"version":"1","id":"<cluster id>"}
    /controller                      ephemeral    {"version":2,"brokerid":1,"timestamp":"...","kraftControllerEpoch":-1}
    /controller_epoch                             "3" (plain decimal)
    /brokers/ids/<id>                ephemeral    {"version":5,"host":..,"port":..,"endpoints":["PLAINTEXT://h:p"],
                                                   "listener_security_protocol_map":{..},"jmx_port":-1,
                                                   "features":{},"timestamp":"..."[,"rack":..]}
    /brokers/topics/<topic>                       {"version":3,"topic_id":"<base64 uuid>","partitions":{"0":[1,2]},
                                                   "adding_replicas":{},"removing_replicas":{}}
    /brokers/topics/<topic>/partitions/<p>/state  {"controller_epoch":..,"leader":..,"version":1,
                                                   "leader_epoch":..,"isr":[..]}
    /config/topics/<topic>                        {"version":1,"config":{..}}
    /config/brokers/<id>|<default>                {"version":1,"config":{..}}
    /config/users/<sanitized user>                {"version":1,"config":{"SCRAM-SHA-256":"salt=..,stored_key=..,.."}}
    /config/users/<user>/clients/<client-id>      {"version":1,"config":{"producer_byte_rate":"1024"}}  (quotas;
    /config/clients/<sanitized client-id>         {"version":1,"config":{..}}   <default> names a default)
    /config/groups/<sanitized group>              {"version":1,"config":{"share.auto.offset.reset":"earliest"}}
    /config/changes/config_change_<seq>           {"version":2,"entity_path":"topics/<topic>"}
    /kafka-acl/<ResourceType>/<name>              {"version":1,"acls":[{"principal","permissionType",
                                                   "operation","host"}]}  (LITERAL patterns)
    /kafka-acl-extended/prefixed/<ResourceType>/<name>                      (PREFIXED patterns)
    /kafka-acl-changes/acl_changes_<seq>          "Topic:<name>" (a LITERAL pattern changed)
    /kafka-acl-extended-changes/acl_changes_<seq> {"version":1,"resourceType":"Topic","name":..,
                                                   "patternType":"PREFIXED"}

Under /kbroker, znodes of kbroker's own, not Kafka's (a Kafka broker neither reads nor writes
them; Kafka has no such znodes):

    /kbroker/remote_log/<topic>/<partition>       the archive's remote log metadata of a partition
                                                  (Kafka keeps it in the __remote_log_metadata topic):
                                                  the archive's JSON document, written with
                                                  compare-and-set on the znode version; kept when the
                                                  topic is deleted, until its archived objects are gone
"""

from __future__ import annotations

import base64
import json
import logging
import re
import uuid
from collections.abc import Mapping
from typing import Any

from kbroker.metadata.store import BrokerEndpoint, BrokerRegistration, PartitionState, TopicRecord
from kbroker.security.acl import (
    PatternType,
    ResourcePattern,
    parse_pattern_type,
    parse_resource_type,
    resource_type_name,
)
from protocol.errors import ErrorCode, KafkaError

log = logging.getLogger("kbroker.metadata.zk")

CLUSTER_ID_PATH = "/cluster/id"
CONTROLLER_PATH = "/controller"
CONTROLLER_EPOCH_PATH = "/controller_epoch"
BROKER_IDS_PATH = "/brokers/ids"
TOPICS_PATH = "/brokers/topics"
CONFIG_ROOT = "/config"
TOPIC_CONFIGS_PATH = "/config/topics"
BROKER_CONFIGS_PATH = "/config/brokers"
USER_CONFIGS_PATH = "/config/users"
# Kafka's ConfigType.GROUP entity ("groups"); Kafka 3.8+ keeps group configs in KRaft only, so
# this path follows the layout of the other entities.
GROUP_CONFIGS_PATH = "/config/groups"
CONFIG_CHANGES_PATH = "/config/changes"
CONFIG_CHANGE_PREFIX = "config_change_"
DELETE_TOPICS_PATH = "/admin/delete_topics"
# ACLs as Kafka's ZkAclStore keeps them: literal patterns, prefixed ones, and their change queues.
LITERAL_ACL_PATH = "/kafka-acl"
PREFIXED_ACL_PATH = "/kafka-acl-extended/prefixed"
LITERAL_ACL_CHANGES_PATH = "/kafka-acl-changes"
PREFIXED_ACL_CHANGES_PATH = "/kafka-acl-extended-changes"
ACL_CHANGE_PREFIX = "acl_changes_"
# The persistent paths a Kafka broker creates at start (those kbroker uses).
TOP_LEVEL_PATHS = (BROKER_IDS_PATH, TOPICS_PATH, TOPIC_CONFIGS_PATH, BROKER_CONFIGS_PATH, CONFIG_CHANGES_PATH,
                   DELETE_TOPICS_PATH, LITERAL_ACL_PATH, PREFIXED_ACL_PATH, LITERAL_ACL_CHANGES_PATH,
                   PREFIXED_ACL_CHANGES_PATH)
# kbroker's own znodes (not Kafka's): created on first use, never by a Kafka broker.
KBROKER_ROOT = "/kbroker"
REMOTE_LOG_PATH = f"{KBROKER_ROOT}/remote_log"
CLUSTER_DEFAULT = "<default>"
# Kafka's brokers purge change notifications older than this (changeExpirationMs).
CONFIG_CHANGE_EXPIRATION_MS = 15 * 60 * 1000
LEGAL_TOPIC = re.compile(r"[a-zA-Z0-9._-]+")


def topic_path(topic: str) -> str:
    return f"{TOPICS_PATH}/{topic}"


def partition_state_path(topic: str, partition: int) -> str:
    return f"{TOPICS_PATH}/{topic}/partitions/{partition}/state"


def remote_logs_path(topic: str) -> str:
    """The parent of a topic's remote log documents, one child per partition."""
    return f"{REMOTE_LOG_PATH}/{topic}"


def remote_log_path(topic: str, partition: int) -> str:
    return f"{REMOTE_LOG_PATH}/{topic}/{partition}"


def broker_path(broker_id: int) -> str:
    return f"{BROKER_IDS_PATH}/{broker_id}"


def encode_json(document: Mapping[str, Any]) -> bytes:
    return json.dumps(document, separators=(",", ":")).encode()


def legal_topic(topic: str) -> bool:
    """Names that are one path segment; anything else cannot be a topic (and must not be let
    near a path: "a/partitions" would read another topic's subtree)."""
    return bool(LEGAL_TOPIC.fullmatch(topic)) and topic not in (".", "..")


def config_entity(broker_id: int | None) -> str:
    return CLUSTER_DEFAULT if broker_id is None else str(broker_id)


def change_sequence(child: str, prefix: str = CONFIG_CHANGE_PREFIX) -> int:
    suffix = child[len(prefix):] if child.startswith(prefix) else ""
    return int(suffix) if suffix.isdigit() else -1


def kafka_uuid(topic_id: uuid.UUID) -> str:
    """Kafka's Uuid.toString: URL-safe base64 of the 16 bytes, without padding."""
    return base64.urlsafe_b64encode(topic_id.bytes).decode().rstrip("=")


def parse_kafka_uuid(text: str) -> uuid.UUID:
    return uuid.UUID(bytes=base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))


def encode_topic(topic_id: uuid.UUID, assignment: Mapping[int, list[int]]) -> bytes:
    return encode_json({
        "version": 3,
        "topic_id": kafka_uuid(topic_id),
        "partitions": {str(p): list(r) for p, r in sorted(assignment.items())},
        "adding_replicas": {},
        "removing_replicas": {},
    })


def decode_topic(name: str, document: dict[str, Any], config: dict[str, Any] | None, version: int) -> TopicRecord:
    topic_id = document.get("topic_id")
    return TopicRecord(
        name=name,
        # A topic written by a Kafka older than 2.8 has no id: give it a stable one.
        topic_id=parse_kafka_uuid(topic_id) if topic_id else uuid.uuid5(uuid.NAMESPACE_URL, f"kafka-topic:{name}"),
        assignment={int(p): list(r) for p, r in document.get("partitions", {}).items()},
        configs={k: str(v) for k, v in ((config or {}).get("config") or {}).items()},
        version=version,
    )


def encode_state(state: PartitionState) -> bytes:
    return encode_json({"controller_epoch": state.controller_epoch, "leader": state.leader, "version": 1,
                    "leader_epoch": state.leader_epoch, "isr": list(state.isr)})


def decode_state(document: dict[str, Any], version: int) -> PartitionState:
    return PartitionState(
        leader=int(document["leader"]),
        leader_epoch=int(document["leader_epoch"]),
        isr=[int(b) for b in document["isr"]],
        controller_epoch=int(document["controller_epoch"]),
        version=version,
    )


def encode_broker(registration: BrokerRegistration) -> bytes:
    # Like Kafka: the top-level host/port (for old clients) are those of the first PLAINTEXT endpoint.
    plaintext = next((e for e in registration.endpoints if e.security_protocol == "PLAINTEXT"), None)
    document: dict[str, Any] = {
        "features": {},
        "listener_security_protocol_map": {e.listener: e.security_protocol for e in registration.endpoints},
        "endpoints": [f"{e.listener}://{bracket(e.host)}:{e.port}" for e in registration.endpoints],
        "jmx_port": -1,
        "port": plaintext.port if plaintext else -1,
        "host": plaintext.host if plaintext else None,
        "version": 5,
        "timestamp": str(registration.timestamp_ms),
    }
    if registration.rack is not None:
        document["rack"] = registration.rack
    return encode_json(document)


def decode_broker(broker_id: int, document: dict[str, Any]) -> BrokerRegistration:
    protocols = document.get("listener_security_protocol_map") or {}
    endpoints = []
    for text in document.get("endpoints", []):
        match = re.fullmatch(r"([A-Za-z0-9_]+)://(\[[^\]]*\]|[^:]*):(-?\d+)", text)
        if match is None:
            log.warning("broker %d: cannot parse endpoint %r", broker_id, text)
            continue
        listener = match.group(1)
        endpoints.append(BrokerEndpoint(listener, match.group(2).strip("[]"), int(match.group(3)),
                                        protocols.get(listener, listener)))
    return BrokerRegistration(broker_id, tuple(endpoints), document.get("rack"), int(document.get("timestamp", 0)))


def bracket(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def acl_path(pattern: ResourcePattern) -> str:
    """The znode of a pattern's ACLs. A name that is not one path segment cannot be stored
    there (it would name another znode): refused as Kafka's InvalidRequestException would."""
    if "/" in pattern.name or pattern.name in (".", "..") or "\x00" in pattern.name:
        raise KafkaError(ErrorCode.INVALID_REQUEST, f"resource name {pattern.name!r} cannot be stored in ZooKeeper")
    root = LITERAL_ACL_PATH if pattern.pattern_type == PatternType.LITERAL else PREFIXED_ACL_PATH
    return f"{root}/{resource_type_name(pattern.resource_type)}/{pattern.name}"


def decode_acl_change(root: str, data: bytes) -> ResourcePattern:
    if root == LITERAL_ACL_CHANGES_PATH:
        type_name, sep, name = data.decode().partition(":")
        if not sep:
            raise ValueError("no resource type")
        return ResourcePattern(parse_resource_type(type_name), name, PatternType.LITERAL)
    try:
        document = json.loads(data)
        return ResourcePattern(parse_resource_type(document["resourceType"]), str(document["name"]),
                               parse_pattern_type(document["patternType"]))
    except (KeyError, TypeError, json.JSONDecodeError) as e:
        raise ValueError(str(e)) from None
