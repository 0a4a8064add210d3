"""Client quotas, as Kafka's ClientQuotaManager keeps and enforces them (KIP-13, KIP-55, KIP-219).

Entities are users, client ids and users' client ids, each possibly the default (`<default>`),
stored as Kafka stores them in ZooKeeper (`/config/users/<user>`, `/config/clients/<client-id>`,
`/config/users/<user>/clients/<client-id>`), in the metadata store. `ClientQuotas` holds every
entity's quota values in memory, loaded at start and kept current through the store's change
notifications (so a quota set through any broker applies on every broker), and owns one
`QuotaManager` per quota key that is enforced: `producer_byte_rate` (Produce),
`consumer_byte_rate` (Fetch by consumers), `request_percentage` (every client request, charged
by the connection with its handler's time on the event loop) and `controller_mutation_rate`
(partitions created and deleted by CreateTopics, CreatePartitions and DeleteTopics;
`MutationQuotaManager`, Kafka's ControllerMutationQuotaManager, measured with a TokenBucket).

A `QuotaManager` resolves the quota of a (user principal, client id) pair by Kafka's precedence
and measures its rate with Kafka's Rate over a SampledStat (`quota.window.num` windows of
`quota.window.size.seconds`), one sensor per quota identity (the metric tags of Kafka's
DefaultQuotaCallback: clients sharing a user quota share its sensor). Recording returns the
throttle time Kafka computes: `(observed - quota) / quota * window`. Time is passed in (monotonic
milliseconds), so the arithmetic is tested without waiting. While no quota of its key was ever
set, `enabled` is False and the request paths skip everything else (one attribute read).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from kbroker.clock import WallClock, monotonic_ms
from kbroker.cluster.store_writer import StoreWriter
from kbroker.metadata.store import MetadataStore, desanitize_entity_name, sanitize_entity_name
from kbroker.rates import Rate, TokenBucket
from protocol.errors import ErrorCode, KafkaError

log = logging.getLogger("kbroker.quotas")

DEFAULT = "<default>"  # the default entity's name in paths (a sanitized name never has '<')
PRODUCER_BYTE_RATE = "producer_byte_rate"
CONSUMER_BYTE_RATE = "consumer_byte_rate"
REQUEST_PERCENTAGE = "request_percentage"
CONTROLLER_MUTATION_RATE = "controller_mutation_rate"
# Kafka's QuotaConfigs for users and clients: name -> whether the value is a whole number (LONG)
# rather than a DOUBLE.
QUOTA_KEYS: dict[str, bool] = {PRODUCER_BYTE_RATE: True, CONSUMER_BYTE_RATE: True,
                               REQUEST_PERCENTAGE: False, CONTROLLER_MUTATION_RATE: False}
DEFAULT_WINDOW_NUM = 11
DEFAULT_WINDOW_SIZE_SECONDS = 1
# Kafka purges a client's sensors after an hour without a record.
INACTIVE_SENSOR_EXPIRATION_MS = 3600 * 1000
_PURGE_INTERVAL_MS = 60 * 1000
UNLIMITED = float(2**63 - 1)  # Long.MaxValue: no quota

# Kafka's QuotaTypes: which levels of entities have (or had) a quota.
NO_QUOTAS = 0
CLIENT_ID_QUOTA = 1
USER_QUOTA = 2
USER_CLIENT_ID_QUOTA = 4


@dataclass(frozen=True, slots=True)
class QuotaEntity:
    """A quota entity by sanitized names: `user`/`client_id` None when the entity has no such
    part, DEFAULT for the default one (user, client-id, or both)."""

    user: str | None
    client_id: str | None

    @property
    def path(self) -> str:
        """The entity's path under /config."""
        if self.user is None:
            return f"clients/{self.client_id}"
        if self.client_id is None:
            return f"users/{self.user}"
        return f"users/{self.user}/clients/{self.client_id}"

    @classmethod
    def from_path(cls, entity_type: str, name: str) -> QuotaEntity | None:
        """The entity a change notification or a listing names ("users", "alice/clients/c1"), None
        for anything else."""
        if entity_type == "clients" and name and "/" not in name:
            return cls(None, name)
        if entity_type != "users" or not name:
            return None
        user, slash, rest = name.partition("/")
        if not slash:
            return cls(user, None)
        kind, slash, client = rest.partition("/")
        if kind != "clients" or not slash or not client or "/" in client:
            return None
        return cls(user, client)

    @classmethod
    def of_names(cls, user: str | None, client_id: str | None, user_default: bool = False,
                 client_default: bool = False) -> QuotaEntity:
        """From wire names (None with the default flag: the default entity)."""
        return cls(DEFAULT if user_default else (None if user is None else sanitize_entity_name(user)),
                   DEFAULT if client_default else (None if client_id is None else sanitize_entity_name(client_id)))

    def wire(self) -> list[tuple[str, str | None]]:
        """(entity type, name or None for the default) pairs, as the quota APIs name entities."""
        parts: list[tuple[str, str | None]] = []
        if self.user is not None:
            parts.append(("user", None if self.user == DEFAULT else desanitize_entity_name(self.user)))
        if self.client_id is not None:
            parts.append(("client-id", None if self.client_id == DEFAULT else desanitize_entity_name(self.client_id)))
        return parts


