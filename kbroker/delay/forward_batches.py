"""Forward batches: how a retry topic's partition records that its due records went elsewhere.

A due record of a retry topic is not delivered to its own partition but to another topic's
(the target, or the dead-letter topic). That is two partitions, often on two brokers, so the
"delivery in the same log" of plain delayed records cannot mark it done. Instead the retry
partition's leader first appends a *forward batch* to the retry partition, naming exactly what
it will append where, and only once that batch is committed appends the records to the target
as an idempotent producer:

- a control batch (like a pending batch: consumers skip it), producer id -1, one record per
  target batch; key: the control key of type `FORWARD_CONTROL_TYPE` (0x4B46, "KF");
- value, version 0: int8 version | int8 route | int64 forward time | int64 producer id |
  int16 producer epoch | int32 base sequence | int32 target partition | int16 n + n bytes
  target topic (UTF-8) | int32 c | c x int64 pending offsets, in the order of the target
  batch's records.

The delay index takes a forward record as the delivery of its pending offsets (so it is
replicated, truncated and reloaded like a delivery). The target batch is a function of the
forward record and the pending records it names, and carries the forward record's producer id,
epoch and sequence, so appending it again is answered as a duplicate by the target partition
(its producer state keeps the last five batches of each producer).

At most one forward batch is unconfirmed (some target batch not acknowledged): a leader writes
the next forward batch only once every target batch of the previous one is acknowledged, so a
forward batch confirms all before it; with nothing more to forward it appends a *done marker*
(control type `FORWARD_DONE_CONTROL_TYPE`, 0x4B44 "KD"; value int8 version | int64 the forward
batch's base offset). A new leader of the retry partition appends the target batches of the
unconfirmed forward batch, if there is one, before forwarding anything else. The done marker is
what keeps an old, long-confirmed batch from being appended again after its producer id was
forgotten by the target partition (which would then take it as new).
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass

from kbroker.delay.pending_batches import control_type
from kbroker.delay.retries import Route
from protocol.record_batch import CorruptRecordError, Record, decode_payload, encode_batch, encode_control_key
from protocol.records import BatchHeader

FORWARD_CONTROL_TYPE = 0x4B46
FORWARD_VALUE_VERSION = 0
FORWARD_CONTROL_KEY = encode_control_key(FORWARD_CONTROL_TYPE)
FORWARD_DONE_CONTROL_TYPE = 0x4B44
FORWARD_DONE_CONTROL_KEY = encode_control_key(FORWARD_DONE_CONTROL_TYPE)
_DONE = struct.Struct(">bq")  # version, the forward batch's base offset
_FIXED = struct.Struct(">bbqqhii")  # version, route, time, producer id, epoch, base sequence, target partition
_SHORT = struct.Struct(">h")
_INT = struct.Struct(">i")


@dataclass(frozen=True, slots=True)
class ForwardRecord:
    """One target batch: pending offsets (in order) appended to a target partition."""

    route: Route
    forward_ms: int  # the time of forwarding: the target records' timestamp
    producer_id: int
    producer_epoch: int
    base_sequence: int
    target_topic: str
    target_partition: int
    pending_offsets: tuple[int, ...]
    offset: int = -1  # of the forward record in the retry partition's log (-1 before)


def encode_forward_value(forward: ForwardRecord) -> bytes:
    topic = forward.target_topic.encode()
    return b"".join((
        _FIXED.pack(FORWARD_VALUE_VERSION, forward.route, forward.forward_ms, forward.producer_id,
                    forward.producer_epoch, forward.base_sequence, forward.target_partition),
        _SHORT.pack(len(topic)), topic,
        _INT.pack(len(forward.pending_offsets)),
        struct.pack(f">{len(forward.pending_offsets)}q", *forward.pending_offsets),
    ))


def decode_forward_value(value: bytes | None, offset: int = -1) -> ForwardRecord:
    """The forward record a control record's value holds; CorruptRecordError if it is not one."""
    try:
        if value is None:
            raise struct.error("null value")
        version, route, forward_ms, producer_id, epoch, sequence, partition = _FIXED.unpack_from(value)
        if version != FORWARD_VALUE_VERSION:
            raise CorruptRecordError(f"forward record at offset {offset} has unknown version {version}")
        pos = _FIXED.size
        (topic_length,) = _SHORT.unpack_from(value, pos)
        topic = bytes(value[pos + _SHORT.size : pos + _SHORT.size + topic_length]).decode()
        pos += _SHORT.size + topic_length
        (count,) = _INT.unpack_from(value, pos)
        pos += _INT.size
        if count < 0 or pos + 8 * count != len(value):
            raise struct.error(f"{count} offsets in {len(value) - pos} bytes")
        offsets = struct.unpack_from(f">{count}q", value, pos)
        return ForwardRecord(Route(route), forward_ms, producer_id, epoch, sequence, topic, partition, offsets,
                             offset)
    except (struct.error, ValueError, UnicodeDecodeError) as e:
        raise CorruptRecordError(f"unreadable forward record at offset {offset}: {e}") from None


def encode_forward_batch(forwards: Sequence[ForwardRecord], *, base_offset: int = 0) -> bytes:
    """The control batch naming `forwards`, one record each."""
    if not forwards:
        raise ValueError("a forward batch needs at least one forward record")
    records = [Record(delta, forward.forward_ms, FORWARD_CONTROL_KEY, encode_forward_value(forward))
               for delta, forward in enumerate(forwards)]
    return encode_batch(records, control=True, base_offset=base_offset)


def is_forward_batch(batch: bytes | bytearray | memoryview, header: BatchHeader) -> bool:
    return control_type(batch, header) == FORWARD_CONTROL_TYPE


def decode_forward_batch(batch: bytes | bytearray | memoryview, header: BatchHeader) -> list[ForwardRecord]:
    return [decode_forward_value(record.value, record.offset) for record in decode_payload(batch, header)]


def encode_forward_done_batch(forward_batch_offset: int, timestamp: int) -> bytes:
    """The done marker: every target batch of the forward batch at `forward_batch_offset` was
    acknowledged."""
    record = Record(0, timestamp, FORWARD_DONE_CONTROL_KEY, _DONE.pack(FORWARD_VALUE_VERSION, forward_batch_offset))
    return encode_batch([record], control=True)


def decode_forward_done(batch: bytes | bytearray | memoryview, header: BatchHeader) -> int | None:
    """The forward batch offset a done marker names; None if it cannot be read (then it confirms
    nothing, and a new leader appends that forward batch's target batches again: harmless)."""
    records = decode_payload(batch, header)
    value = records[0].value if records else None
    if value is None or len(value) != _DONE.size or value[0] != FORWARD_VALUE_VERSION:
        return None
    return _DONE.unpack(value)[1]
