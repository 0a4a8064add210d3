"""Fetch: the wire's side of `ReplicaManager.fetch`, which reads the record batches, long-polling
until min_bytes arrive or max_wait_ms passes.

Record bytes are never copied: the log returns file slices that the connection sends with
sendfile. Topic ids are resolved here (`_topic_name`). Fetch sessions (KIP-227, `kbroker/cluster/fetch_sessions.py`): a full
fetch with epoch 0 opens one; an incremental fetch names only what changed and is answered
with only the partitions that have news.
"""

from __future__ import annotations

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
from kbroker.cluster.partition import QUIET, LogReadResult
from kbroker.cluster.replica_manager import FetchParams, PartitionFetch
from kbroker.handlers import Pacer, RequestContext
from kbroker.handlers.authorize import Op, Resource, allowed_names, cluster_allowed
from protocol.errors import ErrorCode
from protocol.messages.fetch import FetchableTopicResponse, FetchResponse, PartitionData
from protocol.primitives import ZERO_UUID

API_KEY = 1
MIN_VERSION = 4
ADVERTISED_MIN = 0
MAX_VERSION = 17  # v17 adds a tagged ReplicaDirectoryId (KIP-853), for KRaft voters only
READ_COMMITTED = 1
SESSIONS_SINCE = 7  # the first version with session fields
TOPIC_IDS_SINCE = 13


async def handle(ctx: RequestContext, request: Any) -> FetchResponse:
    sessions = ctx.broker.fetch_sessions
    replica_id = _replica_id(ctx, request)
    ctx.exempt_from_request_quota = replica_id >= 0
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
    keys = list(wanted)
    names, partitions = await _partition_fetches(ctx, wanted, pacer, consumer=replica_id < 0)
    quota = ctx.broker.quotas.fetch
    limited = replica_id < 0 and quota.enabled  # consumers' consumer_byte_rate quotas
    max_bytes, min_bytes = request.max_bytes, request.min_bytes
    if limited:
        # Kafka: never more than the quota allows in its window, which would be sure to throttle.
        max_bytes = min(max_bytes, int(quota.max_value_in_window(ctx.principal, ctx.header.client_id or "")))
        min_bytes = min(min_bytes, max_bytes)
    params = FetchParams(replica_id, request.max_wait_ms, min_bytes, max_bytes,
                         read_committed=request.isolation_level == READ_COMMITTED)
    results = await _fetch_authorized(ctx, params, partitions, pacer)
    reads = list(zip(keys, names, results, strict=True))
    if limited:
        throttle_ms = _record_quota(ctx, reads)
        if throttle_ms:
            # Kafka's getThrottledResponse: no data, the session as it was (a full fetch opens none).
            return {"throttle_time_ms": throttle_ms, "error_code": ErrorCode.NO_ERROR,
                    "session_id": session.id if session is not None else INVALID_SESSION_ID, "responses": []}
    if session is not None:
        reads = _news(session, reads)
        response_session = session.id
    elif epoch == INITIAL_EPOCH and ctx.version >= SESSIONS_SINCE and reads:
        response_session = sessions.create(replica_id >= 0, _cache(reads, wanted), ctx.now_ms())
    else:
        response_session = INVALID_SESSION_ID
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NO_ERROR, "session_id": response_session,
            "responses": await _by_topic(reads, pacer)}


def _record_quota(ctx: RequestContext, reads: list[_Read]) -> int:
    """Kafka's fetch quota: the response's size is recorded and, when that exceeds the client's
    quota, taken back again (the answer will carry no data) and the throttle time returned."""
    quotas = ctx.broker.quotas
    client_id = ctx.header.client_id or ""
    size = _response_size(reads)
    now = quotas.now_ms()
    throttle_ms = quotas.fetch.record(ctx.principal, client_id, size, now)
    if throttle_ms:
        quotas.fetch.unrecord(ctx.principal, client_id, size, now)
        ctx.throttle_ms = throttle_ms
        ctx.broker.stats.record_throttle(*quotas.fetch.throttle_entity(ctx.principal, client_id), throttle_ms)
    return throttle_ms


def _response_size(reads: list[_Read]) -> int:
    """About the encoded size of the answer (Kafka's FetchContext.getResponseSize): the records,
    and each topic's and partition's fields."""
    size = 16
    topics = set()
    for key, name, result in reads:
        size += 46 + result.size
        if key[:2] not in topics:
            topics.add(key[:2])
            size += 22 + len(name or "")
    return size


# What one partition contributes to a fetch response: its session key, its topic name (None: an
# unknown topic id) and what the replica manager read.
_Read = tuple[PartitionKey, str | None, LogReadResult]


