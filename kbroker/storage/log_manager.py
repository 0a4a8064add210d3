"""All partition logs of this broker across its `log.dirs`, and their periodic upkeep.

Per log dir, in Kafka's formats: `recovery-point-offset-checkpoint`,
`replication-offset-checkpoint` (high watermarks), `log-start-offset-checkpoint`,
`cleaner-offset-checkpoint`, and the `.kafka_cleanshutdown` marker written by a clean
shutdown (its absence at start makes every log recover from its recovery point).

Single-threaded: meant to be driven from the event loop (`tick` about once a second).
"""

from __future__ import annotations

import logging
import os
import shutil
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from kbroker.storage import checkpoint
from kbroker.storage.cleaner import compact
from kbroker.storage.log import Clock, Log, parse_log_dir_name, wall_clock_ms
from kbroker.storage.log_config import LogConfig

log = logging.getLogger("kbroker.storage")

CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"
DELETE_DIR_SUFFIX = "-delete"
# KRaft's metadata log lives in a log dir too; it is not a partition this manager owns.
_NOT_PARTITION_PREFIXES = ("__cluster_metadata",)

ConfigProvider = Callable[[str], LogConfig]


def _default_config(_topic: str) -> LogConfig:
    return LogConfig()


class LogManager:
    def __init__(
        self,
        log_dirs: Sequence[Path],
        default_config_provider: ConfigProvider = _default_config,
        *,
        retention_check_interval_ms: int = 300_000,
        cleaner_backoff_ms: int = 15_000,
        checkpoint_interval_ms: int = 60_000,
        clock: Clock = wall_clock_ms,
    ) -> None:
        if not log_dirs:
            raise ValueError("at least one log dir is needed")
        self.log_dirs = [Path(d) for d in log_dirs]
        self.config_provider = default_config_provider
        self.retention_check_interval_ms = retention_check_interval_ms
        self.cleaner_backoff_ms = cleaner_backoff_ms
        self.checkpoint_interval_ms = checkpoint_interval_ms
        self.clock = clock
        self._logs: dict[tuple[str, int], Log] = {}
        self._dirs_to_delete: list[tuple[int, Path, Log]] = []
        self._next_retention_ms = 0
        self._next_cleaning_ms = 0
        self._next_checkpoint_ms = 0
        for log_dir in self.log_dirs:
            self._load_dir(log_dir)

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
            if key in self._logs:
                log.error("%s: partition %s-%d is also in %s; ignoring this copy",
                          directory, *key, self._logs[key].directory)
                continue
            opened = Log(
                directory,
                self.config_provider(key[0]),
                log_start_offset=log_starts.get(key, 0),
                recovery_point=recovery_points.get(key, 0),
                high_watermark=high_watermarks.get(key, 0),
                had_clean_shutdown=clean,
                clock=self.clock,
            )
            opened.cleaner_checkpoint = max(cleaner_offsets.get(key, 0), opened.log_start_offset)
            self._logs[key] = opened
        # From here on a crash must be noticed at the next start.
        marker.unlink(missing_ok=True)

    def _partition_dirs(self, log_dir: Path) -> Iterator[tuple[Path, tuple[str, int]]]:
        for child in sorted(log_dir.iterdir()):
            if not child.is_dir():
                continue
            if child.name.endswith(DELETE_DIR_SUFFIX):
                shutil.rmtree(child, ignore_errors=True)  # a deletion the last run did not finish
                continue
            key = parse_log_dir_name(child.name)
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
            return existing
        directory = self._least_loaded_dir() / f"{topic}-{partition}"
        existed = directory.exists()
        try:
            created = Log(directory, config or self.config_provider(topic), had_clean_shutdown=True, clock=self.clock)
        except BaseException:
            if not existed and directory.is_dir():
                shutil.rmtree(directory, ignore_errors=True)  # no half-made partition left behind
            raise
        self._logs[key] = created
        log.info("created log %s in %s", created.name, directory.parent)
        return created

    def _least_loaded_dir(self) -> Path:
        if len(self.log_dirs) == 1:
            return self.log_dirs[0]  # the common case: no need to count thousands of logs
        counts = {d: 0 for d in self.log_dirs}
        for existing in self._logs.values():
            parent = existing.directory.parent
            if parent in counts:
                counts[parent] += 1
        return min(self.log_dirs, key=lambda d: counts[d])

    def delete_log(self, topic: str, partition: int) -> None:
        """Take the log away now; its directory (renamed `<name>.<uuid>-delete`) goes after a delay,
        so fetches already holding file slices can finish."""
        doomed = self._logs.pop((topic, partition), None)
        if doomed is None:
            return
        target = doomed.directory.with_name(f"{doomed.directory.name}.{uuid.uuid4().hex}{DELETE_DIR_SUFFIX}")
        os.replace(doomed.directory, target)
        due = self.clock() + doomed.config.file_delete_delay_ms
        self._dirs_to_delete.append((due, target, doomed))

    def update_config(self, topic: str, config: LogConfig) -> None:
        for (log_topic, _), each in self._logs.items():
            if log_topic == topic:
                each.config = config

    # -- periodic work ----------------------------------------------------------------------------

    def tick(self, now_ms: int) -> None:
        """Called about once a second: deferred deletions, flushes, retention, compaction, checkpoints."""
        self._delete_expired(now_ms)
        for each in self.logs():
            each.flush_if_due(now_ms)
        if now_ms >= self._next_retention_ms:
            self._next_retention_ms = now_ms + self.retention_check_interval_ms
            self._for_each_log("retention", lambda each: each.delete_old_segments(now_ms))
        if now_ms >= self._next_cleaning_ms:
            self._next_cleaning_ms = now_ms + self.cleaner_backoff_ms
            self._for_each_log("compaction", lambda each: compact(each, now_ms) if each.config.compact else None)
        if now_ms >= self._next_checkpoint_ms:
            self._next_checkpoint_ms = now_ms + self.checkpoint_interval_ms
            self.write_checkpoints()

    def _for_each_log(self, what: str, work: Callable[[Log], object]) -> None:
        for each in self.logs():
            try:
                work(each)
            except Exception:  # one broken log must not stop the upkeep of the others
                log.exception("%s of %s failed", what, each.name)

    def _delete_expired(self, now_ms: int) -> None:
        for each in self.logs():
            each.delete_expired_files(now_ms)
        due = [entry for entry in self._dirs_to_delete if entry[0] <= now_ms]
        self._dirs_to_delete = [entry for entry in self._dirs_to_delete if entry[0] > now_ms]
        for _, directory, doomed in due:
            _remove_deleted_log(directory, doomed)

    def write_checkpoints(self) -> None:
        for log_dir in self.log_dirs:
            logs = [each for each in self._logs.values() if each.directory.parent == log_dir]

            def offsets(field: Callable[[Log], int], logs: list[Log] = logs) -> dict[tuple[str, int], int]:
                return {(each.topic, each.partition): field(each) for each in logs}

            checkpoint.write_offsets(log_dir / checkpoint.RECOVERY_POINT_CHECKPOINT, offsets(lambda e: e.recovery_point))
            checkpoint.write_offsets(log_dir / checkpoint.REPLICATION_CHECKPOINT, offsets(lambda e: e.high_watermark))
            checkpoint.write_offsets(log_dir / checkpoint.LOG_START_CHECKPOINT, offsets(lambda e: e.log_start_offset))
            checkpoint.write_offsets(log_dir / checkpoint.CLEANER_CHECKPOINT, offsets(lambda e: e.cleaner_checkpoint))

    # -- shutdown -------------------------------------------------------------------------------

    def shutdown(self) -> None:
        """Flush every log, write checkpoints, close, and mark each log dir cleanly shut down."""
        for each in self.logs():
            each.flush()
        self.write_checkpoints()
        for each in self.logs():
            each.close()
        for _, directory, doomed in self._dirs_to_delete:
            _remove_deleted_log(directory, doomed)
        self._dirs_to_delete = []
        for log_dir in self.log_dirs:
            (log_dir / CLEAN_SHUTDOWN_FILE).touch()
            checkpoint.fsync_dir(log_dir)


def _remove_deleted_log(directory: Path, doomed: Log) -> None:
    doomed.release()
    shutil.rmtree(directory, ignore_errors=True)
