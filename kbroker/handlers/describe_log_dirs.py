"""DescribeLogDirs: which partitions each log directory holds, and their sizes."""

from __future__ import annotations

import shutil
from collections import defaultdict
from pathlib import Path
from typing import Any

from kbroker.handlers import RequestContext
from kbroker.storage.log import Log
from protocol.errors import ErrorCode

API_KEY = 35
MIN_VERSION = 0
MAX_VERSION = 4


async def handle(ctx: RequestContext, request: Any) -> dict[str, Any]:
    wanted = None if request.topics is None else {(t.topic, p) for t in request.topics for p in t.partitions}
    manager = ctx.broker.log_manager
    by_dir: dict[Path, list[Log]] = defaultdict(list)
    for log in manager.logs():
        if wanted is None or (log.topic, log.partition) in wanted:
            by_dir[log.directory.parent].append(log)
    results = [_describe_dir(directory, by_dir[directory], manager.health[directory].writable)
               for directory in manager.log_dirs]
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NO_ERROR, "results": results}


def _describe_dir(directory: Path, logs: list[Log], writable: bool) -> dict[str, Any]:
    topics: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for log in sorted(logs, key=lambda log: (log.topic, log.partition)):
        topics[log.topic].append({
            "partition_index": log.partition,
            "partition_size": log.size_in_bytes,
            # How far this replica's log end is behind the high watermark (0 for a leader).
            "offset_lag": max(log.high_watermark - log.log_end_offset, 0),
            "is_future_key": False,
        })
    usage = shutil.disk_usage(directory)
    return {
        # A full or failed dir is reported as Kafka reports an offline one; its partitions are
        # still listed (a full dir still serves reads).
        "error_code": ErrorCode.NO_ERROR if writable else ErrorCode.KAFKA_STORAGE_ERROR,
        "log_dir": str(directory.resolve()),
        "topics": [{"name": name, "partitions": partitions} for name, partitions in topics.items()],
        "total_bytes": usage.total,
        "usable_bytes": usage.free,
    }