def quota_values(configs: Mapping[str, str]) -> dict[str, float]:
    """The client quota configs among an entity's stored configs (SCRAM credentials share the
    user's), as numbers; a value that is no number is logged and left out."""
    values = {}
    for key, text in configs.items():
        if key in QUOTA_KEYS:
            try:
                values[key] = float(text)
            except ValueError:
                log.error("ignoring the stored quota %s=%r: not a number", key, text)
    return values


@functools.lru_cache(maxsize=4096)
def _sanitized(name: str) -> str:
    return sanitize_entity_name(name)


def principal_user(principal: str) -> str:
    """The name of a `User:<name>` principal (Kafka's quotas use KafkaPrincipal.getName)."""
    return principal.partition(":")[2]


# -- one quota key's manager ------------------------------------------------------------------------


class QuotaManager:
    """Kafka's ClientQuotaManager with its DefaultQuotaCallback, for one quota key."""

    def __init__(self, key: str, window_num: int = DEFAULT_WINDOW_NUM,
                 window_size_seconds: int = DEFAULT_WINDOW_SIZE_SECONDS, bounded: bool = False) -> None:
        self.key = key
        self.window_num = window_num
        self.window_ms = window_size_seconds * 1000
        # Request-time quotas throttle for at most one window (Kafka's ClientRequestQuotaManager).
        self.max_throttle_ms = self.window_ms if bounded else None
        self.enabled = False  # a quota of this key was set since start (Kafka's quotasEnabled)
        self._types = NO_QUOTAS
        self._quotas: dict[QuotaEntity, float] = {}
        self._sensors: dict[tuple[str, str], Any] = {}  # Rate here, TokenBucket for mutations
        self._last_purge_ms = 0

    # -- quotas ---------------------------------------------------------------------------------

    def update(self, entity: QuotaEntity, value: float | None) -> None:
        """Set (or, with None, remove) the entity's quota. As in Kafka, the levels of entities
        ever given a quota stay enabled until a restart."""
        if entity.user is not None:
            self._types |= USER_CLIENT_ID_QUOTA if entity.client_id is not None else USER_QUOTA
        elif entity.client_id is not None:
            self._types |= CLIENT_ID_QUOTA
        if value is None:
            self._quotas.pop(entity, None)
        else:
            self._quotas[entity] = value
        self.enabled = self._types != NO_QUOTAS

    def metric_tags(self, user: str, client_id: str) -> tuple[str, str]:
        """The identity whose rate counts (sanitized user, client id; "" for no such part):
        Kafka's DefaultQuotaCallback.quotaMetricTags."""
        types = self._types
        if types in (NO_QUOTAS, CLIENT_ID_QUOTA):
            return "", client_id
        if types == USER_QUOTA:
            return user, ""
        if types == USER_CLIENT_ID_QUOTA:
            return user, client_id
        quotas = self._quotas
        if QuotaEntity(user, client_id) in quotas or QuotaEntity(user, DEFAULT) in quotas:
            return user, client_id
        if QuotaEntity(user, None) in quotas:
            return user, ""
        if QuotaEntity(DEFAULT, client_id) in quotas or QuotaEntity(DEFAULT, DEFAULT) in quotas:
            return user, client_id
        if QuotaEntity(DEFAULT, None) in quotas:
            return user, ""
        return "", client_id

    def throttle_entity(self, principal: str, client_id: str) -> tuple[str, str]:
        """The entity a client's throttling is reported under (the metrics' entity_type and
        entity): the identity whose rate counts, as Kafka tags its throttle-time sensor."""
        user, client = self.metric_tags(_sanitized(principal_user(principal)), _sanitized(client_id))
        if user and client:
            return "user,client-id", f"{user},{client}"
        return ("user", user) if user else ("client-id", client)

    def limit(self, tags: tuple[str, str]) -> float:
        """The quota of an identity, by Kafka's precedence (DefaultQuotaCallback.quotaLimit);
        UNLIMITED when none applies."""
        user, client_id = tags
        quotas = self._quotas
        found: float | None = None
        if user and client_id:
            for entity in (QuotaEntity(user, client_id), QuotaEntity(user, DEFAULT), QuotaEntity(DEFAULT, client_id),
                           QuotaEntity(DEFAULT, DEFAULT)):
                found = quotas.get(entity)
                if found is not None:
                    break
        elif user:
            found = quotas.get(QuotaEntity(user, None))
            if found is None:
                found = quotas.get(QuotaEntity(DEFAULT, None))
        elif client_id:
            found = quotas.get(QuotaEntity(None, client_id))
            if found is None:
                found = quotas.get(QuotaEntity(None, DEFAULT))
        return UNLIMITED if found is None else found

    def quota(self, principal: str, client_id: str) -> float:
        """The quota that applies to a client (UNLIMITED: none)."""
        return self.limit(self.metric_tags(_sanitized(principal_user(principal)), _sanitized(client_id)))

    # -- measuring ------------------------------------------------------------------------------

    def record(self, principal: str, client_id: str, value: float, now_ms: int) -> int:
        """Record `value` (bytes) for the client at `now_ms` and return the throttle time in ms
        (0 within its quota): Kafka's recordAndGetThrottleTimeMs."""
        tags = self.metric_tags(_sanitized(principal_user(principal)), _sanitized(client_id))
        rate = self._sensor(tags, now_ms)
        bound = self.limit(tags)
        if bound >= UNLIMITED:
            rate.record(value, now_ms)
            return 0
        return rate.record_over(value, bound, now_ms, self.max_throttle_ms)

    def unrecord(self, principal: str, client_id: str, value: float, now_ms: int) -> None:
        """Take back a recorded value (a throttled fetch answers without its data)."""
        tags = self.metric_tags(_sanitized(principal_user(principal)), _sanitized(client_id))
        self._sensor(tags, now_ms).record(-value, now_ms)

    def max_value_in_window(self, principal: str, client_id: str) -> float:
        """Kafka's getMaxValueInQuotaWindow: the most one request may carry without being sure to
        be throttled, the quota times `window_num - 1` windows."""
        if not self.enabled:
            return UNLIMITED
        bound = self.quota(principal, client_id)
        if bound >= UNLIMITED:
            return UNLIMITED
        return bound * (self.window_num - 1) * self.window_ms / 1000

    def _new_sensor(self) -> Any:
        return Rate(self.window_num, self.window_ms)

    def _sensor(self, tags: tuple[str, str], now_ms: int) -> Any:
        rate = self._sensors.get(tags)
        if rate is None:
            rate = self._sensors[tags] = self._new_sensor()
        if now_ms - self._last_purge_ms >= _PURGE_INTERVAL_MS:
            self._last_purge_ms = now_ms
            idle = [t for t, r in self._sensors.items()
                    if t != tags and now_ms - r.last_record_ms > INACTIVE_SENSOR_EXPIRATION_MS]
            for t in idle:
                del self._sensors[t]
        return rate


