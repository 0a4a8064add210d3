"""Records as the client produces and fetches them, and their v2 record batches."""

from __future__ import annotations

from dataclasses import dataclass, field

from kbroker.clock import wall_clock_ms
from protocol import record_batch

COMPRESSION_CODECS = {c.name.lower(): int(c) for c in record_batch.Compression}
CREATE_TIME, LOG_APPEND_TIME = record_batch.TimestampType


@dataclass
class Record:
    """A record as a client sees it: what to produce, or what a fetch returned."""

    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]] = field(default_factory=list)
    timestamp: int = -1  # -1 when producing: stamped with the current time
    timestamp_type: int = CREATE_TIME
    partition: int = -1
    offset: int = -1


def encode_batch(records: list[Record], compression: int = record_batch.NONE) -> bytes:
    """One RecordBatch v2 holding `records`, stamped now where they carry no timestamp.

    No producer id: the tools' producer is not idempotent, as Kafka's console producer was not.
    """
    if not records:
        raise ValueError("a batch holds at least one record")
    now = wall_clock_ms()
    return record_batch.encode_batch(
        [record_batch.Record(delta, r.timestamp if r.timestamp >= 0 else now, r.key, r.value, list(r.headers))
         for delta, r in enumerate(records)],
        compression=compression,
    )


def decode_batches(data: bytes | memoryview | None, partition: int = -1) -> tuple[list[Record], int | None]:
    """The data records in a fetched record set, and the offset after its last whole batch.

    A fetch may end with a partial batch (cut at the size limit); it is left for the next fetch.
    Control batches (transaction markers) are skipped but still advance the offset.
    """
    records: list[Record] = []
    next_offset = None
    for batch in record_batch.decode_batches(data or b""):
        next_offset = batch.next_offset
        if batch.is_control:
            continue
        records += [Record(r.key, r.value, r.headers, r.timestamp, batch.timestamp_type, partition, r.offset)
                    for r in batch.records]
    return records, next_offset
