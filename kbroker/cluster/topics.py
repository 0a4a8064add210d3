"""Topic lifecycle over the metadata store: create, delete, grow, reconfigure.

This is the controller's job; on the embedded single node it runs in-process over the
local store, and every partition is hosted here.

Lookups answer from the broker's `MetadataCache`. Writes go to the store through the broker's
`StoreWriter` (off the event loop in a ZooKeeper cluster); once one succeeds, the new record is
put in the cache, so the request that made the change sees it when it is answered.
"""

from __future__ import annotations

import dataclasses
import logging
import re
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass

from kbroker.cluster.controller import Controller, initial_state
from kbroker.cluster.metadata_cache import MetadataCache
from kbroker.cluster.replica_manager import INTERNAL_TOPICS as INTERNAL_TOPICS  # re-export: the topic rules
from kbroker.cluster.replica_manager import ReplicaManager
from kbroker.cluster.store_writer import StoreWriter
from kbroker.metadata.store import MetadataStore, PartitionState, TopicRecord
from kbroker.pacing import Pacer
from kbroker.storage.log_config import LogConfig
from kbroker.views.view import SOURCE_CONFIG, VIEW_CONFIGS, is_view, view_of
from protocol.errors import ErrorCode, KafkaError

log = logging.getLogger("kbroker.topics")

MAX_TOPIC_NAME_LENGTH = 249
_LEGAL_TOPIC = re.compile(r"[a-zA-Z0-9._-]+")
# Kafka's controller refuses to create more partitions than this in one request.
MAX_PARTITIONS_PER_REQUEST = 10_000
# Given the partitions a request is about to create or delete; raises KafkaError to refuse (the
# controller mutation quota).
Charge = Callable[[int], None]


def validate_topic_name(name: str) -> None:
    if not name or name in (".", ".."):
        raise KafkaError(ErrorCode.INVALID_TOPIC, f"topic name {name!r} is illegal")
    if len(name) > MAX_TOPIC_NAME_LENGTH:
        raise KafkaError(ErrorCode.INVALID_TOPIC, f"topic name is longer than {MAX_TOPIC_NAME_LENGTH}")
    if not _LEGAL_TOPIC.fullmatch(name):
        raise KafkaError(ErrorCode.INVALID_TOPIC, f"topic name {name!r} has characters other than [a-zA-Z0-9._-]")


@dataclass(frozen=True, slots=True)
class TopicSpec:
    name: str
    num_partitions: int = -1
    replication_factor: int = -1
    assignment: dict[int, list[int]] | None = None
    configs: Mapping[str, str] | None = None


