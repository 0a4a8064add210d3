"""Producer state in the log: idempotent retries, sequence and epoch checks, transactions, LSO,
the aborted-transaction index, snapshots and their rebuild after a crash."""

from __future__ import annotations

import pytest

from kbroker.storage.cleaner import compact
from kbroker.storage.log import Log
from kbroker.storage.log_config import LogConfig
from kbroker.storage.producer_state import AppendOrigin
from protocol.errors import ErrorCode, KafkaError
from protocol.record_batch import ControlType, Record, encode_batch, encode_end_txn_batch
from tests.storage.conftest import T0, OpenLog, read_all

PID = 4_000
COORDINATOR = AppendOrigin.COORDINATOR


def data(values: list[bytes], seq: int, *, pid: int = PID, epoch: int = 0, txn: bool = False,
         keys: list[bytes] | None = None) -> bytes:
    records = [Record(i, T0 + i, keys[i] if keys else None, v) for i, v in enumerate(values)]
    return encode_batch(records, producer_id=pid, producer_epoch=epoch, base_sequence=seq, transactional=txn)


def marker(kind: ControlType, *, pid: int = PID, epoch: int = 0, coordinator_epoch: int = 0) -> bytes:
    return encode_end_txn_batch(kind, producer_id=pid, producer_epoch=epoch, coordinator_epoch=coordinator_epoch,
                                timestamp=T0)


def append(log: Log, batch: bytes, origin: AppendOrigin = AppendOrigin.CLIENT):  # noqa: ANN201
    info = log.append_as_leader(batch, 0, T0, origin=origin)
    log.high_watermark = log.log_end_offset
    return info


def error_of(log: Log, batch: bytes, origin: AppendOrigin = AppendOrigin.CLIENT) -> int:
    with pytest.raises(KafkaError) as caught:
        append(log, batch, origin)
    return caught.value.code


# -- idempotence ---------------------------------------------------------------------------------


def test_a_retried_batch_gets_its_first_offsets_and_is_not_written_again(open_log: OpenLog) -> None:
    log = open_log()
    append(log, data([b"a", b"b"], 0))
    append(log, data([b"c"], 2))
    retry = append(log, data([b"a", b"b"], 0))
    assert (retry.duplicate, retry.first_offset, retry.last_offset) == (True, 0, 1)
    assert log.log_end_offset == 3
    assert [r.value for r in read_all(log)] == [b"a", b"b", b"c"]


def test_only_the_last_five_batches_are_remembered(open_log: OpenLog) -> None:
    log = open_log()
    for seq in range(6):
        append(log, data([b"x"], seq))
    assert append(log, data([b"x"], 1)).duplicate  # the oldest of the last five
    assert error_of(log, data([b"x"], 0)) == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert log.log_end_offset == 6


def test_sequence_gaps_and_old_epochs_are_refused(open_log: OpenLog) -> None:
    log = open_log()
    append(log, data([b"a"], 0, epoch=1))
    assert error_of(log, data([b"b"], 2, epoch=1)) == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert error_of(log, data([b"b"], 1, epoch=0)) == ErrorCode.INVALID_PRODUCER_EPOCH
    assert error_of(log, data([b"b"], 5, epoch=2)) == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER  # new epoch: from 0
    append(log, data([b"b"], 0, epoch=2))
    assert log.log_end_offset == 2


def test_a_producer_the_partition_does_not_know_may_start_at_any_sequence(open_log: OpenLog) -> None:
    # Kafka 3.x accepts it: its state may have gone with retention or DeleteRecords.
    log = open_log()
    append(log, data([b"a"], 42))
    append(log, data([b"b"], 43))
    assert error_of(log, data([b"c"], 45)) == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER


def test_sequences_wrap_around_at_int32_max(open_log: OpenLog) -> None:
    log = open_log()
    append(log, data([b"a", b"b"], 2**31 - 2))
    append(log, data([b"c"], 0))
    assert log.active_producers()[0].last_sequence == 0


