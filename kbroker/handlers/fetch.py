"""Fetch: read record batches, long-polling until min_bytes arrive or max_wait_ms passes.

Record bytes are never copied here: the log returns file slices that the connection
sends with sendfile. Fetch sessions (KIP-227) are declined with session id 0, which
makes clients send full fetch requests, as the protocol allows.
"""

from __future__ import annotations

import asyncio
from typing import Any

from kbroker.cluster.partition import Partition
from kbroker.handlers import RequestContext
from protocol.errors import ErrorCode, KafkaError

API_KEY = 1
MIN_VERSION = 4
ADVERTISED_MIN = 0
MAX_VERSION = 16
READ_COMMITTED = 1


class _Read:
    """What one partition contributes to a fetch response."""

    __slots__ = ("topic", "partition", "index", "offset", "max_bytes", "leader_epoch", "result", "refused")

    def __init__(self, topic: Any, index: int, data: Any) -> None:
        self.topic = topic
        self.index = index
        self.partition: Partition | None = None
        self.offset = data.fetch_offset
        self.max_bytes = data.partition_max_bytes
        self.leader_epoch = data.current_leader_epoch
        self.result: dict[str, Any] = {}
        self.refused: KafkaError | None = None  # why this fetcher may not read here at all


async def handle(ctx: RequestContext, request: Any) -> dict[str, Any]:
    if request.session_id != 0:
        return {"error_code": ErrorCode.FETCH_SESSION_ID_NOT_FOUND, "session_id": 0, "responses": []}
    reads, topics = _plan(ctx, request)
    replica_id = _replica_id(ctx, request)
    if replica_id >= 0:
        _record_follower(ctx, replica_id, reads)
    committed = request.isolation_level == READ_COMMITTED
    loop = asyncio.get_running_loop()
    deadline = loop.time() + request.max_wait_ms / 1000
    while True:
        total, errors = _read_all(reads, request.max_bytes, committed, follower=replica_id >= 0)
        remaining = deadline - loop.time()
        # Nothing readable (no partitions, or only unknown topic ids) answers at once, as in
        # Kafka: e.g. the Java consumer's close sends an empty fetch to end its session.
        if total >= request.min_bytes or errors or remaining <= 0 or not reads:
            break
        await ctx.broker.replicas.wait_for_data((r.partition for r in reads if r.partition), remaining)
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NO_ERROR, "session_id": 0, "responses": topics}


def _plan(ctx: RequestContext, request: Any) -> tuple[list[_Read], list[dict[str, Any]]]:
    broker = ctx.broker
    reads: list[_Read] = []
    topics: list[dict[str, Any]] = []
    for topic in request.topics:
        name = topic.topic
        if ctx.version >= 13:
            record = broker.topics.find_by_id(topic.topic_id)
            name = record.name if record else None
        partitions = []
        for data in topic.partitions:
            read = _Read(name, data.partition, data)
            if name is None:
                read.result = _error(data.partition, ErrorCode.UNKNOWN_TOPIC_ID)
            else:
                read.partition = broker.replicas.find(name, data.partition)
                if read.partition is None:
                    read.result = _error(data.partition, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
                reads.append(read)
            partitions.append(read.result)
        topics.append({"topic": topic.topic, "topic_id": topic.topic_id, "partitions": partitions})
    return reads, topics


def _replica_id(ctx: RequestContext, request: Any) -> int:
    """The fetching follower's broker id; -1 for consumers."""
    if ctx.version >= 15:
        return request.replica_state.replica_id if request.replica_state is not None else -1
    return request.replica_id


def _record_follower(ctx: RequestContext, replica_id: int, reads: list[_Read]) -> None:
    """A follower's fetch offsets say what it holds: the leader's ISR and HW follow from them."""
    now_ms = ctx.now_ms()
    for read in reads:
        if read.partition is None or not read.partition.is_leader:
            continue
        try:
            read.partition.record_follower_fetch(replica_id, read.offset, now_ms)
        except KafkaError as e:
            read.refused = e


def _read_all(reads: list[_Read], max_bytes: int, committed: bool, follower: bool = False) -> tuple[int, bool]:
    total = 0
    errors = False
    for read in reads:
        if read.partition is None:
            errors = True
            continue
        size = _read_one(read, max_bytes - total, first=total == 0, committed=committed, follower=follower)
        errors = errors or read.result["error_code"] != ErrorCode.NO_ERROR
        total += size
    return total, errors


def _read_one(read: _Read, budget: int, first: bool, committed: bool, follower: bool = False) -> int:
    partition = read.partition
    assert partition is not None
    result = read.result
    result.clear()
    result.update(
        partition_index=read.index,
        high_watermark=partition.high_watermark,
        last_stable_offset=partition.last_stable_offset,
        log_start_offset=partition.log_start_offset,
        aborted_transactions=[] if committed else None,
        records=None,
        error_code=ErrorCode.NO_ERROR,
    )
    try:
        if read.refused is not None:
            raise read.refused
        partition.require_leader()
        partition.check_leader_epoch(read.leader_epoch)
        # Followers copy the whole log; consumers see only what the ISR has.
        upper = None if follower else partition.last_stable_offset if committed else partition.high_watermark
        data = partition.log.read(
            read.offset, min(read.max_bytes, max(budget, 0)), max_offset_exclusive=upper, min_one_batch=first
        )
    except KafkaError as e:
        result["error_code"] = e.code
        return 0
    if data is None or data.size == 0:
        result["records"] = b""
        return 0
    result["records"] = data
    if committed:
        # The consumer drops records of these producers from first_offset up to their ABORT marker.
        result["aborted_transactions"] = [
            {"producer_id": producer_id, "first_offset": first_offset}
            for producer_id, first_offset in partition.log.collect_aborted_transactions(read.offset, upper)
        ]
    return data.size


def _error(index: int, code: ErrorCode) -> dict[str, Any]:
    return {
        "partition_index": index,
        "error_code": code,
        "high_watermark": -1,
        "last_stable_offset": -1,
        "log_start_offset": -1,
        "records": None,
    }
