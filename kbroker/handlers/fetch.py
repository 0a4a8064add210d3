"""Fetch: read record batches, long-polling until min_bytes arrive or max_wait_ms passes.

Record bytes are never copied here: the log returns file slices that the connection
sends with sendfile. Fetch sessions (KIP-227, `kbroker/cluster/fetch_sessions.py`): a full
fetch with epoch 0 opens one; an incremental fetch names only what changed and is answered
with only the partitions that have news.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from kbroker.cluster.fetch_sessions import (
    FINAL_EPOCH,
    INITIAL_EPOCH,
    INVALID_SESSION_ID,
    CachedPartition,
    FetchSession,
    PartitionKey,
    next_epoch,
)
from kbroker.cluster.partition import Partition
from kbroker.handlers import Pacer, RequestContext
from protocol.errors import ErrorCode, KafkaError
from protocol.messages.fetch import FetchableTopicResponse, FetchResponse, PartitionData

API_KEY = 1
MIN_VERSION = 4
ADVERTISED_MIN = 0
MAX_VERSION = 17  # v17 adds a tagged ReplicaDirectoryId (KIP-853), for KRaft voters only
READ_COMMITTED = 1
SESSIONS_SINCE = 7  # the first version with session fields
TOPIC_IDS_SINCE = 13
ZERO_UUID = uuid.UUID(int=0)


class _Read:
    """What one partition contributes to a fetch response."""

    __slots__ = ("key", "topic", "index", "offset", "max_bytes", "leader_epoch", "partition", "result", "refused",
                 "size")

    def __init__(self, key: PartitionKey, topic: str | None, wanted: CachedPartition) -> None:
        self.key = key
        self.topic = topic  # None: an unknown topic id
        self.index = key[2]
        self.offset = wanted.fetch_offset
        self.max_bytes = wanted.max_bytes
        self.leader_epoch = wanted.leader_epoch
        self.partition: Partition | None = None
        self.result: PartitionData = {}
        self.refused: KafkaError | None = None  # why this fetcher may not read here at all
        self.size = 0  # record bytes read


async def handle(ctx: RequestContext, request: Any) -> FetchResponse:
    sessions = ctx.broker.fetch_sessions
    replica_id = _replica_id(ctx, request)
    epoch, session_id = request.session_epoch, request.session_id
    session: FetchSession | None = None
    pacer = Pacer()
    wanted = await _wanted(ctx, request, pacer)
    if epoch in (INITIAL_EPOCH, FINAL_EPOCH):
        if session_id != INVALID_SESSION_ID:
            sessions.remove(session_id)  # a full fetch ends the session it names
    else:
        session = sessions.get(session_id)
        if session is None:
            return _session_error(ErrorCode.FETCH_SESSION_ID_NOT_FOUND)
        if session.epoch != epoch:
            return _session_error(ErrorCode.INVALID_FETCH_SESSION_EPOCH)
        session.update(wanted, _forgotten(ctx, request))
        if session.partitions:
            sessions.touch(session, ctx.now_ms())
            session.epoch = next_epoch(session.epoch)
            wanted = session.partitions
        else:
            sessions.remove(session.id)  # nothing left to fetch: the session ends
            session = None
    reads = await _plan(ctx, wanted, pacer)
    if replica_id >= 0:
        _record_follower(ctx, replica_id, reads)
    committed = request.isolation_level == READ_COMMITTED
    loop = asyncio.get_running_loop()
    deadline = loop.time() + request.max_wait_ms / 1000
    while True:
        total, errors = await _read_all(reads, request.max_bytes, committed, pacer, follower=replica_id >= 0)
        remaining = deadline - loop.time()
        # Nothing readable (no partitions, or only unknown topic ids) answers at once, as in
        # Kafka: e.g. the Java consumer's close sends an empty fetch to end its session.
        if total >= request.min_bytes or errors or remaining <= 0 or not reads:
            break
        await ctx.broker.replicas.wait_for_data((r.partition for r in reads if r.partition), remaining)
    if session is not None:
        reads = _news(session, reads)
        response_session = session.id
    elif epoch == INITIAL_EPOCH and ctx.version >= SESSIONS_SINCE and reads:
        response_session = sessions.create(replica_id >= 0, _cache(reads, wanted), ctx.now_ms())
    else:
        response_session = INVALID_SESSION_ID
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NO_ERROR, "session_id": response_session,
            "responses": _by_topic(ctx, reads)}


def _session_error(code: ErrorCode) -> FetchResponse:
    return {"throttle_time_ms": 0, "error_code": code, "session_id": INVALID_SESSION_ID, "responses": []}


def _key(ctx: RequestContext, topic: Any, index: int) -> PartitionKey:
    if ctx.version >= TOPIC_IDS_SINCE:
        return (topic.topic_id, None, index)
    return (ZERO_UUID, topic.topic, index)


async def _wanted(ctx: RequestContext, request: Any, pacer: Pacer) -> dict[PartitionKey, CachedPartition]:
    """The partitions the request names, with what it asks of each."""
    wanted = {}
    for topic in request.topics:
        for data in topic.partitions:
            wanted[_key(ctx, topic, data.partition)] = CachedPartition(
                data.fetch_offset, data.partition_max_bytes, data.current_leader_epoch, data.log_start_offset)
            await pacer.tick()
    return wanted


def _forgotten(ctx: RequestContext, request: Any) -> list[PartitionKey]:
    return [_key(ctx, topic, index) for topic in request.forgotten_topics_data or [] for index in topic.partitions]


async def _plan(ctx: RequestContext, wanted: dict[PartitionKey, CachedPartition], pacer: Pacer) -> list[_Read]:
    broker = ctx.broker
    names: dict[uuid.UUID, str | None] = {}
    reads = []
    for key, data in wanted.items():
        await pacer.tick()
        topic_id, name, index = key
        if name is None:
            if topic_id not in names:
                record = broker.metadata_cache.topic_by_id(topic_id)
                names[topic_id] = record.name if record else None
            name = names[topic_id]
        read = _Read(key, name, data)
        if name is None:
            read.result = _error(index, ErrorCode.UNKNOWN_TOPIC_ID)
        else:
            read.partition = broker.replicas.find(name, index)
            if read.partition is None:
                read.result = _error(index, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        reads.append(read)
    return reads


def _news(session: FetchSession, reads: list[_Read]) -> list[_Read]:
    """An incremental response: only the partitions with records, a moved high watermark or log
    start, or an error; those that returned records go to the back of the session's order."""
    news = []
    for read in reads:
        result = read.result
        cached = session.partitions[read.key]
        if cached.must_respond(read.size, result["high_watermark"], result["log_start_offset"],
                               result["error_code"] != ErrorCode.NO_ERROR):
            news.append(read)
            if read.size:
                session.move_to_end(read.key)
    return news


