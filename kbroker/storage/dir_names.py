"""Names of partition directories: `<topic>-<partition>` and a future replica's
`<topic>-<partition>.<uuid>-future` (a replica being copied to another log dir of this broker),
as Kafka names them, so a log dir can be read with Kafka's habits."""

from __future__ import annotations

import uuid

FUTURE_DIR_SUFFIX = "-future"


def parse_log_dir_name(name: str) -> tuple[str, int] | None:
    """`<topic>-<partition>` -> (topic, partition); None for anything else."""
    topic, sep, partition = name.rpartition("-")
    if not sep or not topic or not partition.isdigit():
        return None
    return topic, int(partition)


def future_dir_name(topic: str, partition: int) -> str:
    """Kafka's name for a future replica's directory: `<topic>-<partition>.<uuid>-future`."""
    return f"{topic}-{partition}.{uuid.uuid4().hex}{FUTURE_DIR_SUFFIX}"


def parse_future_dir_name(name: str) -> tuple[str, int] | None:
    """`<topic>-<partition>.<32 hex>-future` -> (topic, partition); None for anything else."""
    return _parse_suffixed_dir_name(name, FUTURE_DIR_SUFFIX)


def _parse_suffixed_dir_name(name: str, suffix: str) -> tuple[str, int] | None:
    if not name.endswith(suffix):
        return None
    base, dot, unique = name[: -len(suffix)].rpartition(".")
    if not dot or len(unique) != 32 or any(c not in "0123456789abcdef" for c in unique):
        return None
    return parse_log_dir_name(base)
