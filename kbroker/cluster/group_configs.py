"""Group configs (KIP-848, KIP-932): per-group settings set with IncrementalAlterConfigs or
AlterConfigs on a GROUP resource (`kafka-configs.sh --entity-type groups`).

The names, types, defaults and checks are Kafka 4.2's `GroupConfig` (with KIP-1191's two
dead-letter configs from Kafka's trunk). A group that does not set a config gets the broker's
value of its synonym (`share.record.lock.duration.ms` -> `group.share.record.lock.duration.ms`),
else Kafka's default. Validation is Kafka 4.2's: the group's whole config (its stored overrides
with the change applied, Kafka's defaults for the rest) is parsed, then checked against the
broker's `group.consumer.*` / `group.share.*` min and max, then session timeout against
heartbeat interval; a failure is INVALID_CONFIG with Kafka's message.

`GroupConfigs` holds every group's stored configs in memory, loaded from the metadata store at
start and kept current from its ("groups", <group>) change notifications, so request paths
(ShareFetch reading `share.isolation.level`, ...) never wait on ZooKeeper.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from kbroker.cluster.store_writer import StoreWriter
from kbroker.config import BrokerConfig
from kbroker.metadata.store import MetadataStore, desanitize_entity_name
from protocol.errors import ErrorCode, KafkaError

log = logging.getLogger("kbroker.group_configs")

GROUP_CONFIG_SOURCE = 8  # DescribeConfigs' ConfigSource.GROUP_CONFIG
_INT_MAX = 2**31 - 1
_LONG_BOUNDS = (-(2**63), 2**63 - 1)


@dataclass(frozen=True, slots=True)
class GroupConfigDef:
    name: str
    kind: str  # Kafka's ConfigDef type: INT, LONG, STRING, BOOLEAN
    default: str
    at_least: int | None = None  # the ConfigDef's own range (Range.atLeast)
    choices: tuple[str, ...] = ()  # ValidString.in
    synonym: str | None = None  # the broker config whose value a group without its own gets
    doc: str = ""


DLQ_TOPIC_NAME = "errors.deadletterqueue.topic.name"
DLQ_COPY_RECORD = "errors.deadletterqueue.copy.record.enable"

GROUP_CONFIG_DEFS: dict[str, GroupConfigDef] = {d.name: d for d in (
    GroupConfigDef("consumer.session.timeout.ms", "INT", "45000", 1, synonym="group.consumer.session.timeout.ms",
                   doc="How long a consumer-protocol member may go without a heartbeat."),
    GroupConfigDef("consumer.heartbeat.interval.ms", "INT", "5000", 1, synonym="group.consumer.heartbeat.interval.ms",
                   doc="How often consumer-protocol members heartbeat."),
    GroupConfigDef("share.session.timeout.ms", "INT", "45000", 1, synonym="group.share.session.timeout.ms",
                   doc="How long a share group member may go without a heartbeat."),
    GroupConfigDef("share.heartbeat.interval.ms", "INT", "5000", 1, synonym="group.share.heartbeat.interval.ms",
                   doc="How often share group members heartbeat."),
    GroupConfigDef("share.record.lock.duration.ms", "INT", "30000", 1000,
                   synonym="group.share.record.lock.duration.ms",
                   doc="How long a share consumer holds an acquired record before it is delivered again."),
    GroupConfigDef("share.delivery.count.limit", "INT", "5", 2, synonym="group.share.delivery.count.limit",
                   doc="Deliveries of a record before it is archived."),
    GroupConfigDef("share.partition.max.record.locks", "INT", "2000", 100,
                   synonym="group.share.partition.max.record.locks",
                   doc="Most records in flight per share partition."),
    GroupConfigDef("share.auto.offset.reset", "STRING", "latest",
                   doc="Where a share group starts reading a partition: latest, earliest or by_duration:<ISO-8601>."),
    GroupConfigDef("share.isolation.level", "STRING", "read_uncommitted",
                   choices=("read_committed", "read_uncommitted"),
                   doc="read_committed delivers only committed transactional records."),
    GroupConfigDef("share.renew.acknowledge.enable", "BOOLEAN", "true",
                   doc="Whether the RENEW acknowledgement type is enabled for the group."),
    GroupConfigDef("streams.session.timeout.ms", "INT", "45000", 1, doc="Streams groups (not served by kbroker)."),
    GroupConfigDef("streams.heartbeat.interval.ms", "INT", "5000", 1, doc="Streams groups (not served by kbroker)."),
    GroupConfigDef("streams.num.standby.replicas", "INT", "0", 0, doc="Streams groups (not served by kbroker)."),
    GroupConfigDef("streams.initial.rebalance.delay.ms", "INT", "3000", 0,
                   doc="Streams groups (not served by kbroker)."),
    GroupConfigDef(DLQ_TOPIC_NAME, "STRING", "",
                   doc="The dead-letter topic of the share group (KIP-1191); blank: none."),
    GroupConfigDef(DLQ_COPY_RECORD, "BOOLEAN", "false",
                   doc="Whether a dead letter carries the archived record's key, value and headers."),
)}

# Kafka's bounds of the streams configs (group.streams.* defaults; kbroker has no streams groups).
_STREAMS_BOUNDS = {
    "streams.session.timeout.ms": (45000, 60000, "group.streams.min.session.timeout.ms",
                                   "group.streams.max.session.timeout.ms"),
    "streams.heartbeat.interval.ms": (5000, 15000, "group.streams.min.heartbeat.interval.ms",
                                      "group.streams.max.heartbeat.interval.ms"),
}
_STREAMS_MAX_STANDBY = 2  # group.streams.max.standby.replicas
# Checked against the broker's group.<kind>.min.<setting> / max, in Kafka 4.2's order.
_BOUNDED = (
    ("consumer.heartbeat.interval.ms", "group.consumer.{}.heartbeat.interval.ms"),
    ("consumer.session.timeout.ms", "group.consumer.{}.session.timeout.ms"),
    ("share.heartbeat.interval.ms", "group.share.{}.heartbeat.interval.ms"),
    ("share.session.timeout.ms", "group.share.{}.session.timeout.ms"),
    ("share.record.lock.duration.ms", "group.share.{}.record.lock.duration.ms"),
    ("share.delivery.count.limit", "group.share.{}.delivery.count.limit"),
    ("share.partition.max.record.locks", "group.share.{}.partition.max.record.locks"),
)
_ISO_DURATION = re.compile(
    r"([-+]?)P(?:([-+]?\d+)D)?(?:T(?:([-+]?\d+)H)?(?:([-+]?\d+)M)?(?:([-+]?\d+)(?:[.,](\d{0,9}))?S)?)?",
    re.IGNORECASE)


def _invalid(name: str, value: object, reason: str) -> KafkaError:
    return KafkaError(ErrorCode.INVALID_CONFIG, f"Invalid value {value} for configuration {name}: {reason}")


def parse_duration_ms(text: str) -> int | None:
    """Java's `Duration.parse` (PnDTnHnMn.nS) in milliseconds; None if `text` is not one."""
    match = _ISO_DURATION.fullmatch(text)
    if match is None or not any(match.group(i) for i in range(2, 6)) or text.upper().endswith("T"):
        return None
    sign = -1 if match.group(1) == "-" else 1
    days, hours, minutes, seconds = (int(match.group(i) or 0) for i in range(2, 6))
    fraction = (match.group(6) or "").ljust(9, "0")
    total_ns = (((days * 24 + hours) * 60 + minutes) * 60 + seconds) * 10**9
    total_ns += int(fraction) * (-1 if match.group(5) and match.group(5).startswith("-") else 1)
    return sign * total_ns // 10**6


