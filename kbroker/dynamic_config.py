"""Dynamic broker configs (KIP-226): what each broker config is as DescribeConfigs reports it
(type, read-only, sensitive, synonyms), and the checks of an AlterConfigs or
IncrementalAlterConfigs update of a broker resource.

An update passes Kafka's checks first (Kafka's `DynamicBrokerConfig.validate`, with Kafka's
messages and, as Kafka 3.9's brokers answer, INVALID_REQUEST), then kbroker's own refusals
(INVALID_CONFIG): a security setting kbroker does not honour is refused, as it is at start (see
`is_unhonoured_security_setting`), and so are the listener settings, which kbroker cannot change
while it runs. Everything else Kafka accepts is stored and reported; which of those kbroker acts
on is listed in docs/configuration.md.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping

from kbroker import kafka_configs as kafka
from kbroker.config import (
    BROKER_CONFIG_DEFS,
    is_unhonoured_security_setting,
    parse_ip_overrides,
    tls_setting_name,
)
from kbroker.security.sasl_config import is_sasl_setting
from protocol.errors import ErrorCode, KafkaError

LISTENER_CONFIG = re.compile(r"listener\.name\.[^.]*\.(.*)")

# Kafka changes these at run time (opening or re-securing listeners); kbroker binds its listeners
# at start only, so storing a new value would report listeners that are not served.
RESTART_ONLY = frozenset({"listeners", "advertised.listeners", "listener.security.protocol.map"})

# Kafka's listener configs that stay cluster-wide even with a listener prefix.
_CLUSTER_LEVEL_LISTENER_CONFIGS = frozenset({"max.connections", "max.connection.creation.rate", "num.network.threads"})

# Thread pools Kafka resizes at run time, by at most a factor of two at a time.
THREAD_POOLS = frozenset({
    "num.io.threads", "num.network.threads", "num.replica.fetchers", "num.recovery.threads.per.data.dir",
    "background.threads",
})

# kbroker's own broker configs (not Kafka's): their types as DescribeConfigs reports them.
_KBROKER_ONLY_TYPES = {
    "cluster.id": "STRING",
    "socket.request.read.timeout.ms": "LONG",
    "socket.request.max.entries": "INT",
    "metrics.listener": "STRING",  # the metrics endpoint's http://host:port (docs/operations.md)
    "log.encryption.key.file": "STRING",  # a path, not the keys: not sensitive (as ssl.keystore.location)
    "log.flush.rolled.busy.percent": "INT",  # the paced writeback of rolled segments (docs/operations.md)
    # The archive's object store (docs/archive.md); its secret key is a password, hidden as Kafka hides them.
    "remote.log.storage.s3.endpoint": "STRING",
    "remote.log.storage.s3.bucket": "STRING",
    "remote.log.storage.s3.prefix": "STRING",
    "remote.log.storage.s3.region": "STRING",
    "remote.log.storage.s3.access.key.id": "STRING",
    "remote.log.storage.s3.secret.access.key": "PASSWORD",
    # Share groups' settings of Kafka 4.1, which 3.9's catalogue lacks (KIP-932).
    "group.share.max.share.sessions": "INT",
    "share.coordinator.state.topic.num.partitions": "INT",
    "share.coordinator.state.topic.replication.factor": "SHORT",
    "share.coordinator.state.topic.min.isr": "SHORT",
    "share.coordinator.state.topic.segment.bytes": "INT",
    "share.coordinator.snapshot.update.records.per.snapshot": "INT",
    "share.coordinator.write.timeout.ms": "INT",
    # Kafka 4.1's bounds of share group configs, which Kafka 3.9's catalogue lacks.
    "group.share.min.delivery.count.limit": "INT",
    "group.share.max.delivery.count.limit": "INT",
    "group.share.min.partition.max.record.locks": "INT",
    "group.share.max.partition.max.record.locks": "INT",
    # KIP-1191's (Kafka trunk).
    "errors.deadletterqueue.auto.create.topics.enable": "BOOLEAN",
    "errors.deadletterqueue.topic.name.prefix": "STRING",
}

# DescribeConfigs' config_type codes (KIP-569).
CONFIG_TYPE_CODES = {
    "BOOLEAN": 1, "STRING": 2, "INT": 3, "SHORT": 4, "LONG": 5, "DOUBLE": 6, "LIST": 7, "CLASS": 8, "PASSWORD": 9,
}
UNKNOWN_TYPE = 0

_INT_BOUNDS = {"SHORT": (-(2**15), 2**15 - 1), "INT": (-(2**31), 2**31 - 1), "LONG": (-(2**63), 2**63 - 1)}


# -- what a broker config is --------------------------------------------------------------------


def base_name(name: str) -> str:
    """`listener.name.<listener>.<config>` configures <config> for one listener."""
    match = LISTENER_CONFIG.fullmatch(name)
    return match.group(1) if match else name


def config_type(name: str) -> str | None:
    """Kafka's type of a broker config; None for a name Kafka does not define."""
    return kafka.BROKER_CONFIG_TYPES.get(name) or _KBROKER_ONLY_TYPES.get(name)


