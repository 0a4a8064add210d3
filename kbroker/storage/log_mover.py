"""Moving a replica to another log dir of this broker (AlterReplicaLogDirs, KIP-113).

As in Kafka, the partition's log is copied into a *future* replica,
`<dest dir>/<topic>-<partition>.<uuid>-future`, while the current log goes on serving reads and
writes; once the copy has caught up, the future replica takes the current one's place and the
old directory is deleted after `file.delete.delay.ms`. Kafka copies with a fetcher thread; here
one asyncio task per move copies whole batches, segment by segment (the copy's segments start at
the same offsets, so its files are byte for byte the source's, except with encryption at rest:
batches are copied decrypted and sealed again with fresh nonces and the current key), about
1 MiB per turn of the event loop, and `replica.alter.log.dirs.io.max.bytes.per.second` paces it.

The swap runs in one turn of the event loop, so no append or truncation can come between the
last copied batch and the swap: the copy takes the last few batches (at most `FINAL_COPY_BYTES`)
and the source's log start, high watermark, leader epochs and producer state, is fsynced whole,
and then the directories are renamed in an order that a crash at any point recovers from
(`finish_interrupted_swaps`):

1. `<src>/<tp>` -> `<src>/<tp>.<uuid>-replaced` (fsync the dir): the old log is set aside, not
   deleted. A crash now leaves no `<tp>` anywhere; the next start renames it back and resumes
   the move from the future replica, which is complete.
2. `<dest>/<tp>.<uuid>-future` -> `<dest>/<tp>` (fsync the dir): the commit point. From here
   the copy is the partition's log; the next start deletes a `-replaced` directory whose
   partition has a `<tp>` in some log dir.
3. `-replaced` -> `-delete`, removed after `file.delete.delay.ms` (fetches in flight may still
   be sending from its files).

So the current log stays authoritative until the copy is complete and durable, and neither copy
is ever deleted while it is the only one. A future replica found at start is resumed where it
stopped (after checking that its last batch is still the source's; otherwise it starts over).
Compaction of the partition waits while it moves.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
import uuid
from bisect import bisect_right
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from kbroker.fsutil import fsync_dir
from kbroker.storage.dir_names import future_dir_name, parse_log_dir_name
from kbroker.storage.encryption import plain_header_bytes
from kbroker.storage.index import INT32_MAX
from kbroker.storage.log import Log
from kbroker.storage.log_config import LONG_MAX, LogConfig
from kbroker.storage.segment import LogSegment
from protocol.errors import ErrorCode, KafkaError
from protocol.records import HEADER_SIZE, BatchHeader

if TYPE_CHECKING:
    from kbroker.storage.log_manager import LogManager

log = logging.getLogger("kbroker.storage")

REPLACED_DIR_SUFFIX = "-replaced"
COPY_CHUNK_BYTES = 1 << 20  # copied per turn of the event loop
FINAL_COPY_BYTES = 1 << 20  # at most this much is copied while appends wait, before the swap
UNLIMITED_RATE = LONG_MAX
MAX_DIR_NAME = 255  # Kafka refuses topics whose future directory name would be longer (KAFKA-4893)

Key = tuple[str, int]
RateProvider = Callable[[], int]


class _StartOver(Exception):
    """The source changed under the copy (truncated, or its segments rewritten): copy again."""


# -- crash recovery at start --------------------------------------------------------------------

def finish_interrupted_swaps(log_dirs: Sequence[Path]) -> None:
    """Before logs are loaded: settle `-replaced` directories a crash left in the middle of a swap.

    A `-replaced` directory is deleted when its partition has a `<topic>-<partition>` directory in
    some log dir (the swap was committed); otherwise it is renamed back (it is the only copy).
    """
    for log_dir in log_dirs:
        if not log_dir.is_dir():
            continue
        for child in sorted(log_dir.iterdir()):
            key = _parse_replaced(child.name)
            if key is None or not child.is_dir():
                continue
            name = f"{key[0]}-{key[1]}"
            if any((other / name).is_dir() for other in log_dirs):
                doomed = child.with_name(f"{name}.{uuid.uuid4().hex}-delete")
                os.replace(child, doomed)  # removed with the other -delete dirs while loading
                log.info("%s: a move to another log dir had completed; deleting the old copy", child)
            else:
                os.replace(child, log_dir / name)
                fsync_dir(log_dir)
                log.warning("%s: a move to another log dir was interrupted before it completed; this copy "
                            "stays the partition's log", log_dir / name)


def _parse_replaced(name: str) -> Key | None:
    if not name.endswith(REPLACED_DIR_SUFFIX):
        return None
    base, dot, unique = name[: -len(REPLACED_DIR_SUFFIX)].rpartition(".")
    return parse_log_dir_name(base) if dot and len(unique) == 32 else None


# -- the moves ----------------------------------------------------------------------------------

@dataclass(eq=False)
class _Move:
    source: Log
    future: Log
    task: asyncio.Task[None] | None = None
    # The header of the last batch copied: the source must still hold it, or it changed under us.
    last_base: int | None = None
    last_header: bytes = b""


class LogDirMover:
    """Starts, runs, cancels and resumes moves of replicas between this broker's log dirs."""

    def __init__(self, manager: LogManager, on_replaced: Callable[[Log], None] | None = None,
                 rate: RateProvider = lambda: UNLIMITED_RATE) -> None:
        self.manager = manager
        self.on_replaced = on_replaced  # the partition now serves from this log
        self._rate_provider = rate
        self._rate = (UNLIMITED_RATE, 0.0)  # (bytes per second, monotonic time to ask again)
        self._moves: dict[Key, _Move] = {}
        self._started = False

    # -- requests (AlterReplicaLogDirs) -----------------------------------------------------------

    def log_dir_for(self, path: str, topic: str, partition: int) -> Path:
        """The configured log dir named by `path` (an absolute path, as Kafka requires), if it can take a copy.

        Raises INVALID_TOPIC (name too long for a future directory), LOG_DIR_NOT_FOUND,
        KAFKA_STORAGE_ERROR (the dir is offline or full).
        """
        if len(f"{topic}-{partition}.{'0' * 32}-future") > MAX_DIR_NAME:
            raise KafkaError(ErrorCode.INVALID_TOPIC, "The topic name is too long.")
        for log_dir in self.manager.log_dirs:
            if path in (str(log_dir.absolute()), str(log_dir.resolve())):
                health = self.manager.health[log_dir]
                if not health.writable:
                    raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR,
                                     f"Log directory {path} is {health.state.value}")
                return log_dir
        raise KafkaError(ErrorCode.LOG_DIR_NOT_FOUND, f"Log dir {path} is not found in the config.")

    def prefer(self, key: Key, log_dir: Path) -> None:
        """Kafka's first steps: a move to another dir stops; a partition not here yet will be created in `log_dir`."""
        future = self.manager.future_logs.get(key)
        if future is not None and future.directory.parent != log_dir:
            self.cancel(key)
        current = self.manager.get_log(*key)
        if current is not None and not current.health.readable:
            raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR, f"Partition {key[0]}-{key[1]} is offline")
        in_dir = [each for each in (current, self.manager.future_logs.get(key))
                  if each is not None and each.directory.parent == log_dir]
        if not in_dir:
            self.manager.preferred_dirs[key] = log_dir

    def move(self, key: Key, log_dir: Path) -> None:
        """Start copying the partition's log into `log_dir` (nothing to do if it is there or on its way)."""
        source = self.manager.get_log(*key)
        if source is None:
            raise KafkaError(ErrorCode.REPLICA_NOT_AVAILABLE, f"no replica of {key[0]}-{key[1]} here")
        if source.directory.parent == log_dir:
            self.manager.preferred_dirs.pop(key, None)
            return
        if key in self.manager.future_logs:
            return  # already moving there (a move elsewhere was cancelled by `prefer`)
        if source.damaged_segments:
            raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR,
                             f"{source.name} holds damaged data ({source.damaged_segments[0].name}); "
                             "it cannot be copied to another log dir")
        future = self._create_future(source, log_dir)
        self.manager.preferred_dirs.pop(key, None)
        log.info("%s: moving from %s to %s", source.name, source.directory.parent, log_dir)
        self._begin(_Move(source, future))

    def cancel(self, key: Key) -> None:
        """Stop a move and delete its copy; the current log is untouched."""
        move = self._moves.pop(key, None)
        if move is not None and move.task is not None:
            move.task.cancel()
        future = self.manager.future_logs.pop(key, None)
        if future is not None:
            self._discard(future)
        current = self.manager.get_log(*key)
        if current is not None:
            current.cleaning_paused = False

    def future_log(self, key: Key) -> Log | None:
        return self.manager.future_logs.get(key)

    # -- lifecycle ------------------------------------------------------------------------------

    def start(self) -> None:
        """Resume the moves whose future replicas were found at start (needs a running loop)."""
        self._started = True
        for key, future in list(self.manager.future_logs.items()):
            source = self.manager.get_log(*key)
            if source is None:
                # The only copy: kept on disk as it is, not served; an operator decides.
                self.manager.future_logs.pop(key)
                future.release()
                log.warning("%s: a future replica without a current log; left in place", future.directory)
                continue
            if source.directory.parent == future.directory.parent or source.damaged_segments:
                self.manager.future_logs.pop(key)
                self._discard(future)
                continue
            log.info("%s: resuming the move from %s to %s", source.name, source.directory.parent,
                     future.directory.parent)
            future.config = _copy_config(source)
            self._begin(_Move(source, future))

    async def stop(self) -> None:
        tasks = [move.task for move in self._moves.values() if move.task is not None]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._moves.clear()

    def rate(self) -> int:
        """replica.alter.log.dirs.io.max.bytes.per.second, asked for at most once a second."""
        value, until = self._rate
        now = time.monotonic()
        if now >= until:
            try:
                value = max(int(self._rate_provider()), 1)
            except Exception:
                log.exception("reading replica.alter.log.dirs.io.max.bytes.per.second failed")
            self._rate = (value, now + 1.0)
        return value

    def _begin(self, move: _Move) -> None:
        key = (move.source.topic, move.source.partition)
        move.source.cleaning_paused = True
        self._moves[key] = move
        if self._started:
            move.task = asyncio.get_running_loop().create_task(self._run(key, move), name=f"move {key[0]}-{key[1]}")

    # -- copying ----------------------------------------------------------------------------------

    def _create_future(self, source: Log, log_dir: Path) -> Log:
        health = self.manager.health[log_dir]
        directory = log_dir / future_dir_name(source.topic, source.partition)
        try:
            future = Log(directory, _copy_config(source), log_start_offset=source.segments[0].base_offset,
                         had_clean_shutdown=True, clock=source.clock, health=health,
                         keyring=source.cipher.keyring if source.cipher is not None else None,
                         archiving=source.archiving_enabled)
        except OSError as e:
            raise health.failed(e, f"creating {directory}") from e
        self.manager.future_logs[(source.topic, source.partition)] = future
        return future

    def _discard(self, future: Log) -> None:
        try:
            self.manager.delete_later(future)
        except OSError as e:
            future.release()
            log.error("%s: could not delete the abandoned copy (%s); it is deleted at the next start", future.directory, e)

    def _live(self, key: Key, move: _Move) -> bool:
        return (self._moves.get(key) is move and self.manager.future_logs.get(key) is move.future
                and self.manager.get_log(*key) is move.source)

    async def _run(self, key: Key, move: _Move) -> None:
        try:
            await self._copy_until_swapped(key, move)
        except asyncio.CancelledError:
            raise
        except KafkaError as e:
            self._abort(key, move, str(e))
        except OSError as e:
            move.future.health.failed(e, f"copying {move.source.name}")
            self._abort(key, move, str(e))
        except Exception:
            log.exception("%s: moving to another log dir failed", move.source.name)
            self._abort(key, move, "unexpected error")
        finally:
            if self._moves.get(key) is move and self.manager.future_logs.get(key) is not move.future:
                del self._moves[key]  # the partition or its copy went away (a deleted topic)

    async def _copy_until_swapped(self, key: Key, move: _Move) -> None:
        _resume_point(move)
        while self._live(key, move):
            rate = self.rate()
            budget = min(COPY_CHUNK_BYTES, max(rate // 10, HEADER_SIZE))
            try:
                copied, remaining = _copy(move, budget)
                if remaining <= min(FINAL_COPY_BYTES, budget):  # a pace applies to the last bytes too
                    # Pending bulk fsyncs first, off the loop: the swap itself then waits for little.
                    await asyncio.to_thread(move.future.flush)
                    if not self._live(key, move):
                        return
                    self._swap(key, move)
                    return
            except _StartOver as e:
                log.info("%s: %s; copying again from the start", move.source.name, e)
                self.manager.future_logs.pop(key, None)
                self._discard(move.future)
                move.future = self._create_future(move.source, move.future.directory.parent)
                move.last_base, move.last_header = None, b""
                continue
            move.future.flush(move.future.active_segment.base_offset)  # finished segments go to disk as they come
            await asyncio.sleep(copied / rate if rate < UNLIMITED_RATE else 0)

    def _abort(self, key: Key, move: _Move, reason: str) -> None:
        log.error("%s: the move to %s failed and is abandoned (%s); the partition stays in %s",
                  move.source.name, move.future.directory.parent, reason, move.source.directory.parent)
        if self._moves.get(key) is move:
            self.cancel(key)

    # -- the swap -----------------------------------------------------------------------------

    def _swap(self, key: Key, move: _Move) -> None:
        """Finish the copy and put it in the source's place, all in one turn of the event loop."""
        source, future = move.source, move.future
        _copy(move, LONG_MAX)
        if future.log_end_offset != source.log_end_offset:  # the source restarted at a later offset
            raise _StartOver(f"the source now ends at {source.log_end_offset}, the copy at {future.log_end_offset}")
        now = source.clock()
        future.adopt_state_of(source, now)
        future.flush_everything()
        self.manager.write_checkpoints()  # the copy's log start, HW and recovery point, under its partition
        if not future.health.writable:
            raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR, f"{future.directory.parent} failed during the swap")
        final = future.directory.parent / source.name
        set_aside = _commit_renames(source, future, final)
        # Committed: the copy is the partition's log.
        future.repoint(final)
        source.repoint(set_aside)
        future.config = source.config
        future.cleaning_paused = False
        del self._moves[key]
        self.manager.future_logs.pop(key, None)
        self.manager.replace_log(future)
        if self.on_replaced is not None:
            self.on_replaced(future)
        try:
            self.manager.delete_later(source)
        except OSError as e:
            log.warning("%s: could not schedule the old copy's deletion (%s); it goes at the next start", set_aside, e)
        self.manager.write_checkpoints()
        log.info("%s: moved to %s (log end %d)", future.name, final.parent, future.log_end_offset)


def _commit_renames(source: Log, future: Log, final: Path) -> Path:
    """Steps 1 and 2 of the module docstring; on failure before the commit the source is put back."""
    current = source.directory
    set_aside = current.with_name(f"{source.name}.{uuid.uuid4().hex}{REPLACED_DIR_SUFFIX}")
    try:
        os.replace(current, set_aside)
        fsync_dir(current.parent)
    except OSError as e:
        _put_back(source, set_aside, current)
        raise source.health.failed(e, f"setting {current} aside") from e
    try:
        os.replace(future.directory, final)
        fsync_dir(final.parent)
    except OSError as e:
        if final.exists() and not future.directory.exists():
            with contextlib.suppress(OSError):
                os.replace(final, future.directory)
        _put_back(source, set_aside, current)
        raise future.health.failed(e, f"renaming {future.directory} to {final.name}") from e
    return set_aside


def _put_back(source: Log, set_aside: Path, current: Path) -> None:
    if not set_aside.exists():
        return
    try:
        os.replace(set_aside, current)
        fsync_dir(current.parent)
    except OSError as e:
        # The next start renames it back (no current log exists anywhere).
        source.health.failed(e, f"renaming {set_aside} back")


# -- copying batches --------------------------------------------------------------------------

def _copy_config(source: Log) -> LogConfig:
    """The copy rolls where the source did, never by its own size or time rules, and is fsynced at the end."""
    return source.config.with_changes(segment_bytes=INT32_MAX, segment_ms=LONG_MAX, flush_messages=LONG_MAX,
                                      flush_ms=LONG_MAX, segment_jitter_ms=0)


def _resume_point(move: _Move) -> None:
    """A future replica found at start: remember its last batch, checked against the source by `_copy`."""
    last = _last_batch(move.future)
    if last is not None:
        move.last_base, move.last_header = last


def _copy(move: _Move, budget: int) -> tuple[int, int]:
    """Copy whole batches, about `budget` bytes, from the source to the copy: (bytes copied, bytes left)."""
    source, future = move.source, move.future
    if move.last_base is not None and _batch_header_at(source, move.last_base) != move.last_header:
        raise _StartOver(f"the source no longer holds the batch at offset {move.last_base}")
    segments = source.segments
    next_offset = future.log_end_offset
    slot = max(bisect_right([s.base_offset for s in segments], next_offset) - 1, 0)
    copied = 0
    while slot < len(segments):
        segment = segments[slot]
        found = segment.translate_offset(next_offset) if segment.next_offset > next_offset else None
        if found is None:
            slot += 1
            continue
        position, header = found
        if header.base_offset < next_offset:
            raise _StartOver(f"a source batch spans offset {next_offset}, where the copy ends")
        if copied >= budget:
            return copied, segment.size - position + sum(s.size for s in segments[slot + 1:])
        if segment.base_offset > future.active_segment.base_offset:
            future.roll(source.clock(), segment.base_offset)  # the copy's segments start where the source's do
        end, last = _batches_within(segment, position, budget - copied)
        future.append_as_follower(segment.read_batches(position, end))
        last_position, last_header = last
        move.last_base = last_header.base_offset
        move.last_header = plain_header_bytes(segment.read_at(last_position, HEADER_SIZE))
        copied += end - position
        next_offset = last_header.last_offset + 1
    return copied, 0


def _batches_within(segment: LogSegment, position: int, budget: int) -> tuple[int, tuple[int, BatchHeader]]:
    """(end position, (position, header) of the last batch) of the batches from `position` within
    `budget` bytes (at least one)."""
    end, last = position, None
    for batch_position, header in segment.batches(position):
        if last is not None and batch_position + header.size - position > budget:
            break
        end, last = batch_position + header.size, (batch_position, header)
    assert last is not None
    return end, last


def _batch_header_at(log_: Log, base_offset: int) -> bytes | None:
    """The header bytes of the batch of `log_` that starts at `base_offset`, if there is one."""
    segments = log_.segments
    slot = bisect_right([s.base_offset for s in segments], base_offset) - 1
    if slot < 0:
        return None
    found = segments[slot].translate_offset(base_offset)
    if found is None or found[1].base_offset != base_offset:
        return None
    return plain_header_bytes(segments[slot].read_at(found[0], HEADER_SIZE))


def _last_batch(log_: Log) -> tuple[int, bytes] | None:
    """(base offset, header bytes) of the last batch of `log_`."""
    for segment in reversed(log_.segments):
        if segment.is_empty:
            continue
        found = segment.translate_offset(segment.next_offset - 1)
        if found is not None:
            return found[1].base_offset, plain_header_bytes(segment.read_at(found[0], HEADER_SIZE))
    return None
