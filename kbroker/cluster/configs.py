"""Config resources as DescribeConfigs/AlterConfigs see them: topics and brokers.

A topic's effective value comes from its own override (DYNAMIC_TOPIC_CONFIG), else a dynamic
broker config (per broker, then cluster default), else `server.properties` (STATIC_BROKER_CONFIG),
else the built-in default (DEFAULT_CONFIG) — Kafka's order. Values are strings, as on the wire.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from kbroker.config import BROKER_CONFIG_DEFS
from kbroker.storage.log_config import LogConfig
from protocol.errors import ErrorCode, KafkaError

if TYPE_CHECKING:
    from kbroker.broker import Broker


class ResourceType(enum.IntEnum):
    TOPIC = 2
    BROKER = 4
    BROKER_LOGGER = 8


class ConfigSource(enum.IntEnum):
    DYNAMIC_TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5
    DYNAMIC_BROKER_LOGGER_CONFIG = 6


class ConfigType(enum.IntEnum):
    UNKNOWN = 0
    BOOLEAN = 1
    STRING = 2
    INT = 3
    SHORT = 4
    LONG = 5
    DOUBLE = 6
    LIST = 7


_SOURCE_OF = {
    "dynamic": ConfigSource.DYNAMIC_BROKER_CONFIG,
    "dynamic-default": ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG,
    "static": ConfigSource.STATIC_BROKER_CONFIG,
    "default": ConfigSource.DEFAULT_CONFIG,
}


def config_entry(
    name: str, value: str | None, source: ConfigSource, synonyms: list[dict[str, Any]] | None = None,
    read_only: bool = False,
) -> dict[str, Any]:
    """One config as DescribeConfigs (and CreateTopics) report it; unused fields per version drop out."""
    return {
        "name": name,
        "value": value,
        "read_only": read_only,
        "is_default": source == ConfigSource.DEFAULT_CONFIG,
        "config_source": source,
        "is_sensitive": False,
        "synonyms": synonyms or [],
        "config_type": _config_type(value),
        "documentation": None,
    }


def _config_type(value: str | None) -> ConfigType:
    if value in ("true", "false"):
        return ConfigType.BOOLEAN
    if value is not None and value.lstrip("-").isdigit():
        return ConfigType.LONG
    return ConfigType.STRING


class ConfigService:
    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.config = broker.config
        self.store = broker.store

    # -- effective values -------------------------------------------------------------------------

    def dynamic_broker_configs(self) -> dict[str, tuple[str, str]]:
        """Dynamic broker configs in force here: name -> (value, 'dynamic' | 'dynamic-default')."""
        merged = {k: (v, "dynamic-default") for k, v in self.store.get_broker_configs(None).items()}
        merged.update({k: (v, "dynamic") for k, v in self.store.get_broker_configs(self.config.broker_id).items()})
        return merged

    def topic_defaults(self) -> dict[str, str]:
        return self.config.topic_defaults(self.dynamic_broker_configs())

    def _topic_default_entries(self) -> dict[str, tuple[str, str, str]]:
        return self.config.topic_default_entries(self.dynamic_broker_configs())

    def _broker_value(self, name: str, dynamic: Mapping[str, tuple[str, str]]) -> list[tuple[str, str]]:
        """The value of a broker config from its strongest source, as a 0- or 1-element list."""
        if name in dynamic:
            return [dynamic[name]]
        if name in self.config.raw:
            return [(self.config.raw[name], "static")]
        definition = BROKER_CONFIG_DEFS.get(name)
        if definition is not None and definition.default is not None:
            return [(definition.default, "default")]
        return []

    # -- topics -----------------------------------------------------------------------------------

    def describe_topic(
        self, name: str, overrides: Mapping[str, str], keys: list[str] | None = None, synonyms: bool = False
    ) -> list[dict[str, Any]]:
        defaults = self._topic_default_entries()
        dynamic = self.dynamic_broker_configs()
        entries = []
        for config_name in sorted(defaults):
            if keys is not None and config_name not in keys:
                continue
            value, broker_name, source = defaults[config_name]
            # The broker config behind the default, in its own units (log.retention.hours=336).
            chain = [
                self._synonym(broker_name, raw, _SOURCE_OF[raw_source])
                for raw, raw_source in self._broker_value(broker_name, dynamic)
                if broker_name != config_name
            ]
            if config_name in overrides:
                chain.insert(0, self._synonym(config_name, overrides[config_name], ConfigSource.DYNAMIC_TOPIC_CONFIG))
                entry = config_entry(
                    config_name, overrides[config_name], ConfigSource.DYNAMIC_TOPIC_CONFIG, chain if synonyms else None
                )
            else:
                entry = config_entry(config_name, value, _SOURCE_OF[source], chain if synonyms else None)
            entries.append(entry)
        return entries

    @staticmethod
    def _synonym(name: str, value: str, source: ConfigSource) -> dict[str, Any]:
        return {"name": name, "value": value, "source": source}

    def alter_topic(self, name: str, overrides: Mapping[str, str], validate_only: bool) -> None:
        """Replace a topic's overrides (AlterConfigs semantics)."""
        self.broker.topics.set_configs(name, overrides, validate_only=validate_only)

    def topic_overrides(self, name: str) -> dict[str, str]:
        return dict(self.broker.topics.require(name).configs)

    # -- brokers ----------------------------------------------------------------------------------

    def check_broker_resource(self, resource_name: str) -> int | None:
        """'' is the cluster-wide default entity; otherwise it must name this broker."""
        if resource_name == "":
            return None
        try:
            broker_id = int(resource_name)
        except ValueError:
            raise KafkaError(ErrorCode.INVALID_REQUEST, f"Invalid broker id {resource_name!r}") from None
        if broker_id != self.config.broker_id:
            raise KafkaError(ErrorCode.INVALID_REQUEST, f"Unexpected broker id, expected {self.config.broker_id}")
        return broker_id

    def describe_broker(
        self, broker_id: int | None, keys: list[str] | None = None, synonyms: bool = False
    ) -> list[dict[str, Any]]:
        if broker_id is None:  # the default entity shows only what was set on it
            return [
                config_entry(n, v, ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG)
                for n, v in sorted(self.store.get_broker_configs(None).items())
                if keys is None or n in keys
            ]
        dynamic = self.dynamic_broker_configs()
        entries = []
        for name in sorted(BROKER_CONFIG_DEFS):
            if keys is not None and name not in keys:
                continue
            found = self._broker_value(name, dynamic)
            value, source = found[0] if found else (None, "default")
            chain = [self._synonym(name, value, _SOURCE_OF[source])] if synonyms and value is not None else []
            entries.append(config_entry(name, value, _SOURCE_OF[source], chain, read_only=not _dynamic(name)))
        return entries

    def alter_broker(self, broker_id: int | None, configs: Mapping[str, str], validate_only: bool) -> None:
        """Replace the dynamic configs of this broker (or of the cluster default entity)."""
        for name in configs:
            if name not in BROKER_CONFIG_DEFS:
                raise KafkaError(ErrorCode.INVALID_CONFIG, f"Unknown broker config {name}")
            if not _dynamic(name):
                raise KafkaError(ErrorCode.INVALID_CONFIG, f"Cannot update these configs dynamically: {{{name}}}")
            try:
                BROKER_CONFIG_DEFS[name].parse(configs[name])
            except ValueError as e:
                raise KafkaError(ErrorCode.INVALID_CONFIG, f"Invalid value {configs[name]} for {name}: {e}") from None
        previous = self.store.get_broker_configs(broker_id)
        self.store.set_broker_configs(broker_id, configs)
        try:
            defaults = self.topic_defaults()
            LogConfig.from_properties(defaults)
        except KafkaError:
            self.store.set_broker_configs(broker_id, previous)
            raise
        if validate_only:
            self.store.set_broker_configs(broker_id, previous)
            return
        self.broker.topics.set_defaults(defaults)

    def broker_overrides(self, broker_id: int | None) -> dict[str, str]:
        return self.store.get_broker_configs(broker_id)


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


def _dynamic(name: str) -> bool:
    definition = BROKER_CONFIG_DEFS.get(name)
    return definition is not None and definition.dynamic
