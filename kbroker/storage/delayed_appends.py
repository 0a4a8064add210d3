"""The produce side of delayed delivery (docs/delayed-and-retry.md): a producer's batch that holds
delayed records becomes a pending batch before the log assigns its offsets.

`plan_batch` runs after the record validation walk, on the records it already has uncompressed,
so a compressed batch is decompressed once. The walk tells it whether any record has a header
starting with `kbroker.d` (the start of every delay header's name); only such a batch, or one of
a topic that delays every record, is decoded again.

`pending_batch` then encodes the replacement with the client batch's producer fields (id,
epoch, base sequence, transactional bit) and codec, so idempotence and transactions treat it
as the batch it stands for.
"""

from __future__ import annotations

from dataclasses import dataclass

from aiokafka.record.default_records import DefaultRecordBatch

from kbroker.delay.delay_headers import (
    DelayHeaderError,
    DelaySettings,
    batch_due_times,
)
from kbroker.delay.pending_batches import encode_pending_batch
from kbroker.delay.retries import RetrySettings, retry_due_times
from kbroker.storage.log_config import LogConfig
from protocol.record_batch import Record
from protocol.records import BatchHeader


@dataclass(slots=True)
class BatchPlan:
    """What the produce path must do with one client batch beyond appending it."""

    records: list[Record]
    # Each record's due time (None: not delayed).
    due_times: list[int | None]


def plan_batch(uncompressed: bytes | bytearray | memoryview, header: BatchHeader, config: LogConfig,
               partition: str, now_ms: int, *, names_delay_headers: bool) -> BatchPlan | None:
    """The plan for a client batch (header plus uncompressed records), None when it has nothing
    to do with delays. `names_delay_headers`: whether some record has a header starting with
    `kbroker.d` (the validator's walk found out). Raises DelayHeaderError (with the record's
    index) for a refused delay."""
    if not config.delayed_delivery_enable:
        return None
    if config.delivery_delay_ms <= 0 and not config.is_retry_topic and not names_delay_headers:
        return None
    # LogAppendTime topics stamp records with the append time: delays count from it.
    records = _records(uncompressed, now_ms if config.log_append_time else None)
    if config.is_retry_topic:
        # Every record of a retry topic is held, and its attempt's backoff decides for how long.
        settings = RetrySettings(config.retry_backoff_ms, bool(config.retry_dead_letter_topic))
        return BatchPlan(records, list(retry_due_times(records, now_ms, settings)))
    due_times = batch_due_times(records, now_ms, DelaySettings(config.delivery_delay_ms, config.delay_max_ms))
    return None if due_times is None else BatchPlan(records, due_times)


def _records(uncompressed: bytes | bytearray | memoryview, log_append_time: int | None) -> list[Record]:
    """The batch's records, read by aiokafka's record iterator (in C), as the validator's walk
    just did: a delayed batch is decoded once more, not in Python."""
    return [Record(index, record.timestamp if log_append_time is None else log_append_time, record.key,
                   record.value, list(record.headers))
            for index, record in enumerate(DefaultRecordBatch(bytes(uncompressed)))]


def pending_batch(plan: BatchPlan, header: BatchHeader, now_ms: int) -> bytes:
    """The pending batch replacing a client batch; records that asked for no delay are due now,
    so the batch is delivered whole and in order."""
    due_times = [now_ms if due is None else due for due in plan.due_times]
    return encode_pending_batch(
        plan.records, due_times, producer_id=header.producer_id, producer_epoch=header.producer_epoch,
        base_sequence=header.base_sequence, transactional=header.is_transactional, compression=header.compression)


__all__ = ["BatchPlan", "DelayHeaderError", "pending_batch", "plan_batch"]
