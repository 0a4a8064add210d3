"""Broker configuration: Kafka's `server.properties` names, defaults and synonyms.

Topic-level settings have broker-level defaults under other names (`log.retention.ms` is the
default of `retention.ms`); `TOPIC_CONFIG_SYNONYMS` maps one to the other, in Kafka's order of
precedence. Unknown properties are logged and ignored, as Kafka does.
"""

from __future__ import annotations

import logging
import os
import re
import socket
import tempfile
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kbroker.kafka_configs import DYNAMIC_BROKER_CONFIGS, DYNAMIC_DEFAULTS
from kbroker.metrics.listener import parse_metrics_listener
from kbroker.properties import parse_properties
from kbroker.security import sasl_config, tls
from kbroker.security.sasl_config import SaslConfigError, SaslCredentials, SaslListenerSettings
from kbroker.security.tls import TlsConfigError, TlsSettings
from kbroker.storage.encryption import KeyFileError, Keyring, load_key_file
from kbroker.storage.log_config import TOPIC_CONFIG_DEFAULTS, LogConfig
from protocol.errors import KafkaError

log = logging.getLogger("kbroker.config")



# Sources of broker config values, strongest first: (source name, values).
Layers = list[tuple[str, Mapping[str, "str | None"]]]


class ConfigError(Exception):
    """A configuration the broker cannot start with."""


@dataclass(frozen=True, slots=True)
class ConfigDef:
    name: str
    parse: Callable[[str], Any]
    default: str | None
    doc: str

    @property
    def dynamic(self) -> bool:
        """Changeable at run time through AlterConfigs, as in Kafka (KIP-226)."""
        return self.name in DYNAMIC_BROKER_CONFIGS


def _int(text: str) -> int:
    return int(text.strip())


def _percent(text: str) -> int:
    value = int(text.strip())
    if not 1 <= value <= 100:
        raise ValueError("expected 1 to 100")
    return value