async def _fetch_authorized(ctx: RequestContext, params: FetchParams, partitions: list[PartitionFetch],
                            pacer: Pacer) -> list[LogReadResult]:
    """Kafka's checks: a follower needs CLUSTER_ACTION on the cluster, a consumer READ on each
    topic; what is refused answers TOPIC_AUTHORIZATION_FAILED and is never read."""
    if params.replica_id >= 0:
        permitted = {p.topic for p in partitions} if cluster_allowed(ctx, Op.CLUSTER_ACTION) else set()
    else:
        permitted = allowed_names(ctx, Op.READ, Resource.TOPIC, (p.topic for p in partitions if p.topic is not None))
    # An unknown topic id is not a name to refuse: the replica manager answers it as unknown.
    readable = [p for p in partitions if p.topic is None or p.topic in permitted]
    if len(readable) == len(partitions):
        return await ctx.broker.replicas.fetch(params, partitions, ctx.now_ms(), pacer)
    read = iter(await ctx.broker.replicas.fetch(params, readable, ctx.now_ms(), pacer))
    refused = LogReadResult(ErrorCode.TOPIC_AUTHORIZATION_FAILED, hosted=False)
    return [next(read) if p.topic is None or p.topic in permitted else refused for p in partitions]


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
            if pacer.due():
                await pacer.pause()
    return wanted


def _forgotten(ctx: RequestContext, request: Any) -> list[PartitionKey]:
    return [_key(ctx, topic, index) for topic in request.forgotten_topics_data or [] for index in topic.partitions]


async def _partition_fetches(ctx: RequestContext, wanted: dict[PartitionKey, CachedPartition],
                             pacer: Pacer, consumer: bool) -> tuple[list[str | None], list[PartitionFetch]]:
    """What to ask the replica manager, by topic name: v13+ fetchers name topics by id. A
    consumer's read of a filtered view reads its source (followers never replicate a view)."""
    by_id: dict[uuid.UUID, str | None] = {}
    names: list[str | None] = []
    partitions: list[PartitionFetch] = []
    for (topic_id, name, index), entry in wanted.items():
        if pacer.due():
            await pacer.pause()
        if name is None:
            if topic_id not in by_id:
                by_id[topic_id] = _topic_name(ctx, topic_id)
            name = by_id[topic_id]
        names.append(name)
        view = ctx.broker.metadata_cache.view(name) if consumer else None
        partitions.append(PartitionFetch(name, index, entry.fetch_offset, entry.max_bytes, entry.leader_epoch, view,
                                         entry.high_watermark, entry.log_start_offset))
    return names, partitions


def _topic_name(ctx: RequestContext, topic_id: uuid.UUID) -> str | None:
    """The one lookup of a topic id."""
    record = ctx.broker.metadata_cache.topic_by_id(topic_id)
    return record.name if record else None


def _news(session: FetchSession, reads: list[_Read]) -> list[_Read]:
    """An incremental response: only the partitions with records, a moved high watermark or log
    start, or an error; those that returned records go to the back of the session's order."""
    news = []
    for read in reads:
        key, _, result = read
        if result is QUIET:  # nothing read, nothing new to tell
            continue
        cached = session.partitions[key]
        if cached.must_respond(result.size, result.high_watermark, result.log_start_offset,
                               result.error != ErrorCode.NO_ERROR):
            news.append(read)
            if result.size:
                session.move_to_end(key)
    return news


def _cache(reads: list[_Read], wanted: dict[PartitionKey, CachedPartition]) -> dict[PartitionKey, CachedPartition]:
    """A new session's partitions, remembering what this full response told of each."""
    cached = {}
    for key, _, result in reads:
        entry = wanted[key]
        error = result.error != ErrorCode.NO_ERROR
        entry.high_watermark = -1 if error else result.high_watermark
        entry.log_start_offset = result.log_start_offset
        cached[key] = entry
    return cached


async def _by_topic(reads: list[_Read], pacer: Pacer) -> list[FetchableTopicResponse]:
    """Response topics in the reads' order, consecutive partitions of a topic together."""
    topics: list[FetchableTopicResponse] = []
    last: PartitionKey | None = None
    for key, resolved_name, result in reads:
        topic_id, name, index = key
        if last is None or key[:2] != last[:2]:
            topics.append({"topic": resolved_name if name is None else name, "topic_id": topic_id, "partitions": []})
        topics[-1]["partitions"].append(_partition_data(index, result))
        last = key
        if pacer.due():
            await pacer.pause()
    return topics


def _replica_id(ctx: RequestContext, request: Any) -> int:
    """The fetching follower's broker id; -1 for consumers."""
    if ctx.version >= 15:
        return request.replica_state.replica_id if request.replica_state is not None else -1
    return request.replica_id


def _partition_data(index: int, result: LogReadResult) -> PartitionData:
    if not result.hosted:
        return _error(index, result.error)
    aborted = result.aborted_transactions
    return {
        "partition_index": index,
        "high_watermark": result.high_watermark,
        "last_stable_offset": result.last_stable_offset,
        "log_start_offset": result.log_start_offset,
        "aborted_transactions": None if aborted is None else [
            {"producer_id": producer_id, "first_offset": first_offset} for producer_id, first_offset in aborted],
        # Never null, errors included: librdkafka cannot parse a null record set. A slice of the
        # log is sent as it is (sendfile), never copied.
        "records": b"" if result.records is None else result.records,
        "error_code": result.error,
    }


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
