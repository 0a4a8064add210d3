"""DescribeLogDirs: which partitions each log directory holds, and their sizes.

A replica being moved to another log dir (AlterReplicaLogDirs) is listed twice, as Kafka lists
it: the current replica in its dir, and the future replica (`is_future_key`) in the destination
with `offset_lag` = how far its log end is behind the current replica's. That is what
kafka-reassign-partitions.sh --verify and kafka-log-dirs.sh read.
"""

from __future__ import annotations

import shutil
from collections import defaultdict
from pathlib import Path
from typing import Any

from kbroker.handlers import RequestContext
from kbroker.storage.log import Log
from kbroker.storage.log_manager import LogManager
from protocol.errors import ErrorCode

API_KEY = 35
MIN_VERSION = 0
MAX_VERSION = 4


async def handle(ctx: RequestContext, request: Any) -> dict[str, Any]:
    wanted = None if request.topics is None else {(t.topic, p) for t in request.topics for p in t.partitions}
    manager = ctx.broker.log_manager
    by_dir: dict[Path, list[Log]] = defaultdict(list)
    for log in [*manager.logs(), *manager.future_logs.values()]:
        if wanted is None or (log.topic, log.partition) in wanted:
            by_dir[log.directory.parent].append(log)
    results = [_describe_dir(manager, directory, by_dir[directory]) for directory in manager.log_dirs]
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NO_ERROR, "results": results}


def _describe_dir(manager: LogManager, directory: Path, logs: list[Log]) -> dict[str, Any]:
    topics: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for log in sorted(logs, key=lambda log: (log.topic, log.partition)):
        topics[log.topic].append({
            "partition_index": log.partition,
            "partition_size": log.size_in_bytes,
            "offset_lag": _offset_lag(manager, log),
            "is_future_key": log.is_future,
        })
    usage = shutil.disk_usage(directory)
    return {
        # A full or failed dir is reported as Kafka reports an offline one; its partitions are
        # still listed (a full dir still serves reads).
        "error_code": ErrorCode.NO_ERROR if manager.health[directory].writable else ErrorCode.KAFKA_STORAGE_ERROR,
        "log_dir": str(directory.resolve()),
        "topics": [{"name": name, "partitions": partitions} for name, partitions in topics.items()],
        "total_bytes": usage.total,
        "usable_bytes": usage.free,
    }


def _offset_lag(manager: LogManager, log: Log) -> int:
    """Kafka's getLogEndOffsetLag: a future replica's distance to the current one's log end; a
    current replica's to the high watermark (0 for a leader); -1 when there is nothing to compare."""
    current = manager.get_log(log.topic, log.partition)
    if current is None:
        return -1
    if log.is_future:
        return current.log_end_offset - log.log_end_offset
    return max(current.high_watermark - log.log_end_offset, 0)
