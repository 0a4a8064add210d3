"""The archive's background work (Kafka's RemoteLogManager): for every tiered partition this
broker leads, copy closed segments below the last stable offset to the object store, record
them in the partition's remote log metadata, and apply the total retention to what is archived;
for every tiered partition it hosts, tell the log what is archived so local retention may
delete it. Consumers' reads below the local log start are served from here too.

One round every `remote.log.manager.task.interval.ms`; a partition whose round fails (the
object store unreachable, a metadata conflict) waits a backoff that doubles up to
`remote.log.manager.task.retry.backoff.max.ms` and keeps its local data meanwhile. Every write
of the metadata is a compare-and-set on the version the round read: of two brokers that both
think they lead a partition, the one with the older view fails and stops; the one that reads a
document written by a newer leader epoch leaves the partition alone.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import logging
import re
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, TypeVar

from kbroker.archive.object_store import ObjectStore, ObjectStoreError
from kbroker.archive.remote_log import (
    COPY_FINISHED,
    COPY_STARTED,
    DELETE_STARTED,
    LEADER_EPOCHS,
    LOG,
    OFFSET_INDEX,
    PRODUCER_SNAPSHOT,
    TIME_INDEX,
    TXN_INDEX,
    RemoteLog,
    RemoteSegment,
)
from kbroker.archive.remote_reader import RemoteReader
from kbroker.clock import WallClock, wall_clock_ms
from kbroker.log_limiter import RateLimitedLog
from kbroker.metadata.store import MetadataConflict, MetadataStore
from kbroker.storage.index import OffsetIndex, TimeIndex, segment_file_name
from kbroker.storage.leader_epoch import EpochEntry
from kbroker.storage.log import Log
from kbroker.storage.segment import LogSegment
from kbroker.tasks import cancel_and_wait
from protocol.errors import ErrorCode, KafkaError
from protocol.records import read_header

log = logging.getLogger("kbroker.archive")
T = TypeVar("T")
limited_log = RateLimitedLog(log)


class Runner(Protocol):
    """Where metadata store calls run (the broker's StoreWriter: off the event loop for ZooKeeper)."""

    async def run(self, call: Callable[..., object], *args: object) -> object: ...


class Hosted(Protocol):
    """What the archiver needs of a partition (kbroker/cluster/partition.py)."""

    topic: str
    index: int
    topic_id: uuid.UUID
    log: Log
    leader_epoch: int

    @property
    def is_leader(self) -> bool: ...


@dataclass(frozen=True, slots=True)
class ArchiveSettings:
    task_interval_ms: int = 30_000
    retry_backoff_ms: int = 500
    retry_backoff_max_ms: int = 30_000
    cache_bytes: int = 1 << 30
    # remote.log.manager.copier.thread.pool.size: partitions a round archives at once, and the
    # threads their uploads and deletions run on.
    copier_threads: int = 10
    # remote.log.reader.threads: the threads consumers' reads of the archive run on.
    reader_threads: int = 10


@dataclass(frozen=True, slots=True)
class RemoteRead:
    """Archived batches for a fetch, and the aborted transactions (producer id, first offset)
    overlapping them for read_committed."""

    data: bytes
    first_offset: int
    aborted: list[tuple[int, int]]


@dataclass(frozen=True, slots=True)
class FollowerStart:
    """Where a follower behind its leader's local log start starts over (Kafka's remote log aux
    state): the end of the archived segment holding the offset before the leader's local log,
    with the leader epochs and producer state archived with that segment."""

    offset: int
    epochs: list[EpochEntry]
    producer_snapshot: bytes


class Fenced(Exception):
    """Another leader wrote the partition's metadata: this broker stops archiving it."""


@dataclass(slots=True)
class _Backoff:
    delay_ms: int
    next_ms: int


class Archiver:
    def __init__(self, settings: ArchiveSettings, store: ObjectStore, metadata: MetadataStore, writer: Runner,
                 partitions: Callable[[], Iterator[Hosted]], cache_dir: Path,
                 clock: WallClock = wall_clock_ms) -> None:
        self.settings = settings
        self.store = store
        self.metadata = metadata
        self.writer = writer
        self.partitions = partitions
        self.clock = clock
        self.reader = RemoteReader(store, cache_dir, settings.cache_bytes)
        self._copiers = ThreadPoolExecutor(settings.copier_threads, thread_name_prefix="archive-copy")
        self._readers = ThreadPoolExecutor(settings.reader_threads, thread_name_prefix="archive-read")
        self.remote_logs: dict[tuple[str, int], RemoteLog] = {}  # as last read or written
        self._backoff: dict[tuple[str, int], _Backoff] = {}
        self._task: asyncio.Task[None] | None = None
        self._deletions: set[asyncio.Task[None]] = set()
        self._wake = asyncio.Event()
        # What the metrics show (kbroker_archive_*).
        self.segments_copied = 0
        self.bytes_copied = 0
        self.segments_deleted = 0
        self.failures = 0

    @property
    def backing_off(self) -> int:
        return len(self._backoff)

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        await cancel_and_wait(self._task)
        self._task = None
        for task in list(self._deletions):  # a deletion under way finishes (its objects would stay)
            with contextlib.suppress(Exception):
                await task
        for pool in (self._copiers, self._readers):  # what runs there finishes; what waits does not
            await asyncio.to_thread(pool.shutdown, wait=True, cancel_futures=True)
        await asyncio.to_thread(self.reader.close)
        self.store.close()

    async def _copying(self, call: Callable[..., T], *args: object) -> T:
        """`call(*args)` on a copier thread (uploads, deletions: they block on the object store)."""
        return await asyncio.get_running_loop().run_in_executor(self._copiers, functools.partial(call, *args))

    async def _reading(self, call: Callable[..., T], *args: object) -> T:
        """`call(*args)` on a reader thread: consumers' reads never wait behind uploads."""
        return await asyncio.get_running_loop().run_in_executor(self._readers, functools.partial(call, *args))

    def wake(self) -> None:
        """Run a round now (a topic's configs changed; tests)."""
        self._wake.set()

    async def _run(self) -> None:
        while True:
            try:
                await self.round()
            except Exception:  # a bug must not end archiving for good: the next round retries
                log.exception("archiving round failed")
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.settings.task_interval_ms / 1000):
                    await self._wake.wait()
            self._wake.clear()

    async def round(self) -> None:
        """One pass over the hosted tiered partitions, `copier_threads` of them at a time."""
        now = self.clock()
        due = [p for p in self.partitions() if p.log.tiered and (
            (backoff := self._backoff.get((p.topic, p.index))) is None or now >= backoff.next_ms)]
        slots = asyncio.Semaphore(self.settings.copier_threads)

        async def one(partition: Hosted) -> None:
            async with slots:
                await self._round_of(partition)

        for outcome in await asyncio.gather(*(one(p) for p in due), return_exceptions=True):
            if isinstance(outcome, Exception):  # a bug: the other partitions went on
                log.error("archiving round of a partition failed", exc_info=outcome)

    async def _round_of(self, partition: Hosted) -> None:
        key = (partition.topic, partition.index)
        try:
            await self._archive(partition)
        except (ObjectStoreError, MetadataConflict, OSError) as e:
            self._failed(key, partition, e)
        except Fenced as e:
            log.info("%s-%d: %s", *key, e)
        else:
            self._backoff.pop(key, None)

    def _failed(self, key: tuple[str, int], partition: Hosted, error: Exception) -> None:
        self.failures += 1
        before = self._backoff.get(key)
        delay = self.settings.retry_backoff_ms if before is None else \
            min(before.delay_ms * 2, self.settings.retry_backoff_max_ms)
        self._backoff[key] = _Backoff(delay, self.clock() + delay)
        if before is None:  # once per failure streak, not every retry
            log.warning("archiving %s-%d failed, retrying with backoff (local data kept): %s", *key, error)

    def forget_topic(self, topic: str, topic_id: uuid.UUID) -> None:
        """A deleted topic's archive goes: every object under its key, then its metadata (in the
        background; a failure is logged and leaves objects to delete by hand, never another
        topic's)."""
        key = archive_key(topic, topic_id)
        for remote_key in [k for k in self.remote_logs if k[0] == key]:
            del self.remote_logs[remote_key]
        task = asyncio.get_running_loop().create_task(self._delete_topic(key))
        self._deletions.add(task)
        task.add_done_callback(self._deletions.discard)

    async def _delete_topic(self, key: str) -> None:
        try:
            # The metadata first: a round still uploading one of the topic's segments then fails
            # its next compare-and-set and deletes what it uploaded; listing the objects after
            # that finds every other one.
            documents = await self.writer.run(self.metadata.list_remote_logs, key)
            await self.writer.run(self.metadata.delete_remote_logs, key)
            for document, version in documents.values():  # type: ignore[union-attr]
                for segment in RemoteLog.from_document(key, 0, document, version).segments:
                    self.reader.forget(segment)
            listed = await self._copying(self.store.list_keys, f"{key}-")
            # Only "<key>-<partition>/...": a topic whose name starts with this key is another's.
            ours = re.compile(re.escape(key) + r"-\d+/")
            objects = [name for name in listed if ours.match(name)]
            await self._copying(self.store.delete_keys, objects)
            log.info("deleted the archive of %s: %d object(s)", key, len(objects))
        except (ObjectStoreError, MetadataConflict, OSError) as e:
            log.error("deleting the archive of %s failed (its objects are under %s-*): %s", key, key, e)

    async def remote_log(self, partition: Hosted) -> RemoteLog:
        """What the archive holds of `partition`: this archiver's copy, which its rounds (each
        reads the metadata store) and its own writes keep current, or, before its first round
        since the start, the metadata store's document. KAFKA_STORAGE_ERROR when that cannot
        be read."""
        topic, index = _key(partition), partition.index
        cached = self.remote_logs.get((topic, index))
        return cached if cached is not None else await self._load_for_reads(topic, index)

    async def _load_for_reads(self, topic: str, index: int) -> RemoteLog:
        """`load`, its failure a KAFKA_STORAGE_ERROR for the reader that asked."""
        try:
            return await self.load(topic, index)
        except Exception as e:  # the metadata store's own errors (a ZooKeeper session lost, ...)
            limited_log.warning(f"load-{topic}-{index}", "reading the archive's metadata of %s-%d failed: %r",
                                topic, index, e)
            raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR, "the archive's metadata cannot be read") from None

    # -- reads ----------------------------------------------------------------------------------

    async def read(self, partition: Hosted, offset: int, max_bytes: int, committed: bool) -> RemoteRead:
        """A consumer's fetch from `offset`, below the local log start: OFFSET_OUT_OF_RANGE when
        the archive does not hold it; KAFKA_STORAGE_ERROR, which clients retry, when the object
        store or the archive's metadata cannot be read."""
        topic, index = _key(partition), partition.index
        remote = self.remote_logs.get((topic, index))
        if remote is None or remote.segment_for(offset) is None:
            remote = await self._load_for_reads(topic, index)  # after a start, or a copy by another leader
        segment = remote.segment_for(offset)
        if segment is None:
            raise KafkaError(ErrorCode.OFFSET_OUT_OF_RANGE,
                             f"offset {offset} of {topic}-{index} is neither archived nor local")
        following = next((s for s in remote.finished if s.base_offset == segment.end_offset + 1), None)
        try:
            data = await self._reading(self.reader.read, topic, index, segment, offset, max_bytes, following)
            if not data:
                return RemoteRead(data, offset, [])
            aborted = await self._aborted(partition, remote, segment, offset, _end_of(data)) if committed else []
        except (ObjectStoreError, OSError) as e:
            # Retriable for every client, which fetches again (Kafka answers UNKNOWN_SERVER_ERROR).
            limited_log.warning(f"read-{topic}-{index}", "reading %s-%d at %d from the archive failed: %s",
                                topic, index, offset, e)
            raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR, f"the archive cannot be read: {e}") from None
        return RemoteRead(data, read_header(data).base_offset, aborted)

    async def offset_for_timestamp(self, partition: Hosted, timestamp: int) -> tuple[int, int, int] | None:
        """ListOffsets by time in the archive (Kafka looks there before the local log): the first
        archived record from the log start on with timestamp >= `timestamp`, as (offset,
        timestamp, leader epoch); None when no archived record is that new. KAFKA_STORAGE_ERROR
        when the archive cannot be read."""
        topic, index = _key(partition), partition.index
        start = partition.log.log_start_offset
        remote = await self.remote_log(partition)
        try:
            for segment in sorted(remote.finished, key=lambda s: s.base_offset):
                if segment.end_offset < start or segment.max_timestamp < timestamp:
                    continue
                found = await self._reading(self.reader.offset_for_timestamp, topic, index, segment, timestamp,
                                            start)
                if found is not None:
                    return found
        except (ObjectStoreError, OSError) as e:
            limited_log.warning(f"time-{topic}-{index}", "looking up a time in the archive of %s-%d failed: %s",
                                topic, index, e)
            raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR, f"the archive cannot be read: {e}") from None
        return None

    async def _aborted(self, partition: Hosted, remote: RemoteLog, segment: RemoteSegment, offset: int,
                       upper: int) -> list[tuple[int, int]]:
        """Aborted transactions overlapping [offset, upper): from the transaction indexes of this
        archived segment and the ones after it, then the local log's, until an entry's last
        stable offset shows no later one can overlap (Kafka's collectAbortedTransactions)."""
        found: list[tuple[int, int]] = []
        for later in sorted(remote.finished, key=lambda s: s.base_offset):
            if later.base_offset < segment.base_offset or later.has_aborted is False:
                continue
            entries = await self._reading(self.reader.aborted_transactions, _key(partition), partition.index,
                                          later)
            for txn in entries:
                if txn.last_offset >= offset and txn.first_offset < upper:
                    found.append((txn.producer_id, txn.first_offset))
                if txn.last_stable_offset >= upper:
                    return found
        log_ = partition.log
        return found + log_.collect_aborted_transactions(max(offset, log_.local_log_start_offset), upper)

    async def follower_start(self, partition: Hosted, leader_local_start: int) -> FollowerStart:
        """Where this broker's replica starts when its leader's local log begins at
        `leader_local_start`, past what the replica holds; KAFKA_STORAGE_ERROR when the archive
        cannot be read (the fetcher asks again after its backoff)."""
        topic, index = _key(partition), partition.index
        try:
            remote = await self.load(topic, index)
            segment = remote.segment_for(leader_local_start - 1)
            if segment is None:  # nothing archived before the leader's local log
                return FollowerStart(leader_local_start, [], b"")
            epochs = await self._reading(self.store.get_bytes, segment.object_key(topic, index, LEADER_EPOCHS))
            snapshot = await self._reading(self.store.get_bytes, segment.object_key(topic, index, PRODUCER_SNAPSHOT))
        except Exception as e:  # the object store's or the metadata store's
            limited_log.warning(f"aux-{topic}-{index}", "reading the archive of %s-%d for a follower failed: %r",
                                topic, index, e)
            raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR, "the archive cannot be read") from None
        return FollowerStart(segment.end_offset + 1, parse_epochs(epochs), snapshot)

    # -- one partition ----------------------------------------------------------------------------

    async def _archive(self, partition: Hosted) -> None:
        remote = await self.load(_key(partition), partition.index)
        if partition.is_leader:
            epoch = partition.leader_epoch
            if remote.leader_epoch > epoch:
                raise Fenced(f"archived by a newer leader epoch {remote.leader_epoch} (this broker's: {epoch})")
            remote = await self._clean(partition, remote, epoch)
            self._adopt(partition.log, remote)
            remote = await self._copy(partition, remote, epoch)
            remote = await self._expire(partition, remote, epoch)
        self._adopt(partition.log, remote)

    async def load(self, topic: str, partition: int) -> RemoteLog:
        document, version = await self.writer.run(self.metadata.get_remote_log, topic, partition)  # type: ignore[misc]
        remote = RemoteLog.from_document(topic, partition, document, version)
        self.remote_logs[(topic, partition)] = remote
        return remote

    async def _write(self, remote: RemoteLog, segments: list[RemoteSegment], epoch: int) -> RemoteLog:
        updated = remote.with_segments(segments, epoch)
        version = await self.writer.run(self.metadata.set_remote_log, remote.topic, remote.partition,
                                        updated.to_document(), remote.version)
        written = dataclasses.replace(updated, version=int(version))  # type: ignore[call-overload]
        self.remote_logs[(remote.topic, remote.partition)] = written
        return written

    @staticmethod
    def _adopt(log_: Log, remote: RemoteLog) -> None:
        """The log learns what is archived; a log start the archive's retention (or a lost
        checkpoint) left below anything that exists moves up to what does."""
        log_.highest_offset_in_remote = remote.highest_offset
        earliest = remote.earliest_offset
        readable = log_.local_log_start_offset if earliest is None else min(earliest, log_.local_log_start_offset)
        if log_.log_start_offset < readable:
            log_.advance_log_start_for_archive(readable)

    async def _clean(self, partition: Hosted, remote: RemoteLog, epoch: int) -> RemoteLog:
        """Segments a round left half done (a leader that died mid-upload or mid-delete): their
        objects go, then their records. Nothing of this broker's is in flight at a round's start."""
        unfinished = [s for s in remote.segments if s.state != COPY_FINISHED]
        if not unfinished:
            return remote
        await self._copying(self._delete_objects, partition, unfinished)
        kept = [s for s in remote.segments if s.state == COPY_FINISHED]
        log.info("%s-%d: removed %d unfinished archived segment(s)", partition.topic, partition.index,
                 len(unfinished))
        return await self._write(remote, kept, epoch)

    # -- copying ----------------------------------------------------------------------------------

    async def _copy(self, partition: Hosted, remote: RemoteLog, epoch: int) -> RemoteLog:
        for segment, first, end_offset in copyable(partition.log, remote.highest_offset):
            # A new leader's segments need not end where its predecessor's did: of one holding
            # archived offsets, only the rest goes up, so no offset is archived twice.
            position = 0 if first == segment.base_offset else await self._copying(segment.bound_position, first)
            started = RemoteSegment(uuid.uuid4().hex, first, end_offset, COPY_STARTED, epoch,
                                    segment.size - position, segment.largest_timestamp,
                                    any(txn.last_offset >= first for txn in segment.txn_index.entries))
            remote = await self._write(remote, [*remote.segments, started], epoch)
            try:
                await self._copying(self._upload, partition, segment, started, position)
            except Exception:
                await self._abandon(partition, remote, started, epoch)
                raise
            finished = dataclasses.replace(started, state=COPY_FINISHED)
            try:
                remote = await self._write(remote, [s for s in remote.segments if s.id != started.id] + [finished],
                                           epoch)
            except MetadataConflict:
                # Someone else wrote meanwhile (a newer leader): what was uploaded is not recorded.
                await self._copying(self._delete_objects, partition, [started])
                raise
            partition.log.highest_offset_in_remote = end_offset
            self.segments_copied += 1
            self.bytes_copied += started.size
            log.info("%s-%d: archived segment %d..%d (%d bytes%s)", partition.topic, partition.index,
                     started.base_offset, end_offset, started.size,
                     f", the rest of local segment {segment.base_offset}" if position else "")
        return remote

    async def _abandon(self, partition: Hosted, remote: RemoteLog, started: RemoteSegment, epoch: int) -> None:
        """An upload failed: its objects and record go now if the store lets us, else next round."""
        with contextlib.suppress(ObjectStoreError, MetadataConflict, OSError):
            await self._copying(self._delete_objects, partition, [started])
            await self._write(remote, [s for s in remote.segments if s.id != started.id], epoch)

    def _upload(self, partition: Hosted, segment: LogSegment, remote: RemoteSegment, position: int) -> None:
        """Every file of the segment from `position` (the batch at `remote.base_offset`) on, on
        a worker thread; the records last, so that a listing of the store shows a segment's .log
        only once its indexes are there."""
        log_ = partition.log
        topic, index = _key(partition), partition.index
        end = remote.end_offset + 1
        if position == 0:
            self.store.put_file(remote.object_key(topic, index, OFFSET_INDEX), segment.offset_index.path)
            self.store.put_file(remote.object_key(topic, index, TIME_INDEX), segment.time_index.path)
        else:
            offsets, times = index_tail(segment, remote.base_offset, position)
            self.store.put_bytes(remote.object_key(topic, index, OFFSET_INDEX), offsets)
            self.store.put_bytes(remote.object_key(topic, index, TIME_INDEX), times)
        for suffix, path in ((TXN_INDEX, segment.txn_index.path),
                             (PRODUCER_SNAPSHOT, log_.directory / segment_file_name(end, PRODUCER_SNAPSHOT))):
            key = remote.object_key(topic, index, suffix)
            if path.exists():
                self.store.put_file(key, path)
            else:
                self.store.put_bytes(key, b"")
        epochs = [e for e in log_.epochs.entries if e.start_offset < end]
        self.store.put_bytes(remote.object_key(topic, index, LEADER_EPOCHS),
                             "".join(f"{e.epoch} {e.start_offset}\n" for e in epochs).encode())
        self.store.put_file(remote.object_key(topic, index, LOG), segment.log_path, position)

    def _delete_objects(self, partition: Hosted, segments: list[RemoteSegment]) -> None:
        keys = [key for s in segments for key in s.object_keys(_key(partition), partition.index)]
        self.store.delete_keys(keys)
        for segment in segments:
            self.reader.forget(segment)

    # -- the archive's retention --------------------------------------------------------------------

    async def _expire(self, partition: Hosted, remote: RemoteLog, epoch: int) -> RemoteLog:
        doomed = expired(partition.log, remote, self.clock())
        if not doomed:
            return remote
        marked = [dataclasses.replace(s, state=DELETE_STARTED) if s in doomed else s for s in remote.segments]
        remote = await self._write(remote, marked, epoch)
        # As Kafka: the log start moves first, so no reader is sent to what is being deleted.
        partition.log.advance_log_start_for_archive(max(s.end_offset for s in doomed) + 1)
        await self._copying(self._delete_objects, partition, doomed)
        gone = {s.id for s in doomed}
        self.segments_deleted += len(doomed)
        log.info("%s-%d: deleted %d archived segment(s) by retention; log start is now %d", partition.topic,
                 partition.index, len(doomed), partition.log.log_start_offset)
        return await self._write(remote, [s for s in remote.segments if s.id not in gone], epoch)