def config_type_code(name: str) -> int:
    kind = config_type(name)
    return CONFIG_TYPE_CODES[kind] if kind else UNKNOWN_TYPE


def topic_config_type_code(name: str) -> int:
    kind = kafka.TOPIC_CONFIG_TYPES.get(name)
    return CONFIG_TYPE_CODES[kind] if kind else UNKNOWN_TYPE


def is_read_only(name: str) -> bool:
    return name not in kafka.DYNAMIC_BROKER_CONFIGS


def is_sensitive(name: str) -> bool:
    """As Kafka: passwords, and names it does not know (it cannot tell they are harmless)."""
    kind = config_type(name)
    return kind is None or kind == "PASSWORD"


def broker_synonyms(name: str) -> list[str]:
    """Kafka's `brokerConfigSynonyms`: the names that set the same thing, strongest first."""
    for group in (
        ["log.roll.ms", "log.roll.hours"],
        ["log.roll.jitter.ms", "log.roll.jitter.hours"],
        ["log.retention.ms", "log.retention.minutes", "log.retention.hours"],
    ):
        if name in group:
            return group
    if name == "log.flush.interval.ms":  # log.flush.scheduler.interval.ms is its default
        return ["log.flush.interval.ms", "log.flush.scheduler.interval.ms"]
    return [name]


def synonym_chain(
    name: str, layers: list[tuple[str, Mapping[str, str | None]]]
) -> list[tuple[str, str, str]]:
    """Kafka's `configSynonyms`: (name, value, source) of every synonym set in each layer, layer
    by layer (strongest first), then synonyms in order; entries before the first one of `name`
    itself are dropped (a stronger synonym is not a synonym of a weaker one)."""
    chain = [
        (synonym, values[synonym], source)
        for source, values in layers
        for synonym in broker_synonyms(name)
        if values.get(synonym) is not None
    ]
    while chain and chain[0][0] != name:
        chain.pop(0)
    return chain


# -- checks of an update ------------------------------------------------------------------------


def check_update(props: Mapping[str, str], per_broker: bool, current: Callable[[str], str | None]) -> None:
    """Refuse an update that would leave the entity's dynamic configs as `props`.

    `per_broker` is False for the cluster-wide default entity; `current(name)` is the value in
    force now (for Kafka's limits on resizing thread pools).
    """
    _refuse_names([n for n in props if _non_dynamic(n)], "Cannot update these configs dynamically")
    _refuse_names([n for n in props if n in kafka.LISTENER_ONLY_DYNAMIC],
                  "These security configs can be dynamically updated only per-listener using the listener prefix",
                  "HashSet")
    for name, value in props.items():
        check_value(base_name(name), value)
    if not per_broker:
        _refuse_names([n for n in props if _per_broker_only(n)],
                      "Cannot update these configs at default cluster level, broker id must be specified")
    for name, value in props.items():
        _check_resize(name, value, current(name))
    _refuse_unhonoured(props)


def _refuse_names(names: list[str], message: str, kind: str = "Set") -> None:
    if names:
        raise KafkaError(ErrorCode.INVALID_REQUEST, f"{message}: {kind}({', '.join(sorted(names))})")


def _non_dynamic(name: str) -> bool:
    """A broker config Kafka (or kbroker) defines and does not change at run time."""
    if name in kafka.DYNAMIC_BROKER_CONFIGS or name in kafka.BROKER_QUOTA_CONFIGS:
        return False
    return name in kafka.BROKER_CONFIG_TYPES or name in BROKER_CONFIG_DEFS


def _per_broker_only(name: str) -> bool:
    match = LISTENER_CONFIG.fullmatch(name)
    if match:
        return match.group(1) not in _CLUSTER_LEVEL_LISTENER_CONFIGS
    return name in kafka.PER_BROKER_DYNAMIC


def check_value(name: str, value: str) -> None:
    """Kafka's ConfigDef check of one value: its type, then its range or allowed values."""
    kind = config_type(name)
    if kind is None:
        return  # Kafka keeps custom names (e.g. for plugins) without checking them
    text = value.strip()
    if kind in _INT_BOUNDS:
        low, high = _INT_BOUNDS[kind]
        if not re.fullmatch(r"[+-]?\d+", text) or not low <= int(text) <= high:
            raise _invalid(name, value, f"Not a number of type {kind}")
        _check_range(name, value, int(text))
    elif kind == "DOUBLE":
        try:
            number = float(text)
        except ValueError:
            raise _invalid(name, value, "Not a number of type DOUBLE") from None
        _check_range(name, value, number)
    elif kind == "BOOLEAN" and text.lower() not in ("true", "false"):
        raise _invalid(name, value, "Expected value to be either true or false")
    choices = kafka.DYNAMIC_CHOICES.get(name)
    if choices is not None:
        items = [item.strip() for item in text.split(",") if item.strip()] if kind == "LIST" else [text]
        if any(item not in choices for item in items):
            raise _invalid(name, value, f"String must be one of: {', '.join(sorted(choices) if kind == 'LIST' else choices)}")
    if name == "max.connection.creation.rate" and int(text) < 1:
        # Kafka's listener quotas refuse it as they reconfigure (ConnectionQuotas).
        raise KafkaError(ErrorCode.INVALID_REQUEST, f"Invalid max.connection.creation.rate {text}")
    if name == "max.connections.per.ip.overrides":
        try:
            parse_ip_overrides(text)
        except ValueError as e:
            raise _invalid(name, value, str(e)) from None