def test_client_batches_are_checked_for_producer_fields(open_log: OpenLog) -> None:
    log = open_log()
    assert error_of(log, data([b"a"], -1)) == ErrorCode.INVALID_RECORD  # a producer id needs a sequence
    assert error_of(log, marker(ControlType.COMMIT)) == ErrorCode.INVALID_RECORD  # markers are the coordinator's
    assert error_of(log, encode_batch([Record(0, T0, None, b"x")], transactional=True)) == ErrorCode.INVALID_RECORD


def test_idle_producers_expire_unless_a_transaction_is_open(open_log: OpenLog) -> None:
    log = open_log()
    append(log, data([b"a"], 0, pid=1))
    append(log, data([b"b"], 0, pid=2, txn=True))
    assert log.remove_expired_producers(T0 + 10_000, 5_000) == 1
    assert [p.producer_id for p in log.active_producers()] == [2]


# -- transactions --------------------------------------------------------------------------------


def test_an_open_transaction_holds_the_last_stable_offset(open_log: OpenLog) -> None:
    log = open_log()
    append(log, data([b"plain"], 0, pid=1))
    append(log, data([b"t1", b"t2"], 0, txn=True))
    append(log, data([b"plain2"], 1, pid=1))
    assert (log.last_stable_offset, log.high_watermark) == (1, 4)
    assert log.ongoing_transactions() == {PID: 1}
    append(log, marker(ControlType.COMMIT), COORDINATOR)
    assert log.last_stable_offset == log.high_watermark == 5
    assert log.collect_aborted_transactions(0, 5) == []


def test_an_aborted_transaction_is_indexed_for_read_committed_fetches(open_log: OpenLog) -> None:
    log = open_log()
    append(log, data([b"a"], 0, txn=True))
    append(log, data([b"x"], 0, pid=7, txn=True))  # another transaction, still open after the abort
    append(log, data([b"b"], 1, txn=True))
    append(log, marker(ControlType.ABORT), COORDINATOR)  # offset 3
    entries = log.active_segment.txn_index.entries
    assert [(t.producer_id, t.first_offset, t.last_offset, t.last_stable_offset) for t in entries] == [(PID, 0, 3, 1)]
    assert log.collect_aborted_transactions(0, 4) == [(PID, 0)]
    assert log.collect_aborted_transactions(4, 5) == []  # the transaction ended before the fetch offset
    assert log.last_stable_offset == 1  # producer 7's transaction is still open


def test_a_non_transactional_write_inside_a_transaction_is_refused(open_log: OpenLog) -> None:
    log = open_log()
    append(log, data([b"a"], 0, txn=True))
    assert error_of(log, data([b"b"], 1)) == ErrorCode.INVALID_TXN_STATE


def test_markers_from_an_older_coordinator_epoch_are_fenced(open_log: OpenLog) -> None:
    log = open_log()
    append(log, data([b"a"], 0, txn=True))
    append(log, marker(ControlType.COMMIT, coordinator_epoch=5), COORDINATOR)
    append(log, data([b"b"], 1, txn=True))
    assert error_of(log, marker(ControlType.ABORT, coordinator_epoch=4), COORDINATOR) == \
        ErrorCode.TRANSACTION_COORDINATOR_FENCED


def test_a_marker_with_a_bumped_epoch_fences_the_old_epoch(open_log: OpenLog) -> None:
    log = open_log()
    append(log, data([b"a"], 0, txn=True))
    append(log, marker(ControlType.ABORT, epoch=1), COORDINATOR)  # the coordinator aborted on a timeout
    assert error_of(log, data([b"b"], 1, txn=True)) == ErrorCode.INVALID_PRODUCER_EPOCH
    append(log, data([b"b"], 0, epoch=1, txn=True))


# -- persistence ---------------------------------------------------------------------------------


def state_of(log: Log) -> list[tuple[int, int, int, int]]:
    return sorted((p.producer_id, p.producer_epoch, p.last_sequence, p.current_txn_start_offset)
                  for p in log.active_producers())


def build_history(log: Log) -> None:
    append(log, data([b"a", b"b"], 0, pid=1))
    append(log, data([b"t"], 0, txn=True))
    append(log, marker(ControlType.ABORT), COORDINATOR)
    append(log, data([b"u"], 1, txn=True))  # left open