# -- controller mutations (KIP-599) ------------------------------------------------------------------

class MutationQuotaManager(QuotaManager):
    """Kafka's ControllerMutationQuotaManager: `controller_mutation_rate` partitions created or
    deleted per second, by the same entities, precedence and metric tags as the byte rates, but
    measured with a TokenBucket (a burst of `quota.window.num * quota.window.size.seconds`
    seconds' worth, refilled at the quota). Requests take a `MutationQuota` of their client,
    strict or permissive by their version."""

    def __init__(self, window_num: int = DEFAULT_WINDOW_NUM,
                 window_size_seconds: int = DEFAULT_WINDOW_SIZE_SECONDS) -> None:
        super().__init__(CONTROLLER_MUTATION_RATE, window_num, window_size_seconds)

    def _new_sensor(self) -> TokenBucket:
        return TokenBucket()

    def new_quota(self, principal: str, client_id: str, strict: bool) -> MutationQuota:
        """The client's quota for one request (Kafka's newQuotaFor). Call only while `enabled`
        (Kafka answers the unbounded quota otherwise)."""
        return MutationQuota(self, self.metric_tags(_sanitized(principal_user(principal)), _sanitized(client_id)),
                             strict, self.throttle_entity(principal, client_id))

    def bucket(self, tags: tuple[str, str], now_ms: int) -> tuple[TokenBucket | None, float, float]:
        """The identity's bucket, its quota and burst; no bucket when no quota applies (Kafka's
        quota is then Long.MaxValue, a bucket never exhausted)."""
        bound = self.limit(tags)
        if bound >= UNLIMITED:
            # Kafka's bucket would be refilled to the brim at once when a quota comes again.
            self._sensors.pop(tags, None)
            return None, bound, bound
        return self._sensor(tags, now_ms), bound, self.window_num * self.window_ms / 1000 * bound