def _bool(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered not in ("true", "false"):
        raise ValueError(f"expected true or false, got {text!r}")
    return lowered == "true"


def _str(text: str) -> str:
    return text.strip()


def _list(text: str) -> list[str]:
    return [item.strip() for item in text.split(",") if item.strip()]


# group.consumer.migration.policy's values (the coordinator's MigrationPolicy; config sits below it).
MIGRATION_POLICIES = ("bidirectional", "upgrade", "downgrade", "disabled")


def _migration_policy(text: str) -> str:
    value = text.strip().lower()
    if value not in MIGRATION_POLICIES:
        raise ValueError(f"{text!r}: expected one of {', '.join(MIGRATION_POLICIES)}")
    return value


_DEFS = [
    ConfigDef("broker.id", _int, "0", "The id of this broker (node.id is a synonym)."),
    ConfigDef("node.id", _int, None, "Synonym of broker.id."),
    ConfigDef("listeners", _str, "PLAINTEXT://127.0.0.1:9092", "Addresses to listen on."),
    ConfigDef("advertised.listeners", _str, None, "Addresses clients are told to use (default: listeners)."),
    ConfigDef("listener.security.protocol.map", _str, "PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL",
              "Listener name -> security protocol; PLAINTEXT and SSL are served."),
    ConfigDef("inter.broker.listener.name", _str, None,
              "The listener other brokers reach this one on (replication, transaction markers)."),
    ConfigDef("security.inter.broker.protocol", _str, "PLAINTEXT",
              "Instead of inter.broker.listener.name: the listener named after this protocol."),
    ConfigDef("log.dirs", _str, None, "Directories holding partition logs (comma separated)."),
    ConfigDef("log.dir", _str, os.path.join(tempfile.gettempdir(), "kbroker-logs"), "Used when log.dirs is unset."),
    ConfigDef("cluster.id", _str, None, "Cluster id to use when log dirs are new (default: random)."),
    ConfigDef("zookeeper.connect", _str, None, "ZooKeeper connect string; unset runs the embedded single node."),
    ConfigDef("zookeeper.session.timeout.ms", _int, "18000",
              "How long ZooKeeper waits for a broker it lost before its registration goes."),
    ConfigDef("zookeeper.connection.timeout.ms", _int, None,
              "How long a starting broker waits to reach ZooKeeper (default: the session timeout)."),
    ConfigDef("num.partitions", _int, "1", "Partitions of auto-created topics and topics created without a count."),
    ConfigDef("default.replication.factor", _int, "1", "Replication factor of auto-created topics."),
    # Authorization (docs/security.md, "Authorization").
    ConfigDef("authorizer.class.name", _str, "",
              "Kafka's AclAuthorizer or StandardAuthorizer turns ACLs on (kbroker's authorizer decides as they do); "
              "empty: every request is allowed. Any other class refuses the start."),
    ConfigDef("auto.create.topics.enable", _bool, "true", "Create a topic when Metadata asks for an unknown one."),
    ConfigDef("delete.topic.enable", _bool, "true", "Allow DeleteTopics."),
    ConfigDef("socket.request.max.bytes", _int, "104857600", "Largest request frame accepted."),
    # Connections and the memory requests may hold (see docs/operations.md).
    ConfigDef("max.connections", _int, "2147483647",
              "Connections the broker keeps at once; at the limit it stops accepting until one closes."),
    ConfigDef("max.connections.per.ip", _int, "2147483647",
              "Connections one client address may hold; more are closed at once."),
    ConfigDef("max.connections.per.ip.overrides", _str, "",
              "Per-address limits, host:count,host:count, overriding max.connections.per.ip."),
    ConfigDef("max.connection.creation.rate", _int, "2147483647",
              "New connections per second the broker accepts, measured over the quota windows; over it "
              "accepting waits (KIP-612)."),
    ConfigDef("connections.max.idle.ms", _int, "600000",
              "A connection with no bytes either way for this long is closed."),
    ConfigDef("socket.request.read.timeout.ms", _int, "30000",
              "A request whose first bytes arrived must be complete within this long, or the connection "
              "is closed (a client trickling bytes cannot hold a connection and its buffers forever)."),
    ConfigDef("connection.failed.authentication.delay.ms", _int, "100",
              "How long a connection whose SASL authentication failed waits before its answer and its close "
              "(slows down password guessing, KIP-306)."),
    ConfigDef("socket.request.max.entries", _int, "100000",
              "Array entries (topics, partitions, groups...) one request may hold in all; a request with more "
              "is refused and its connection closed (kbroker's own: each entry costs Python objects)."),
    ConfigDef("queued.max.request.bytes", _int, "536870912",
              "Bytes of requests held at once across all connections; at the limit sockets are not "
              "read until memory is freed (-1: no limit, Kafka's default)."),
    ConfigDef("quota.window.num", _int, "11",
              "Samples kept to measure a client's rate against its quota (docs/operations.md, \"Quotas\")."),
    ConfigDef("quota.window.size.seconds", _int, "1", "The time span of each quota sample."),
    ConfigDef("controller.quota.window.num", _int, "11",
              "Samples of the controller mutation quota: a client's burst of partitions created or deleted is "
              "this many windows' worth of its controller_mutation_rate (docs/operations.md, \"Quotas\")."),
    ConfigDef("controller.quota.window.size.seconds", _int, "1",
              "The time span of each controller mutation quota sample."),
    # Monitoring (docs/operations.md, "Metrics").
    ConfigDef("metrics.listener", parse_metrics_listener, "",  # a bad value: ConfigError at start
              "Where Prometheus scrapes the broker's metrics, http://host:port (served at /metrics; an empty "
              "host or 0.0.0.0 is every interface); empty: no metrics endpoint (kbroker's own)."),
    ConfigDef("log.retention.check.interval.ms", _int, "300000", "How often retention runs."),
    ConfigDef("log.cleaner.enable", _bool, "true", "Run compaction for cleanup.policy=compact topics."),
    ConfigDef("log.encryption.key.file", _str, None,
              "Encryption at rest: a file of `<key id>:<base64 of 32 bytes>` lines; the last key encrypts new "
              "record batches, every key decrypts (kbroker's own; see docs/security.md)."),
    # The archive: tiered storage in an S3-compatible object store (docs/archive.md).
    ConfigDef("remote.log.storage.system.enable", _bool, "false",
              "Archive closed segments of topics with remote.storage.enable=true to the object store below."),
    ConfigDef("remote.log.manager.task.interval.ms", _int, "30000", "How often the archive copies and expires."),
    ConfigDef("log.local.retention.ms", _int, "-2",
              "Default local.retention.ms of tiered topics (-2: the total retention's)."),
    ConfigDef("log.local.retention.bytes", _int, "-2",
              "Default local.retention.bytes of tiered topics (-2: the total retention's)."),
    ConfigDef("remote.log.manager.task.retry.backoff.ms", _int, "500",
              "First wait before a partition's failed archiving is tried again (then doubled)."),
    ConfigDef("remote.log.manager.task.retry.backoff.max.ms", _int, "30000",
              "Longest wait between tries of a partition's failed archiving."),
    ConfigDef("remote.log.manager.thread.pool.size", _int, "10",
              "Deprecated in Kafka: the copier pool's size when remote.log.manager.copier.thread.pool.size is -1."),
    ConfigDef("remote.log.manager.copier.thread.pool.size", _int, "-1",
              "Partitions the archive copies and expires at once, and threads for their uploads "
              "(-1: remote.log.manager.thread.pool.size)."),
    ConfigDef("remote.log.reader.threads", _int, "10", "Threads for consumers' reads of the archive."),
    ConfigDef("remote.log.index.file.cache.total.size.bytes", _int, "1073741824",
              "Local disk for chunks and indexes of archived segments read by consumers (in the first log dir)."),
    ConfigDef("remote.log.storage.s3.endpoint", _str, None,
              "The S3-compatible service's URL; unset: AWS S3 (kbroker's own)."),
    ConfigDef("remote.log.storage.s3.bucket", _str, None, "The archive's bucket (kbroker's own)."),
    ConfigDef("remote.log.storage.s3.prefix", _str, "", "Key prefix of the archive's objects (kbroker's own)."),
    ConfigDef("remote.log.storage.s3.region", _str, "us-east-1", "The bucket's region (kbroker's own)."),
    ConfigDef("remote.log.storage.s3.access.key.id", _str, None,
              "Credentials; unset: boto3's default chain, e.g. AWS_ACCESS_KEY_ID (kbroker's own)."),
    ConfigDef("remote.log.storage.s3.secret.access.key", _str, None, "Goes with the access key id (kbroker's own)."),
    ConfigDef("log.cleaner.backoff.ms", _int, "15000", "Pause between compaction passes."),
    ConfigDef("log.flush.offset.checkpoint.interval.ms", _int, "60000", "How often recovery points are saved."),
    ConfigDef("log.initial.task.delay.ms", _int, "30000",
              "How long after start retention, flush.ms flushes, the recovery-point and log-start-offset "
              "checkpoints and the removal of deleted partitions first run (Kafka: for testing only)."),
    ConfigDef("log.flush.scheduler.interval.ms", _int, "9223372036854775807", "Kept for compatibility."),
    ConfigDef("log.flush.rolled.busy.percent", _percent, "10",
              "Share of the time a rolled segment's writeback keeps the disk busy before its fsync; "
              "100: one fsync at once, as Kafka (kbroker's own, docs/operations.md)."),
    # Consumer groups and committed offsets.
    ConfigDef("group.initial.rebalance.delay.ms", _int, "3000", "How long a new group waits for more members."),
    ConfigDef("group.min.session.timeout.ms", _int, "6000", "Smallest session timeout a member may ask for."),
    ConfigDef("group.max.session.timeout.ms", _int, "1800000", "Largest session timeout a member may ask for."),
    ConfigDef("group.max.size", _int, "2147483647", "Most members one group may have."),
    # The consumer group protocol (KIP-848, docs/groups.md).
    ConfigDef("group.coordinator.rebalance.protocols", _list, "classic,consumer",
              "Group protocols served; without consumer, ConsumerGroupHeartbeat answers UNSUPPORTED_VERSION."),
    ConfigDef("group.consumer.heartbeat.interval.ms", _int, "5000", "How often consumer-protocol members heartbeat."),
    ConfigDef("group.consumer.min.heartbeat.interval.ms", _int, "5000", "Lower bound of the heartbeat interval."),
    ConfigDef("group.consumer.max.heartbeat.interval.ms", _int, "15000", "Upper bound of the heartbeat interval."),
    ConfigDef("group.consumer.session.timeout.ms", _int, "45000",
              "How long a consumer-protocol member may go without a heartbeat before it is fenced."),
    ConfigDef("group.consumer.min.session.timeout.ms", _int, "45000", "Lower bound of the session timeout."),
    ConfigDef("group.consumer.max.session.timeout.ms", _int, "60000", "Upper bound of the session timeout."),
    ConfigDef("group.consumer.max.size", _int, "2147483647", "Most members one consumer-protocol group may have."),
    ConfigDef("group.consumer.assignors", _list, "uniform,range",
              "Server-side assignors (uniform, range, or Kafka's class names); the first is the default."),
    ConfigDef("group.consumer.regex.refresh.interval.ms", _int, "600000",
              "How often subscription regexes are resolved again even when no topic was created or deleted."),
    ConfigDef("group.consumer.migration.policy", _migration_policy, "bidirectional",
              "Whether a group with members changes protocol online: bidirectional, upgrade (classic to "
              "consumer only), downgrade (consumer to classic only) or disabled (empty groups always may)."),
    # Share groups (KIP-932, docs/share-groups.md).
    ConfigDef("group.share.enable", _bool, "true", "Serve share groups (KIP-932): advertise their APIs."),
    ConfigDef("group.share.session.timeout.ms", _int, "45000", "A share group member's session timeout."),
    ConfigDef("group.share.heartbeat.interval.ms", _int, "5000", "How often share group members heartbeat."),
    ConfigDef("group.share.max.size", _int, "200", "Most members one share group may have."),
    ConfigDef("group.share.record.lock.duration.ms", _int, "30000",
              "How long a share consumer holds an acquired record before it is redelivered."),
    ConfigDef("group.share.delivery.count.limit", _int, "5",
              "Deliveries of a record to share consumers before it is archived."),
    ConfigDef("group.share.partition.max.record.locks", _int, "2000",
              "Most records in flight (acquired, or released and not yet redelivered) per share partition."),
    ConfigDef("group.share.max.share.sessions", _int, "2000", "Most share sessions this broker keeps."),
    ConfigDef("share.coordinator.state.topic.num.partitions", _int, "50",
              "Partitions of __share_group_state, where share-partition state is kept (set before first use)."),
    ConfigDef("share.coordinator.state.topic.replication.factor", _int, "3",
              "Replication factor of __share_group_state (one node: its one replica)."),
    ConfigDef("share.coordinator.state.topic.min.isr", _int, "2",
              "min.insync.replicas of __share_group_state (at most its replication factor)."),
    ConfigDef("share.coordinator.state.topic.segment.bytes", _int, "104857600",
              "Segment size of __share_group_state."),
    ConfigDef("share.coordinator.snapshot.update.records.per.snapshot", _int, "500",
              "ShareUpdate records the share coordinator writes per share partition between snapshots."),
    ConfigDef("share.coordinator.write.timeout.ms", _int, "5000",
              "How long a share-state write waits for every in-sync replica of __share_group_state."),
    # Bounds of the share group configs a group may set (kafka-configs.sh --entity-type groups).
    ConfigDef("group.share.min.session.timeout.ms", _int, "45000", "Lower bound of share.session.timeout.ms."),
    ConfigDef("group.share.max.session.timeout.ms", _int, "60000", "Upper bound of share.session.timeout.ms."),
    ConfigDef("group.share.min.heartbeat.interval.ms", _int, "5000", "Lower bound of share.heartbeat.interval.ms."),
    ConfigDef("group.share.max.heartbeat.interval.ms", _int, "15000", "Upper bound of share.heartbeat.interval.ms."),
    ConfigDef("group.share.min.record.lock.duration.ms", _int, "15000",
              "Lower bound of share.record.lock.duration.ms."),
    ConfigDef("group.share.max.record.lock.duration.ms", _int, "60000",
              "Upper bound of share.record.lock.duration.ms."),
    ConfigDef("group.share.min.delivery.count.limit", _int, "2", "Lower bound of share.delivery.count.limit."),
    ConfigDef("group.share.max.delivery.count.limit", _int, "10", "Upper bound of share.delivery.count.limit."),
    ConfigDef("errors.deadletterqueue.auto.create.topics.enable", _bool, "false",
              "Create a share group's missing dead-letter topic (KIP-1191) on its first dead letter."),
    ConfigDef("errors.deadletterqueue.topic.name.prefix", _str, "dlq.",
              "Dead-letter topics of share groups must start with this (empty: any name)."),
    ConfigDef("group.share.min.partition.max.record.locks", _int, "100",
              "Lower bound of share.partition.max.record.locks."),
    ConfigDef("group.share.max.partition.max.record.locks", _int, "4000",
              "Upper bound of share.partition.max.record.locks."),
    ConfigDef("offsets.topic.num.partitions", _int, "50", "Partitions of __consumer_offsets (set before first use)."),
    ConfigDef("offsets.topic.replication.factor", _int, "3",
              "Replication factor of __consumer_offsets (at most the number of brokers alive)."),
    ConfigDef("offsets.topic.segment.bytes", _int, "104857600", "Segment size of __consumer_offsets."),
    ConfigDef("offsets.retention.minutes", _int, "10080", "How long offsets of an empty group are kept."),
    ConfigDef("offsets.retention.check.interval.ms", _int, "600000", "How often expired offsets are removed."),
    ConfigDef("offset.metadata.max.bytes", _int, "4096", "Largest metadata string of a committed offset."),
    # Transactions.
    ConfigDef("transaction.state.log.num.partitions", _int, "50", "Partitions of __transaction_state."),
    ConfigDef("transaction.state.log.replication.factor", _int, "3",
              "Replication factor of __transaction_state (at most the number of brokers alive)."),
    ConfigDef("transaction.state.log.segment.bytes", _int, "104857600", "Segment size of __transaction_state."),
    ConfigDef("transaction.max.timeout.ms", _int, "900000", "Largest transaction timeout a producer may ask for."),
    ConfigDef("transaction.abort.timed.out.transaction.cleanup.interval.ms", _int, "10000",
              "How often transactions open past their timeout are aborted."),
    # Replication.
    ConfigDef("replica.lag.time.max.ms", _int, "30000",
              "A follower that has not caught up with its leader for this long leaves the ISR."),
    ConfigDef("replica.fetch.wait.max.ms", _int, "500", "Longest a follower's fetch waits for data."),
    ConfigDef("replica.alter.log.dirs.io.max.bytes.per.second", _int, "9223372036854775807", "Pace of copying a replica to another log dir (AlterReplicaLogDirs)."),
    ConfigDef("replica.fetch.min.bytes", _int, "1", "Least data a follower's fetch waits for."),
    ConfigDef("replica.fetch.max.bytes", _int, "1048576", "Bytes a follower fetches per partition."),
    ConfigDef("replica.fetch.response.max.bytes", _int, "10485760", "Bytes a follower fetches per request."),
    ConfigDef("replica.fetch.backoff.ms", _int, "1000", "How long a follower waits after a failed fetch."),
    ConfigDef("max.incremental.fetch.session.cache.slots", _int, "1000",
              "Incremental fetch sessions (KIP-227) the broker keeps; 0 turns them off."),
    ConfigDef("broker.rack", _str, None, "The rack of this broker: replicas of a partition go to different racks."),
    ConfigDef("unclean.leader.election.enable", _bool, "false",
              "Elect a replica outside the ISR when no in-sync replica is alive (may lose data)."),
    ConfigDef("auto.leader.rebalance.enable", _bool, "true",
              "The controller moves leadership back to preferred replicas when too many are led elsewhere."),
    ConfigDef("leader.imbalance.check.interval.seconds", _int, "300", "How often leader imbalance is checked."),
    ConfigDef("leader.imbalance.per.broker.percentage", _int, "10",
              "The share of a broker's preferred partitions led elsewhere that triggers a rebalance."),
    ConfigDef("producer.id.expiration.ms", _int, "86400000", "How long an idle producer's state is kept."),
    ConfigDef("producer.id.expiration.check.interval.ms", _int, "600000",
              "How often producers idle for producer.id.expiration.ms are forgotten."),
    ConfigDef("transaction.partition.verification.enable", _bool, "true",
              "Refuse transactional writes to partitions not added to the producer's transaction (KIP-890)."),
    # Broker-level defaults of topic configs (see TOPIC_CONFIG_SYNONYMS).
    ConfigDef("log.segment.bytes", _int, "1073741824", "Default segment.bytes."),
    ConfigDef("log.roll.ms", _int, None, "Default segment.ms."),
    ConfigDef("log.roll.hours", _int, "168", "Default segment.ms, in hours."),
    ConfigDef("log.roll.jitter.ms", _int, None, "Default segment.jitter.ms."),
    ConfigDef("log.roll.jitter.hours", _int, "0", "Default segment.jitter.ms, in hours."),
    ConfigDef("log.retention.ms", _int, None, "Default retention.ms."),
    ConfigDef("log.retention.minutes", _int, None, "Default retention.ms, in minutes."),
    ConfigDef("log.retention.hours", _int, "336", "Default retention.ms, in hours (two weeks)."),
    ConfigDef("log.retention.bytes", _int, "-1", "Default retention.bytes."),
    ConfigDef("log.cleanup.policy", _str, "delete", "Default cleanup.policy."),
    ConfigDef("log.cleaner.delete.retention.ms", _int, "86400000", "Default delete.retention.ms."),
    ConfigDef("log.cleaner.min.compaction.lag.ms", _int, "0", "Default min.compaction.lag.ms."),
    ConfigDef("log.cleaner.max.compaction.lag.ms", _int, "9223372036854775807", "Default max.compaction.lag.ms."),
    ConfigDef("log.cleaner.min.cleanable.ratio", _str, "0.5", "Default min.cleanable.dirty.ratio."),
    ConfigDef("message.max.bytes", _int, "1048588", "Default max.message.bytes."),
    ConfigDef("log.message.timestamp.type", _str, "CreateTime", "Default message.timestamp.type."),
    ConfigDef("log.message.timestamp.before.max.ms", _int, "9223372036854775807", "Default."),
    ConfigDef("log.message.timestamp.after.max.ms", _int, "3600000", "Default."),
    ConfigDef("log.message.timestamp.difference.max.ms", _int, "9223372036854775807", "Default."),
    ConfigDef("log.flush.interval.messages", _int, "9223372036854775807", "Default flush.messages."),
    ConfigDef("log.flush.interval.ms", _int, None, "Default flush.ms."),
    ConfigDef("log.index.size.max.bytes", _int, "10485760", "Default segment.index.bytes."),
    ConfigDef("log.index.interval.bytes", _int, "4096", "Default index.interval.bytes."),
    ConfigDef("log.segment.delete.delay.ms", _int, "60000", "Default file.delete.delay.ms."),
    ConfigDef("log.preallocate", _bool, "false", "Default preallocate."),
    ConfigDef("compression.type", _str, "producer", "Default compression.type."),
    ConfigDef("min.insync.replicas", _int, "1", "Default min.insync.replicas."),
]
BROKER_CONFIG_DEFS: dict[str, ConfigDef] = {d.name: d for d in _DEFS}
# Built-in defaults: kbroker's, and Kafka's for the dynamic configs kbroker stores but does not use.
BUILT_IN_DEFAULTS: dict[str, str | None] = {**DYNAMIC_DEFAULTS, **{d.name: d.default for d in _DEFS}}

HOUR_MS = 3_600_000
MINUTE_MS = 60_000

# topic config -> broker configs that set its default, highest precedence first, with the
# factor that turns the broker value into the topic's unit.
TOPIC_CONFIG_SYNONYMS: dict[str, list[tuple[str, int]]] = {
    "segment.bytes": [("log.segment.bytes", 1)],
    "segment.ms": [("log.roll.ms", 1), ("log.roll.hours", HOUR_MS)],
    "segment.jitter.ms": [("log.roll.jitter.ms", 1), ("log.roll.jitter.hours", HOUR_MS)],
    "retention.ms": [("log.retention.ms", 1), ("log.retention.minutes", MINUTE_MS), ("log.retention.hours", HOUR_MS)],
    "retention.bytes": [("log.retention.bytes", 1)],
    "local.retention.ms": [("log.local.retention.ms", 1)],
    "local.retention.bytes": [("log.local.retention.bytes", 1)],
    "cleanup.policy": [("log.cleanup.policy", 1)],
    "delete.retention.ms": [("log.cleaner.delete.retention.ms", 1)],
    "min.compaction.lag.ms": [("log.cleaner.min.compaction.lag.ms", 1)],
    "max.compaction.lag.ms": [("log.cleaner.max.compaction.lag.ms", 1)],
    "min.cleanable.dirty.ratio": [("log.cleaner.min.cleanable.ratio", 1)],
    "max.message.bytes": [("message.max.bytes", 1)],
    "message.timestamp.type": [("log.message.timestamp.type", 1)],
    "message.timestamp.before.max.ms": [("log.message.timestamp.before.max.ms", 1)],
    "message.timestamp.after.max.ms": [("log.message.timestamp.after.max.ms", 1)],
    "message.timestamp.difference.max.ms": [("log.message.timestamp.difference.max.ms", 1)],
    "flush.messages": [("log.flush.interval.messages", 1)],
    "flush.ms": [("log.flush.interval.ms", 1)],
    "segment.index.bytes": [("log.index.size.max.bytes", 1)],
    "index.interval.bytes": [("log.index.interval.bytes", 1)],
    "file.delete.delay.ms": [("log.segment.delete.delay.ms", 1)],
    "preallocate": [("log.preallocate", 1)],
    "compression.type": [("compression.type", 1)],
    "min.insync.replicas": [("min.insync.replicas", 1)],
    "unclean.leader.election.enable": [("unclean.leader.election.enable", 1)],
}


# -- security settings kbroker does not honour yet -------------------------------------------------

# A setting that would protect the broker or its data, set by an operator who relies on it, must
# not be ignored: the broker refuses to start instead of serving with less protection than asked
# for. Names as Kafka's KafkaConfig; the list shrinks as each feature is implemented.
UNHONOURED_SECURITY_PREFIXES = (
    "delegation.token.", "password.encoder.", "listener.name.",
    "replication.quota.", "leader.replication.throttled.", "follower.replication.throttled.",
    "zookeeper.ssl.",  # TLS to ZooKeeper: kbroker's ZooKeeper session is plaintext
)
UNHONOURED_SECURITY_NAMES = frozenset({
    "authorizer.class.name", "principal.builder.class",
    "security.providers", "client.quota.callback.class",
    "control.plane.listener.name", "producer.id.quota.window.num",
    # Kafka 2.x's static client quotas, removed in Kafka 3.0 (dynamic `<default>` quotas replace them).
    "quota.producer.default", "quota.consumer.default", "zookeeper.set.acl", "zookeeper.clientCnxnSocket",
})
# Kafka's authorizers, which kbroker's own authorizer stands in for (kbroker/security/acl.py):
# the ZooKeeper-mode AclAuthorizer and KRaft's StandardAuthorizer decide alike.
KAFKA_AUTHORIZERS = frozenset({"kafka.security.authorizer.AclAuthorizer",
                               "org.apache.kafka.metadata.authorizer.StandardAuthorizer"})
# The authorizer's own settings: in Kafka they are the authorizer's, not KafkaConfig's, so
# DescribeConfigs does not list them (BrokerConfig.super_users / allow_everyone_if_no_acl_found).
AUTHORIZER_SETTINGS = frozenset({"super.users", "allow.everyone.if.no.acl.found"})
# Values that ask for nothing beyond what kbroker does: no authorizer or Kafka's, no SASL between brokers.
_HARMLESS_VALUES = {
    "authorizer.class.name": {"", *KAFKA_AUTHORIZERS},
    "security.inter.broker.protocol": {"PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"},
    "zookeeper.ssl.client.enable": {"false"},
    "zookeeper.set.acl": {"false"},
}
# Kafka's default mapping of listener names to security protocols.
DEFAULT_SECURITY_PROTOCOL_MAP = {name: name for name in ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")}
SUPPORTED_SECURITY_PROTOCOLS = frozenset({"PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"})
TLS_PROTOCOLS = frozenset({"SSL", "SASL_SSL"})
_LISTENER_PREFIX = re.compile(r"listener\.name\.([^.]+)\.(.*)", re.DOTALL)


def tls_setting_name(name: str) -> str | None:
    """The `ssl.*` name a setting sets, for a listener or for all (`listener.name.<l>.ssl.x` and
    `ssl.x` both give `ssl.x`); None for any other setting."""
    match = _LISTENER_PREFIX.fullmatch(name)
    base = match.group(2) if match else name
    return base if base.startswith("ssl.") else None


def is_unhonoured_security_setting(name: str, value: str | None = None) -> bool:
    """Whether setting `name` (to `value`) at start asks for protection kbroker does not provide yet."""
    tls_name = tls_setting_name(name)
    if tls_name is not None:
        return tls_name not in tls.HONOURED
    if sasl_config.is_sasl_setting(name):
        return not sasl_config.is_honoured(name)
    if name not in UNHONOURED_SECURITY_NAMES and not name.startswith(UNHONOURED_SECURITY_PREFIXES) \
            and name != "security.inter.broker.protocol":
        return False
    harmless = _HARMLESS_VALUES.get(name)
    return harmless is None or value is None or value.strip().upper() not in {h.upper() for h in harmless}


def unhonoured_security_settings(props: Mapping[str, str]) -> list[str]:
    return sorted(name for name, value in props.items() if is_unhonoured_security_setting(name, value))


def security_protocol_map(props: Mapping[str, str]) -> dict[str, str]:
    text = props.get("listener.security.protocol.map")
    if not text:
        return dict(DEFAULT_SECURITY_PROTOCOL_MAP)
    mapping = {}
    for item in _list(text):
        name, sep, protocol = item.partition(":")
        if not sep or not name.strip() or not protocol.strip():
            raise ConfigError(f"listener.security.protocol.map: {item!r} is not NAME:PROTOCOL")
        mapping[name.strip().upper()] = protocol.strip().upper()
    return mapping


def tls_properties(props: Mapping[str, str], listener: str | None) -> dict[str, str]:
    """The `ssl.*` settings of one listener: `listener.name.<name>.ssl.x` (the name in any case)
    overrides `ssl.x`, as Kafka's valuesWithPrefixOverride does."""
    result = {name: value for name, value in props.items() if name.startswith("ssl.")}
    if listener is not None:
        for name, value in props.items():
            match = _LISTENER_PREFIX.fullmatch(name)
            if match and match.group(1).upper() == listener.upper() and match.group(2).startswith("ssl."):
                result[match.group(2)] = value
    return result


def parse_ip_overrides(text: str | None) -> dict[str, int]:
    """`max.connections.per.ip.overrides`: "host:count,host:count" (hosts or IP addresses)."""
    overrides: dict[str, int] = {}
    for item in (text or "").split(","):
        item = item.strip()
        if not item:
            continue
        host, sep, count = item.rpartition(":")
        if not sep or not host or not count.strip().isdigit():
            raise ValueError(f"max.connections.per.ip.overrides: {item!r} is not host:count")
        for address in _addresses_of(host.strip()):
            overrides[address] = int(count)
    return overrides


def _addresses_of(host: str) -> list[str]:
    try:
        return sorted({info[4][0] for info in socket.getaddrinfo(host, None)})
    except OSError:
        return [host]


# -- listeners ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Listener:
    name: str
    host: str
    port: int


def parse_listeners(text: str, what: str) -> list[Listener]:
    listeners = []
    for item in _list(text):
        match = re.fullmatch(r"([A-Za-z0-9_]+)://(\[[^\]]*\]|[^:]*):(\d+)", item)
        if match is None:
            raise ConfigError(f"{what}: {item!r} is not NAME://host:port")
        host = match.group(2).strip("[]")
        listeners.append(Listener(match.group(1).upper(), host, int(match.group(3))))
    if not listeners:
        raise ConfigError(f"{what} is empty")
    names = [listener.name for listener in listeners]
    if len(set(names)) != len(names):
        raise ConfigError(f"{what}: each listener needs its own name")
    return listeners


# -- the broker's configuration -------------------------------------------------------------------


class BrokerConfig:
    """Parsed static configuration of one broker."""

    def __init__(self, props: Mapping[str, str]) -> None:
        self.raw = dict(props)
        self.dynamic_default: dict[str, str] = {}
        self.dynamic_per_broker: dict[str, str] = {}
        refused = unhonoured_security_settings(props)
        if refused:
            raise ConfigError(
                f"refusing to start: {', '.join(refused)} "
                f"{'asks' if len(refused) == 1 else 'ask'} for security kbroker does not implement yet "
                "(quotas, TLS and SASL settings other than those in docs/security.md); remove the setting "
                "to run without it"
            )
        for name in sorted(set(props) - set(BROKER_CONFIG_DEFS) - AUTHORIZER_SETTINGS):
            # The TLS and SASL settings are read per listener.
            if tls_setting_name(name) is None and not sasl_config.is_sasl_setting(name):
                log.warning("ignoring unknown property %s", name)
        self.values: dict[str, Any] = {}
        for definition in _DEFS:
            text = props.get(definition.name, definition.default)
            if text is None:
                self.values[definition.name] = None
                continue
            try:
                self.values[definition.name] = definition.parse(text)
            except ValueError as e:
                raise ConfigError(f"invalid value {text!r} for {definition.name}: {e}") from None
        node_id = self.values["node.id"]
        self.broker_id: int = node_id if node_id is not None and "broker.id" not in props else self.values["broker.id"]
        if self.broker_id < 0:
            raise ConfigError("broker.id must be 0 or more")
        self.log_dirs: list[str] = _list(self.values["log.dirs"] or self.values["log.dir"])
        if not self.log_dirs:
            raise ConfigError("log.dirs is empty")
        self.cluster_id: str | None = self.values["cluster.id"]
        self.zookeeper_connect: str | None = self.values["zookeeper.connect"]
        self.num_partitions: int = self.values["num.partitions"]
        self.default_replication_factor: int = self.values["default.replication.factor"]
        self.auto_create_topics_enable: bool = self.values["auto.create.topics.enable"]
        self.delete_topic_enable: bool = self.values["delete.topic.enable"]
        self.socket_request_max_bytes: int = self.values["socket.request.max.bytes"]
        self.log_retention_check_interval_ms: int = self.values["log.retention.check.interval.ms"]
        self.log_cleaner_enable: bool = self.values["log.cleaner.enable"]
        self.encryption_keyring: Keyring | None = self._load_keyring()
        self.log_cleaner_backoff_ms: int = self.values["log.cleaner.backoff.ms"]
        self.checkpoint_interval_ms: int = self.values["log.flush.offset.checkpoint.interval.ms"]
        self.log_initial_task_delay_ms: int = self.values["log.initial.task.delay.ms"]
        self._check_consumer_group_bounds()
        if self.log_initial_task_delay_ms < 0:
            raise ConfigError("log.initial.task.delay.ms must be at least 0")
        self._listeners = parse_listeners(self.values["listeners"], "listeners")
        advertised = self.values["advertised.listeners"]
        self._advertised = parse_listeners(advertised, "advertised.listeners") if advertised else None
        self.security_protocols = self._check_security_protocols(props)
        self.listener_tls = self._tls_of_listeners(props)
        self.listener_sasl = self._sasl_of_listeners(props)
        self.inter_broker_listener = self._inter_broker_listener(props)
        self.inter_broker_sasl = self._inter_broker_sasl(props)
        if self.num_partitions < 1:
            raise ConfigError("num.partitions must be at least 1")
        self._check_connection_settings()
        try:
            LogConfig.from_properties(self.topic_defaults())
        except KafkaError as e:
            raise ConfigError(e.message) from None

    def apply_dynamic(self, cluster_default: Mapping[str, str], per_broker: Mapping[str, str]) -> None:
        """Dynamic broker configs (KIP-226) from the metadata store: for the configs Kafka changes at
        run time, a value set for this broker wins over the cluster-wide default, which wins over
        `server.properties`. `get()` returns the result from now on."""
        self.dynamic_default = dict(cluster_default)
        self.dynamic_per_broker = dict(per_broker)
        for definition in _DEFS:
            if not definition.dynamic:
                continue
            text = per_broker.get(definition.name, cluster_default.get(
                definition.name, self.raw.get(definition.name, definition.default)))
            try:
                self.values[definition.name] = None if text is None else definition.parse(text)
            except ValueError:
                log.error("ignoring dynamic config %s=%r: not a valid value", definition.name, text)
        self.log_cleaner_backoff_ms = self.values["log.cleaner.backoff.ms"]

    def effective_text(self, name: str) -> tuple[str, str] | None:
        """The value of broker config `name` as text and where it comes from ('dynamic',
        'dynamic-default', 'static' or 'default'), or None when it has none."""
        for source, values in self.layers():
            if values.get(name) is not None:
                return values[name], source
        return None

    def layers(
        self, cluster_default: Mapping[str, str] | None = None, per_broker: Mapping[str, str] | None = None
    ) -> Layers:
        """Where broker config values come from, strongest first (Kafka's order); with other
        dynamic configs than the ones in force, to try them."""
        return [
            ("dynamic", self.dynamic_per_broker if per_broker is None else per_broker),
            ("dynamic-default", self.dynamic_default if cluster_default is None else cluster_default),
            ("static", self.raw),
            ("default", BUILT_IN_DEFAULTS),
        ]

    def _load_keyring(self) -> Keyring | None:
        """The keys of log.encryption.key.file; a file that cannot be used stops the start (fail closed:
        never write plaintext when encryption was asked for)."""
        path = self.values["log.encryption.key.file"]
        if path is None:
            return None
        if not path.strip():
            raise ConfigError("refusing to start: log.encryption.key.file is set but empty")
        try:
            return load_key_file(path)
        except KeyFileError as e:
            raise ConfigError(f"refusing to start: {e}") from None

    def _check_connection_settings(self) -> None:
        for name in ("max.connections", "max.connections.per.ip", "connections.max.idle.ms",
                     "socket.request.read.timeout.ms", "socket.request.max.bytes", "socket.request.max.entries",
                     "quota.window.num", "quota.window.size.seconds", "controller.quota.window.num",
                     "controller.quota.window.size.seconds", "max.connection.creation.rate"):
            if self.values[name] < 1:
                raise ConfigError(f"{name} must be at least 1")
        delay = self.values["connection.failed.authentication.delay.ms"]
        if not 0 <= delay < self.values["connections.max.idle.ms"]:
            raise ConfigError(f"connection.failed.authentication.delay.ms={delay} should always be at least 0 and "
                              f"less than connections.max.idle.ms={self.values['connections.max.idle.ms']}")
        queued = self.values["queued.max.request.bytes"]
        if 0 < queued < self.socket_request_max_bytes:
            # As Kafka: the pool must hold the largest request, or that request could never be read.
            raise ConfigError("queued.max.request.bytes must be at least socket.request.max.bytes "
                              f"({self.socket_request_max_bytes}), or -1")
        try:
            parse_ip_overrides(self.values["max.connections.per.ip.overrides"])
        except ValueError as e:
            raise ConfigError(str(e)) from None

    def _check_security_protocols(self, props: Mapping[str, str]) -> dict[str, str]:
        """Listener name -> security protocol; a listener kbroker cannot secure stops the start
        (serving SSL:// or SASL_*:// as plaintext would fail open)."""
        mapping = security_protocol_map(props)
        protocols = {}
        for listener in (*self._listeners, *(self._advertised or ())):
            protocol = mapping.get(listener.name)
            if protocol is None:
                raise ConfigError(f"listener {listener.name} is not in listener.security.protocol.map")
            if protocol not in SUPPORTED_SECURITY_PROTOCOLS:
                raise ConfigError(
                    f"refusing to start: listener {listener.name} uses security protocol {protocol}, which kbroker "
                    "does not implement yet; it would be served as unencrypted, unauthenticated PLAINTEXT")
            protocols[listener.name] = protocol
        return protocols

    def _tls_of_listeners(self, props: Mapping[str, str]) -> dict[str, TlsSettings]:
        """The TLS settings of each SSL listener (`listener.name.<name>.ssl.*` over `ssl.*`), with
        their key material loaded now: a setting that cannot be applied stops the start. The
        shared `ssl.*` values are checked even without an SSL listener, so none is ignored."""
        result = {}
        try:
            TlsSettings.from_properties(tls_properties(props, None))
            for name, protocol in self.security_protocols.items():
                if protocol in TLS_PROTOCOLS:
                    settings = TlsSettings.from_properties(tls_properties(props, name))
                    settings.server_context()  # loads the key store: a bad key or password fails here
                    result[name] = settings
        except TlsConfigError as e:
            raise ConfigError(f"refusing to start: {e}") from None
        return result

    def _sasl_of_listeners(self, props: Mapping[str, str]) -> dict[str, SaslListenerSettings]:
        """The SASL settings of each SASL listener; a mechanism or setting kbroker cannot apply
        stops the start."""
        try:
            sasl_config.check_global(props)
            return {name: sasl_config.listener_settings(props, name)
                    for name, protocol in self.security_protocols.items() if protocol in sasl_config.SASL_PROTOCOLS}
        except SaslConfigError as e:
            raise ConfigError(f"refusing to start: {e}") from None

    def _inter_broker_sasl(self, props: Mapping[str, str]) -> SaslCredentials | None:
        """How this broker logs in to the others when the inter-broker listener is SASL."""
        settings = self.listener_sasl.get(self.inter_broker_listener)
        if settings is None:
            return None
        try:
            return sasl_config.inter_broker_credentials(props, self.inter_broker_listener, settings)
        except SaslConfigError as e:
            raise ConfigError(f"refusing to start: {e}") from None

    def _inter_broker_listener(self, props: Mapping[str, str]) -> str:
        """Kafka's rule: `inter.broker.listener.name`, or else the listener named after
        `security.inter.broker.protocol` (PLAINTEXT by default); not both."""
        name = self.values["inter.broker.listener.name"]
        if name and "security.inter.broker.protocol" in props:
            raise ConfigError("Only one of inter.broker.listener.name and security.inter.broker.protocol should be set.")
        if name:
            name = name.upper()
            if name not in security_protocol_map(props):
                raise ConfigError(f"Listener with name {name} defined in inter.broker.listener.name not found in "
                                  "listener.security.protocol.map.")
        else:
            name = self.values["security.inter.broker.protocol"].upper()
            if name not in SUPPORTED_SECURITY_PROTOCOLS:
                raise ConfigError(f"refusing to start: security.inter.broker.protocol={name} is not implemented")
        advertised = [listener.name for listener in self._advertised or self._listeners]
        if self.zookeeper_connect and name not in advertised:
            # Other brokers could not reach this one (Kafka refuses this too).
            raise ConfigError(f"inter.broker.listener.name must be a listener name defined in advertised.listeners. "
                              f"The valid options based on currently configured listeners are {','.join(advertised)}")
        return name

    def inter_broker_tls(self) -> TlsSettings | None:
        """TLS settings for connecting to other brokers: those of the inter-broker listener, if it is SSL."""
        return self.listener_tls.get(self.inter_broker_listener)

    @classmethod
    def load(cls, path: str | os.PathLike[str] | None, overrides: Iterable[str] = ()) -> BrokerConfig:
        props = parse_properties(Path(path).read_text()) if path else {}
        for override in overrides:
            key, sep, value = override.partition("=")
            if not sep or not key.strip():
                raise ConfigError(f"--override {override!r} is not key=value")
            props[key.strip()] = value.strip()
        return cls(props)

    def _check_consumer_group_bounds(self) -> None:
        """Kafka's start-up checks of the consumer protocol's timing settings."""
        v = self.values
        for setting in ("heartbeat.interval.ms", "session.timeout.ms"):
            value, low, high = (v[f"group.consumer.{setting}"], v[f"group.consumer.min.{setting}"],
                                v[f"group.consumer.max.{setting}"])
            if not low <= value <= high:
                raise ConfigError(f"group.consumer.{setting} ({value}) must be between group.consumer.min.{setting} "
                                  f"({low}) and group.consumer.max.{setting} ({high})")
        if v["group.consumer.heartbeat.interval.ms"] >= v["group.consumer.session.timeout.ms"]:
            raise ConfigError("group.consumer.heartbeat.interval.ms must be less than group.consumer.session.timeout.ms")

    def get(self, name: str) -> Any:
        return self.values.get(name)

    @property
    def super_users(self) -> str:
        return self.raw.get("super.users", "")

    @property
    def allow_everyone_if_no_acl_found(self) -> bool:
        """Kafka reads the authorizer's setting as Java's Boolean.parseBoolean: only "true" is true."""
        return self.raw.get("allow.everyone.if.no.acl.found", "false").strip().lower() == "true"

    def listeners_parsed(self) -> list[Listener]:
        return list(self._listeners)

    def advertised_listeners_parsed(self) -> list[Listener]:
        """What clients are told; a wildcard or empty host becomes this machine's name."""
        chosen = self._advertised or self._listeners
        result = []
        for listener in chosen:
            host = listener.host
            if host in ("", "0.0.0.0", "::"):
                host = socket.getfqdn()
            result.append(Listener(listener.name, host, listener.port))
        return result

    def topic_defaults(self, layers: Layers | None = None) -> dict[str, str]:
        """Topic config values implied by broker configs (see `topic_default_entries`)."""
        return {name: value for name, (value, _, _) in self.topic_default_entries(layers).items()}

    def topic_default_entries(self, layers: Layers | None = None) -> dict[str, tuple[str, str, str]]:
        """topic config -> (value, config that set it, source) for every topic config.

        Sources rank dynamic per-broker, dynamic cluster default, server.properties, built-in
        default (see `layers`); within a source the synonyms rank as listed in TOPIC_CONFIG_SYNONYMS.
        """
        layers = self.layers() if layers is None else layers
        result: dict[str, tuple[str, str, str]] = {}
        for topic_name, default in TOPIC_CONFIG_DEFAULTS.items():
            result[topic_name] = _first_set(TOPIC_CONFIG_SYNONYMS.get(topic_name, []), layers) or (
                default, topic_name, "default"
            )
        return result


def _first_set(synonyms: list[tuple[str, int]], layers: Layers) -> tuple[str, str, str] | None:
    for source, values in layers:
        for broker_name, factor in synonyms:
            text = values.get(broker_name)
            if text is not None:
                value = str(int(text) * factor) if factor != 1 else text.strip()
                return value, broker_name, source
    return None