def test_state_survives_a_clean_restart_through_the_snapshot(open_log: OpenLog) -> None:
    log = open_log()
    build_history(log)
    before = state_of(log)
    log.close()
    assert (log.directory / "00000000000000000005.snapshot").exists()
    reopened = open_log(had_clean_shutdown=True, recovery_point=5, high_watermark=5)
    assert state_of(reopened) == before
    assert reopened.last_stable_offset == 4
    assert append(reopened, data([b"a", b"b"], 0, pid=1)).duplicate


@pytest.mark.parametrize("damage", ["no snapshot", "corrupt snapshot", "lost txn index"])
def test_state_and_txn_index_are_rebuilt_after_a_crash(open_log: OpenLog, damage: str) -> None:
    log = open_log(LogConfig(segment_bytes=400))
    build_history(log)
    for seq in range(2, 8):  # enough to roll segments, so snapshots exist mid-log
        append(log, data([b"v" * 40], seq, pid=1))
    before, aborted = state_of(log), log.collect_aborted_transactions(0, log.log_end_offset)
    assert len(log.segments) > 2 and aborted == [(PID, 2)]
    snapshots = sorted(log.directory.glob("*.snapshot"))
    if damage == "no snapshot":
        for path in snapshots:
            path.unlink()
    elif damage == "corrupt snapshot":
        snapshots[-1].write_bytes(snapshots[-1].read_bytes()[:-3] + b"xyz")
    else:
        for path in log.directory.glob("*.txnindex"):
            path.unlink()
    log.release()  # a crash: no closing snapshot
    reopened = open_log(LogConfig(segment_bytes=400), recovery_point=0 if damage == "lost txn index" else 6)
    assert state_of(reopened) == before
    assert reopened.collect_aborted_transactions(0, reopened.log_end_offset) == aborted
    assert append(reopened, data([b"v" * 40], 7, pid=1)).duplicate


def test_truncation_rolls_the_state_back(open_log: OpenLog) -> None:
    log = open_log()
    append(log, data([b"t"], 0, txn=True))
    append(log, marker(ControlType.COMMIT), COORDINATOR)
    append(log, data([b"p"], 0, pid=1))
    log.truncate_to(1)  # the marker and producer 1 are gone
    assert log.ongoing_transactions() == {PID: 0}
    assert [p.producer_id for p in log.active_producers()] == [PID]
    append(log, marker(ControlType.ABORT), COORDINATOR)
    assert log.collect_aborted_transactions(0, 2) == [(PID, 0)]


def test_compaction_stops_at_open_transactions_and_drops_aborted_records(open_log: OpenLog) -> None:
    config = LogConfig(segment_bytes=300, cleanup_policy=("compact",), min_cleanable_dirty_ratio=0.0)
    log = open_log(config)
    append(log, data([b"committed"], 0, pid=1, keys=[b"k"]))
    append(log, data([b"aborted"], 0, txn=True, keys=[b"k"]))
    append(log, marker(ControlType.ABORT), COORDINATOR)
    for i in range(1, 6):
        append(log, data([b"other" * 10], i, pid=1, keys=[b"j"]))
    assert compact(log, T0 + 1)
    survivors = {r.key: r.value for r in read_all(log) if r.key is not None}
    assert survivors[b"k"] == b"committed"  # the aborted value neither won nor survived
    assert log.collect_aborted_transactions(0, log.log_end_offset) == [(PID, 1)]


def test_compaction_leaves_an_open_transaction_alone(open_log: OpenLog) -> None:
    config = LogConfig(segment_bytes=300, cleanup_policy=("compact",), min_cleanable_dirty_ratio=0.0)
    log = open_log(config)
    append(log, data([b"open"], 0, txn=True, keys=[b"k"]))
    for i in range(6):
        append(log, data([b"other" * 10], i, pid=1, keys=[b"j"]))
    assert len(log.segments) > 2 and log.last_stable_offset == 0
    assert not compact(log, T0 + 1)
    append(log, marker(ControlType.COMMIT), COORDINATOR)
    assert compact(log, T0 + 1)
