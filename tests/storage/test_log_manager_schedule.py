"""When the LogManager's periodic upkeep first runs: `log.initial.task.delay.ms` after the logs are
loaded for the tasks Kafka's LogManager delays (retention, the flush.ms flusher, the recovery-point
and log-start-offset checkpoints, removing deleted partitions), at once for the rest. Driven by an
injectable clock: no waiting."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from kbroker.config import BrokerConfig, ConfigError
from kbroker.storage import checkpoint
from kbroker.storage.log import Log
from kbroker.storage.log_config import LogConfig
from kbroker.storage.log_manager import DEFAULT_INITIAL_TASK_DELAY_MS, LogManager
from tests.storage.batches import Rec, batch
from tests.storage.conftest import T0, Clock

DAY = 86_400_000
RETENTION_CHECK_MS = 300_000
ONE_BATCH = len(batch([Rec(b"k", b"r" * 100)]))


def config(**changes: object) -> LogConfig:
    # Five single-record batches per segment, one day of retention.
    return LogConfig(**{"segment_bytes": ONE_BATCH * 5, "retention_ms": DAY, **changes})


@pytest.fixture
def manager_for(tmp_path: Path, clock: Clock) -> Iterator:
    made: list[LogManager] = []

    def make(log_config: LogConfig | None = None, **kwargs: object) -> LogManager:
        manager = LogManager([tmp_path / "logs"], lambda _topic: log_config or config(),
                             retention_check_interval_ms=RETENTION_CHECK_MS, clock=clock, **kwargs)
        made.append(manager)
        return manager

    yield make
    for manager in made:
        manager.shutdown()


def fill(log: Log, count: int, timestamp: int) -> None:
    for _ in range(count):
        log.append_as_leader(batch([Rec(b"k", b"r" * 100, timestamp)]), 0, T0)
    log.high_watermark = log.log_end_offset


def test_the_default_delay_is_kafkas() -> None:
    assert DEFAULT_INITIAL_TASK_DELAY_MS == 30_000
    assert BrokerConfig({}).log_initial_task_delay_ms == 30_000
    assert BrokerConfig({"log.initial.task.delay.ms": "0"}).log_initial_task_delay_ms == 0
    with pytest.raises(ConfigError, match="log.initial.task.delay.ms must be at least 0"):
        BrokerConfig({"log.initial.task.delay.ms": "-1"})


def test_retention_first_runs_after_the_initial_delay(manager_for, clock: Clock) -> None:
    manager = manager_for()
    log = manager.get_or_create_log("old", 0)
    fill(log, 12, timestamp=T0 - 10 * DAY)  # written just after start, with old timestamps

    for now in (T0 + 1_000, T0 + 2_000, T0 + DEFAULT_INITIAL_TASK_DELAY_MS - 1):
        manager.tick(now)
        assert log.log_start_offset == 0, f"retention ran {now - T0} ms after start"
    manager.tick(T0 + DEFAULT_INITIAL_TASK_DELAY_MS)
    assert log.log_start_offset == 12

    # From then on, every retention.check.interval.ms.
    fill(log, 3, timestamp=T0 - 10 * DAY)
    manager.tick(T0 + DEFAULT_INITIAL_TASK_DELAY_MS + RETENTION_CHECK_MS - 1)
    assert log.log_start_offset == 12
    manager.tick(T0 + DEFAULT_INITIAL_TASK_DELAY_MS + RETENTION_CHECK_MS)
    assert log.log_start_offset == 15


def test_the_delay_counts_from_when_the_logs_were_loaded(manager_for, clock: Clock) -> None:
    clock.now = T0 + 7 * DAY
    manager = manager_for(initial_task_delay_ms=5_000)
    log = manager.get_or_create_log("old", 0)
    fill(log, 6, timestamp=T0)
    manager.tick(clock.now + 4_999)
    assert log.log_start_offset == 0
    manager.tick(clock.now + 5_000)
    assert log.log_start_offset == 6


def test_no_delay_runs_retention_on_the_first_tick(manager_for, clock: Clock) -> None:
    manager = manager_for(initial_task_delay_ms=0)
    log = manager.get_or_create_log("old", 0)
    fill(log, 12, timestamp=T0 - 10 * DAY)
    manager.tick(T0 + 1_000)
    assert log.log_start_offset == 12


def test_recovery_checkpoints_wait_and_high_watermarks_do_not(manager_for, clock: Clock, tmp_path: Path) -> None:
    manager = manager_for()
    fill(manager.get_or_create_log("t", 0), 3, timestamp=T0)
    log_dir = tmp_path / "logs"
    delayed = [log_dir / checkpoint.RECOVERY_POINT_CHECKPOINT, log_dir / checkpoint.LOG_START_CHECKPOINT]
    undelayed = [log_dir / checkpoint.REPLICATION_CHECKPOINT, log_dir / checkpoint.CLEANER_CHECKPOINT]

    manager.tick(T0 + 1_000)
    # As Kafka: ReplicaManager's highwatermark-checkpoint and the cleaner's checkpoint are not delayed.
    assert all(path.exists() for path in undelayed)
    assert checkpoint.read_offsets(undelayed[0]) == {("t", 0): 3}
    assert not any(path.exists() for path in delayed)

    manager.tick(T0 + DEFAULT_INITIAL_TASK_DELAY_MS)
    assert all(path.exists() for path in delayed)


def test_flush_ms_waits_but_a_rolled_segment_is_flushed_at_once(manager_for, clock: Clock) -> None:
    manager = manager_for(config(flush_ms=1_000, retention_ms=-1))
    log = manager.get_or_create_log("t", 0)
    fill(log, 7, timestamp=T0)  # segments [0..4] (rolled) and [5, 6] (active)

    manager.tick(T0 + 2_000)
    assert log.recovery_point == 5, "the rolled segment is flushed, the active one waits for the flusher"
    manager.tick(T0 + DEFAULT_INITIAL_TASK_DELAY_MS)
    assert log.recovery_point == 7


def test_deleted_partitions_are_removed_after_the_delay(manager_for, clock: Clock, tmp_path: Path) -> None:
    manager = manager_for(config(file_delete_delay_ms=0))
    fill(manager.get_or_create_log("gone", 0), 2, timestamp=T0)
    manager.delete_log("gone", 0)
    leftovers = list((tmp_path / "logs").glob("gone-0.*-delete"))
    assert len(leftovers) == 1

    manager.tick(T0 + 1_000)
    assert leftovers[0].exists()
    manager.tick(T0 + DEFAULT_INITIAL_TASK_DELAY_MS)
    assert not leftovers[0].exists()