class MutationQuota:
    """One request's controller mutation quota: Kafka's StrictControllerMutationQuota (CreateTopics
    v6+, CreatePartitions v3+, DeleteTopics v5+) or PermissiveControllerMutationQuota (older
    versions)."""

    __slots__ = ("_manager", "_recorded_ms", "_tags", "_throttle_ms", "entity", "strict")

    def __init__(self, manager: MutationQuotaManager, tags: tuple[str, str], strict: bool,
                 entity: tuple[str, str]) -> None:
        self._manager = manager
        self._tags = tags
        self.strict = strict
        self.entity = entity  # (entity type, name) the throttling is reported under
        self._throttle_ms = 0
        self._recorded_ms = 0

    def record(self, permits: float, now_ms: int) -> None:
        """Count `permits` partitions created or deleted. Strict: when the client's credits are
        already below zero nothing is counted and THROTTLING_QUOTA_EXCEEDED is raised (so one
        mutation may take them below zero, the next is refused). Permissive: always counted; when
        that takes the credits below zero the answer is throttled."""
        bucket, bound, burst = self._manager.bucket(self._tags, now_ms)
        if bucket is None:
            return
        if self.strict:
            tokens = bucket.measure(bound, burst, now_ms)
            if tokens < 0:
                self._violated(tokens, bound, now_ms)
                # No message: Kafka's ApiError leaves out the error's generic one.
                raise KafkaError(ErrorCode.THROTTLING_QUOTA_EXCEEDED)
            bucket.record(permits, bound, burst, now_ms)
            return
        bucket.record(permits, bound, burst, now_ms)
        tokens = bucket.measure(bound, burst, now_ms)
        if tokens < 0:
            self._violated(tokens, bound, now_ms)

    def _violated(self, tokens: float, bound: float, now_ms: int) -> None:
        # Kafka's ControllerMutationQuotaManager.throttleTimeMs: the time to refill to zero.
        self._throttle_ms = math.floor(-tokens / bound * 1000 + 0.5)  # Java's Math.round
        self._recorded_ms = now_ms

    def throttle_time_ms(self, now_ms: int) -> int:
        """The answer's throttle time: the last violation's, less the time since (Kafka's
        AbstractControllerMutationQuota.throttleTime); 0 when none."""
        return max(0, self._throttle_ms - (now_ms - self._recorded_ms))


