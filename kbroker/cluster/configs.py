"""Config resources as DescribeConfigs/AlterConfigs see them: topics and brokers.

A topic's effective value comes from its own override (DYNAMIC_TOPIC_CONFIG), else a dynamic
broker config (per broker, then cluster default), else `server.properties` (STATIC_BROKER_CONFIG),
else the built-in default (DEFAULT_CONFIG) — Kafka's order. Values are strings, as on the wire.
"""

from __future__ import annotations

import asyncio
import enum
import logging
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from kbroker import dynamic_config
from kbroker.cluster.group_configs import GROUP_CONFIG_DEFS
from kbroker.config import TOPIC_CONFIG_SYNONYMS, ConfigError, parse_ip_overrides
from kbroker.storage.log_config import LogConfig
from protocol.errors import ErrorCode, KafkaError

if TYPE_CHECKING:
    from kbroker.broker import Broker

log = logging.getLogger("kbroker.configs")


class ResourceType(enum.IntEnum):
    TOPIC = 2
    BROKER = 4
    BROKER_LOGGER = 8
    GROUP = 32


class ConfigSource(enum.IntEnum):
    DYNAMIC_TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5
    DYNAMIC_BROKER_LOGGER_CONFIG = 6
    GROUP_CONFIG = 8


class ConfigType(enum.IntEnum):
    UNKNOWN = 0
    BOOLEAN = 1
    STRING = 2
    INT = 3
    SHORT = 4
    LONG = 5
    DOUBLE = 6
    LIST = 7
    CLASS = 8
    PASSWORD = 9


_SOURCE_OF = {
    "dynamic": ConfigSource.DYNAMIC_BROKER_CONFIG,
    "dynamic-default": ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG,
    "static": ConfigSource.STATIC_BROKER_CONFIG,
    "default": ConfigSource.DEFAULT_CONFIG,
}
# The store's name of the cluster-wide default entity, in change notifications.
DEFAULT_ENTITY = "<default>"


def config_entry(
    name: str, value: str | None, source: ConfigSource, synonyms: list[dict[str, Any]] | None = None,
    read_only: bool = False, config_type: int = ConfigType.UNKNOWN, sensitive: bool = False,
) -> dict[str, Any]:
    """One config as DescribeConfigs (and CreateTopics) report it; unused fields per version drop out."""
    return {
        "name": name,
        "value": None if sensitive else value,
        "read_only": read_only,
        "is_default": source == ConfigSource.DEFAULT_CONFIG,
        "config_source": source,
        "is_sensitive": sensitive,
        "synonyms": synonyms or [],
        "config_type": config_type,
        "documentation": None,
    }


def _synonym(name: str, value: str | None, source: ConfigSource) -> dict[str, Any]:
    return {"name": name, "value": value, "source": source}