def auto_offset_reset(value: str) -> tuple[str, int | None]:
    """Kafka's ShareGroupAutoOffsetResetStrategy: ("latest"|"earliest", None) or ("by_duration",
    milliseconds back from now). Raises ValueError on anything else."""
    if value in ("latest", "earliest"):
        return value, None
    prefix = "by_duration:"
    if value.startswith(prefix):
        duration_ms = parse_duration_ms(value[len(prefix):])
        if duration_ms is not None and duration_ms >= 0:
            return "by_duration", duration_ms
    raise ValueError(value)


def _parse(definition: GroupConfigDef, raw: str) -> Any:
    """One value as Kafka's ConfigDef parses it (type, then its own range or choices)."""
    name, text = definition.name, raw.strip()
    if definition.kind in ("INT", "LONG"):
        low, high = (-(2**31), _INT_MAX) if definition.kind == "INT" else _LONG_BOUNDS
        if not re.fullmatch(r"[+-]?\d+", text) or not low <= int(text) <= high:
            raise _invalid(name, raw, f"Not a number of type {definition.kind}")
        number = int(text)
        if definition.at_least is not None and number < definition.at_least:
            raise _invalid(name, raw, f"Value must be at least {definition.at_least}")
        return number
    if definition.kind == "BOOLEAN":
        if text.lower() not in ("true", "false"):
            raise _invalid(name, raw, "Expected value to be either true or false")
        return text.lower() == "true"
    if definition.choices and text not in definition.choices:
        raise _invalid(name, text, f"String must be one of: {', '.join(definition.choices)}")
    if name == "share.auto.offset.reset":
        try:
            auto_offset_reset(text)
        except ValueError:
            raise _invalid(name, text, f"Invalid value `{text}` for configuration {name}. The value must be either "
                                       "'earliest', 'latest' or of the format 'by_duration:<PnDTnHnMn.nS>'.") from None
    return text


