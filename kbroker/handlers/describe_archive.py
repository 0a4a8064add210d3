"""DescribeArchive (kbroker's own API, key 10001): the local and archived sizes and offsets of the
partitions this broker leads, for `kbroker topics --describe` of tiered topics
(`ReplicaManager.archive_summary`; docs/archive.md, "Seeing what is archived").

Kafka's DescribeLogDirs reports only the local size (a remote size is merely proposed, KIP-1187),
and so does kbroker's; this API adds what the archive holds. A topic that is not tiered answers
its local numbers with nothing archived (0 bytes, 0 segments, highest archived offset -1).

Not advertised in ApiVersions: Kafka's clients and tools see only Kafka's APIs. Topics,
authorization and errors as every kbroker describe API answers them (`led_partitions`).
"""

from __future__ import annotations

from typing import Any

from kbroker.handlers import RequestContext
from kbroker.handlers.led_partitions import describe_topics
from protocol.errors import ErrorCode

API_KEY = 10001
MIN_VERSION = 0
MAX_VERSION = 0
ADVERTISED = False


async def handle(ctx: RequestContext, request: Any) -> dict[str, Any]:
    async def sizes(topic: str, index: int) -> dict[str, Any]:
        summary = await ctx.broker.replicas.archive_summary(topic, index)
        return {"local_log_start_offset": summary.local_log_start_offset, "local_size": summary.local_size,
                "log_start_offset": summary.log_start_offset, "archived_size": summary.archived_size,
                "archived_segment_count": summary.archived_segment_count,
                "highest_archived_offset": summary.highest_archived_offset}

    topics = await describe_topics(ctx, request.topics, sizes)
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NO_ERROR, "error_message": None, "topics": topics}
