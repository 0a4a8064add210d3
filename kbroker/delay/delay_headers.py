"""A produced record's due time, from its delay headers and its topic's settings.

Producers ask for a delay with one of two record headers, both decimal ASCII:

- `kbroker.delay.ms`: deliver this many milliseconds after the record's timestamp;
- `kbroker.deliver.at`: deliver at this time, in milliseconds since the epoch.

A topic's `delivery.delay.ms` (default 0: none) delays every record that has neither header.
The rules, chosen to be what a Kafka user would expect of a strict broker-side check:

- A header wins over the topic default, so `kbroker.delay.ms: 0` sends one record at once on a
  delayed topic.
- A record whose due time is not after `now` is not delayed (None): it is appended as usual.
- Values are plain non-negative decimal integers: ASCII digits only, no sign, no spaces, no
  fraction, at most int64. Anything else, a null value, or a negative number is INVALID_RECORD
  naming the header and the value, as Kafka names the field it refuses.
- The same header given twice with different values, or both headers naming different due
  times, is INVALID_RECORD: the broker does not guess which one the producer meant. Repeats
  that agree are accepted (a retrying interceptor may add a header again).
- `delay.max.ms` (default 40 days) bounds how long the broker holds a record: a
  `kbroker.delay.ms` above it, or a due time more than that after `now`, is INVALID_RECORD.
- A record without a timestamp (-1, as very old clients send) is delayed from `now`.

`names_delay_header` is the pre-check, made on the headers the produce validator's record walk
(aiokafka's C iterator) has in hand anyway: a batch none of whose records names a header
starting with `kbroker.d` is never decoded again. A record without headers costs one truth
test; no byte of the batch is searched.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from protocol.errors import ErrorCode, KafkaError
from protocol.record_batch import Header, Record

DELAY_MS_HEADER = "kbroker.delay.ms"
DELIVER_AT_HEADER = "kbroker.deliver.at"
# Added by the broker to a delivered record; named here so the pre-check covers all three.
DELAYED_FROM_HEADER = "kbroker.delayed.from"

DEFAULT_DELAY_MAX_MS = 40 * 24 * 3600 * 1000
NO_TIMESTAMP = -1
_LONG_MAX = (1 << 63) - 1
# The common prefix of the header names.
HEADER_NAME_PREFIX = "kbroker.d"


class DelayHeaderError(KafkaError):
    """A record's delay cannot be honoured: INVALID_RECORD with the reason (and its index)."""

    def __init__(self, message: str, record_index: int = -1) -> None:
        super().__init__(ErrorCode.INVALID_RECORD, message)
        self.record_index = record_index


@dataclass(frozen=True, slots=True)
class DelaySettings:
    """A topic's delay settings: `delivery.delay.ms` and `delay.max.ms`."""

    default_delay_ms: int = 0
    max_delay_ms: int = DEFAULT_DELAY_MAX_MS


def names_delay_header(headers: Sequence[Header]) -> bool:
    """Whether a record's headers name one of the delay headers (or `kbroker.delayed.from`): the
    per-record pre-check, on the headers the validator's record walk has decoded anyway. A record
    without headers, nearly every one, costs one truth test."""
    return any(name.startswith(HEADER_NAME_PREFIX) for name, _ in headers)


def due_time(headers: Sequence[Header], timestamp_ms: int, now_ms: int,
             settings: DelaySettings = DelaySettings()) -> int | None:
    """When the record is due, or None when it is not delayed. Raises DelayHeaderError."""
    base_ms = now_ms if timestamp_ms == NO_TIMESTAMP else timestamp_ms
    delay_ms = header_value(headers, DELAY_MS_HEADER)
    deliver_at = header_value(headers, DELIVER_AT_HEADER)
    if delay_ms is not None and delay_ms > settings.max_delay_ms:
        raise DelayHeaderError(
            f"{DELAY_MS_HEADER} {delay_ms} is beyond the topic's delay.max.ms {settings.max_delay_ms}")
    if delay_ms is not None and deliver_at is not None and base_ms + delay_ms != deliver_at:
        raise DelayHeaderError(
            f"{DELAY_MS_HEADER} {delay_ms} after the record's timestamp {base_ms} is {base_ms + delay_ms}, "
            f"but {DELIVER_AT_HEADER} is {deliver_at}: give one of them, or both agreeing")
    if deliver_at is not None:
        due_ms = deliver_at
    elif delay_ms is not None:
        due_ms = base_ms + delay_ms
    elif settings.default_delay_ms > 0:
        due_ms = base_ms + settings.default_delay_ms
    else:
        return None
    if due_ms <= now_ms:
        return None
    if due_ms - now_ms > settings.max_delay_ms:
        raise DelayHeaderError(
            f"the record is due at {due_ms}, {due_ms - now_ms} ms from now, beyond the topic's "
            f"delay.max.ms {settings.max_delay_ms}")
    return due_ms


def batch_due_times(records: Sequence[Record], now_ms: int,
                    settings: DelaySettings = DelaySettings()) -> list[int | None] | None:
    """Each record's due time (None: not delayed), or None when no record of the batch is delayed.

    A refused record raises DelayHeaderError carrying its index in the batch, for KIP-467's
    record errors; Kafka refuses the whole batch then, and so does the produce path.
    """
    dues: list[int | None] = []
    for index, record in enumerate(records):
        try:
            dues.append(due_time(record.headers, record.timestamp, now_ms, settings))
        except DelayHeaderError as e:
            raise DelayHeaderError(e.message or "", index) from None
    return dues if any(due is not None for due in dues) else None


def header_value(headers: Sequence[Header], name: str) -> int | None:
    """The value of header `name` as a non-negative int64, None if absent; refuses a malformed one."""
    found: int | None = None
    for key, raw in headers:
        if key != name:
            continue
        value = _parse_decimal(name, raw)
        if found is not None and value != found:
            raise DelayHeaderError(f"{name} is given twice with different values, {found} and {value}")
        found = value
    return found


def _parse_decimal(name: str, raw: bytes | None) -> int:
    if raw is None:
        raise DelayHeaderError(f"{name} has a null value; it must be a decimal number of milliseconds")
    shown = raw[:40].decode("ascii", "backslashreplace")
    if raw[:1] == b"-" and raw[1:].isdigit():
        raise DelayHeaderError(f"{name} {shown!r} is negative; it must be >= 0")
    # bytes.isdigit is ASCII-only: "١٢" or "+5" or " 5" are refused here.
    if not raw.isdigit() or len(raw) > 19 or int(raw) > _LONG_MAX:
        raise DelayHeaderError(
            f"{name} {shown!r} is not a decimal number of milliseconds (ASCII digits, at most int64)")
    return int(raw)