class ConfigService:
    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.config = broker.config
        self.store = broker.store
        self._unwatch: Callable[[], None] | None = None
        self._load_dynamic()

    # -- dynamic broker configs (KIP-226) ---------------------------------------------------------

    def _load_dynamic(self) -> None:
        """Read the dynamic broker configs from the store into the broker's config. At start a
        stored security setting kbroker cannot honour stops the broker (never serve with less
        protection than configured)."""
        cluster_default = self.store.get_broker_configs(None)
        per_broker = self.store.get_broker_configs(self.config.broker_id)
        refused = dynamic_config.unhonoured_stored({**cluster_default, **per_broker})
        if refused:
            raise ConfigError(f"refusing to start: dynamic broker configs {', '.join(refused)} ask for security "
                              "kbroker does not implement yet; remove them from the metadata store")
        self.config.apply_dynamic(cluster_default, per_broker)

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        """Follow config changes made through any broker (the store's change notifications).
        What changed is read on the store's thread (kazoo's), so the event loop never waits for
        ZooKeeper, and applied on the loop."""
        def on_change(entity_type: str, entity_name: str) -> None:
            try:
                changed = self._read_change(entity_type, entity_name)
            except Exception:
                log.exception("reading a config change of %s/%s failed", entity_type, entity_name)
                return
            if changed is not None and not loop.is_closed():
                loop.call_soon_threadsafe(self._on_config_change, entity_type, entity_name, changed)

        self._unwatch = self.store.watch_config_changes(on_change)

    def stop(self) -> None:
        if self._unwatch is not None:
            self._unwatch()
            self._unwatch = None

    def _read_change(self, entity_type: str, entity_name: str) -> Any:
        """What a change notification is about, read from the store (on the store's thread):
        the dynamic broker configs (cluster default, this broker's), or a topic's overrides."""
        if entity_type == "brokers" and entity_name in (DEFAULT_ENTITY, str(self.config.broker_id)):
            return self.read_dynamic()
        if entity_type == "topics":
            record = self.store.get_topic(entity_name)
            return dict(record.configs) if record is not None else None
        return None

    def _on_config_change(self, entity_type: str, entity_name: str, changed: Any) -> None:
        try:
            if entity_type == "brokers":
                self.reload(*changed)
            elif entity_type == "topics":
                topics = self.broker.topics
                if topics.cache.topic(entity_name) is not None:
                    topics.configs_changed(entity_name, changed)
                    self.broker.replicas.update_config(entity_name, topics.log_config(changed))
        except Exception:
            log.exception("applying a config change of %s/%s failed", entity_type, entity_name)

    def read_dynamic(self) -> tuple[dict[str, str], dict[str, str]]:
        """The dynamic broker configs in the store: the cluster default's and this broker's."""
        return self.store.get_broker_configs(None), self.store.get_broker_configs(self.config.broker_id)

    def reload(self, cluster_default: dict[str, str], per_broker: dict[str, str]) -> None:
        """Apply dynamic broker configs read from the store to everything that uses them while running."""
        refused = dynamic_config.unhonoured_stored({**cluster_default, **per_broker})
        if refused:
            log.error("ignoring dynamic broker configs %s: security kbroker does not implement yet",
                      ", ".join(refused))
            cluster_default = {k: v for k, v in cluster_default.items() if k not in refused}
            per_broker = {k: v for k, v in per_broker.items() if k not in refused}
        self.config.apply_dynamic(cluster_default, per_broker)
        broker = self.broker
        broker.topics.set_defaults(self.topic_defaults())
        broker.log_manager.cleaner_backoff_ms = self.config.get("log.cleaner.backoff.ms")
        if broker.cluster is not None:
            broker.cluster.unclean_election = self.config.get("unclean.leader.election.enable")
        broker.server.max_connections = self.config.get("max.connections")
        broker.server.max_per_ip = self.config.get("max.connections.per.ip")
        broker.server.connection_rate.limit = self.config.get("max.connection.creation.rate")
        broker.server.per_ip_overrides = parse_ip_overrides(self.config.get("max.connections.per.ip.overrides"))

    # -- effective values -------------------------------------------------------------------------

    def topic_defaults(self) -> dict[str, str]:
        return self.config.topic_defaults()

    def _layers(self, default_entity_only: bool = False) -> list[tuple[str, Mapping[str, str | None]]]:
        layers = self.config.layers()
        return [(s, v) for s, v in layers if s == "dynamic-default"] if default_entity_only else layers

    # -- topics -----------------------------------------------------------------------------------

    def describe_topic(
        self, name: str, overrides: Mapping[str, str], keys: list[str] | None = None, synonyms: bool = False
    ) -> list[dict[str, Any]]:
        """As Kafka's ConfigHelper: the topic's override, then the broker config behind the default
        with its synonyms (Kafka's `configSynonyms`); the source is the first of these."""
        defaults = self.config.topic_default_entries()
        layers = self._layers()
        entries = []
        for config_name in sorted(defaults):
            if keys is not None and config_name not in keys:
                continue
            value = defaults[config_name][0]
            broker_names = TOPIC_CONFIG_SYNONYMS.get(config_name)
            chain = [
                _synonym(n, v, _SOURCE_OF[source])
                for n, v, source in (dynamic_config.synonym_chain(broker_names[0][0], layers) if broker_names else [])
            ]
            if config_name in overrides:
                value = overrides[config_name]
                chain.insert(0, _synonym(config_name, value, ConfigSource.DYNAMIC_TOPIC_CONFIG))
            source = chain[0]["source"] if chain else ConfigSource.DEFAULT_CONFIG
            entries.append(config_entry(
                config_name, value, source, chain if synonyms else None,
                config_type=dynamic_config.topic_config_type_code(config_name),
            ))
        return entries

    async def alter_topic(self, name: str, overrides: Mapping[str, str], validate_only: bool) -> None:
        """Replace a topic's overrides (AlterConfigs semantics)."""
        await self.broker.topics.set_configs(name, overrides, validate_only=validate_only)

    def topic_overrides(self, name: str) -> dict[str, str]:
        return dict(self.broker.topics.require(name).configs)

    # -- groups -----------------------------------------------------------------------------------

    def describe_group(self, group: str, keys: list[str] | None = None, synonyms: bool = False) -> list[dict[str, Any]]:
        """As Kafka's ConfigHelper for a GROUP: every group config, the group's own value first
        (GROUP_CONFIG), then the broker config behind it with its sources; none is read-only."""
        overrides = self.broker.group_configs.overrides(group)
        layers = self._layers()
        entries = []
        for name in sorted(GROUP_CONFIG_DEFS):
            if keys is not None and name not in keys:
                continue
            definition = GROUP_CONFIG_DEFS[name]
            chain = [
                _synonym(n, v, _SOURCE_OF[source])
                for n, v, source in (dynamic_config.synonym_chain(definition.synonym, layers)
                                     if definition.synonym else [])
            ]
            value = chain[0]["value"] if chain else definition.default
            if name in overrides:
                value = overrides[name]
                chain.insert(0, _synonym(name, value, ConfigSource.GROUP_CONFIG))
            source = chain[0]["source"] if chain else ConfigSource.DEFAULT_CONFIG
            entries.append(config_entry(
                name, value, source, chain if synonyms else None,
                config_type=dynamic_config.CONFIG_TYPE_CODES[definition.kind],
            ))
        return entries

    async def alter_group(self, group: str, overrides: Mapping[str, str], validate_only: bool) -> None:
        """Replace a group's configs (AlterConfigs semantics), after Kafka's checks."""
        await self.broker.group_configs.alter(group, overrides, validate_only)

    # -- brokers ----------------------------------------------------------------------------------

    def check_broker_resource(self, resource_name: str, describing: bool = False) -> int | None:
        """'' is the cluster-wide default entity; otherwise it must name this broker (Kafka's messages)."""
        if resource_name == "":
            return None
        try:
            broker_id = int(resource_name)
        except ValueError:
            what = "Broker" if describing else "Node"
            raise KafkaError(ErrorCode.INVALID_REQUEST,
                             f"{what} id must be an integer, but it is: {resource_name}") from None
        if broker_id != self.config.broker_id:
            expected = f"{self.config.broker_id} or empty string" if describing else str(self.config.broker_id)
            raise KafkaError(ErrorCode.INVALID_REQUEST,
                             f"Unexpected broker id, expected {expected}, but received {resource_name}")
        return broker_id

    def describe_broker(
        self, broker_id: int | None, keys: list[str] | None = None, synonyms: bool = False
    ) -> list[dict[str, Any]]:
        """As Kafka's ConfigHelper: this broker's configs (its own value of each, the source of
        the first synonym) or, for the default entity, only what was set on it."""
        default_entity = broker_id is None
        if default_entity:
            names = sorted(self.config.dynamic_default)
        else:
            stored = set(self.config.dynamic_default) | set(self.config.dynamic_per_broker)
            names = sorted(set(dynamic_config.reportable_broker_configs()) | stored)
        layers = self._layers(default_entity)
        entries = []
        for name in names:
            if keys is not None and name not in keys:
                continue
            value = next((v[name] for _, v in layers if v.get(name) is not None), None)
            chain = dynamic_config.synonym_chain(name, layers)
            source = _SOURCE_OF[chain[0][2]] if chain else ConfigSource.DEFAULT_CONFIG
            sensitive = dynamic_config.is_sensitive(name)
            entries.append(config_entry(
                name, value, source,
                [_synonym(n, None if sensitive else v, _SOURCE_OF[s]) for n, v, s in chain] if synonyms else None,
                read_only=dynamic_config.is_read_only(name), config_type=dynamic_config.config_type_code(name),
                sensitive=sensitive,
            ))
        return entries

    async def alter_broker(self, broker_id: int | None, configs: Mapping[str, str], validate_only: bool) -> None:
        """Replace the dynamic configs of this broker (or of the cluster default entity), after
        Kafka's checks and kbroker's (see kbroker/dynamic_config.py)."""
        def current(name: str) -> str | None:
            found = self.config.effective_text(name)
            return found[0] if found else None

        dynamic_config.check_update(configs, broker_id is not None, current)
        self._check_topic_defaults(broker_id, configs)
        if validate_only:
            return
        writer = self.broker.store_writer
        await writer.run(self.store.set_broker_configs, broker_id, configs)
        # At once here (read back in the order written); other brokers follow the store's change notification.
        self.reload(*await writer.run(self.read_dynamic))

    def _check_topic_defaults(self, broker_id: int | None, configs: Mapping[str, str]) -> None:
        """The topic defaults the update would give must make a valid log config."""
        cluster_default = dict(configs) if broker_id is None else self.config.dynamic_default
        per_broker = dict(configs) if broker_id is not None else self.config.dynamic_per_broker
        layers = self.config.layers(cluster_default, per_broker)
        try:
            LogConfig.from_properties(self.config.topic_defaults(layers))
        except KafkaError as e:
            raise KafkaError(ErrorCode.INVALID_REQUEST, e.message) from None

    def broker_overrides(self, broker_id: int | None) -> dict[str, str]:
        """The entity's dynamic configs as last read from the store (kept in memory, so a request
        never reads ZooKeeper)."""
        return dict(self.config.dynamic_default if broker_id is None else self.config.dynamic_per_broker)


