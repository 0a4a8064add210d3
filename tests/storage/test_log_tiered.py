"""A tiered log's local window (kbroker/storage/log_tiered.py): local retention deletes only
archived segments and keeps the partition's log start, reads below the local window are sent to
the archive, and the log start survives a reopen."""

from __future__ import annotations

import pytest

from kbroker.storage.log import Log
from kbroker.storage.log_config import LogConfig
from protocol.errors import ErrorCode, KafkaError
from tests.storage.batches import Rec, batch
from tests.storage.conftest import T0, Clock, OpenLog, read_all
from tests.storage.test_log_lifecycle import DAY, fill

ONE = len(batch([Rec(b"k", b"r" * 100)]))


def tiered(**changes: object) -> LogConfig:
    """Five single-record batches a segment; a local window of two segments."""
    settings: dict = {"segment_bytes": ONE * 5, "remote_storage_enable": True, "local_retention_bytes": ONE * 10}
    return LogConfig(**{**settings, **changes})


def code_of_read(log: Log, offset: int) -> int:
    with pytest.raises(KafkaError) as caught:
        log.read(offset, 1000)
    return caught.value.code


def test_local_retention_deletes_only_archived_segments_and_keeps_the_log_start(open_log: OpenLog) -> None:
    log = open_log(tiered(), archiving=True)
    fill(log, 30)  # segments [0..4] ... [25..29]
    assert log.delete_old_segments(T0) == 0  # nothing archived: the disk keeps everything
    log.highest_offset_in_remote = 14  # the archive holds [0..14]
    assert log.delete_old_segments(T0) == 3
    assert [s.base_offset for s in log.segments] == [15, 20, 25]
    assert (log.log_start_offset, log.local_log_start_offset) == (0, 15)
    log.highest_offset_in_remote = 29
    assert log.delete_old_segments(T0) == 1  # [15..19]: the window is two segments (the active one too)
    assert [s.base_offset for s in log.segments] == [20, 25]
    assert log.log_start_offset == 0


def test_a_read_below_the_local_window_goes_to_the_archive(open_log: OpenLog) -> None:
    log = open_log(tiered(), archiving=True)
    fill(log, 20)
    log.highest_offset_in_remote = 9
    log.delete_old_segments(T0)
    assert log.local_log_start_offset == 10
    assert code_of_read(log, 0) == ErrorCode.OFFSET_MOVED_TO_TIERED_STORAGE
    assert code_of_read(log, 9) == ErrorCode.OFFSET_MOVED_TO_TIERED_STORAGE
    assert [r.offset for r in read_all(log, 10)] == list(range(10, 20))
    log.advance_log_start_for_archive(5)  # the archive's retention deleted [0..4]
    assert code_of_read(log, 4) == ErrorCode.OFFSET_OUT_OF_RANGE
    assert code_of_read(log, 5) == ErrorCode.OFFSET_MOVED_TO_TIERED_STORAGE


def test_local_retention_by_time_counts_only_archived_segments(open_log: OpenLog, clock: Clock) -> None:
    log = open_log(tiered(local_retention_bytes=-2, local_retention_ms=DAY), archiving=True)
    fill(log, 10, timestamp=T0 - 3 * DAY)
    fill(log, 5, timestamp=T0)
    log.highest_offset_in_remote = 4
    assert log.delete_old_segments(T0) == 1  # [5..9] is as old, but not archived
    assert log.local_log_start_offset == 5


def test_without_archiving_the_topic_config_changes_nothing(open_log: OpenLog) -> None:
    """A broker that does not archive keeps the ordinary retention for every log."""
    log = open_log(tiered(retention_bytes=ONE * 10), archiving=False)
    fill(log, 20)
    assert log.delete_old_segments(T0) == 2
    assert log.log_start_offset == log.local_log_start_offset == 10


def closed_after_archiving(open_log: OpenLog) -> None:
    """A tiered log "t-0" of offsets 0..19 whose segments below 10 went after archiving, closed."""
    log = open_log(tiered(), archiving=True, name="t-0")
    fill(log, 20)
    log.highest_offset_in_remote = 14
    log.delete_old_segments(T0)
    log.delete_expired_files(T0 + 10 * DAY)
    log.close()


def test_the_log_start_below_the_local_window_survives_a_reopen(open_log: OpenLog) -> None:
    closed_after_archiving(open_log)
    reopened = open_log(tiered(), archiving=True, name="t-0", log_start_offset=0, had_clean_shutdown=True)
    assert (reopened.log_start_offset, reopened.local_log_start_offset) == (0, 10)
    reopened.close()
    local = open_log(tiered(), archiving=False, name="t-0", log_start_offset=0, had_clean_shutdown=True)
    assert local.log_start_offset == 10


def test_only_the_first_config_after_a_load_takes_the_checkpointed_start_back(open_log: OpenLog) -> None:
    """A log opened with a default config learns its topic's later; a topic made tiered long
    after the load does not go back to that load's checkpoint (retention has moved on since)."""
    closed_after_archiving(open_log)
    reopened = open_log(LogConfig(segment_bytes=ONE * 5), archiving=True, name="t-0", log_start_offset=0,
                        had_clean_shutdown=True)
    assert reopened.log_start_offset == 10  # loaded with a default config: not tiered (yet)
    reopened.config = tiered()
    reopened.config_applied()  # its topic's config: tiered, the partition starts in the archive
    assert reopened.log_start_offset == 0
    reopened.close()
    plain = open_log(LogConfig(segment_bytes=ONE * 5), archiving=True, name="t-0", log_start_offset=0,
                     had_clean_shutdown=True)
    plain.config_applied()  # its topic's config: not tiered
    plain.config = tiered()
    plain.config_applied()  # made tiered later: the load's checkpoint is long stale
    assert plain.log_start_offset == 10


def test_a_follower_far_behind_starts_over_with_the_archived_state(open_log: OpenLog) -> None:
    """What the archive kept with the segment ending at 19 (leader epochs, producer state) becomes
    the state of a follower that starts over at 20, its partition starting in the archive."""
    leader = open_log(tiered(), archiving=True, name="leader-0")
    for sequence in range(20):
        leader.append_as_leader(batch([Rec(b"k", b"r" * 100)], producer_id=7, producer_epoch=1,
                                      base_sequence=sequence), 3 if sequence >= 10 else 2, T0)
    leader.producer_state.take_snapshot()
    snapshot = (leader.directory / "00000000000000000020.snapshot").read_bytes()
    follower = open_log(tiered(), archiving=True, name="follower-0")
    fill(follower, 3)  # what it held before: gone
    follower.start_from_archive(20, 5, leader.epochs.entries, snapshot)
    assert (follower.log_start_offset, follower.local_log_start_offset, follower.log_end_offset) == (5, 20, 20)
    assert [tuple(e) for e in follower.epochs.entries] == [(2, 0), (3, 10)]
    assert [(p.producer_id, p.producer_epoch, p.last_sequence) for p in follower.active_producers()] == [(7, 1, 19)]
    assert code_of_read(follower, 12) == ErrorCode.OFFSET_MOVED_TO_TIERED_STORAGE
    # As the partition's next leader, it knows the producer: a gap in its sequence is refused.
    with pytest.raises(KafkaError) as caught:
        follower.append_as_leader(batch([Rec(b"k", b"r")], producer_id=7, producer_epoch=1, base_sequence=21), 4, T0)
    assert caught.value.code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    follower.append_as_leader(batch([Rec(b"k", b"r")], producer_id=7, producer_epoch=1, base_sequence=20), 4, T0)
    assert follower.log_end_offset == 21
