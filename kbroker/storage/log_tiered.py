"""The tiered side of a partition's log (docs/archive.md): with `remote.storage.enable`, closed
segments are copied to the archive (kbroker/archive) and local disks keep only a recent window.

Two log starts then differ, as in Kafka's UnifiedLog: `log_start_offset` is the partition's,
the first offset a consumer can read (in the archive), and `local_log_start_offset` is the
first segment's on this disk. Local retention (`local.retention.ms` / `local.retention.bytes`,
-2: the total's) deletes only segments the archive holds (`highest_offset_in_remote`) and
leaves `log_start_offset` where it is; the archive's own retention moves it
(`advance_log_start_for_archive`). A part of `Log`, kept apart from its file.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from kbroker.fsutil import write_atomically
from kbroker.storage.index import segment_file_name
from kbroker.storage.leader_epoch import EpochEntry, LeaderEpochCache
from kbroker.storage.log_config import LogConfig
from kbroker.storage.log_segments import LogSegments
from kbroker.storage.producer_state import SNAPSHOT_SUFFIX, ProducerStateManager
from kbroker.storage.segment import LogSegment

# local.retention.ms / local.retention.bytes: "the same as the total retention".
SAME_AS_TOTAL = -2


class LogTiering:
    """Mixed into `Log`: what tiered storage needs of the log's own state."""

    config: LogConfig
    directory: Path
    log_start_offset: int
    epochs: LeaderEpochCache
    producer_state: ProducerStateManager
    _segments: LogSegments
    # Whether this broker archives at all (remote.log.storage.system.enable): a topic asking for
    # it on a broker that does not is refused at creation; a log loaded so stays local-only.
    archiving_enabled: bool = False
    # The last offset the archive holds (-1: none), set by the archiver after each copy.
    highest_offset_in_remote: int = -1

    # The log start of the log-start checkpoint at load, until the topic's config is known (logs
    # are opened before their topics' configs are read): below the first local segment, a tiered
    # log's partition starts in the archive.
    checkpointed_log_start: int | None = None

    _delete_prefix: Callable[..., int]
    _advance_log_start: Callable[[int], None]
    truncate_fully_and_start_at: Callable[[int], None]

    @property
    def tiered(self) -> bool:
        return self.archiving_enabled and self.config.remote_storage_enable

    def config_applied(self, final: bool = True) -> None:
        """The log's topic config is known: a tiered log takes its checkpointed start back. At
        load (`final` False) the config may be a default one, so a log not tiered by it keeps the
        checkpoint for the first config its topic gives; after that, the checkpoint is stale."""
        checkpointed, self.checkpointed_log_start = self.checkpointed_log_start, None
        if self.tiered and checkpointed is not None and checkpointed < self.log_start_offset:
            self.log_start_offset = checkpointed
        elif not final and not self.tiered:
            self.checkpointed_log_start = checkpointed

    @property
    def local_log_start_offset(self) -> int:
        """The first offset on this disk (Kafka's localLogStartOffset)."""
        first = self._segments.first.base_offset if self._segments else self.log_start_offset
        return max(first, self.log_start_offset)

    @property
    def local_retention_ms(self) -> int:
        value = self.config.local_retention_ms
        return self.config.retention_ms if value == SAME_AS_TOTAL else value

    @property
    def local_retention_bytes(self) -> int:
        value = self.config.local_retention_bytes
        return self.config.retention_bytes if value == SAME_AS_TOTAL else value

    def _delete_archived(self, now_ms: int) -> int:
        """Local retention of a tiered log: the oldest segments the archive holds, while the local
        log is over local.retention.bytes or they are older than local.retention.ms."""
        archived = self.highest_offset_in_remote
        limit_bytes = self.local_retention_bytes
        limit_ms = self.local_retention_ms
        excess = self._segments.size_in_bytes - limit_bytes if limit_bytes >= 0 else -1

        def deletable(segment: LogSegment, upper: int) -> bool:
            nonlocal excess
            if upper - 1 > archived:
                return False  # not archived yet: the disk keeps it whatever its age or size
            if excess >= 0 and excess - segment.size >= 0:
                excess -= segment.size
                return True
            return limit_ms >= 0 and now_ms - segment.largest_timestamp > limit_ms

        return self._delete_prefix(deletable, now_ms, "local retention", advance_start=False)

    def advance_log_start_for_archive(self, offset: int) -> None:
        """The archive's retention deleted its segments below `offset`: the partition starts there."""
        if offset > self.log_start_offset:
            self._advance_log_start(offset)

    def start_from_archive(self, offset: int, log_start: int, epochs: Sequence[EpochEntry],
                           producer_snapshot: bytes) -> None:
        """A follower behind its leader's local log start starts over, empty, at `offset` (the end
        of an archived segment), as Kafka's follower builds its remote log aux state: the leader
        epochs and the producer state archived with that segment are taken as this log's, and
        the partition's log start is the leader's, in the archive."""
        self.truncate_fully_and_start_at(offset)
        self.log_start_offset = min(log_start, offset)
        self.epochs.replace_entries([e for e in epochs if e.start_offset < offset])
        if producer_snapshot:
            write_atomically(self.directory / segment_file_name(offset, SNAPSHOT_SUFFIX), producer_snapshot)
            self.producer_state.load_snapshot(offset)
