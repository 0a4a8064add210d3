"""Retry topics (docs/delayed-and-retry.md): the attempt rules and the records the broker forwards.

A retry topic is a topic with `retry.target.topic`. A consumer that failed to process a record
produces it there, headers and all. The record's own `kbroker.attempt` header says how many
attempts it has had (none: 0), so attempt n = that + 1:

- n <= len(retry.backoff.ms): the record waits `retry.backoff.ms[n - 1]` from its append and is
  then appended to the target topic with `kbroker.attempt: n`;
- otherwise its attempts are used up: it goes at once to `retry.dead.letter.topic`, with
  `kbroker.dead.reason`; without one, the produce is refused (INVALID_RECORD), so the consumer
  learns it is out of retries instead of the record vanishing.

Every record of a retry topic is held (a pending record, like a delayed one), whatever its
delay headers say: the backoff decides. Forwarded records lose the delay headers (they have
done their work; left in, a target topic would delay the record again) and get the
`kbroker.original.*` headers naming the first place the broker held them, unless they carry
them already (a consumer that forwards headers keeps the first ones through every attempt).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import IntEnum

from kbroker.delay.delay_headers import (
    DELAY_MS_HEADER,
    DELAYED_FROM_HEADER,
    DELIVER_AT_HEADER,
    DelayHeaderError,
    header_value,
)
from kbroker.delay.pending_batches import PendingRecord
from kbroker.partitioner import partition_for_key
from protocol.record_batch import Header, Record

ATTEMPT_HEADER = "kbroker.attempt"
DEAD_REASON_HEADER = "kbroker.dead.reason"
ORIGINAL_TOPIC_HEADER = "kbroker.original.topic"
ORIGINAL_PARTITION_HEADER = "kbroker.original.partition"
ORIGINAL_OFFSET_HEADER = "kbroker.original.offset"
# Headers the broker sets on a forwarded record, or that would act on it again at its target.
_REPLACED = frozenset({DELAY_MS_HEADER, DELIVER_AT_HEADER, DELAYED_FROM_HEADER, ATTEMPT_HEADER,
                       DEAD_REASON_HEADER})
_ORIGINAL = (ORIGINAL_TOPIC_HEADER, ORIGINAL_PARTITION_HEADER, ORIGINAL_OFFSET_HEADER)


class Route(IntEnum):
    """Where a due record of a retry topic goes, and why."""

    TARGET = 0
    EXHAUSTED = 1  # to the dead-letter topic: its attempts are used up
    NO_TARGET = 2  # to the dead-letter topic: the target topic is gone
    REFUSED = 3  # to the dead-letter topic: the target topic refused it for good

    @property
    def to_dead_letters(self) -> bool:
        return self is not Route.TARGET


@dataclass(frozen=True, slots=True)
class RetrySettings:
    """A retry topic's settings: `retry.backoff.ms` and whether it has a dead-letter topic."""

    backoffs_ms: tuple[int, ...]
    has_dead_letter_topic: bool


def attempts_made(headers: Sequence[Header]) -> int:
    """The attempts a record has had, from its `kbroker.attempt` header (absent: 0).
    Raises DelayHeaderError for a value that is not a decimal number, or two that differ."""
    return header_value(headers, ATTEMPT_HEADER) or 0


def route_of(headers: Sequence[Header], backoffs: int) -> tuple[Route, int]:
    """(where the record goes, the attempt number it is on) with `backoffs` attempts configured."""
    attempt = attempts_made(headers) + 1
    return (Route.TARGET, attempt) if attempt <= backoffs else (Route.EXHAUSTED, attempt - 1)


def retry_due_times(records: Sequence[Record], now_ms: int, settings: RetrySettings) -> list[int]:
    """Each record's due time on a retry topic: its attempt's backoff from now, or now when its
    attempts are used up. Raises DelayHeaderError (with the record's index) for a bad attempt
    header, or a used-up record on a topic without a dead-letter topic."""
    dues = []
    for index, record in enumerate(records):
        try:
            route, attempt = route_of(record.headers, len(settings.backoffs_ms))
        except DelayHeaderError as e:
            raise DelayHeaderError(e.message or "", index) from None
        if route is Route.EXHAUSTED and not settings.has_dead_letter_topic:
            raise DelayHeaderError(
                f"the record has had {attempt} attempts, all that retry.backoff.ms allows, and the retry topic "
                "has no retry.dead.letter.topic", index)
        dues.append(now_ms + settings.backoffs_ms[attempt - 1] if route is Route.TARGET else now_ms)
    return dues


def target_partition(record: PendingRecord, source_partition: int, partitions: int) -> int:
    """The target topic's partition for a forwarded record: by its key as Kafka's default
    partitioner picks it; a keyless record keeps its original partition if it names one that
    exists, else takes the retry partition's number (mod the partition count)."""
    if record.key is not None:
        return partition_for_key(record.key, partitions)
    original = _header(record.headers, ORIGINAL_PARTITION_HEADER)
    if original is not None and original.isdigit() and int(original) < partitions:
        return int(original)
    return source_partition % partitions


def forwarded_record(record: PendingRecord, *, offset_delta: int, timestamp: int, route: Route, attempt: int,
                     source_topic: str, source_partition: int) -> Record:
    """The record appended to the target (or dead-letter) topic for pending `record`."""
    headers = [(name, value) for name, value in record.headers if name not in _REPLACED]
    if not any(name in _ORIGINAL for name, _ in headers):
        headers += [(ORIGINAL_TOPIC_HEADER, source_topic.encode()),
                    (ORIGINAL_PARTITION_HEADER, str(source_partition).encode()),
                    (ORIGINAL_OFFSET_HEADER, str(record.offset).encode())]
    headers.append((ATTEMPT_HEADER, str(attempt).encode()))
    if route is Route.EXHAUSTED:
        headers.append((DEAD_REASON_HEADER, f"retries exhausted: {attempt} attempts made, all that "
                        f"{source_topic}'s retry.backoff.ms allows".encode()))
    elif route is Route.NO_TARGET:
        headers.append((DEAD_REASON_HEADER, f"the retry target topic of {source_topic} does not exist".encode()))
    elif route is Route.REFUSED:
        headers.append((DEAD_REASON_HEADER, f"the retry target topic of {source_topic} refused the record (too "
                        "large for it, or keyless on a compacted topic)".encode()))
    return Record(offset_delta, timestamp, record.key, record.value, headers)


def _header(headers: Sequence[Header], name: str) -> bytes | None:
    for key, value in headers:
        if key == name:
            return value
    return None