def archive_key(topic: str, topic_id: uuid.UUID) -> str:
    """What a topic's archive is kept under, in the metadata store and the object store: its name
    and its id, so a topic deleted and created again under its name never meets the old one's
    archive (nor its cleanup)."""
    return f"{topic}.{topic_id.hex}"


def _key(partition: Hosted) -> str:
    return archive_key(partition.topic, partition.topic_id)


def parse_epochs(data: bytes) -> list[EpochEntry]:
    """An archived segment's leader epochs: lines of "<epoch> <start offset>"."""
    return [EpochEntry(int(epoch), int(start)) for epoch, start in (line.split() for line in data.decode().splitlines())]


def _end_of(data: bytes) -> int:
    """The offset after the last batch of `data` (whole batches)."""
    position, end = 0, 0
    while position < len(data):
        header = read_header(data, position)
        end = header.last_offset + 1
        position += header.size
    return end


def copyable(log_: Log, highest_archived: int) -> Iterator[tuple[LogSegment, int, int]]:
    """Closed segments not archived yet whose records are all below the last stable offset (every
    transaction in them decided): each with the first offset to archive (past what is archived
    already) and its last offset. The active segment never."""
    segments = log_.segments
    bound = log_.last_stable_offset
    for segment, following in zip(segments, segments[1:], strict=False):
        upper = following.base_offset
        if upper > bound:
            return
        if upper - 1 <= highest_archived or upper <= log_.log_start_offset:
            continue
        yield segment, max(segment.base_offset, highest_archived + 1), upper - 1