def _check_range(name: str, value: str, number: float) -> None:
    low, high = kafka.DYNAMIC_RANGES.get(name, (None, None))
    if number in kafka.RANGE_EXCEPTIONS.get(name, ()):
        return
    if low is not None and number < low:
        raise _invalid(name, value, f"Value must be at least {low}")
    if high is not None and number > high:
        raise _invalid(name, value, f"Value must be no more than {high}")


def _invalid(name: str, value: str, reason: str) -> KafkaError:
    return KafkaError(ErrorCode.INVALID_REQUEST, f"Invalid value {value} for configuration {name}: {reason}")


def _check_resize(name: str, value: str, current: str | None) -> None:
    """Kafka's limits on resizing a thread pool at run time: at least half, at most double."""
    if current is None or (name not in THREAD_POOLS and name != "log.cleaner.threads"):
        return
    new, old = int(value.strip()), int(current)
    if new == old:
        return
    if name == "log.cleaner.threads":
        if new < 1:
            raise KafkaError(ErrorCode.INVALID_REQUEST, "Log cleaner threads should be at least 1")
        if new < old // 2:
            raise KafkaError(ErrorCode.INVALID_REQUEST,
                             f"Log cleaner threads cannot be reduced to less than half the current value {old}")
        if new > old * 2:
            raise KafkaError(ErrorCode.INVALID_REQUEST,
                             f"Log cleaner threads cannot be increased to more than double the current value {old}")
        return
    failed = f"Dynamic thread count update validation failed for {name}={value}"
    if new < old // 2:
        raise KafkaError(ErrorCode.INVALID_REQUEST, f"{failed}, value should be at least half the current value {old}")
    if new > old * 2:
        raise KafkaError(ErrorCode.INVALID_REQUEST,
                         f"{failed}, value should not be greater than double the current value {old}")


def _refuse_unhonoured(props: Mapping[str, str]) -> None:
    """kbroker's own refusals, after Kafka's checks passed (INVALID_CONFIG)."""
    security = sorted(n for n, v in props.items() if is_unhonoured_security_setting(n, v))
    if security:
        raise KafkaError(
            ErrorCode.INVALID_CONFIG,
            f"{', '.join(security)}: security kbroker does not implement yet (TLS, SASL, ACLs, quotas); "
            "refused rather than stored, since it would not be honoured",
        )
    tls = sorted(n for n in props if tls_setting_name(n) is not None)
    if tls:
        # Kafka reloads key stores at run time; kbroker loads its TLS contexts at start only.
        raise KafkaError(
            ErrorCode.INVALID_CONFIG,
            f"{', '.join(tls)}: kbroker reads TLS settings at start only; set "
            f"{'it' if len(tls) == 1 else 'them'} in server.properties and restart",
        )
    sasl = sorted(n for n in props if is_sasl_setting(n))
    if sasl:
        # Kafka reloads JAAS entries and mechanisms at run time; kbroker reads them at start only.
        raise KafkaError(
            ErrorCode.INVALID_CONFIG,
            f"{', '.join(sasl)}: kbroker reads SASL settings at start only; set "
            f"{'it' if len(sasl) == 1 else 'them'} in server.properties and restart",
        )
    restart_only = sorted(n for n in props if n in RESTART_ONLY)
    if restart_only:
        raise KafkaError(
            ErrorCode.INVALID_CONFIG,
            f"{', '.join(restart_only)}: kbroker binds its listeners at start only; set "
            f"{'it' if len(restart_only) == 1 else 'them'} in server.properties and restart",
        )


def unhonoured_stored(configs: Mapping[str, str]) -> list[str]:
    """Stored dynamic configs (written by another tool) that ask for security kbroker lacks: TLS
    and SASL settings too, which kbroker reads from server.properties only and so would not apply."""
    return sorted(n for n, v in configs.items()
                  if is_unhonoured_security_setting(n, v) or tls_setting_name(n) is not None or is_sasl_setting(n))


def reportable_broker_configs() -> list[str]:
    """The broker configs DescribeConfigs lists for a broker: kbroker's, and every dynamic config
    of Kafka's that kbroker accepts (those it refuses would only show settings it lacks)."""
    accepted = {
        n for n in kafka.DYNAMIC_BROKER_CONFIGS
        if not is_unhonoured_security_setting(n) and n not in RESTART_ONLY and tls_setting_name(n) is None
        and not is_sasl_setting(n)
    }
    return sorted(set(BROKER_CONFIG_DEFS) | accepted)
