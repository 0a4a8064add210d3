"""All partition logs of this broker across its `log.dirs`, and their periodic upkeep.

Per log dir, in Kafka's formats: `recovery-point-offset-checkpoint`,
`replication-offset-checkpoint` (high watermarks), `log-start-offset-checkpoint`,
`cleaner-offset-checkpoint`, and the `.kafka_cleanshutdown` marker written by a clean
shutdown (its absence at start makes every log recover from its recovery point).

Single-threaded: meant to be driven from the event loop (`tick` about once a second).

Periodic upkeep is scheduled as Kafka's LogManager schedules its tasks: retention
(kafka-log-retention), the flush.ms flusher (kafka-log-flusher), the recovery-point and
log-start-offset checkpoints (kafka-recovery-point-checkpoint, kafka-log-start-offset-checkpoint)
and the removal of deleted partitions' directories (kafka-delete-logs) first run
`log.initial.task.delay.ms` (30 s) after the logs are loaded, then at their intervals. What Kafka
runs from the start runs from the start: compaction (the LogCleaner's threads), the flush that
follows a roll, the deletion of `.deleted` segment files (each has its own delay), the
high-watermark and cleaner-offset checkpoints (ReplicaManager's and the cleaner's).
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from kbroker.clock import WallClock, wall_clock_ms
from kbroker.fsutil import fsync_dir
from kbroker.storage import checkpoint
from kbroker.storage.cleaner import compact
from kbroker.storage.dir_names import FUTURE_DIR_SUFFIX, parse_future_dir_name, parse_log_dir_name
from kbroker.storage.encryption import Keyring
from kbroker.storage.log import Log, RolledFlush
from kbroker.storage.log_config import LogConfig
from kbroker.storage.log_dir_health import KafkaStorageError, LogDirHealth
from kbroker.storage.log_mover import finish_interrupted_swaps
from kbroker.storage.write_behind import DirWriter
from kbroker.storage.writeback import PacedWriteback

log = logging.getLogger("kbroker.storage")

CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"
DELETE_DIR_SUFFIX = "-delete"
# How often a full log dir is tried for room again.
PROBE_INTERVAL_MS = 2_000
# Kafka's log.initial.task.delay.ms default (ServerLogConfigs.LOG_INITIAL_TASK_DELAY_MS_DEFAULT).
DEFAULT_INITIAL_TASK_DELAY_MS = 30_000
# KRaft's metadata log lives in a log dir too; it is not a partition this manager owns.
_NOT_PARTITION_PREFIXES = ("__cluster_metadata",)

ConfigProvider = Callable[[str], LogConfig]

# What each checkpoint file holds per partition.
_CHECKPOINTED_FIELDS: dict[str, Callable[[Log], int]] = {
    checkpoint.RECOVERY_POINT_CHECKPOINT: lambda each: each.recovery_point,
    checkpoint.REPLICATION_CHECKPOINT: lambda each: each.high_watermark,
    checkpoint.LOG_START_CHECKPOINT: lambda each: each.log_start_offset,
    checkpoint.CLEANER_CHECKPOINT: lambda each: each.cleaner_checkpoint,
}
ALL_CHECKPOINTS = tuple(_CHECKPOINTED_FIELDS)
# Kafka's LogManager writes these on tasks that wait log.initial.task.delay.ms after start...
DELAYED_CHECKPOINTS = (checkpoint.RECOVERY_POINT_CHECKPOINT, checkpoint.LOG_START_CHECKPOINT)
# ...and its ReplicaManager (high watermarks) and cleaner write these from the start.
UNDELAYED_CHECKPOINTS = (checkpoint.REPLICATION_CHECKPOINT, checkpoint.CLEANER_CHECKPOINT)


def _default_config(_topic: str) -> LogConfig:
    return LogConfig()


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """One checkpoint file's offsets as of when they were read, and that reading's number."""

    path: Path
    version: int
    offsets: dict[tuple[str, int], int]


class CheckpointFiles:
    """Writes of checkpoint files from the event loop and from the flusher thread, never older
    over newer: a periodic write queued behind a slow flush may run after a later, immediate
    one (a log dir move, shutdown), and must then leave the newer file alone."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._versions = 0
        self._written: dict[Path, int] = {}

    def version(self, path: Path, offsets: dict[tuple[str, int], int]) -> Checkpoint:
        with self._lock:
            self._versions += 1
            return Checkpoint(path, self._versions, offsets)

    def write(self, checkpoints: Sequence[Checkpoint]) -> None:
        for each in checkpoints:
            with self._lock:  # held through the write: a newer version waits for an older one
                if self._written.get(each.path, 0) > each.version:
                    continue
                checkpoint.write_offsets(each.path, each.offsets)
                self._written[each.path] = each.version


