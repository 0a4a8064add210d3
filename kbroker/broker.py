"""The broker: wires configuration, storage, cluster services and the network server."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import time
from collections.abc import Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kbroker.clock import wall_clock_ms
from kbroker.cluster.acls import AclService, AclStoreUnreadable
from kbroker.cluster.broker_client import AsyncBrokerClient
from kbroker.cluster.client_quotas import ClientQuotas
from kbroker.cluster.configs import ConfigService
from kbroker.cluster.controller import Controller
from kbroker.cluster.credentials import UserCredentials
from kbroker.cluster.delayed_delivery import DelayedDeliveries
from kbroker.cluster.fetch_sessions import FetchSessionCache
from kbroker.cluster.group_configs import GroupConfigs, auto_offset_reset
from kbroker.cluster.metadata_cache import MetadataCache
from kbroker.cluster.partition_writer import PartitionWriter
from kbroker.cluster.producer_ids import ProducerIdManager
from kbroker.cluster.replica_fetcher import FetcherConfig
from kbroker.cluster.replica_manager import ReplicaManager
from kbroker.cluster.retry_forwarding import RetryForwarder
from kbroker.cluster.store_writer import StoreWriter
from kbroker.cluster.topics import TopicManager
from kbroker.config import BrokerConfig, ConfigError
from kbroker.coordinator.assignors import assignors_from_config
from kbroker.coordinator.dead_letters import DeadLetters, DeadLetterSettings
from kbroker.coordinator.group_coordinator import GroupConfig, GroupCoordinator
from kbroker.coordinator.offsets_topic import TOPIC as OFFSETS_TOPIC
from kbroker.coordinator.offsets_topic import InternalTopic, OffsetsTopic
from kbroker.coordinator.share_coordinator import TOPIC as SHARE_STATE_TOPIC
from kbroker.coordinator.share_coordinator import ShareCoordinator, ShareCoordinatorConfig
from kbroker.coordinator.share_groups import ShareGroupConfig, ShareGroupCoordinator
from kbroker.coordinator.share_offsets import ShareGroupOffsets
from kbroker.coordinator.share_partitions import ShareGroupSettings, SharePartitionManager
from kbroker.coordinator.share_persister import SharePersister
from kbroker.coordinator.txn_coordinator import TOPIC as TRANSACTION_TOPIC
from kbroker.coordinator.txn_coordinator import TransactionCoordinator, TxnConfig
from kbroker.coordinator.txn_markers import MarkerSender
from kbroker.meta_properties import load_or_create_meta
from kbroker.metadata.local_store import LocalMetadataStore
from kbroker.metadata.store import BrokerEndpoint, BrokerIdInUse, BrokerRegistration, MetadataStore
from kbroker.metrics.stats import BrokerStats
from kbroker.server.server import Server
from kbroker.share.share_group import TopicInfo
from kbroker.share.share_partition import ShareLimits
from kbroker.share.share_sessions import ShareSessionCache
from kbroker.storage.encryption import MissingKey
from kbroker.storage.log import Log
from kbroker.storage.log_config import LogConfig
from kbroker.storage.log_dir_health import LogDirHealth
from kbroker.storage.log_manager import LogManager
from kbroker.storage.log_mover import LogDirMover

if TYPE_CHECKING:
    from kbroker.archive.archiver import Archiver, ArchiveSettings
    from kbroker.archive.object_store import ObjectStoreConfig
    from kbroker.metrics.endpoint import MetricsEndpoint

log = logging.getLogger("kbroker")


@dataclass(frozen=True, slots=True)
class BrokerNode:
    broker_id: int
    host: str
    port: int

TICK_SECONDS = 1.0
# In the first log dir: chunks and indexes of archived segments read by consumers. Not a
# partition's name (no "-<number>" at its end), so the log manager passes it by.
ARCHIVE_CACHE_DIR = "remote-log-cache"
GC_YOUNG_THRESHOLD = 20_000


class Broker:
    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        # What the request paths count for the metrics endpoint (kbroker/metrics), counted
        # whether or not metrics.listener serves it: a few integer additions per request.
        self.stats = BrokerStats()
        self.metrics: MetricsEndpoint | None = None
        log_dirs = [Path(d) for d in config.log_dirs]
        for directory in log_dirs:
            directory.mkdir(parents=True, exist_ok=True)
        self.store = self._open_store(config, log_dirs)
        # What request paths read (never the store), and where their store writes run: off the
        # event loop in a ZooKeeper cluster, so a slow ZooKeeper stalls no client.
        self.metadata_cache = MetadataCache()
        self.store_writer = StoreWriter(threaded=bool(config.zookeeper_connect))
        try:
            # In a cluster the id is the one in ZooKeeper, and meta.properties must agree with it.
            cluster_id = self.store.get_or_create_cluster_id(config.cluster_id) if config.zookeeper_connect \
                else config.cluster_id
            self.cluster_id = load_or_create_meta(log_dirs, config.broker_id, cluster_id)
            self.configs = ConfigService(self)  # applies the stored dynamic broker configs to `config`
            self.credentials = UserCredentials(self.store, self.store_writer)  # SCRAM credentials, for SASL listeners
            self.credentials.load()
            self.group_configs = GroupConfigs(self.store, self.store_writer, config)  # kafka-configs --entity-type groups
            self.group_configs.load()
            # Client quotas (kafka-configs --entity-type users/clients), enforced by Produce, Fetch and the
            # topic mutations (CreateTopics, CreatePartitions, DeleteTopics).
            self.quotas = ClientQuotas(self.store, self.store_writer, config.get("quota.window.num"),
                                       config.get("quota.window.size.seconds"),
                                       controller_window_num=config.get("controller.quota.window.num"),
                                       controller_window_size_seconds=config.get("controller.quota.window.size.seconds"))
            self.quotas.load()
            self.acls = self._open_acls(config)
        except BaseException:
            self.store.close()
            raise
        self._archive_config = self._check_archive(config)
        try:
            self.log_manager = LogManager(
                log_dirs,
                retention_check_interval_ms=config.log_retention_check_interval_ms,
                cleaner_backoff_ms=config.log_cleaner_backoff_ms,
                checkpoint_interval_ms=config.checkpoint_interval_ms,
                initial_task_delay_ms=config.log_initial_task_delay_ms,
                keyring=config.encryption_keyring,
                archiving=self._archive_config is not None,
                rolled_flush_busy_percent=config.get("log.flush.rolled.busy.percent"),
            )
        except MissingKey as e:  # encrypted data this broker cannot read: serve nothing, delete nothing
            self.store.close()
            raise ConfigError(f"refusing to start: {e.message}") from None
        self.log_manager.flush_observer = self.stats.flush_time.observe
        self.log_mover = LogDirMover(self.log_manager, on_replaced=self._on_log_replaced, rate=self._log_dir_move_rate)
        self.replicas = ReplicaManager(config.broker_id, self.log_manager, fetcher_config=FetcherConfig(
            max_wait_ms=config.get("replica.fetch.wait.max.ms"), min_bytes=config.get("replica.fetch.min.bytes"),
            max_bytes=config.get("replica.fetch.response.max.bytes"),
            partition_max_bytes=config.get("replica.fetch.max.bytes"), backoff_ms=config.get("replica.fetch.backoff.ms"),
        ), stats=self.stats)
        self.replicas.views = self.metadata_cache.views  # filtered views are served from their sources
        self.retry_forwarder = RetryForwarder(
            self.replicas, self.metadata_cache,
            PartitionWriter(self.replicas, self._leader_endpoint, self._inter_broker_client),
            lambda: self.producer_ids.next_id(), self._topic_log_config)
        self.delayed_deliveries = DelayedDeliveries(self.replicas, forwarder=self.retry_forwarder)
        self.replicas.on_delayed = self.delayed_deliveries.wake
        self.topics = TopicManager(
            self.store,
            self.replicas,
            config.broker_id,
            self.configs.topic_defaults(),
            config.num_partitions,
            config.default_replication_factor,
            self.metadata_cache,
            self.store_writer,
        )
        self.topics.archiving = self._archive_config is not None
        self.archiver: Archiver | None = None  # started with the broker (docs/archive.md)
        self.cluster: Controller | None = None
        if config.zookeeper_connect:
            tls = config.inter_broker_tls()
            self.cluster = Controller(self.store, config.broker_id, self.replicas, self.topics, self.metadata_cache,
                                       self.store_writer, config.inter_broker_listener,
                                       tls.client_context() if tls else None)
            self.cluster.unclean_election = config.get("unclean.leader.election.enable")
            self.cluster.inter_broker_sasl = config.inter_broker_sasl
            self.topics.cluster = self.cluster
        # In a cluster, ids carry the broker id in their high bits, so brokers never hand out the same one.
        self.producer_ids = ProducerIdManager(log_dirs[0], namespace=config.broker_id if self.cluster else 0)
        try:
            assignors_from_config(config.get("group.consumer.assignors"))
        except ValueError as e:
            raise ConfigError(f"refusing to start: {e}") from None
        self.groups = GroupCoordinator(
            OffsetsTopic(
                self.topics,
                self.replicas,
                config.get("offsets.topic.num.partitions"),
                config.get("offsets.topic.replication.factor"),
                config.get("offsets.topic.segment.bytes"),
            ),
            GroupConfig(
                initial_rebalance_delay_ms=config.get("group.initial.rebalance.delay.ms"),
                min_session_timeout_ms=config.get("group.min.session.timeout.ms"),
                max_session_timeout_ms=config.get("group.max.session.timeout.ms"),
                max_size=config.get("group.max.size"),
                offset_metadata_max_bytes=config.get("offset.metadata.max.bytes"),
                offsets_retention_ms=config.get("offsets.retention.minutes") * 60_000,
                consumer_protocol_enabled="consumer" in config.get("group.coordinator.rebalance.protocols"),
                consumer_heartbeat_interval_ms=config.get("group.consumer.heartbeat.interval.ms"),
                consumer_session_timeout_ms=config.get("group.consumer.session.timeout.ms"),
                consumer_max_size=config.get("group.consumer.max.size"),
                consumer_assignors=tuple(config.get("group.consumer.assignors")),
                consumer_regex_refresh_interval_ms=config.get("group.consumer.regex.refresh.interval.ms"),
                consumer_migration_policy=config.get("group.consumer.migration.policy"),
            ),
            self.metadata_cache.partition_exists,
        )
        self.groups.consumer.consumer.timing_of = self._consumer_group_timing
        self.transactions = TransactionCoordinator(
            InternalTopic(
                TRANSACTION_TOPIC,
                self.topics,
                self.replicas,
                config.get("transaction.state.log.num.partitions"),
                config.get("transaction.state.log.replication.factor"),
                config.get("transaction.state.log.segment.bytes"),
            ),
            TxnConfig(
                max_timeout_ms=config.get("transaction.max.timeout.ms"),
                abort_check_interval_ms=config.get("transaction.abort.timed.out.transaction.cleanup.interval.ms"),
            ),
            self.producer_ids,
            self.replicas,
            self.groups,
            self.metadata_cache.partition_exists,
        )
        self._open_share_groups(config)
        self._next_offset_expiry_ms = 0
        self._next_txn_abort_ms = 0
        self._next_producer_expiry_ms = 0
        self._next_rebalance_ms = 0
        self.server = Server(self)
        self.fetch_sessions = FetchSessionCache(config.get("max.incremental.fetch.session.cache.slots"))
        self.bound: list[tuple[str, str, int]] = []  # (listener name, host, port)
        self._ticker: asyncio.Task[None] | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._stopped = asyncio.Event()

    def _open_share_groups(self, config: BrokerConfig) -> None:
        """Share groups (KIP-932): their coordinator, the share coordinator (share-partition state
        in `__share_group_state`), the share partitions this broker leads with their dead letters,
        and the share sessions of the consumers fetching from it."""
        self.share_coordinator = ShareCoordinator(
            InternalTopic(SHARE_STATE_TOPIC, self.topics, self.replicas,
                          config.get("share.coordinator.state.topic.num.partitions"),
                          config.get("share.coordinator.state.topic.replication.factor"),
                          config.get("share.coordinator.state.topic.segment.bytes"),
                          # As KIP-932 has it: snapshots and updates are pruned, not compacted.
                          {"cleanup.policy": "delete", "retention.ms": "-1",
                           "min.insync.replicas": str(config.get("share.coordinator.state.topic.min.isr"))}),
            ShareCoordinatorConfig(
                updates_per_snapshot=config.get("share.coordinator.snapshot.update.records.per.snapshot"),
                write_timeout_ms=config.get("share.coordinator.write.timeout.ms")))
        self.share_persister = SharePersister(self.share_coordinator, self.cluster, config.broker_id)
        self.dead_letters = DeadLetters(
            self.replicas, self.metadata_cache, self.group_configs, self.topics,
            lambda: DeadLetterSettings(
                auto_create=bool(self.config.get("errors.deadletterqueue.auto.create.topics.enable")),
                topic_prefix=self.config.get("errors.deadletterqueue.topic.name.prefix") or ""),
            remote_leader=self._leader_endpoint, client_factory=self._inter_broker_client)
        self.share_partitions = SharePartitionManager(self.replicas, self._share_settings,
                                                      on_archived=self.dead_letters.archived,
                                                      persister=self.share_persister)
        self.share_sessions: ShareSessionCache[tuple[Any, int]] = ShareSessionCache(
            config.get("group.share.max.share.sessions"))
        self.share_groups = ShareGroupCoordinator(
            ShareGroupConfig(session_timeout_ms=config.get("group.share.session.timeout.ms"),
                             heartbeat_interval_ms=config.get("group.share.heartbeat.interval.ms"),
                             max_size=config.get("group.share.max.size")),
            self._share_topics, is_other_group=self._is_classic_group, on_member_gone=self.end_share_session,
            on_assigned=self.share_partitions.initialize, config_of=self._share_group_config)
        self.share_offsets = ShareGroupOffsets(self.share_groups, self.share_persister, self.share_partitions,
                                               self.metadata_cache, self.replicas, config.broker_id,
                                               clustered=self.cluster is not None)
        # Read at every share fetch: kept per group until its configs change.
        self._share_settings_cache: dict[str, ShareGroupSettings] = {}
        self.group_configs.on_change(self._share_group_configs_changed)

    def _share_group_configs_changed(self, group_id: str) -> None:
        self._share_settings_cache.pop(group_id, None)
        self.share_partitions.settings_changed(group_id)

    def _share_settings(self, group_id: str) -> ShareGroupSettings:
        """A share group's settings: its group configs, else the broker's group.share.* configs."""
        cached = self._share_settings_cache.get(group_id)
        if cached is None:
            cached = self._share_settings_cache[group_id] = self._read_share_settings(group_id)
        return cached

    def _read_share_settings(self, group_id: str) -> ShareGroupSettings:
        configs = self.group_configs
        reset, duration_ms = auto_offset_reset(configs.value(group_id, "share.auto.offset.reset"))
        return ShareGroupSettings(
            ShareLimits(delivery_count_limit=configs.int_value(group_id, "share.delivery.count.limit"),
                        max_in_flight=configs.int_value(group_id, "share.partition.max.record.locks"),
                        lock_duration_ms=configs.int_value(group_id, "share.record.lock.duration.ms")),
            start_at_earliest=reset == "earliest",
            read_committed=configs.value(group_id, "share.isolation.level") == "read_committed",
            start_by_duration_ms=duration_ms,
            renew_enabled=configs.value(group_id, "share.renew.acknowledge.enable").lower() == "true")

    def _leader_endpoint(self, topic: str, index: int) -> tuple[int, tuple[str, int]] | None:
        """The leader of a partition led elsewhere and its inter-broker address (a cluster only)."""
        if self.cluster is None:
            return None
        state = self.cluster.state_of(topic, index)
        if state is None or state.leader < 0:
            return None
        address = self.cluster.endpoint_of(state.leader)
        return (state.leader, address) if address is not None else None

    def _inter_broker_client(self, host: str, port: int) -> AsyncBrokerClient:
        """A connection for the broker's own writes to partitions led elsewhere (dead letters,
        retry topics' forwarding)."""
        assert self.cluster is not None
        return AsyncBrokerClient(host, port, f"broker-{self.config.broker_id}-writer",
                                 ssl_context=self.cluster.inter_broker_ssl, sasl=self.cluster.inter_broker_sasl)

    def _topic_log_config(self, topic: str) -> LogConfig | None:
        record = self.metadata_cache.topic(topic)
        return self.topics.log_config(record.configs) if record is not None else None

    def _consumer_group_timing(self, group_id: str) -> tuple[int, int]:
        """A consumer-protocol group's (session timeout, heartbeat interval): its group configs,
        else the broker's group.consumer.* configs."""
        configs = self.group_configs
        return (configs.int_value(group_id, "consumer.session.timeout.ms"),
                configs.int_value(group_id, "consumer.heartbeat.interval.ms"))

    def _share_group_config(self, group_id: str) -> ShareGroupConfig:
        configs = self.group_configs
        return ShareGroupConfig(session_timeout_ms=configs.int_value(group_id, "share.session.timeout.ms"),
                                heartbeat_interval_ms=configs.int_value(group_id, "share.heartbeat.interval.ms"),
                                max_size=self.config.get("group.share.max.size"))

    def _share_topics(self) -> dict[str, TopicInfo]:
        return {r.name: TopicInfo(r.topic_id, len(r.assignment)) for r in self.metadata_cache.topic_records()
                if not r.name.startswith("__")}

    def _is_classic_group(self, group_id: str) -> bool:
        try:
            return self.groups.describe(group_id) is not None
        except Exception:  # not this broker's to say: the share coordinator checked it is
            return False

    def end_share_session(self, group_id: str, member_id: str) -> None:
        """A share group member's share session here ends (its final ShareFetch or ShareAcknowledge,
        or its group session timed out): what it holds goes back to the queue at once."""
        closed = self.share_sessions.close(group_id, member_id)
        if closed is None:
            return
        known = []  # (share-session key, topic name, partition) of the topics still there
        for key in closed.partitions:
            record = self.metadata_cache.topic_by_id(key[0])
            if record is not None:
                known.append((key, record.name, key[1]))
        self.share_partitions.release_member(group_id, member_id, [(name, index) for _, name, index in known])
        # A share partition no session of its group reads any more is let go (as Kafka's
        # SharePartitionManager does when one becomes empty): the next fetch loads it from the
        # share coordinator, so an offset reset of the then empty group takes effect.
        for key, name, index in known:
            if not self.share_sessions.reads(group_id, key):
                self.share_partitions.forget(group_id, name, index)

    def _open_acls(self, config: BrokerConfig) -> AclService | None:
        """The authorizer when `authorizer.class.name` names one of Kafka's (config.py refuses any
        other), with every ACL of the store; None: every request is allowed, as in Kafka."""
        if not config.get("authorizer.class.name"):
            return None
        acls = AclService(self.store, self.store_writer, config.super_users, config.allow_everyone_if_no_acl_found)
        try:
            acls.load()
        except AclStoreUnreadable as e:  # authorizing without them could allow what they deny
            raise ConfigError(f"refusing to start: {e}") from None
        return acls

    @staticmethod
    def _open_store(config: BrokerConfig, log_dirs: list[Path]) -> MetadataStore:
        """ZooKeeper when `zookeeper.connect` is set (a cluster), else the embedded local store."""
        if not config.zookeeper_connect:
            try:
                return LocalMetadataStore(log_dirs[0])
            except (ValueError, KeyError, TypeError) as e:  # e.g. ACLs it cannot read: never serve without them
                raise ConfigError(f"refusing to start: the metadata store in {log_dirs[0]} cannot be read: {e}") from None
        from kbroker.metadata.zk_store import ZooKeeperMetadataStore

        return ZooKeeperMetadataStore(
            config.zookeeper_connect,
            session_timeout_ms=config.get("zookeeper.session.timeout.ms"),
            connection_timeout_ms=config.get("zookeeper.connection.timeout.ms"),
        )

    async def start(self) -> None:
        self._start_metrics()  # first: a metrics.listener that cannot be bound stops the start at once
        self.log_manager.on_dir_change = self._on_log_dir_change
        self.topics.start()
        self.groups.load()
        self.groups.start_timers()
        self.transactions.load()
        self.share_coordinator.load()
        self.configs.start(asyncio.get_running_loop())
        self.credentials.start(asyncio.get_running_loop())
        self.group_configs.start(asyncio.get_running_loop())
        self.quotas.start(asyncio.get_running_loop())
        if self.acls is not None:
            self.acls.start(asyncio.get_running_loop())
        # Before the listeners: a consumer's first fetch below a tiered log's window is the archive's.
        self._start_archiver()
        for listener in self.config.listeners_parsed():
            port = await self.server.start(listener.host, listener.port, listener.name,
                                           self.config.listener_tls.get(listener.name),
                                           self.config.listener_sasl.get(listener.name))
            self.bound.append((listener.name, listener.host, port))
        # Once it can be reached: the other brokers (and the controller) learn of it now.
        await self._register()
        if self.cluster is not None:
            self.transactions.remote_markers = MarkerSender(self.cluster, self.config.broker_id)
            self.cluster.on_leadership_change = self._on_leadership_change
            self.cluster.start()
        self._ticker = asyncio.create_task(self._tick_forever())
        self.delayed_deliveries.start()
        self.log_mover.start()  # moves between log dirs that a restart interrupted
        # What start built (logs, indexes, coordinator state) lives as long as the broker: keep
        # it out of the collector's full passes, which otherwise scan it all again every time a
        # large request's objects trigger one (and hold up every client while they run).
        gc.freeze()
        # Fewer, larger young collections: a request's tens of thousands of short-lived entries
        # otherwise trigger a cascade of collections, each a pause for every client.
        gc.set_threshold(GC_YOUNG_THRESHOLD, 20, 20)

    def _check_archive(self, config: BrokerConfig) -> tuple[ObjectStoreConfig, ArchiveSettings] | None:
        """The archive's settings when remote.log.storage.system.enable; a setting that makes it
        impossible stops the start (before any log is opened, so no local retention runs)."""
        if not config.get("remote.log.storage.system.enable"):
            return None
        from kbroker.archive.settings import archive_settings  # boto3: only for a broker that archives

        try:
            return archive_settings(config.get, encrypting=config.encryption_keyring is not None)
        except ValueError as e:
            self.store.close()
            raise ConfigError(f"refusing to start: {e}") from None

    def _start_archiver(self) -> None:
        if self._archive_config is None:
            return
        from kbroker.archive.archiver import Archiver
        from kbroker.archive.object_store import ObjectStore

        store_config, settings = self._archive_config
        self.archiver = Archiver(settings, ObjectStore(store_config), self.store, self.store_writer,
                                 lambda: iter(self.replicas.partitions()),
                                 Path(self.config.log_dirs[0]) / ARCHIVE_CACHE_DIR)
        self.replicas.archive = self.archiver
        self.archiver.start()
        log.info("archiving tiered topics to %s", store_config.where)

    def _start_metrics(self) -> None:
        """Serve the metrics on metrics.listener, if set (docs/operations.md, "Metrics")."""
        listener = self.config.get("metrics.listener")
        if listener is None:
            return
        # Loaded only when asked for: prometheus_client and its HTTP server.
        from kbroker.metrics.endpoint import MetricsEndpoint

        endpoint = MetricsEndpoint(self, self.stats, listener)
        try:
            endpoint.start()
        except OSError as e:
            raise ConfigError(f"refusing to start: metrics.listener={self.config.raw.get('metrics.listener')}: "
                              f"cannot listen on {listener.url}: {e.strerror or e}") from None
        self.metrics = endpoint
        log.info("serving metrics on %s", endpoint.url)

    async def _controlled_shutdown(self, timeout_s: float = 10.0) -> None:
        """Move leadership away and leave the ISRs before stopping; wait until the cluster's
        states say so (the watches bring them back), for at most `timeout_s`."""
        assert self.cluster is not None
        try:
            moved = await self.cluster.controlled_shutdown()
        except Exception:
            log.exception("controlled shutdown failed; stopping anyway")
            return
        deadline = time.monotonic() + timeout_s
        while self.cluster.leads_any(moved) and time.monotonic() < deadline:
            await asyncio.sleep(0.05)  # the store's watch updates the states on this loop
        if moved:
            log.info("controlled shutdown: leadership of %d partition(s) moved to other brokers", len(moved))

    def _on_log_dir_change(self, health: LogDirHealth) -> None:
        """A log dir that can no longer take writes: in a cluster its partitions' leadership goes to
        other in-sync replicas (Kafka's log dir failure handling), so producers carry on there."""
        if self.cluster is None or health.writable:
            return
        partitions = {(each.topic, each.partition) for each in self.log_manager.logs_in(health.path)}
        # Seen on a request path (a failed append): the store writes run in the background.
        self._background(self._step_down_from(health, partitions))

    async def _step_down_from(self, health: LogDirHealth, partitions: set[tuple[str, int]]) -> None:
        assert self.cluster is not None
        try:
            moved = await self.cluster.step_down(partitions)
        except Exception:
            log.exception("moving leadership away from log dir %s failed", health.path)
            return
        log.warning("log dir %s is %s: leadership of %d partition(s) moved to other replicas",
                    health.path, health.state.value, len(moved))

    def _background(self, work: Coroutine[Any, Any, None]) -> None:
        """Run `work` as a task the broker keeps a reference to until it ends."""
        task = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _on_log_replaced(self, log_: Log) -> None:
        """A replica moved to another log dir: its partition reads and writes the new copy from now on."""
        partition = self.replicas.find(log_.topic, log_.partition)
        if partition is not None:
            partition.log = log_

    def _log_dir_move_rate(self) -> int:
        # Read at every step of a move: a dynamic change (kafka-reassign-partitions' throttle) applies at once.
        return self.config.get("replica.alter.log.dirs.io.max.bytes.per.second")

    def _on_leadership_change(self, topic: str, index: int, leads: bool) -> None:
        """Coordinator failover: the new leader of an internal partition replays it and takes over
        its groups, transactional ids or share-partition states; the old one lets them go. A
        topic partition's share partitions leave the old leader (the new one loads them)."""
        self.share_partitions.on_leadership_change(topic, index, leads)
        coordinator = {OFFSETS_TOPIC: self.groups, TRANSACTION_TOPIC: self.transactions,
                       SHARE_STATE_TOPIC: self.share_coordinator}.get(topic)
        if coordinator is None:
            return
        if leads:
            coordinator.load(index)
        else:
            coordinator.unload(index)

    async def _register(self) -> None:
        """Announce this broker. After a crash its previous ZooKeeper session may still hold the
        id (with this broker's own address) until that session times out: wait for that, as long
        as a session can live. Another broker using the id is refused at once."""
        deadline = time.monotonic() + self.config.get("zookeeper.session.timeout.ms") / 1000 + 5
        registration = self.registration()
        while True:
            try:
                self.store.register_broker(registration)
                return
            except BrokerIdInUse:
                holder = self.store.live_brokers().get(self.config.broker_id)
                if holder is None:
                    continue  # its session has just expired: register now
                if holder.endpoints != registration.endpoints or time.monotonic() > deadline:
                    raise
                log.info("broker.id %d is still held by a previous session; waiting for it to expire",
                         self.config.broker_id)
                await asyncio.sleep(0.25)

    def registration(self) -> BrokerRegistration:
        """This broker's advertised listeners, with the ports actually bound for port 0."""
        bound = {name: port for name, _, port in self.bound}
        return BrokerRegistration(
            self.config.broker_id,
            tuple(BrokerEndpoint(a.name, a.host, a.port or bound.get(a.name, 0),
                                 self.config.security_protocols.get(a.name, a.name))
                  for a in self.config.advertised_listeners_parsed()),
            rack=self.config.get("broker.rack"),
        )

    def broker_endpoints(self, listener: str) -> list[dict[str, Any]]:
        """The live brokers as Metadata describes them to a client of `listener`: each one's
        address on that listener; a broker without it is left out (Kafka's
        MetadataCache.getAliveBrokerNodes(listenerName))."""
        if self.cluster is not None and self.cluster.brokers:
            found = ((b, self.cluster.endpoint_of(b.broker_id, listener)) for _, b in sorted(self.cluster.brokers.items()))
            return [{"node_id": b.broker_id, "host": address[0], "port": address[1], "rack": b.rack}
                    for b, address in found if address is not None]
        return [{"node_id": e.broker_id, "host": e.host, "port": e.port, "rack": None}
                for e in [self.local_endpoint(listener)] if e is not None]

    def local_endpoint(self, listener: str) -> BrokerNode | None:
        """This broker's advertised address on `listener` (the bound port where it is 0)."""
        bound = {name: port for name, _, port in self.bound}
        for advertised in self.config.advertised_listeners_parsed():
            if advertised.name == listener:
                return BrokerNode(self.config.broker_id, advertised.host, advertised.port or bound.get(listener, 0))
        return None

    async def _tick_forever(self) -> None:
        while True:
            await asyncio.sleep(TICK_SECONDS)
            now_ms = wall_clock_ms()
            try:
                self.log_manager.tick(now_ms)
            except Exception:
                log.exception("periodic storage work failed")
            if now_ms >= self._next_offset_expiry_ms:
                self._next_offset_expiry_ms = now_ms + self.config.get("offsets.retention.check.interval.ms")
                try:
                    self.groups.expire_offsets(now_ms)
                except Exception:
                    log.exception("expiring committed offsets failed")
            self.replicas.shrink_isrs(now_ms, self.config.get("replica.lag.time.max.ms"))
            self.share_partitions.forget_gone()
            if self._next_rebalance_ms == 0:  # as Kafka: the first check one interval after start
                self._next_rebalance_ms = now_ms + self.config.get("leader.imbalance.check.interval.seconds") * 1000
            if self.cluster is not None and now_ms >= self._next_rebalance_ms:
                self._next_rebalance_ms = now_ms + self.config.get("leader.imbalance.check.interval.seconds") * 1000
                if self.config.get("auto.leader.rebalance.enable"):
                    self._background(self._rebalance_leaders())
            if now_ms >= self._next_producer_expiry_ms:
                self._next_producer_expiry_ms = now_ms + self.config.get("producer.id.expiration.check.interval.ms")
                self._expire_producers(now_ms)
            if now_ms >= self._next_txn_abort_ms:
                self._next_txn_abort_ms = now_ms + self.transactions.config.abort_check_interval_ms
                try:
                    self.transactions.abort_timed_out(now_ms)
                except Exception:
                    log.exception("aborting timed-out transactions failed")

    async def _rebalance_leaders(self) -> None:
        assert self.cluster is not None
        try:
            await self.cluster.rebalance_leaders(self.config.get("leader.imbalance.per.broker.percentage"))
        except Exception:
            log.exception("moving leadership back to preferred replicas failed")

    def _expire_producers(self, now_ms: int) -> None:
        """Forget idle producers (producer.id.expiration.ms), as Kafka's periodic check does."""
        expiration_ms = self.config.get("producer.id.expiration.ms")
        for each in self.log_manager.logs():
            try:
                each.remove_expired_producers(now_ms, expiration_ms)
            except Exception:
                log.exception("expiring producers of %s failed", each.name)

    async def stop(self) -> None:
        """Clean shutdown: stop serving, flush logs, write checkpoints."""
        if self._ticker is not None:
            self._ticker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._ticker
        if self.cluster is not None:
            await self._controlled_shutdown()
        self.share_groups.stop()
        self.share_partitions.stop()
        await self.share_persister.close()
        await self.dead_letters.stop()
        self.configs.stop()
        self.credentials.stop()
        self.group_configs.stop()
        self.quotas.stop()
        if self.acls is not None:
            self.acls.stop()
        await self.server.stop()
        self.groups.stop()
        await self.delayed_deliveries.stop()
        if self.archiver is not None:
            await self.archiver.stop()
        await self.replicas.stop()
        await self.log_mover.stop()
        self.log_manager.shutdown()
        if self.cluster is not None:
            self.cluster.stop()
        for task in list(self._tasks):
            task.cancel()
        self.store_writer.close()  # the writes already submitted complete first
        if self.metrics is not None:
            await self.metrics.stop()
            self.metrics = None
        self.store.close()  # last, as Kafka does: the registration goes when the data is safe
        self._stopped.set()

    async def wait_stopped(self) -> None:
        await self._stopped.wait()