def index_tail(segment: LogSegment, first: int, position: int) -> tuple[bytes, bytes]:
    """The offset and time indexes of the segment's batches from `first` (at `position`) on,
    relative to `first` and `position`: the indexes of that tail as a segment of its own."""
    relative = first - segment.base_offset
    offsets = segment.offset_index
    times = segment.time_index
    offset_entries = b"".join(OffsetIndex.ENTRY.pack(key - relative, value - position)
                              for key, value in zip(offsets.keys, offsets.values, strict=True) if key >= relative)
    time_entries = b"".join(TimeIndex.ENTRY.pack(timestamp, value - relative)
                            for timestamp, value in zip(times.keys, times.values, strict=True) if value >= relative)
    return offset_entries, time_entries


def expired(log_: Log, remote: RemoteLog, now_ms: int) -> list[RemoteSegment]:
    """The oldest archived segments the total retention (retention.ms, retention.bytes over the
    archive and the local segments not in it) or the log start (DeleteRecords) no longer keeps."""
    config = log_.config
    finished = sorted(remote.finished, key=lambda s: s.base_offset)
    local_only = sum(s.size for s in log_.segments if s.base_offset > remote.highest_offset)
    breach = remote.size + local_only - config.retention_bytes if config.retention_bytes >= 0 else -1
    doomed = []
    for segment in finished:
        if segment.end_offset < log_.log_start_offset:
            doomed.append(segment)
            continue
        if breach >= 0 and breach - segment.size >= 0:
            breach -= segment.size
            doomed.append(segment)
            continue
        if config.retention_ms >= 0 and segment.max_timestamp <= now_ms - config.retention_ms:
            doomed.append(segment)
            continue
        break
    return doomed