class LogManager:
    def __init__(
        self,
        log_dirs: Sequence[Path],
        default_config_provider: ConfigProvider = _default_config,
        *,
        retention_check_interval_ms: int = 300_000,
        cleaner_backoff_ms: int = 15_000,
        checkpoint_interval_ms: int = 60_000,
        initial_task_delay_ms: int = DEFAULT_INITIAL_TASK_DELAY_MS,
        clock: WallClock = wall_clock_ms,
        keyring: Keyring | None = None,
        archiving: bool = False,
        rolled_flush_busy_percent: int = 100,
    ) -> None:
        if not log_dirs:
            raise ValueError("at least one log dir is needed")
        self.log_dirs = [Path(d) for d in log_dirs]
        self.config_provider = default_config_provider
        self.retention_check_interval_ms = retention_check_interval_ms
        self.cleaner_backoff_ms = cleaner_backoff_ms
        self.checkpoint_interval_ms = checkpoint_interval_ms
        self.clock = clock
        self.keyring = keyring  # encryption at rest (log.encryption.key.file), or None
        self.archiving = archiving  # remote.log.storage.system.enable: tiered topics' logs keep a window
        self._logs: dict[tuple[str, int], Log] = {}
        # Replicas being copied to another log dir (`LogDirMover`), and where partitions not yet
        # created here are to go (AlterReplicaLogDirs before the replica exists, as in Kafka).
        self.future_logs: dict[tuple[str, int], Log] = {}
        self.preferred_dirs: dict[tuple[str, int], Path] = {}
        self._dirs_to_delete: list[tuple[int, Path, Log]] = []
        self._next_cleaning_ms = 0
        self._next_hw_checkpoint_ms = 0
        self._next_probe_ms = 0
        # fsyncs rolled segments and writes the periodic checkpoints off the event loop
        self._flusher: ThreadPoolExecutor | None = None
        # How a rolled segment goes to disk before its fsync (writeback.py), and the flushes
        # submitted and not yet done: one rests only while none waits behind it.
        self.writeback = PacedWriteback(rolled_flush_busy_percent)
        self._rolled_flushes: list[RolledFlush] = []
        self._checkpoint_files = CheckpointFiles()
        # Called with a dir's health when it goes FULL, OFFLINE or back ONLINE (the broker moves
        # leadership in a cluster).
        self.on_dir_change: Callable[[LogDirHealth], None] | None = None
        # Called with the seconds each flush took that wrote something (the broker's metrics).
        self.flush_observer: Callable[[float], None] | None = None
        self.health = {d: LogDirHealth(d, self._dir_changed) for d in self.log_dirs}
        # Each dir's writer thread for large appends (write_behind.py).
        self.writers = {d: DirWriter(str(i)) for i, d in enumerate(self.log_dirs)}
        finish_interrupted_swaps(self.log_dirs)
        for log_dir in self.log_dirs:
            self._load_dir(log_dir)
        # A broker that has just started serves before its upkeep deletes or checkpoints anything:
        # records written with old timestamps right after a start are not gone a second later.
        self._delayed_tasks_start_ms = self.clock() + initial_task_delay_ms
        self._next_retention_ms = self._delayed_tasks_start_ms
        self._next_checkpoint_ms = self._delayed_tasks_start_ms

    def _dir_changed(self, health: LogDirHealth) -> None:
        if self.on_dir_change is not None:
            self.on_dir_change(health)

    def logs_in(self, log_dir: Path) -> list[Log]:
        return [each for each in self._logs.values() if each.directory.parent == log_dir]

    # -- loading ----------------------------------------------------------------------------------

    def _load_dir(self, log_dir: Path) -> None:
        log_dir.mkdir(parents=True, exist_ok=True)
        marker = log_dir / CLEAN_SHUTDOWN_FILE
        clean = marker.exists()
        recovery_points = checkpoint.read_offsets(log_dir / checkpoint.RECOVERY_POINT_CHECKPOINT)
        log_starts = checkpoint.read_offsets(log_dir / checkpoint.LOG_START_CHECKPOINT)
        high_watermarks = checkpoint.read_offsets(log_dir / checkpoint.REPLICATION_CHECKPOINT)
        cleaner_offsets = checkpoint.read_offsets(log_dir / checkpoint.CLEANER_CHECKPOINT)
        if not clean and any(self._partition_dirs(log_dir)):
            log.warning("%s was not shut down cleanly: recovering its logs from their recovery points", log_dir)
        for directory, key in self._partition_dirs(log_dir):
            loaded = self.future_logs if directory.name.endswith(FUTURE_DIR_SUFFIX) else self._logs
            if key in loaded:
                log.error("%s: partition %s-%d is also in %s; ignoring this copy",
                          directory, *key, loaded[key].directory)
                continue
            opened = Log(
                directory,
                self.config_provider(key[0]),
                log_start_offset=log_starts.get(key, 0),
                recovery_point=recovery_points.get(key, 0),
                high_watermark=high_watermarks.get(key, 0),
                had_clean_shutdown=clean,
                clock=self.clock,
                health=self.health[log_dir],
                keyring=self.keyring,
                writer=self.writers[log_dir],
                archiving=self.archiving,
            )
            opened.cleaner_checkpoint = max(cleaner_offsets.get(key, 0), opened.log_start_offset)
            loaded[key] = opened
        # From here on a crash must be noticed at the next start.
        marker.unlink(missing_ok=True)
        self._probe_space(log_dir)

    def _probe_space(self, log_dir: Path) -> None:
        """A dir that starts full is served read-only from the start (see LogDirHealth)."""
        health = self.health[log_dir]
        probe = log_dir / ".kbroker-start-probe"
        try:
            with open(probe, "wb") as f:
                f.write(bytes(64 * 1024))
                f.flush()
                os.fsync(f.fileno())
        except OSError as e:
            health.failed(e, "starting")
        finally:
            probe.unlink(missing_ok=True)

    def _partition_dirs(self, log_dir: Path) -> Iterator[tuple[Path, tuple[str, int]]]:
        for child in sorted(log_dir.iterdir()):
            if not child.is_dir():
                continue
            if child.name.endswith(DELETE_DIR_SUFFIX):
                shutil.rmtree(child, ignore_errors=True)  # a deletion the last run did not finish
                continue
            key = parse_log_dir_name(child.name) or parse_future_dir_name(child.name)
            if key is not None and not key[0].startswith(_NOT_PARTITION_PREFIXES):
                yield child, key

    # -- logs -------------------------------------------------------------------------------------

    def logs(self) -> list[Log]:
        return list(self._logs.values())

    def get_log(self, topic: str, partition: int) -> Log | None:
        return self._logs.get((topic, partition))

    def get_or_create_log(self, topic: str, partition: int, config: LogConfig | None = None) -> Log:
        key = (topic, partition)
        existing = self._logs.get(key)
        if existing is not None:
            if config is not None:
                existing.config = config
                existing.config_applied()
            return existing
        log_dir = self._preferred_dir(key) or self._least_loaded_dir()
        directory = log_dir / f"{topic}-{partition}"
        existed = directory.exists()
        try:
            created = Log(directory, config or self.config_provider(topic), had_clean_shutdown=True, clock=self.clock,
                          health=self.health[log_dir], keyring=self.keyring, writer=self.writers[log_dir],
                          archiving=self.archiving)
        except BaseException:
            if not existed and directory.is_dir():
                shutil.rmtree(directory, ignore_errors=True)  # no half-made partition left behind
            raise
        self._logs[key] = created
        self.preferred_dirs.pop(key, None)  # satisfied
        log.info("created log %s in %s", created.name, directory.parent)
        return created

    def _preferred_dir(self, key: tuple[str, int]) -> Path | None:
        preferred = self.preferred_dirs.get(key)
        return preferred if preferred is not None and self.health[preferred].writable else None

    def _least_loaded_dir(self) -> Path:
        """Where a new partition goes: the writable dir holding the fewest."""
        writable = [d for d in self.log_dirs if self.health[d].writable]
        if not writable:
            raise KafkaStorageError("no log dir can take a new partition: "
                                    + ", ".join(f"{d} is {self.health[d].state.value}" for d in self.log_dirs))
        if len(writable) == 1:
            return writable[0]  # the common case: no need to count thousands of logs
        counts = {d: 0 for d in writable}
        for existing in self._logs.values():
            parent = existing.directory.parent
            if parent in counts:
                counts[parent] += 1
        return min(writable, key=lambda d: counts[d])

    def delete_log(self, topic: str, partition: int) -> None:
        """Take the log away now; its directory (renamed `<name>.<uuid>-delete`) goes after a delay,
        so fetches already holding file slices can finish."""
        future = self.future_logs.pop((topic, partition), None)
        if future is not None:
            self.delete_later(future)
        doomed = self._logs.pop((topic, partition), None)
        if doomed is None:
            return
        self.delete_later(doomed)

    def delete_later(self, doomed: Log) -> None:
        """Rename a log no longer in use `<name>.<uuid>-delete` and remove it after file.delete.delay.ms."""
        directory = doomed.directory
        target = directory.with_name(f"{doomed.name}.{uuid.uuid4().hex}{DELETE_DIR_SUFFIX}")
        os.replace(directory, target)
        doomed.repoint(target)
        due = self.clock() + doomed.config.file_delete_delay_ms
        self._dirs_to_delete.append((due, target, doomed))

    def replace_log(self, replacement: Log) -> None:
        """Serve the partition from `replacement` from now on (a finished move between log dirs)."""
        self._logs[(replacement.topic, replacement.partition)] = replacement

    def update_config(self, topic: str, config: LogConfig) -> None:
        for (log_topic, _), each in self._logs.items():
            if log_topic == topic:
                each.config = config

    # -- periodic work ----------------------------------------------------------------------------

    def tick(self, now_ms: int) -> None:
        """Called about once a second: deferred deletions, flushes, retention, compaction, checkpoints."""
        delayed_tasks_due = now_ms >= self._delayed_tasks_start_ms
        self._delete_expired(now_ms, remove_dirs=delayed_tasks_due)
        if now_ms >= self._next_probe_ms:
            self._next_probe_ms = now_ms + PROBE_INTERVAL_MS
            for health in self.health.values():
                health.probe()
        self._for_each_log("flush", lambda each: self._flush(each, now_ms, delayed_tasks_due))
        if now_ms >= self._next_retention_ms:
            self._next_retention_ms = now_ms + self.retention_check_interval_ms
            # Retention frees space: it runs on a full dir too.
            self._for_each_log("retention", lambda each: each.delete_old_segments(now_ms), needs_write=False)
        if now_ms >= self._next_cleaning_ms:
            self._next_cleaning_ms = now_ms + self.cleaner_backoff_ms
            self._for_each_log("compaction", lambda each: compact(each, now_ms) if each.config.compact else None)
        due: list[str] = []
        if now_ms >= self._next_checkpoint_ms:
            self._next_checkpoint_ms = now_ms + self.checkpoint_interval_ms
            due += DELAYED_CHECKPOINTS
        if now_ms >= self._next_hw_checkpoint_ms:
            self._next_hw_checkpoint_ms = now_ms + self.checkpoint_interval_ms
            due += UNDELAYED_CHECKPOINTS
        if due:
            self._write_checkpoints_behind(due)

    def _flush(self, each: Log, now_ms: int, delayed_tasks_due: bool) -> None:
        """flush.ms when due (after the initial task delay); otherwise the segments rolled since
        the last flush, in the flusher thread when an event loop runs (on it, an fsync of a whole
        segment would stall every client for as long as the disk takes)."""
        if delayed_tasks_due:
            recovery_point, started = each.recovery_point, time.monotonic()
            if each.flush_whole_if_due(now_ms):
                if each.recovery_point != recovery_point:  # not a flush of nothing
                    self._observe_flush(time.monotonic() - started)
                return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # called outside a broker (tools, tests): at once
            each.flush_rolled()
            return
        job = each.start_rolled_flush()
        if job is None:
            return
        for waited_for in self._rolled_flushes:
            waited_for.hurried = True
        self._rolled_flushes.append(job)
        future = loop.run_in_executor(self._flusher_executor(), _timed, lambda: job.run(self.writeback))
        future.add_done_callback(lambda done: self._rolled_flush_done(each, job, done))

    def _observe_flush(self, seconds: float) -> None:
        if self.flush_observer is not None:
            self.flush_observer(seconds)

    def _rolled_flush_done(self, each: Log, job: RolledFlush, done: asyncio.Future[float]) -> None:
        self._rolled_flushes.remove(job)
        error = None if done.cancelled() else done.exception()
        each.finish_rolled_flush(job, succeeded=not done.cancelled() and error is None)
        if not done.cancelled() and error is None:
            self._observe_flush(done.result())  # on the loop, like every other update of the metrics
        if isinstance(error, OSError) and each.health.writable:
            each.health.failed(error, f"flush of {each.name}")
        elif error is not None:
            log.error("flush of %s failed: %r", each.name, error)

    def _for_each_log(self, what: str, work: Callable[[Log], object], needs_write: bool = True) -> None:
        for each in self.logs():
            if not (each.health.writable if needs_write else each.health.readable):
                continue  # a full dir gets no writes, upkeep included; a failed one nothing
            try:
                work(each)
            except OSError as e:
                each.health.failed(e, f"{what} of {each.name}")
            except KafkaStorageError:
                pass
            except Exception:  # one broken log must not stop the upkeep of the others
                log.exception("%s of %s failed", what, each.name)

    def _delete_expired(self, now_ms: int, remove_dirs: bool = True) -> None:
        for each in self.logs():
            each.delete_expired_files(now_ms)
        if not remove_dirs:
            return
        due = [entry for entry in self._dirs_to_delete if entry[0] <= now_ms]
        self._dirs_to_delete = [entry for entry in self._dirs_to_delete if entry[0] > now_ms]
        for _, directory, doomed in due:
            _remove_deleted_log(directory, doomed)

    def write_checkpoints(self, files: Sequence[str] = ALL_CHECKPOINTS) -> None:
        """Write the named checkpoint files (all by default) of every writable log dir, now."""
        for log_dir, contents in self._checkpoint_contents(files):
            try:
                self._checkpoint_files.write(contents)
            except OSError as e:
                self.health[log_dir].failed(e, f"writing the checkpoints of {log_dir}")

    def _write_checkpoints_behind(self, files: Sequence[str]) -> None:
        """The periodic checkpoints: their offsets are read here, their files written (an fsync
        each, and one of the directory) by the flusher thread when an event loop runs, as Kafka
        writes them on its scheduler threads; on the loop they waited for the file system's
        journal, every client with them."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # outside a broker (tools, tests): at once
            self.write_checkpoints(files)
            return
        for log_dir, contents in self._checkpoint_contents(files):
            written = loop.run_in_executor(self._flusher_executor(), self._checkpoint_files.write, contents)
            written.add_done_callback(lambda done, log_dir=log_dir: self._checkpoints_written(log_dir, done))

    def _checkpoints_written(self, log_dir: Path, done: asyncio.Future[None]) -> None:
        error = None if done.cancelled() else done.exception()
        if isinstance(error, OSError) and self.health[log_dir].writable:
            self.health[log_dir].failed(error, f"writing the checkpoints of {log_dir}")
        elif error is not None and not isinstance(error, OSError):
            log.error("writing the checkpoints of %s failed: %r", log_dir, error)

    def _checkpoint_contents(self, files: Sequence[str]) -> list[tuple[Path, list[Checkpoint]]]:
        """Per writable log dir, each named file with the offsets it is to hold as of now."""
        contents = []
        for log_dir in self.log_dirs:
            if not self.health[log_dir].writable:
                continue
            # A future replica is checkpointed under its partition too (never in its current log's dir).
            logs = self.logs_in(log_dir) + [each for each in self.future_logs.values()
                                            if each.directory.parent == log_dir]
            contents.append((log_dir, [self._checkpoint_files.version(
                log_dir / name, {(each.topic, each.partition): _CHECKPOINTED_FIELDS[name](each) for each in logs})
                for name in files]))
        return contents

    def _flusher_executor(self) -> ThreadPoolExecutor:
        if self._flusher is None:
            self._flusher = ThreadPoolExecutor(max_workers=1, thread_name_prefix="kbroker-flush")
        return self._flusher

    # -- shutdown -------------------------------------------------------------------------------

    def shutdown(self) -> None:
        """Flush every log, write checkpoints, close, and mark each log dir cleanly shut down.

        A dir that is full or failed (or fails now) is closed without its marker, so its logs are
        recovered at the next start; the other dirs shut down cleanly all the same.
        """
        if self._flusher is not None:  # a flush of rolled segments in progress ends first, unpaced
            self.writeback.hurry.set()
            self._flusher.shutdown(wait=True)
            self._flusher = None
        for each in self.logs():  # appends being written are published, then flushed
            each.settle()
        for writer in self.writers.values():
            writer.shutdown()
        self._for_each_log("flush", lambda each: each.flush())
        for future in self.future_logs.values():  # a move resumes at the next start
            if future.health.writable:
                future.flush()
        self.write_checkpoints()
        for each in [*self.logs(), *self.future_logs.values()]:
            try:
                each.close() if each.health.writable else each.release()
            except OSError as e:
                each.health.failed(e, f"closing {each.name}")
                each.release()
        for _, directory, doomed in self._dirs_to_delete:
            _remove_deleted_log(directory, doomed)
        self._dirs_to_delete = []
        for log_dir in self.log_dirs:
            if not self.health[log_dir].writable:
                log.warning("%s is %s: not marked cleanly shut down, its logs recover at the next start",
                            log_dir, self.health[log_dir].state.value)
                continue
            try:
                (log_dir / CLEAN_SHUTDOWN_FILE).touch()
                fsync_dir(log_dir)
            except OSError as e:
                log.error("could not mark %s cleanly shut down: %s", log_dir, e)


def _remove_deleted_log(directory: Path, doomed: Log) -> None:
    doomed.release()
    shutil.rmtree(directory, ignore_errors=True)


def _timed(work: Callable[[], None]) -> float:
    """Run `work` (in the flusher thread) and return how many seconds it took."""
    started = time.monotonic()
    work()
    return time.monotonic() - started
