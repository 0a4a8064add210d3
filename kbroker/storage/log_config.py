"""Topic-level log settings with Kafka's names and defaults (Kafka 3.9).

One deliberate difference: `retention.ms` defaults to two weeks here (Kafka: 7 days).
Values arrive as strings (CreateTopics, IncrementalAlterConfigs, server.properties) and are
validated the way Kafka's ConfigDef does; a bad value raises INVALID_CONFIG.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from protocol.errors import ErrorCode, KafkaError

LONG_MAX = 2**63 - 1
INT_MAX = 2**31 - 1

CLEANUP_POLICIES = ("compact", "delete")
COMPRESSION_TYPES = ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")
TIMESTAMP_TYPES = ("CreateTime", "LogAppendTime")


@dataclass(frozen=True, slots=True)
class LogConfig:
    segment_bytes: int = 1073741824
    segment_ms: int = 604800000
    segment_jitter_ms: int = 0
    segment_index_bytes: int = 10485760
    index_interval_bytes: int = 4096
    retention_ms: int = 1209600000  # two weeks: this project's default (Kafka: 7 days)
    retention_bytes: int = -1
    cleanup_policy: tuple[str, ...] = ("delete",)
    delete_retention_ms: int = 86400000
    min_compaction_lag_ms: int = 0
    max_compaction_lag_ms: int = LONG_MAX
    min_cleanable_dirty_ratio: float = 0.5
    max_message_bytes: int = 1048588
    message_timestamp_type: str = "CreateTime"
    message_timestamp_before_max_ms: int = LONG_MAX
    message_timestamp_after_max_ms: int = 3600000
    message_timestamp_difference_max_ms: int = LONG_MAX
    flush_messages: int = LONG_MAX
    flush_ms: int = LONG_MAX
    file_delete_delay_ms: int = 60000
    preallocate: bool = False
    min_insync_replicas: int = 1
    unclean_leader_election_enable: bool = False
    compression_type: str = "producer"
    compression_gzip_level: int = -1
    compression_lz4_level: int = 9
    compression_zstd_level: int = 3
    message_downconversion_enable: bool = True
    message_format_version: str = "3.0-IV1"
    leader_replication_throttled_replicas: str = ""
    follower_replication_throttled_replicas: str = ""
    remote_storage_enable: bool = False
    local_retention_ms: int = -2
    local_retention_bytes: int = -2
    # KIP-1191: a share group may write its dead letters here (Kafka trunk's topic config).
    errors_deadletterqueue_group_enable: bool = False
    # Delayed delivery (docs/delayed-and-retry.md): the delay of records without a delay header,
    # the longest the broker holds a record (40 days), and the timing wheel's tick.
    delivery_delay_ms: int = 0
    delay_max_ms: int = 3456000000
    delay_tick_ms: int = 100
    # false: the produce path does not look for delay headers at all (records are stored as
    # they came, headers included); the baseline the feature's cost is measured against.
    delayed_delivery_enable: bool = True
    # Retry topics: a record produced here waits retry.backoff.ms[attempt - 1] and then goes to
    # retry.target.topic, or to retry.dead.letter.topic once its attempts are used up.
    retry_target_topic: str = ""
    retry_backoff_ms: tuple[int, ...] = (1000, 10000, 60000)
    retry_dead_letter_topic: str = ""
    # Filtered view topics (docs/views.md): the topic a view reads, its filter and the header
    # its `tag` means. A view has no log; these are read by kbroker/views, not by the log.
    view_source_topic: str = ""
    view_filter: str = ""
    view_tag_header: str = "tag"

    @property
    def compact(self) -> bool:
        return "compact" in self.cleanup_policy

    @property
    def delete(self) -> bool:
        return "delete" in self.cleanup_policy

    @property
    def log_append_time(self) -> bool:
        return self.message_timestamp_type == "LogAppendTime"

    @classmethod
    def from_properties(cls, props: Mapping[str, str]) -> LogConfig:
        """Build from topic-level property names; unset ones keep their defaults."""
        values: dict[str, Any] = {}
        for name, raw in props.items():
            spec = _SPECS.get(name)
            if spec is None:
                raise KafkaError(ErrorCode.INVALID_CONFIG, f"Unknown topic config name: {name}")
            values[_field(name)] = _parse(name, raw, spec)
        config = cls(**values)
        if config.min_compaction_lag_ms > config.max_compaction_lag_ms:
            raise KafkaError(
                ErrorCode.INVALID_CONFIG,
                "conflict topic config setting min.compaction.lag.ms > max.compaction.lag.ms",
            )
        if config.delivery_delay_ms > config.delay_max_ms:
            # Every record without a delay header would be refused.
            raise KafkaError(
                ErrorCode.INVALID_CONFIG,
                f"delivery.delay.ms {config.delivery_delay_ms} is above delay.max.ms {config.delay_max_ms}",
            )
        _check_delay_features(config)
        _check_tiering(config)
        return config

    @property
    def is_retry_topic(self) -> bool:
        return bool(self.retry_target_topic)

    def to_properties(self) -> dict[str, str]:
        return {name: _format(getattr(self, _field(name))) for name in _SPECS}

    def with_changes(self, **changes: Any) -> LogConfig:
        return dataclasses.replace(self, **changes)


def _check_delay_features(config: LogConfig) -> None:
    """Settings that would silently do nothing, or refuse every record, are INVALID_CONFIG."""
    if not config.delayed_delivery_enable:
        if config.delivery_delay_ms:
            raise KafkaError(ErrorCode.INVALID_CONFIG,
                             "delivery.delay.ms needs delayed.delivery.enable=true")
        if config.retry_target_topic:
            raise KafkaError(ErrorCode.INVALID_CONFIG, "a retry topic needs delayed.delivery.enable=true")
    if config.retry_dead_letter_topic and not config.retry_target_topic:
        raise KafkaError(ErrorCode.INVALID_CONFIG, "retry.dead.letter.topic is set but retry.target.topic is not")
    too_long = [b for b in config.retry_backoff_ms if b > config.delay_max_ms]
    if config.retry_target_topic and too_long:
        raise KafkaError(ErrorCode.INVALID_CONFIG,
                         f"retry.backoff.ms {too_long[0]} is above delay.max.ms {config.delay_max_ms}")


def _check_tiering(config: LogConfig) -> None:
    """Kafka's checks of a tiered topic (LogConfig.validateRemoteStorage*): no compaction, and a
    local window no larger than the total retention."""
    if not config.remote_storage_enable:
        return
    if config.compact:
        raise KafkaError(ErrorCode.INVALID_CONFIG, "Remote log storage is unsupported for the compacted topics")
    for local_name, local, total_name, total in (
            ("local.retention.bytes", config.local_retention_bytes, "retention.bytes", config.retention_bytes),
            ("local.retention.ms", config.local_retention_ms, "retention.ms", config.retention_ms)):
        if total == -1 or local == -2:
            continue
        if local == -1:
            raise KafkaError(ErrorCode.INVALID_CONFIG, f"Invalid value -1 for configuration {local_name}: "
                             f"Value must not be -1 as {total_name} value is set as {total}.")
        if local > total:
            raise KafkaError(ErrorCode.INVALID_CONFIG, f"Invalid value {local} for configuration {local_name}: "
                             f"Value must not be more than {total_name} property value: {total}")


# -- parsing ---------------------------------------------------------------------------------

Parser = Callable[[str], Any]


@dataclass(frozen=True, slots=True)
class _Spec:
    parse: Parser
    check: Callable[[Any], bool] = lambda _: True
    rule: str = ""


def _field(name: str) -> str:
    return name.replace(".", "_")


def _int(text: str) -> int:
    return int(text.strip())


def _float(text: str) -> float:
    return float(text.strip())


def _bool(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered not in ("true", "false"):
        raise ValueError("expected true or false")
    return lowered == "true"


def _str(text: str) -> str:
    return text.strip()


def _list(text: str) -> tuple[str, ...]:
    return tuple(item.strip() for item in text.split(",") if item.strip())


def _backoffs(text: str) -> tuple[int, ...]:
    """`1000,10000,60000`: one delay per attempt, at least one."""
    values = tuple(int(item) for item in _list(text))
    if not values:
        raise ValueError("no backoff")
    return values


def _long(minimum: int, maximum: int = LONG_MAX) -> _Spec:
    return _Spec(_int, lambda v: minimum <= v <= maximum, f"Value must be in [{minimum}, {maximum}]")


def _choice(options: tuple[str, ...]) -> _Spec:
    return _Spec(_str, lambda v: v in options, f"String must be one of: {', '.join(options)}")


_ANY_LONG = _long(-(2**63))
_BOOL = _Spec(_bool)

_SPECS: dict[str, _Spec] = {
    "segment.bytes": _long(14, INT_MAX),
    "segment.ms": _long(1),
    "segment.jitter.ms": _long(0),
    "segment.index.bytes": _long(4, INT_MAX),
    "index.interval.bytes": _long(0, INT_MAX),
    "retention.ms": _long(-1),
    "retention.bytes": _ANY_LONG,
    "cleanup.policy": _Spec(_list, lambda v: all(p in CLEANUP_POLICIES for p in v),
                            "Each value must be one of: compact, delete"),
    "delete.retention.ms": _long(0),
    "min.compaction.lag.ms": _long(0),
    "max.compaction.lag.ms": _long(1),
    "min.cleanable.dirty.ratio": _Spec(_float, lambda v: 0.0 <= v <= 1.0, "Value must be in [0, 1]"),
    "max.message.bytes": _long(0, INT_MAX),
    "message.timestamp.type": _choice(TIMESTAMP_TYPES),
    "message.timestamp.before.max.ms": _long(0),
    "message.timestamp.after.max.ms": _long(0),
    "message.timestamp.difference.max.ms": _long(0),
    "flush.messages": _long(1),
    "flush.ms": _long(0),
    "file.delete.delay.ms": _long(0),
    "preallocate": _BOOL,
    "min.insync.replicas": _long(1, INT_MAX),
    "unclean.leader.election.enable": _BOOL,
    "compression.type": _choice(COMPRESSION_TYPES),
    "compression.gzip.level": _Spec(_int, lambda v: v == -1 or 1 <= v <= 9, "Value must be -1 or in [1, 9]"),
    "compression.lz4.level": _long(1, 17),
    "compression.zstd.level": _long(-131072, 22),
    "message.downconversion.enable": _BOOL,
    "message.format.version": _Spec(_str),
    "leader.replication.throttled.replicas": _Spec(_str),
    "follower.replication.throttled.replicas": _Spec(_str),
    "remote.storage.enable": _BOOL,
    "local.retention.ms": _long(-2),
    "local.retention.bytes": _long(-2),
    "errors.deadletterqueue.group.enable": _BOOL,
    "delivery.delay.ms": _long(0),
    "delay.max.ms": _long(1),
    # A tick below 1 ms means nothing; above an hour the wheel would hold records far too late.
    "delay.tick.ms": _long(1, 3600000),
    "delayed.delivery.enable": _BOOL,
    "retry.target.topic": _Spec(_str),
    "retry.backoff.ms": _Spec(_backoffs, lambda v: all(0 <= b <= LONG_MAX for b in v),
                              "A list of one or more delays in ms, each >= 0"),
    "retry.dead.letter.topic": _Spec(_str),
    "view.source.topic": _Spec(_str),
    "view.filter": _Spec(_str),
    "view.tag.header": _Spec(_str),
}


def _parse(name: str, raw: str, spec: _Spec) -> Any:
    try:
        value = spec.parse(str(raw))
    except ValueError:
        raise KafkaError(ErrorCode.INVALID_CONFIG, f"Invalid value {raw} for configuration {name}") from None
    if not spec.check(value):
        raise KafkaError(ErrorCode.INVALID_CONFIG, f"Invalid value {raw} for configuration {name}: {spec.rule}")
    return value


def _format(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, tuple):
        return ",".join(str(item) for item in value)
    return str(value)


TOPIC_CONFIG_DEFAULTS: dict[str, str] = LogConfig().to_properties()
TOPIC_CONFIG_NAMES: frozenset[str] = frozenset(_SPECS)
