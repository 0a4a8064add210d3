"""Followers copying their leader's log, as Kafka's ReplicaFetcherThread.

One `ReplicaFetcher` per leader broker fetches, in one Fetch request (with this broker's id as
`replica_id`), every partition this broker follows there. A partition that just became a
follower first truncates its log where it diverges from the leader's, found with
OffsetForLeaderEpoch (KIP-101), so a replica that led before and wrote what was never
replicated drops that tail. The batches fetched are appended with the offsets and epochs the
leader gave them; the follower's high watermark is the leader's, as far as it has the data.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from kbroker.cluster.broker_client import AsyncBrokerClient, BrokerUnavailable
from kbroker.cluster.fetch_sessions import INITIAL_EPOCH, INVALID_SESSION_ID, next_epoch
from kbroker.cluster.partition import Partition
from kbroker.security.sasl_config import SaslCredentials
from kbroker.storage.log_validator import UnexpectedAppendOffset
from kbroker.tasks import cancel_and_wait
from protocol.errors import ErrorCode, KafkaError
from protocol.records import LOG_OVERHEAD

log = logging.getLogger("kbroker.replication")

FETCH, LIST_OFFSETS, OFFSET_FOR_LEADER_EPOCH = 1, 2, 23
FETCH_VERSION, LIST_OFFSETS_VERSION, EPOCH_VERSION = 12, 8, 4
EARLIEST, EARLIEST_LOCAL = -2, -4
UNDEFINED = -1
_LENGTH = struct.Struct(">i")
# Errors that only the controller's next decision resolves: keep fetching the others meanwhile.
_WAIT_FOR_METADATA = frozenset({ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.FENCED_LEADER_EPOCH,
                                ErrorCode.UNKNOWN_LEADER_EPOCH, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION})


class FollowerArchive(Protocol):
    """What a follower needs of the archive (kbroker/archive/archiver.py's Archiver)."""

    async def follower_start(self, partition: Any, leader_local_start: int) -> Any: ...


@dataclass(frozen=True, slots=True)
class FetcherConfig:
    max_wait_ms: int = 500  # replica.fetch.wait.max.ms
    min_bytes: int = 1  # replica.fetch.min.bytes
    max_bytes: int = 10 * 1024 * 1024  # replica.fetch.response.max.bytes
    partition_max_bytes: int = 1024 * 1024  # replica.fetch.max.bytes
    backoff_ms: int = 1000  # replica.fetch.backoff.ms


def whole_batches(records: bytes | memoryview) -> memoryview:
    """The complete batches at the start of a fetched slice (a slice may end inside one)."""
    view = memoryview(records)
    position = 0
    while position + LOG_OVERHEAD <= len(view):
        size = LOG_OVERHEAD + _LENGTH.unpack_from(view, position + LOG_OVERHEAD - 4)[0]
        if position + size > len(view):
            break
        position += size
    return view[:position]


class _Session:
    """This fetcher's fetch session with its leader: id 0 until the leader grants one."""

    __slots__ = ("id", "epoch", "sent")

    def __init__(self) -> None:
        self.id = INVALID_SESSION_ID
        self.epoch = INITIAL_EPOCH
        self.sent: dict[tuple[str, int], tuple[int, int, int]] = {}  # what the leader holds for us

    def reset(self) -> None:
        self.id, self.epoch, self.sent = INVALID_SESSION_ID, INITIAL_EPOCH, {}

    def answered(self, session_id: int, named: dict[tuple[str, int], tuple[int, int, int]],
                 forgotten: list[tuple[str, int]]) -> None:
        if self.id == INVALID_SESSION_ID:  # a full fetch: the leader granted a session, or not
            self.id = session_id
            self.epoch = next_epoch(INITIAL_EPOCH) if session_id else INITIAL_EPOCH
            self.sent = dict(named) if session_id else {}
            return
        if session_id == INVALID_SESSION_ID:  # the leader ended it (nothing left in it)
            self.reset()
            return
        self.epoch = next_epoch(self.epoch)
        self.sent.update(named)
        for key in forgotten:
            self.sent.pop(key, None)


class ReplicaFetcher:
    def __init__(self, local_id: int, leader_id: int, host: str, port: int, config: FetcherConfig,
                 ssl_context: ssl.SSLContext | None = None, sasl: SaslCredentials | None = None,
                 archive: Callable[[], FollowerArchive | None] = lambda: None) -> None:
        self.local_id = local_id
        self.archive = archive  # this broker's archive, if it archives (a tiered replica far behind needs it)
        self.leader_id = leader_id
        self.config = config
        self.client = AsyncBrokerClient(host, port, f"replica-fetcher-{local_id}-{leader_id}",
                                        ssl_context=ssl_context, sasl=sasl)
        self.partitions: dict[tuple[str, int], Partition] = {}
        self._needs_truncation: set[tuple[str, int]] = set()
        self._changed = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._session = _Session()
        # Partitions the leader refused until new metadata comes: left out of fetches for
        # replica.fetch.backoff.ms, while the others go on (as Kafka's fetcher delays them).
        self._delayed_until: dict[tuple[str, int], float] = {}

    # -- membership --------------------------------------------------------------------------

    def add(self, partition: Partition) -> None:
        key = (partition.topic, partition.index)
        self.partitions[key] = partition
        self._needs_truncation.add(key)
        self._delayed_until.pop(key, None)  # a new role: the controller has spoken
        self._changed.set()
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name=f"fetcher-{self.leader_id}")

    def remove(self, topic: str, index: int) -> None:
        self.partitions.pop((topic, index), None)
        self._needs_truncation.discard((topic, index))
        self._delayed_until.pop((topic, index), None)

    async def stop(self) -> None:
        await cancel_and_wait(self._task)
        self._task = None
        await self.client.close()

    # -- the loop -----------------------------------------------------------------------------

    async def _run(self) -> None:
        failing_since: float | None = None  # a dead leader fails every retry: say so once
        while True:
            if not self.partitions:
                self._changed.clear()
                await self._changed.wait()
                continue
            try:
                if self._needs_truncation and (diverged := self._truncatable()):
                    await self._truncate_diverged(diverged)
                await self._fetch_once()
                if failing_since is not None:
                    log.info("fetching from broker %d again after %.1f s of errors", self.leader_id,
                             time.monotonic() - failing_since)
                    failing_since = None
            except (BrokerUnavailable, KafkaError) as e:
                self._session.reset()  # the leader may have moved on or restarted: start afresh
                if failing_since is None:
                    failing_since = time.monotonic()
                    log.info("fetching from broker %d: %s; retrying every %d ms", self.leader_id, e,
                             self.config.backoff_ms)
                await asyncio.sleep(self.config.backoff_ms / 1000)  # replica.fetch.backoff.ms
            except asyncio.CancelledError:
                raise
            except Exception:
                self._session.reset()
                log.exception("replica fetcher for broker %d failed; retrying", self.leader_id)
                await asyncio.sleep(self.config.backoff_ms / 1000)

    async def _fetch_once(self) -> None:
        fetched = self._fetchable()
        if not fetched:
            await self._wait_for_delays()
            return
        positions = {key: (p.log_end_offset, p.leader_epoch, p.log_start_offset) for key, p in fetched.items()}
        session = self._session
        # In a session (KIP-227) only the partitions whose position moved are named; the leader
        # remembers the others, and answers only for partitions with something new.
        named = positions if session.id == 0 else {k: v for k, v in positions.items() if session.sent.get(k) != v}
        forgotten = [] if session.id == 0 else [k for k in session.sent if k not in positions]
        by_topic: dict[str, list[dict[str, Any]]] = {}
        for (topic, index), (offset, leader_epoch, log_start) in named.items():
            by_topic.setdefault(topic, []).append({
                "partition": index, "current_leader_epoch": leader_epoch, "fetch_offset": offset,
                "last_fetched_epoch": -1, "log_start_offset": log_start,
                "partition_max_bytes": self.config.partition_max_bytes,
            })
        forgotten_by_topic: dict[str, list[int]] = {}
        for topic, index in forgotten:
            forgotten_by_topic.setdefault(topic, []).append(index)
        body = {"replica_id": self.local_id, "max_wait_ms": self.config.max_wait_ms,
                "min_bytes": self.config.min_bytes, "max_bytes": self.config.max_bytes, "isolation_level": 0,
                "session_id": session.id, "session_epoch": session.epoch, "rack_id": "",
                "forgotten_topics_data": [{"topic": t, "partitions": ps} for t, ps in forgotten_by_topic.items()],
                "topics": [{"topic": t, "partitions": ps} for t, ps in by_topic.items()]}
        response = await self.client.request(FETCH, FETCH_VERSION, body)
        if response.error_code in (ErrorCode.FETCH_SESSION_ID_NOT_FOUND, ErrorCode.INVALID_FETCH_SESSION_EPOCH):
            log.info("fetch session %d with broker %d: %s; fetching in full", session.id, self.leader_id,
                     ErrorCode(response.error_code).name)
            session.reset()
            return
        if response.error_code != ErrorCode.NO_ERROR:
            raise KafkaError(ErrorCode(response.error_code), "fetch refused")
        session.answered(response.session_id, named, forgotten)
        for topic in response.responses:
            for result in topic.partitions:
                key = (topic.topic, result.partition_index)
                partition = self.partitions.get(key)
                if partition is None or partition is not fetched.get(key):
                    continue  # its role changed while the fetch was in flight
                if await self._apply(partition, result):  # until the controller's next word
                    self._delay(key)

    def _delay(self, key: tuple[str, int]) -> None:
        self._delayed_until[key] = asyncio.get_running_loop().time() + self.config.backoff_ms / 1000

    def _expire_delays(self) -> None:
        now = asyncio.get_running_loop().time()
        for key, until in list(self._delayed_until.items()):
            if until <= now:
                del self._delayed_until[key]

    def _fetchable(self) -> dict[tuple[str, int], Partition]:
        """The partitions not held back, and whose log is known to agree with the leader's (a
        partition awaiting truncation must not append at its end)."""
        self._expire_delays()
        return {k: p for k, p in self.partitions.items()
                if k not in self._delayed_until and k not in self._needs_truncation}

    def _truncatable(self) -> list[tuple[str, int]]:
        self._expire_delays()
        return [k for k in self._needs_truncation if k in self.partitions and k not in self._delayed_until]

    async def _wait_for_delays(self) -> None:
        """Every partition is held back: wait for the first to be due, or for a change of roles."""
        self._changed.clear()
        now = asyncio.get_running_loop().time()
        due = min(self._delayed_until.values(), default=now + self.config.backoff_ms / 1000) - now
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(max(due, 0.0)):
                await self._changed.wait()

    async def _apply(self, partition: Partition, result: Any) -> bool:
        """Append what the leader sent; True when the partition must wait for new metadata."""
        code = result.error_code
        if code == ErrorCode.NO_ERROR:
            data = whole_batches(result.records) if result.records is not None else memoryview(b"")
            if len(data):
                try:
                    partition.log.append_as_follower(data)
                except UnexpectedAppendOffset as e:
                    log.warning("%s: %s; truncating again", partition.name, e)
                    self._needs_truncation.add((partition.topic, partition.index))
                    return False
            partition.update_follower_high_watermark(result.high_watermark)
            self._follow_log_start(partition, result.log_start_offset)
            return False
        if code == ErrorCode.OFFSET_OUT_OF_RANGE:
            await self._reset_out_of_range(partition)
            return False
        if code == ErrorCode.OFFSET_MOVED_TO_TIERED_STORAGE:
            await self._start_from_archive(partition)
            return False
        if code in _WAIT_FOR_METADATA:
            return True
        log.warning("%s: leader %d answered %s", partition.name, self.leader_id, ErrorCode(code).name)
        return True

    @staticmethod
    def _follow_log_start(partition: Partition, leader_log_start: int) -> None:
        # DeleteRecords and retention on the leader move its log start; followers follow as far as they can.
        log_ = partition.log
        if log_.log_start_offset < leader_log_start <= log_.high_watermark:
            log_.delete_records_before(leader_log_start)

    # -- truncation ---------------------------------------------------------------------------

    async def _truncate_diverged(self, keys: list[tuple[str, int]]) -> None:
        """KIP-101: ask the leader where our latest epoch ends there, and cut our log at that point."""
        by_topic: dict[str, list[dict[str, Any]]] = {}
        for topic, index in keys:
            partition = self.partitions[(topic, index)]
            by_topic.setdefault(topic, []).append({"partition": index, "current_leader_epoch": partition.leader_epoch,
                                                   "leader_epoch": partition.log.latest_epoch})
        body = {"replica_id": self.local_id, "topics": [{"topic": t, "partitions": ps} for t, ps in by_topic.items()]}
        response = await self.client.request(OFFSET_FOR_LEADER_EPOCH, EPOCH_VERSION, body)
        for topic in response.topics:
            for result in topic.partitions:
                key = (topic.topic, result.partition)
                partition = self.partitions.get(key)
                if partition is None:
                    continue
                if result.error_code != ErrorCode.NO_ERROR:  # asked again after the backoff
                    self._delay(key)
                    continue
                self._truncate(partition, result.leader_epoch, result.end_offset)
                self._needs_truncation.discard(key)

    @staticmethod
    def _truncate(partition: Partition, leader_epoch: int, leader_end: int) -> None:
        log_ = partition.log
        if log_.latest_epoch < 0 or leader_end == UNDEFINED:
            target = log_.high_watermark  # nothing to compare epochs with: keep only what was committed
        elif leader_epoch == log_.latest_epoch:
            target = leader_end
        else:
            _, our_end = log_.end_offset_for_epoch(leader_epoch)
            target = min(leader_end, our_end)
        target = min(target, log_.log_end_offset)
        if target < log_.log_end_offset:
            log.info("%s: truncating from %d to %d to follow leader epoch %d", partition.name,
                     log_.log_end_offset, target, partition.leader_epoch)
            log_.truncate_to(target)

    async def _leader_offset(self, partition: Partition, timestamp: int) -> int | None:
        """The leader's answer to ListOffsets for a special timestamp (None: an error)."""
        body = {"replica_id": self.local_id, "isolation_level": 0, "topics": [{"name": partition.topic, "partitions": [
            {"partition_index": partition.index, "current_leader_epoch": partition.leader_epoch,
             "timestamp": timestamp}]}]}
        response = await self.client.request(LIST_OFFSETS, LIST_OFFSETS_VERSION, body)
        result = response.topics[0].partitions[0]
        return result.offset if result.error_code == ErrorCode.NO_ERROR else None

    async def _reset_out_of_range(self, partition: Partition) -> None:
        """Our fetch offset is outside the leader's log: behind its start (retention), or ahead
        of its end (we held more than the new leader): start over at its start, or truncate."""
        leader_start = await self._leader_offset(partition, EARLIEST)
        if leader_start is None:
            return
        if partition.log_end_offset < leader_start:
            log.info("%s: behind the leader's log start %d; starting over there", partition.name, leader_start)
            partition.log.truncate_fully_and_start_at(leader_start)
        else:
            self._needs_truncation.add((partition.topic, partition.index))

    async def _start_from_archive(self, partition: Partition) -> None:
        """Our fetch offset is below the leader's local log, in the archive (a replica that was
        away while the leader's local retention moved on, or a new one): start over past the
        archived segment holding the offset before the leader's local log, with the leader
        epochs and producer state archived with it (Kafka's TierStateMachine)."""
        key = (partition.topic, partition.index)
        archive = self.archive()
        if archive is None:
            log.warning("%s: the leader's local log starts past our end and this broker does not archive",
                        partition.name)
            self._delay(key)
            return
        local_start = await self._leader_offset(partition, EARLIEST_LOCAL)
        start = await self._leader_offset(partition, EARLIEST)
        try:
            begin = None if local_start is None else await archive.follower_start(partition, local_start)
        except KafkaError:
            begin = None
        if begin is None or start is None or self.partitions.get(key) is not partition:
            self._delay(key)  # asked again after the backoff
            return
        log.info("%s: behind the leader's local log start %d; starting over at %d, after the archive",
                 partition.name, local_start, begin.offset)
        partition.log.start_from_archive(begin.offset, start, begin.epochs, begin.producer_snapshot)