def validate(overrides: Mapping[str, str], broker: BrokerConfig) -> None:
    """Kafka 4.2's GroupConfig.validate of a group's whole config (INVALID_CONFIG on failure)."""
    for name in overrides:
        if name not in GROUP_CONFIG_DEFS:
            raise KafkaError(ErrorCode.INVALID_CONFIG, f"Unknown group config name: {name}")
    values = {d.name: _parse(d, overrides.get(d.name, d.default)) for d in GROUP_CONFIG_DEFS.values()}
    for name, bound in _BOUNDED:
        low_name, high_name = bound.format("min"), bound.format("max")
        if values[name] < broker.get(low_name):
            raise KafkaError(ErrorCode.INVALID_CONFIG, f"{name} must be greater than or equal to {low_name}")
        if values[name] > broker.get(high_name):
            raise KafkaError(ErrorCode.INVALID_CONFIG, f"{name} must be less than or equal to {high_name}")
    for name, (low, high, low_name, high_name) in _STREAMS_BOUNDS.items():
        if values[name] < low:
            raise KafkaError(ErrorCode.INVALID_CONFIG, f"{name} must be greater than or equal to {low_name}")
        if values[name] > high:
            raise KafkaError(ErrorCode.INVALID_CONFIG, f"{name} must be less than or equal to {high_name}")
    if values["streams.num.standby.replicas"] > _STREAMS_MAX_STANDBY:
        raise KafkaError(ErrorCode.INVALID_CONFIG, "streams.num.standby.replicas must be less than or equal to "
                                                   "group.streams.max.standby.replicas")
    for kind in ("consumer", "share", "streams"):
        if values[f"{kind}.session.timeout.ms"] <= values[f"{kind}.heartbeat.interval.ms"]:
            raise KafkaError(ErrorCode.INVALID_CONFIG,
                             f"{kind}.session.timeout.ms must be greater than {kind}.heartbeat.interval.ms")
    dlq_topic = values[DLQ_TOPIC_NAME]
    if dlq_topic.startswith("__"):
        raise KafkaError(ErrorCode.INVALID_CONFIG, f"{DLQ_TOPIC_NAME}: DLQ topic name must not start with '__'")


def check_group_name(name: str, describing: bool = False) -> None:
    if name == "":
        message = "Group name must not be empty" if describing else "Default group resources are not allowed."
        raise KafkaError(ErrorCode.INVALID_REQUEST, message)


class GroupConfigs:
    """Every group's stored configs, as last read from the metadata store."""

    def __init__(self, store: MetadataStore, writer: StoreWriter, broker: BrokerConfig) -> None:
        self._store = store
        self._writer = writer
        self._broker = broker
        self._groups: dict[str, dict[str, str]] = {}
        self._unwatch: Callable[[], None] | None = None
        self._listeners: list[Callable[[str], None]] = []

    def load(self) -> None:
        self._groups = self._store.list_group_configs()

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        """Follow changes made through any broker: read on the store's thread, held on the loop."""
        def on_change(entity_type: str, entity_name: str) -> None:
            if entity_type != "groups":
                return
            try:
                group = desanitize_entity_name(entity_name)
                configs = self._store.get_group_configs(group)
            except Exception:
                log.exception("reading the configs of a changed group failed")
                return
            if not loop.is_closed():
                loop.call_soon_threadsafe(self._hold, group, configs)

        self._unwatch = self._store.watch_config_changes(on_change)

    def stop(self) -> None:
        if self._unwatch is not None:
            self._unwatch()
            self._unwatch = None

    def on_change(self, listener: Callable[[str], None]) -> None:
        """Call `listener(group)` on the loop whenever a group's configs change (here or elsewhere)."""
        self._listeners.append(listener)

    async def alter(self, group: str, overrides: Mapping[str, str], validate_only: bool) -> None:
        """Replace the group's configs after Kafka's checks; held here at once, and on the other
        brokers when they read the change notification."""
        validate(overrides, self._broker)
        if validate_only:
            return
        await self._writer.run(self._store.set_group_configs, group, dict(overrides))
        self._hold(group, dict(overrides))

    def _hold(self, group: str, configs: dict[str, str]) -> None:
        if configs:
            self._groups[group] = configs
        else:
            self._groups.pop(group, None)
        for listener in self._listeners:
            try:
                listener(group)
            except Exception:
                log.exception("applying the changed configs of group %s failed", group)

    def overrides(self, group: str) -> dict[str, str]:
        return dict(self._groups.get(group, {}))

    def value(self, group: str, name: str) -> str:
        """The config in force for `group`: its own, else the broker's synonym, else Kafka's default."""
        own = self._groups.get(group, {}).get(name)
        if own is not None:
            return own.strip()
        definition = GROUP_CONFIG_DEFS[name]
        if definition.synonym is not None:
            found = self._broker.effective_text(definition.synonym)
            if found is not None:
                return found[0]
        return definition.default

    def int_value(self, group: str, name: str) -> int:
        return int(self.value(group, name))
