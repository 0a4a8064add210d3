"""The group coordinator's settings, from the broker's `group.*` and `offset*` configs."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class GroupConfig:
    initial_rebalance_delay_ms: int = 3000
    min_session_timeout_ms: int = 6000
    max_session_timeout_ms: int = 1_800_000
    max_size: int = 2**31 - 1
    offset_metadata_max_bytes: int = 4096
    offsets_retention_ms: int = 7 * 24 * 3600 * 1000
    # The consumer protocol (KIP-848): `group.coordinator.rebalance.protocols` and `group.consumer.*`.
    consumer_protocol_enabled: bool = True
    consumer_heartbeat_interval_ms: int = 5000
    consumer_session_timeout_ms: int = 45_000
    consumer_max_size: int = 2**31 - 1
    consumer_assignors: tuple[str, ...] = ("uniform", "range")
    consumer_regex_refresh_interval_ms: int = 600_000
    # `group.consumer.migration.policy`: bidirectional, upgrade, downgrade or disabled.
    consumer_migration_policy: str = "bidirectional"