# Log4j level names, as Kafka's tools show and set them, and the Python levels they mean.
LOG_LEVELS = {
    "OFF": logging.CRITICAL + 10,
    "FATAL": logging.CRITICAL,
    "ERROR": logging.ERROR,
    "WARN": logging.WARNING,
    "INFO": logging.INFO,
    "DEBUG": logging.DEBUG,
    "TRACE": 5,
}
ROOT_LOGGER = "root"
# The levels Kafka accepts, upper case only (LogLevelConfig.VALID_LOG_LEVELS), in the order it names them.
_VALID_LEVELS = "DEBUG, ERROR, FATAL, INFO, TRACE, WARN"


def _logger(name: str) -> logging.Logger:
    return logging.getLogger() if name == ROOT_LOGGER else logging.getLogger(name)


def _level_name(level: int) -> str:
    return min(LOG_LEVELS, key=lambda name: (abs(LOG_LEVELS[name] - level), name))


def logger_names() -> list[str]:
    """The root logger and every broker logger created so far."""
    known = [n for n in logging.root.manager.loggerDict if n == "kbroker" or n.startswith("kbroker.")]
    return [ROOT_LOGGER, *sorted(known)]


def describe_loggers(keys: list[str] | None) -> list[dict[str, Any]]:
    names = [n for n in logger_names() if keys is None or n in keys]
    return [
        config_entry(n, _level_name(_logger(n).getEffectiveLevel()), ConfigSource.DYNAMIC_BROKER_LOGGER_CONFIG)
        for n in names
    ]


def set_logger_level(name: str, level: str | None, validate_only: bool) -> None:
    """Set a logger's level (None: inherit from its parent again, as Kafka's DELETE does)."""
    if name not in logger_names():
        raise KafkaError(ErrorCode.INVALID_CONFIG, f"Logger {name} does not exist!")
    if level is not None and level not in _VALID_LEVELS.split(", "):
        raise KafkaError(ErrorCode.INVALID_CONFIG, f"Cannot set the log level of {name} to {level} as it is not a "
                                                   f"supported log level. Valid log levels are {_VALID_LEVELS}")
    if level is None and name == ROOT_LOGGER:
        raise KafkaError(ErrorCode.INVALID_REQUEST, "Removing the log level of the root logger is not allowed")
    if validate_only:
        return
    _logger(name).setLevel(LOG_LEVELS[level] if level is not None else logging.NOTSET)