class TopicManager:
    def __init__(
        self,
        store: MetadataStore,
        replicas: ReplicaManager,
        broker_id: int,
        topic_defaults: Mapping[str, str],
        default_partitions: int,
        default_replication_factor: int,
        cache: MetadataCache | None = None,
        writer: StoreWriter | None = None,
    ) -> None:
        self.store = store
        self.cache = cache if cache is not None else MetadataCache()
        self.writer = writer if writer is not None else StoreWriter(threaded=False)
        self.replicas = replicas
        self.broker_id = broker_id
        self.topic_defaults = dict(topic_defaults)
        self.default_partitions = default_partitions
        self.default_replication_factor = default_replication_factor
        self.cluster: Controller | None = None  # set in a ZooKeeper cluster
        self.archiving = False  # remote.log.storage.system.enable: topics may be tiered (docs/archive.md)

    def _placement_order(self) -> list[int]:
        return self.cluster.placement_order() if self.cluster is not None else self.live_brokers()

    def live_brokers(self) -> list[int]:
        return self.cluster.live_broker_ids() if self.cluster is not None else [self.broker_id]

    def log_config(self, topic_configs: Mapping[str, str]) -> LogConfig:
        return LogConfig.from_properties({**self.topic_defaults, **topic_configs})

    def start(self) -> None:
        """Load every known topic into the cache and open its logs (after a restart). Runs
        before the broker serves, so reading the store here holds up no client."""
        for record in self.store.list_topics():
            self.cache.put_topic(record)
            self._host(record)

    def _host(self, record: TopicRecord) -> None:
        for _ in self._host_steps(record):
            pass

    def _host_steps(self, record: TopicRecord) -> Iterator[None]:
        """Host the record's partitions here, one step per partition (see `create_paced`). A
        view has no partitions of its own to host: its source's serve it."""
        if record.name in self.cache.views:
            return
        if self.cluster is not None:
            self._create_partition_states(record)  # each replica takes its role from the state's watch
            return
        config = self.log_config(record.configs)
        for index, replicas in sorted(record.assignment.items()):
            if self.broker_id in replicas:
                self.replicas.host(record.name, index, record.topic_id, config, replicas)
                yield

    def _create_partition_states(self, record: TopicRecord) -> None:
        """The first states of the record's partitions that have none (after a restart)."""
        assert self.cluster is not None
        missing = {index: state for index, state in self._initial_states(record).items()
                   if self.store.get_partition_state(record.name, index) is None}
        if missing:
            self.store.create_partition_states(record.name, missing)

    def _initial_states(self, record: TopicRecord, only: set[int] | None = None) -> dict[int, PartitionState]:
        assert self.cluster is not None
        live = set(self.live_brokers())
        return {index: initial_state(replicas, live, self.cluster.controller_epoch)
                for index, replicas in record.assignment.items() if only is None or index in only}

    def create(self, spec: TopicSpec, validate_only: bool = False) -> TopicRecord:
        """Create a topic with the store written inline: the embedded node's internal topics and
        tests. Request paths use `create_paced`, whose store writes run off the event loop."""
        record = self._prepare(spec)
        if validate_only:
            return record
        self._commit(record, self._host)
        return record

    async def create_paced(self, spec: TopicSpec, pacer: Pacer | None = None,
                           validate_only: bool = False, charge: Charge | None = None) -> TopicRecord:
        """`create`, with a turn of the event loop for other clients between partitions: creating
        10,000 partition logs takes seconds. `charge` is given the partitions to create once the
        topic is valid, before anything is written (the controller mutation quota, which may
        refuse by raising)."""
        record = self._prepare(spec)
        if validate_only:
            return record
        if charge is not None:
            charge(len(record.assignment))
        if self.cluster is not None:
            # The topic and its partitions' first states, on the writer's thread; each replica
            # takes its role from the states' watch.
            states = {} if is_view(record.configs) else self._initial_states(record)
            await self.writer.run(self._create_in_store, record, states)
            self._created(record)
            return record
        steps = self._host_steps(record)
        pacer = pacer or Pacer()

        def host_first(_: TopicRecord) -> None:
            next(steps, None)

        self._commit(record, host_first)
        try:
            for _ in steps:
                await pacer.tick()
        except Exception as e:
            self._fail_creation(record, e)
        return record

    def _create_in_store(self, record: TopicRecord, states: Mapping[int, PartitionState]) -> None:
        """All or nothing: a topic whose partition states cannot be created is removed again."""
        self.store.create_topic(record.name, record.topic_id, record.assignment, record.configs)
        try:
            self.store.create_partition_states(record.name, states)
        except Exception as e:
            log.warning("creating the partition states of topic %s failed; removing it", record.name)
            self.store.delete_topic(record.name)
            if isinstance(e, KafkaError):
                raise
            raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR,
                             f"Topic '{record.name}' could not be created: {e}") from e

    def _created(self, record: TopicRecord) -> None:
        self.cache.put_topic(record)
        if self.cluster is not None:
            self.cluster.note_created(record.name)
        log.info("created topic %s with %d partitions", record.name, len(record.assignment))

    def _prepare(self, spec: TopicSpec) -> TopicRecord:
        validate_topic_name(spec.name)
        if self.cache.topic(spec.name) is not None:
            raise KafkaError(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{spec.name}' already exists.")
        configs = dict(spec.configs or {})
        config = self.log_config(configs)  # raises INVALID_CONFIG
        self._check_retry_topic(spec.name, config)
        self._check_tiering(config, None)
        if view_of(spec.name, configs) is not None:
            assignment = self._view_assignment(spec, configs)
        else:
            assignment = self._check_assignment(spec.assignment) if spec.assignment else self._plan(spec)
        return TopicRecord(name=spec.name, topic_id=uuid.uuid4(), assignment=assignment, configs=configs)

    def _view_assignment(self, spec: TopicSpec, configs: Mapping[str, str]) -> dict[int, list[int]]:
        """A view's partitions are its source's: the source must be a plain topic of clients'
        records, and a view takes no settings of a log it does not have."""
        self._check_view_configs(spec.name, configs)
        source = self.cache.topic(configs[SOURCE_CONFIG])
        assert source is not None
        count = len(source.assignment)
        if spec.num_partitions not in (-1, count) or spec.assignment:
            raise KafkaError(ErrorCode.INVALID_PARTITIONS,
                             f"view {spec.name} has the {count} partition(s) of its source {source.name}")
        factor = len(source.assignment[0]) if source.assignment else 0
        if spec.replication_factor not in (-1, factor):
            raise KafkaError(ErrorCode.INVALID_REPLICATION_FACTOR,
                             f"view {spec.name} is served by the {factor} replica(s) of its source {source.name}")
        return {index: list(replicas) for index, replicas in source.assignment.items()}

    def _check_view_configs(self, name: str, configs: Mapping[str, str]) -> None:
        """INVALID_CONFIG unless `configs` make `name` a view of an existing plain topic."""
        others = sorted(set(configs) - VIEW_CONFIGS)
        if others:
            raise KafkaError(ErrorCode.INVALID_CONFIG,
                             f"{others[0]} has no meaning on view {name}: a view has no log of its own")
        source_name = configs[SOURCE_CONFIG]
        if source_name == name:
            raise KafkaError(ErrorCode.INVALID_CONFIG, f"view {name} cannot read itself")
        source = self.cache.topic(source_name)
        if source is None:
            raise KafkaError(ErrorCode.INVALID_CONFIG, f"the source topic {source_name} of view {name} does not exist")
        if source_name in self.cache.views:
            raise KafkaError(ErrorCode.INVALID_CONFIG,
                             f"{source_name} is itself a view: a view reads a topic, not another view")
        if source_name in INTERNAL_TOPICS or source_name.startswith("__"):
            raise KafkaError(ErrorCode.INVALID_CONFIG, f"{source_name} is an internal topic: it cannot have views")
        source_config = self.log_config(source.configs)
        if source_config.is_retry_topic:
            raise KafkaError(ErrorCode.INVALID_CONFIG, f"{source_name} is a retry topic: it cannot have views")
        if source_config.remote_storage_enable:
            # Its archived offsets are read by the archive, which views do not read (yet).
            raise KafkaError(ErrorCode.INVALID_CONFIG, f"{source_name} is a tiered topic (remote.storage.enable): "
                             "it cannot have views")

    def _commit(self, record: TopicRecord, host: Callable[[TopicRecord], None]) -> None:
        self.store.create_topic(record.name, record.topic_id, record.assignment, record.configs)
        self.cache.put_topic(record)
        try:
            host(record)
        except Exception as e:
            self._fail_creation(record, e)
        self._created(record)

    def _fail_creation(self, record: TopicRecord, error: Exception) -> None:
        """All or nothing: no topic without its logs."""
        self._abandon(record.name)
        if isinstance(error, KafkaError):
            raise error
        raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR, f"Topic '{record.name}' could not be created: {error}") \
            from error

    def _abandon(self, name: str) -> None:
        """Undo a creation that failed half way: its logs and its record go."""
        log.warning("creating topic %s failed; removing what was created", name)
        self.cache.remove_topic(name)
        try:
            self.replicas.remove_topic(name)
        finally:
            try:
                self.store.delete_topic(name)
            except Exception:
                log.exception("topic %s could not be removed from the metadata store; the next start "
                              "creates its logs", name)

    def _check_assignment(self, assignment: dict[int, list[int]]) -> dict[int, list[int]]:
        if len(assignment) > MAX_PARTITIONS_PER_REQUEST:
            raise KafkaError(ErrorCode.POLICY_VIOLATION, "Excessively large number of partitions per request.")
        if sorted(assignment) != list(range(len(assignment))):
            raise KafkaError(ErrorCode.INVALID_REPLICATION_ASSIGNMENT, "Partitions must be numbered 0 to N-1.")
        factors = {len(replicas) for replicas in assignment.values()}
        if len(factors) != 1:
            raise KafkaError(ErrorCode.INVALID_REPLICATION_ASSIGNMENT, "All partitions need the same replication factor.")
        self._check_replicas(assignment)
        return assignment

    def _check_replicas(self, assignment: Mapping[int, list[int]]) -> None:
        live = set(self.live_brokers())
        for index, replicas in assignment.items():
            if not replicas or len(set(replicas)) != len(replicas):
                raise KafkaError(ErrorCode.INVALID_REPLICATION_ASSIGNMENT, f"Partition {index} has empty or duplicate replicas.")
            unknown = set(replicas) - live
            if unknown:
                raise KafkaError(
                    ErrorCode.INVALID_REPLICATION_ASSIGNMENT, f"Partition {index} is assigned to unknown brokers {sorted(unknown)}."
                )

    def _plan(self, spec: TopicSpec) -> dict[int, list[int]]:
        partitions = self.default_partitions if spec.num_partitions == -1 else spec.num_partitions
        factor = self.default_replication_factor if spec.replication_factor == -1 else spec.replication_factor
        if partitions < 1:
            raise KafkaError(ErrorCode.INVALID_PARTITIONS, "Number of partitions must be larger than 0.")
        if partitions > MAX_PARTITIONS_PER_REQUEST:
            raise KafkaError(ErrorCode.POLICY_VIOLATION, "Excessively large number of partitions per request.")
        if factor < 1:
            raise KafkaError(ErrorCode.INVALID_REPLICATION_FACTOR, "Replication factor must be larger than 0.")
        brokers = self._placement_order()
        if factor > len(brokers):
            raise KafkaError(
                ErrorCode.INVALID_REPLICATION_FACTOR,
                f"Replication factor: {factor} larger than available brokers: {len(brokers)}.",
            )
        return {
            p: [brokers[(p + r) % len(brokers)] for r in range(factor)] for p in range(partitions)
        }

    async def delete_paced(self, name: str, pacer: Pacer, charge: Charge | None = None) -> TopicRecord:
        """Delete a topic, giving other clients a turn between partitions; `charge` is given its
        partitions first (as in `create_paced`)."""
        record = self.require(name)
        views = self.cache.views_of(name)
        if views:
            raise KafkaError(ErrorCode.POLICY_VIOLATION,
                             f"topic {name} has views ({', '.join(views)}): delete them first "
                             "(`kbroker topics --delete --force` deletes them with it)")
        if charge is not None:
            charge(len(record.assignment))
        await self.writer.run(self.store.delete_topic, name)
        self.cache.remove_topic(name)
        if self.cluster is not None:
            self.cluster.note_deleted(name)
        for _ in self.replicas.remove_topic_steps(name):
            await pacer.tick()
        log.info("deleted topic %s", name)
        return record

    def require(self, name: str) -> TopicRecord:
        return self.cache.require(name)

    async def add_partitions_paced(self, name: str, count: int, assignment: list[list[int]] | None,
                                   validate_only: bool, pacer: Pacer, charge: Charge | None = None) -> None:
        """Grow a topic to `count` partitions, on the given replicas or spread like creation
        does, giving other clients a turn between new partitions; `charge` is given the new
        partitions once valid (as in `create_paced`)."""
        record = self.require(name)
        if name in self.cache.views:
            raise KafkaError(ErrorCode.INVALID_TOPIC, f"view {name} has the partitions of its source "
                             f"{self.cache.views[name].source}: add partitions to the source")
        new = self._new_partitions(record, count, assignment)
        if validate_only:
            return
        if charge is not None:
            charge(len(new))
        grown = dataclasses.replace(record, assignment={**record.assignment, **new})
        if self.cluster is not None:
            await self.writer.run(self._add_in_store, name, new, self._initial_states(grown, set(new)))
            self.cache.put_topic(grown)
        else:
            await self.writer.run(self.store.add_partitions, name, new)
            self.cache.put_topic(grown)
            for _ in self._host_steps(grown):
                await pacer.tick()
        log.info("topic %s grew from %d to %d partitions", name, len(record.assignment), count)

    def _add_in_store(self, name: str, new: Mapping[int, list[int]], states: Mapping[int, PartitionState]) -> None:
        """On the writer's thread: the new partitions and their first states; then the first
        partition's state is rewritten unchanged, so every broker's watch re-reads the topic
        (topic watches only see names)."""
        self.store.add_partitions(name, new)
        self.store.create_partition_states(name, states)
        assert self.cluster is not None
        first = self.store.get_partition_state(name, 0)
        if first is not None:
            self.cluster.touch_state((name, 0), first)

    def _new_partitions(self, record: TopicRecord, count: int, assignment: list[list[int]] | None
                        ) -> dict[int, list[int]]:
        name = record.name
        current = len(record.assignment)
        if count < current:
            raise KafkaError(
                ErrorCode.INVALID_PARTITIONS,
                f"The topic {name} currently has {current} partition(s); {count} would not be an increase.",
            )
        if count == current:
            raise KafkaError(ErrorCode.INVALID_PARTITIONS, f"Topic already has {current} partition(s).")
        if count - current > MAX_PARTITIONS_PER_REQUEST:
            raise KafkaError(ErrorCode.POLICY_VIOLATION, "Excessively large number of partitions per request.")
        factor = len(record.assignment[0])
        if assignment is None:
            brokers = self._placement_order()
            return {p: [brokers[(p + r) % len(brokers)] for r in range(factor)] for p in range(current, count)}
        return self._check_new_assignment(assignment, current, count, factor)

    def _check_new_assignment(
        self, assignment: list[list[int]], current: int, count: int, factor: int
    ) -> dict[int, list[int]]:
        if len(assignment) != count - current:
            raise KafkaError(
                ErrorCode.INVALID_REPLICATION_ASSIGNMENT,
                f"Attempted to add {count - current} additional partition(s), "
                f"but only {len(assignment)} assignment(s) were specified.",
            )
        new = {current + i: list(replicas) for i, replicas in enumerate(assignment)}
        for index, replicas in new.items():
            if len(replicas) != factor:
                raise KafkaError(
                    ErrorCode.INVALID_REPLICATION_ASSIGNMENT,
                    f"Inconsistent replication factor between partitions, partition 0 has {factor} "
                    f"while partition {index} has replication factor {len(replicas)}.",
                )
        self._check_replicas(new)
        return new

    def set_defaults(self, topic_defaults: Mapping[str, str]) -> None:
        """New broker-level defaults: every topic without its own override follows them."""
        self.topic_defaults = dict(topic_defaults)
        for record in self.cache.topic_records():
            self.replicas.update_config(record.name, self.log_config(record.configs))

    async def set_configs(self, name: str, configs: Mapping[str, str], validate_only: bool = False) -> None:
        record = self.require(name)
        config = self.log_config(configs)
        self._check_retry_topic(name, config)
        self._check_tiering(config, self.log_config(record.configs), name)
        self._check_view_change(record, configs)
        if validate_only:
            return
        await self.writer.run(self.store.set_topic_configs, name, dict(configs))
        self.configs_changed(name, configs)
        self.replicas.update_config(name, config)

    def _check_tiering(self, config: LogConfig, before: LogConfig | None, name: str | None = None) -> None:
        """A tiered topic needs an archiving broker; once tiered, a topic stays tiered (its
        archived segments would be left where no fetch reads them)."""
        if config.remote_storage_enable and not self.archiving:
            raise KafkaError(ErrorCode.INVALID_CONFIG, "Tiered Storage functionality is disabled in the broker. "
                             "Topic cannot be configured with remote log storage.")
        if config.remote_storage_enable and name is not None and self.cache.views_of(name):
            raise KafkaError(ErrorCode.INVALID_CONFIG, f"{name} has views ({', '.join(self.cache.views_of(name))}): "
                             "a topic with views cannot be tiered (views do not read the archive)")
        if before is not None and before.remote_storage_enable and not config.remote_storage_enable:
            raise KafkaError(ErrorCode.INVALID_CONFIG, "remote.storage.enable cannot be turned off: the topic's "
                             "archived segments would no longer be read or deleted")

    def _check_view_change(self, record: TopicRecord, configs: Mapping[str, str]) -> None:
        """A view's filter and tag header may change (its consumers' offsets stay valid: they are
        the source's); what it reads may not, and a topic never turns into a view or back."""
        view = self.cache.views.get(record.name)
        changed = view_of(record.name, configs)  # INVALID_CONFIG for a filter that does not parse
        if view is None:
            if changed is not None:
                raise KafkaError(ErrorCode.INVALID_CONFIG, f"{record.name} is a topic with its own log: "
                                 f"{SOURCE_CONFIG} is set only when a view is created")
            return
        if changed is None or changed.source != view.source:
            raise KafkaError(ErrorCode.INVALID_CONFIG,
                             f"view {record.name} reads {view.source}: {SOURCE_CONFIG} cannot change")
        self._check_view_configs(record.name, configs)

    def _check_retry_topic(self, name: str, config: LogConfig) -> None:
        """A retry topic's target and dead-letter topics must exist and be plain topics, so a
        record cannot go round in a loop (INVALID_CONFIG otherwise, at create or alter time)."""
        if not config.is_retry_topic:
            return
        for setting, other in (("retry.target.topic", config.retry_target_topic),
                               ("retry.dead.letter.topic", config.retry_dead_letter_topic)):
            if not other:
                continue
            if other == name:
                raise KafkaError(ErrorCode.INVALID_CONFIG, f"{setting} of retry topic {name} is the topic itself: "
                                 "its records would be retried in a loop")
            if other.startswith("__"):
                raise KafkaError(ErrorCode.INVALID_CONFIG, f"{setting} {other} is an internal topic")
            if other in self.cache.views:
                raise KafkaError(ErrorCode.INVALID_CONFIG, f"{setting} {other} is a view: views are read-only")
            record = self.cache.topic(other)
            if record is None:
                raise KafkaError(ErrorCode.INVALID_CONFIG, f"{setting} {other} of retry topic {name} does not exist: "
                                 "create it first")
            if self.log_config(record.configs).is_retry_topic:
                raise KafkaError(ErrorCode.INVALID_CONFIG, f"{setting} {other} of {name} is itself a retry topic: "
                                 "retry topics do not chain")
        if config.retry_dead_letter_topic == config.retry_target_topic:
            raise KafkaError(ErrorCode.INVALID_CONFIG, f"retry.dead.letter.topic of {name} is its retry.target.topic: "
                             "dead letters would be retried again")
        for record in self.cache.topic_records():
            other = self.log_config(record.configs)
            if record.name != name and name in (other.retry_target_topic, other.retry_dead_letter_topic):
                raise KafkaError(ErrorCode.INVALID_CONFIG, f"{name} receives the records of retry topic "
                                 f"{record.name}, so it cannot be a retry topic itself")

    def configs_changed(self, name: str, configs: Mapping[str, str]) -> None:
        """A topic's overrides are now `configs` (written here, or notified by the store)."""
        record = self.cache.topic(name)
        if record is not None:
            self.cache.put_topic(dataclasses.replace(record, configs=dict(configs)))
