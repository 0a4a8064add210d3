"""What batches must satisfy before they reach a log, as Kafka's LogValidator decides.

Three levels. `validate_batches` reads batch headers only (framing, magic, CRC, sizes, counts,
producer fields): it is all a replica's append needs, the leader having checked the rest.
`validate_records` walks the records of a producer's batches: a batch whose records cannot be
read (unknown codec, a payload that does not decompress, record lengths or fields that do not
add up, a count that does not match) would be stored and then stop every consumer at it, so it
is refused with INVALID_RECORD; record errors (a keyless record on a compacted topic, a
timestamp out of range) are answered per record, as Kafka's RecordValidationException. Then the
offsets: `assign_offsets` gives a leader's batches theirs, `check_follower_offsets` makes sure a
replica's continue its log.

The walk runs in C: aiokafka's record batch iterator (a maintained Kafka client whose
`DefaultRecordBatch` reads records exactly as Kafka's DefaultRecord does). Bytes are not
changed and not copied for uncompressed batches; compressed ones are decompressed once.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Sequence
from itertools import chain
from typing import Any

from aiokafka.errors import CorruptRecordException, UnsupportedCodecError
from aiokafka.record.default_records import DefaultRecordBatch

from kbroker.delay.delay_headers import names_delay_header
from kbroker.delay.pending_batches import DELIVERY_ATTRIBUTE
from kbroker.storage import record_scan
from kbroker.storage.batch_scan import MIN_BATCH_LENGTH
from kbroker.storage.delayed_appends import BatchPlan, DelayHeaderError, plan_batch
from kbroker.storage.log_config import LONG_MAX, LogConfig
from protocol.errors import ErrorCode, KafkaError
from protocol.record_batch import CorruptRecordError, UnsupportedCompressionError, uncompressed_batch
from protocol.records import (
    CURRENT_MAGIC,
    LOG_OVERHEAD,
    MAGIC_OFFSET,
    NO_TIMESTAMP,
    TIMESTAMP_TYPE_BIT,
    BatchHeader,
    crc_ok,
    read_header,
    set_base_offset,
    set_log_append_time,
    set_partition_leader_epoch,
)

LEGACY_RECORD_OVERHEAD = 14  # the smallest message of any format (v0), as Kafka's framing check uses
KNOWN_CODECS = range(5)  # none, gzip, snappy, lz4, zstd
_INT32 = struct.Struct(">i")
_INT16 = struct.Struct(">h")
_LONG_MIN = -(1 << 63)


class RecordValidationError(KafkaError):
    """Some records of a batch are refused (Kafka's RecordValidationException): the code, the
    message, and (batch index, message) for each refused record (KIP-467's record_errors)."""

    def __init__(self, code: int, message: str, record_errors: list[tuple[int, str]]) -> None:
        super().__init__(code, message)
        self.record_errors = record_errors


class UnexpectedAppendOffset(KafkaError):
    """A follower append whose offsets do not continue the log (Kafka's UnexpectedAppendOffsetException)."""

    def __init__(self, message: str) -> None:
        super().__init__(ErrorCode.UNKNOWN_SERVER_ERROR, message)


# -- batch headers ------------------------------------------------------------------------------


def validate_batches(
    buf: bytes | bytearray | memoryview, config: LogConfig, name: str, *, from_client: bool, coordinator: bool = False
) -> list[BatchHeader]:
    """Header-level checks of every batch in `buf`; returns the headers."""
    total = len(buf)
    if total > config.segment_bytes:
        raise KafkaError(
            ErrorCode.RECORD_LIST_TOO_LARGE,
            f"{total} bytes of batches exceed the segment size {config.segment_bytes} of {name}",
        )
    headers = []
    position = 0
    while position < total:
        header = _validate_batch(buf, position, total, config, from_client, coordinator)
        headers.append(header)
        position += header.size
    if not headers:
        raise KafkaError(ErrorCode.INVALID_RECORD, "no record batches")
    return headers


def _validate_batch(
    buf: bytes | bytearray | memoryview, position: int, total: int, config: LogConfig, from_client: bool,
    coordinator: bool,
) -> BatchHeader:
    left = total - position
    if left < LOG_OVERHEAD:
        raise KafkaError(ErrorCode.CORRUPT_MESSAGE, f"{left} trailing bytes are not a record batch")
    (length,) = _INT32.unpack_from(buf, position + LOG_OVERHEAD - 4)
    if length < LEGACY_RECORD_OVERHEAD or LOG_OVERHEAD + length > left:
        raise KafkaError(ErrorCode.CORRUPT_MESSAGE, f"batch length {length} does not fit the {left} bytes left")
    magic = buf[position + MAGIC_OFFSET]
    if magic in (0, 1):
        raise KafkaError(ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT, f"message format v{magic} is not supported")
    if magic != CURRENT_MAGIC:
        raise KafkaError(ErrorCode.CORRUPT_MESSAGE, f"unknown magic {magic}")
    if length < MIN_BATCH_LENGTH:
        raise KafkaError(ErrorCode.CORRUPT_MESSAGE, f"batch length {length} is below the v2 minimum")
    header = read_header(buf, position)
    if from_client and header.size > config.max_message_bytes:
        raise KafkaError(
            ErrorCode.MESSAGE_TOO_LARGE,
            f"batch of {header.size} bytes exceeds max.message.bytes {config.max_message_bytes}",
        )
    if not crc_ok(buf, position, header):
        raise KafkaError(ErrorCode.CORRUPT_MESSAGE, f"CRC mismatch in batch at byte {position}")
    if from_client:
        check_client_batch(header, coordinator)
    return header


def check_client_batch(header: BatchHeader, coordinator: bool) -> None:
    """What Kafka's LogValidator demands of batches from producers (control batches: coordinators only)."""
    if header.base_offset != 0:
        raise KafkaError(ErrorCode.INVALID_RECORD, f"batch base offset must be 0, not {header.base_offset}")
    if header.record_count < 1 or header.last_offset_delta != header.record_count - 1:
        raise KafkaError(
            ErrorCode.INVALID_RECORD,
            f"batch claims {header.record_count} records and last offset delta {header.last_offset_delta}",
        )
    if header.is_control and not coordinator:
        raise KafkaError(ErrorCode.INVALID_RECORD, "clients may not write control batches")
    if header.attributes & DELIVERY_ATTRIBUTE and not coordinator:
        # The broker marks its deliveries of delayed records with it (docs/delayed-and-retry.md).
        raise KafkaError(ErrorCode.INVALID_RECORD, f"attribute bit {DELIVERY_ATTRIBUTE:#06x} is the broker's own")
    if header.producer_id >= 0 and header.base_sequence < 0 and not coordinator:
        raise KafkaError(ErrorCode.INVALID_RECORD,
                         f"invalid sequence number {header.base_sequence} in a batch of producer {header.producer_id}")
    if header.is_transactional and header.producer_id < 0:
        raise KafkaError(ErrorCode.INVALID_RECORD, "a transactional batch without a producer id")


# -- records ------------------------------------------------------------------------------------


def validate_records(
    buf: bytes | bytearray | memoryview, headers: Sequence[BatchHeader], config: LogConfig, name: str, now_ms: int
) -> list[BatchPlan | None]:
    """Walk the records of a producer's batches (their headers already checked).

    Raises INVALID_RECORD for a batch whose records cannot be read, and a RecordValidationError
    for refused records: keyless records of a compacted topic, timestamps out of range, delay
    headers the broker cannot honour. Returns each batch's delayed-delivery plan (None for a
    batch without delays, nearly every one), made from the records the walk has uncompressed.
    """
    view = memoryview(buf)
    position = 0
    plans: list[BatchPlan | None] = []
    for header in headers:
        errors, plan = _check_records(view[position : position + header.size], header, config, name, now_ms)
        if errors:
            raise _record_validation_error(errors)
        plans.append(plan)
        position += header.size
    return plans


def _check_records(
    batch: memoryview, header: BatchHeader, config: LogConfig, name: str, now_ms: int
) -> tuple[list[tuple[int, int, str]], BatchPlan | None]:
    """(code, batch index, message) of each refused record, and the batch's delay plan."""
    compact = config.compact
    create_time = not config.log_append_time
    before = config.message_timestamp_before_max_ms
    after = config.message_timestamp_after_max_ms
    # The timestamps a record may carry: checked only on CreateTime topics with a bound.
    bounded = create_time and (before < LONG_MAX or after < LONG_MAX)
    low, high = (now_ms - before, now_ms + after) if bounded else (-LONG_MAX, LONG_MAX)
    append_time_batch = header.log_append_time
    errors: list[tuple[int, int, str]] = []
    index = -1
    plan = None
    delay_headers = False
    try:
        uncompressed = _uncompressed(batch, header)
        if not append_time_batch and record_scan.all_plain(uncompressed, header, low, high, need_key=compact):
            # Nearly every batch, in a few microseconds: nothing for the walk below to refuse.
            return errors, plan_batch(uncompressed, header, config, name, now_ms, names_delay_headers=False)
        records: Iterator[tuple[int, Any]] = enumerate(DefaultRecordBatch(uncompressed))
        if not (compact or append_time_batch):
            # Nearly every batch: a record without headers, whose offset delta is its index and
            # whose timestamp is within the bounds, needs no other look. This loop costs about
            # half the walk below (docs/performance.md); the first record it cannot pass goes
            # on to the walk, which decides about it and the rest.
            for index, record in records:
                if record.offset != index or record.headers or not low <= record.timestamp <= high:
                    records = chain(((index, record),), records)
                    break
            else:
                records = iter(())  # all passed (the batch's iterator must not be asked again)
        for index, record in records:
            if record.offset != index:
                raise CorruptRecordError(f"record {index} has offset delta {record.offset}; deltas must count "
                                         "the records from 0")
            if not delay_headers and record.headers:
                delay_headers = names_delay_header(record.headers)
            if compact and record.key is None:
                errors.append((ErrorCode.INVALID_RECORD, index,
                               f"Compacted topic cannot accept message without key in topic partition {name}"))
            elif create_time and (timestamp := record.timestamp) != NO_TIMESTAMP:
                if bounded and not low <= timestamp <= high:
                    errors.append((ErrorCode.INVALID_TIMESTAMP, index,
                                   f"Timestamp {timestamp} of message with offset {index} is out of range. The "
                                   f"timestamp should be within [{_java_long(low)}, {_java_long(high)}]"))
            elif append_time_batch:
                errors.append((ErrorCode.INVALID_TIMESTAMP, index,
                               f"Invalid timestamp type in message {_describe(record)}. Producer should not set "
                               "timestamp type to LogAppendTime."))
        if not errors:
            plan = plan_batch(uncompressed, header, config, name, now_ms, names_delay_headers=delay_headers)
    except DelayHeaderError as e:
        errors.append((ErrorCode.INVALID_RECORD, max(e.record_index, 0), e.message or "bad delay header"))
    except (CorruptRecordException, CorruptRecordError, UnsupportedCodecError, UnsupportedCompressionError,
            ValueError, IndexError, UnicodeDecodeError) as e:
        detail = e.message if isinstance(e, KafkaError) else str(e)
        raise KafkaError(ErrorCode.INVALID_RECORD,
                         f"unreadable records in a batch of {name} (at record {index + 1}): {detail}") from None
    return errors, plan


def _uncompressed(batch: memoryview, header: BatchHeader) -> bytes | bytearray | memoryview:
    if header.compression not in KNOWN_CODECS:
        raise UnsupportedCompressionError(header.compression)
    return uncompressed_batch(batch, header)


def _record_validation_error(errors: list[tuple[int, int, str]]) -> RecordValidationError:
    """Kafka's processRecordErrors: INVALID_TIMESTAMP if any record's timestamp is refused."""
    record_errors = [(index, message) for _, index, message in errors]
    if any(code == ErrorCode.INVALID_TIMESTAMP for code, _, _ in errors):
        return RecordValidationError(ErrorCode.INVALID_TIMESTAMP,
                                     "One or more records have been rejected due to invalid timestamp", record_errors)
    shown = ", ".join(f"RecordError(batchIndex={index}, message='{message}')" for index, message in record_errors[:3])
    return RecordValidationError(
        ErrorCode.INVALID_RECORD,
        f"One or more records have been rejected due to {len(record_errors)} record errors in total, and only "
        f"showing the first three errors at most: [{shown}]", record_errors)


# -- offsets ------------------------------------------------------------------------------------


def assign_offsets(
    buf: bytearray, headers: Sequence[BatchHeader], first_offset: int, leader_epoch: int, append_time: int
) -> list[BatchHeader]:
    """Give a leader's batches their offsets from `first_offset`, its epoch and (unless NO_TIMESTAMP)
    the log append time, patching `buf` in place; returns the headers as now written."""
    offset = first_offset
    patched = []
    position = 0
    for header in headers:
        set_base_offset(buf, position, offset)
        set_partition_leader_epoch(buf, position, leader_epoch)
        changes = {"base_offset": offset, "partition_leader_epoch": leader_epoch}
        if append_time != NO_TIMESTAMP:
            set_log_append_time(buf, position, header.size, append_time)
            changes.update(max_timestamp=append_time, attributes=header.attributes | TIMESTAMP_TYPE_BIT)
        patched.append(header._replace(**changes))
        offset += header.last_offset_delta + 1
        position += header.size
    return patched


def check_follower_offsets(headers: Sequence[BatchHeader], log_end_offset: int, name: str) -> None:
    """A replica's batches keep the leader's offsets: they must start at or after the log end and increase."""
    previous = log_end_offset - 1
    for header in headers:
        if header.base_offset <= previous or header.last_offset < header.base_offset:
            raise UnexpectedAppendOffset(
                f"{name}: batch at offset {header.base_offset} does not follow offset {previous}"
            )
        previous = header.last_offset


def _describe(record: object) -> str:
    key, value = getattr(record, "key", None), getattr(record, "value", None)
    return (f"DefaultRecord(offset={getattr(record, 'offset', -1)}, timestamp={getattr(record, 'timestamp', -1)}, "
            f"key={0 if key is None else len(key)} bytes, value={0 if value is None else len(value)} bytes)")


def _java_long(value: int) -> int:
    """`value` as Java's long arithmetic gives it (Kafka's bounds overflow when a limit is Long.MAX)."""
    return ((value - _LONG_MIN) % (1 << 64)) + _LONG_MIN