# -- the service --------------------------------------------------------------------------------


class ClientQuotas:
    """Every entity's quotas, in memory, and the managers that enforce them (module docstring)."""

    def __init__(self, store: MetadataStore, writer: StoreWriter, window_num: int = DEFAULT_WINDOW_NUM,
                 window_size_seconds: int = DEFAULT_WINDOW_SIZE_SECONDS, clock: WallClock = monotonic_ms, *,
                 controller_window_num: int = DEFAULT_WINDOW_NUM,
                 controller_window_size_seconds: int = DEFAULT_WINDOW_SIZE_SECONDS) -> None:
        self._store = store
        self.now_ms = clock  # the time the managers are given (monotonic: a wall-clock step is no burst)
        self._writer = writer
        self._entities: dict[QuotaEntity, dict[str, float]] = {}
        self.produce = QuotaManager(PRODUCER_BYTE_RATE, window_num, window_size_seconds)
        self.fetch = QuotaManager(CONSUMER_BYTE_RATE, window_num, window_size_seconds)
        self.request = QuotaManager(REQUEST_PERCENTAGE, window_num, window_size_seconds, bounded=True)
        # Kafka sizes the mutation quota by its own controller.quota.window.* settings.
        self.mutations = MutationQuotaManager(controller_window_num, controller_window_size_seconds)
        self._managers = {m.key: m for m in (self.produce, self.fetch, self.request, self.mutations)}
        self._unwatch: Callable[[], None] | None = None

    def load(self) -> None:
        for entity_type in ("users", "clients"):
            for path, configs in self._store.list_entity_configs(entity_type).items():
                entity = QuotaEntity.from_path(entity_type, path)
                if entity is not None:
                    self._hold(entity, configs)

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        """Follow changes made through any broker: the entity is read on the thread that reports
        the change (ZooKeeper's), then held on the loop."""
        def on_change(entity_type: str, name: str) -> None:
            entity = QuotaEntity.from_path(entity_type, name)
            if entity is None:
                return
            try:
                configs = self._store.get_entity_configs(entity.path)
            except Exception:
                log.exception("reading the quotas of changed entity %s failed", entity.path)
                return
            loop.call_soon_threadsafe(self._hold, entity, configs)

        self._unwatch = self._store.watch_config_changes(on_change)

    def stop(self) -> None:
        if self._unwatch is not None:
            self._unwatch()
            self._unwatch = None

    def _hold(self, entity: QuotaEntity, configs: Mapping[str, str]) -> None:
        values = quota_values(configs)
        before = self._entities.get(entity, {})
        if values:
            self._entities[entity] = values
        else:
            self._entities.pop(entity, None)
        for key, manager in self._managers.items():
            if values.get(key) != before.get(key):
                manager.update(entity, values.get(key))

    def entities(self) -> dict[QuotaEntity, dict[str, float]]:
        return {entity: dict(values) for entity, values in self._entities.items()}

    async def alter(self, entity: QuotaEntity, edit: Callable[[dict[str, str]], dict[str, str] | None]) -> None:
        """Replace the entity's stored configs by `edit(current)` on the store writer's thread
        (nothing is written when it returns None: a validation), then hold them here at once;
        the other brokers hear of it through the change notification."""
        def read_edit_write() -> dict[str, str] | None:
            configs = edit(self._store.get_entity_configs(entity.path))
            if configs is not None:
                self._store.set_entity_configs(entity.path, configs)
            return configs

        configs = await self._writer.run(read_edit_write)
        if configs is not None:
            self._hold(entity, configs)

    async def read_all(self) -> dict[QuotaEntity, dict[str, float]]:
        """Every entity with quotas, as the store has them now (DescribeClientQuotas reads the
        store, as Kafka's ZooKeeper mode does)."""
        def read() -> dict[QuotaEntity, dict[str, float]]:
            found = {}
            for entity_type in ("users", "clients"):
                for path, configs in self._store.list_entity_configs(entity_type).items():
                    entity = QuotaEntity.from_path(entity_type, path)
                    values = quota_values(configs)
                    if entity is not None and values:
                        found[entity] = values
            return found

        return await self._writer.run(read)