def _cache(reads: list[_Read], wanted: dict[PartitionKey, CachedPartition]) -> dict[PartitionKey, CachedPartition]:
    """A new session's partitions, remembering what this full response told of each."""
    cached = {}
    for read in reads:
        entry = wanted[read.key]
        error = read.result["error_code"] != ErrorCode.NO_ERROR
        entry.high_watermark = -1 if error else read.result["high_watermark"]
        entry.log_start_offset = read.result["log_start_offset"]
        cached[read.key] = entry
    return cached


def _by_topic(ctx: RequestContext, reads: list[_Read]) -> list[FetchableTopicResponse]:
    """Response topics in the reads' order, consecutive partitions of a topic together."""
    topics: list[FetchableTopicResponse] = []
    last: PartitionKey | None = None
    for read in reads:
        if last is None or read.key[:2] != last[:2]:
            topic_id, name, _ = read.key
            topics.append({"topic": read.topic if name is None else name, "topic_id": topic_id, "partitions": []})
        topics[-1]["partitions"].append(read.result)
        last = read.key
    return topics


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


async def _read_all(reads: list[_Read], max_bytes: int, committed: bool, pacer: Pacer,
                    follower: bool = False) -> tuple[int, bool]:
    total = 0
    errors = False
    for read in reads:
        await pacer.tick()
        if read.partition is None:
            errors = True
            continue
        read.size = _read_one(read, max_bytes - total, first=total == 0, committed=committed, follower=follower)
        errors = errors or read.result["error_code"] != ErrorCode.NO_ERROR
        total += read.size
    return total, errors


def _read_one(read: _Read, budget: int, first: bool, committed: bool, follower: bool = False) -> int:
    partition = read.partition
    assert partition is not None
    result: PartitionData = {
        "partition_index": read.index,
        "high_watermark": partition.high_watermark,
        "last_stable_offset": partition.last_stable_offset,
        "log_start_offset": partition.log_start_offset,
        "aborted_transactions": [] if committed else None,
        "records": b"",  # never null, errors included: librdkafka cannot parse a null record set
        "error_code": ErrorCode.NO_ERROR,
    }
    read.result = result
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


def _error(index: int, code: ErrorCode) -> PartitionData:
    return {
        "partition_index": index,
        "error_code": code,
        "high_watermark": -1,
        "last_stable_offset": -1,
        "log_start_offset": -1,
        "records": b"",
    }


def error_answer(version: int, request: Any, code: int, message: str | None) -> FetchResponse:
    """Kafka's answer to a Fetch that failed as a whole: from v13 the top-level code alone;
    before, also every requested partition with the code and empty (not null) records."""
    topics: list[FetchableTopicResponse] = [] if version >= TOPIC_IDS_SINCE else [
        {"topic": t.topic, "partitions": [{**_error(p.partition, code), "records": b""} for p in t.partitions]}
        for t in request.topics
    ]
    return {"throttle_time_ms": 0, "error_code": code, "session_id": 0, "responses": topics}
