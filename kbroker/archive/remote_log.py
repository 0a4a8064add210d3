"""What the archive holds of one partition: its remote log metadata (Kafka's
RemoteLogSegmentMetadata, kept in `__remote_log_metadata`; here one document per partition in
the metadata store, written with compare-and-set).

A segment goes through Kafka's states: COPY_STARTED before its upload (so a leader that dies
mid-upload leaves a record of what to clean), COPY_FINISHED once every file is in the object
store (only these are read and count as archived), DELETE_STARTED before the archive's retention
removes its objects. The document also carries the highest leader epoch that wrote it: a
leader of an older epoch that finds a newer one has lost the partition and stops (fencing, on
top of the compare-and-set).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

COPY_STARTED = "COPY_SEGMENT_STARTED"
COPY_FINISHED = "COPY_SEGMENT_FINISHED"
DELETE_STARTED = "DELETE_SEGMENT_STARTED"
STATES = (COPY_STARTED, COPY_FINISHED, DELETE_STARTED)

# The files uploaded with a segment, by suffix: the records, their offset and time indexes, the
# aborted transactions (empty when none), the producer state at the segment's end (empty when
# the broker had no snapshot there) and the leader epochs the segment spans.
LOG, OFFSET_INDEX, TIME_INDEX, TXN_INDEX, PRODUCER_SNAPSHOT, LEADER_EPOCHS = (
    ".log", ".index", ".timeindex", ".txnindex", ".snapshot", ".epochs")
SEGMENT_FILES = (LOG, OFFSET_INDEX, TIME_INDEX, TXN_INDEX, PRODUCER_SNAPSHOT, LEADER_EPOCHS)
FORMAT = 1


@dataclass(frozen=True, slots=True)
class RemoteSegment:
    id: str  # unique per upload: two uploads of one offset range never share objects
    base_offset: int
    end_offset: int  # the last offset it holds
    state: str
    leader_epoch: int  # of the leader that uploaded it
    size: int = 0  # bytes of its .log
    max_timestamp: int = -1
    # Whether its .txnindex holds aborted transactions: reads skip fetching the empty ones
    # (Kafka's txnIdxEmpty). None: not known.
    has_aborted: bool | None = None

    def object_key(self, topic: str, partition: int, suffix: str) -> str:
        return f"{topic}-{partition}/{self.base_offset:020d}-{self.id}{suffix}"

    def object_keys(self, topic: str, partition: int) -> list[str]:
        return [self.object_key(topic, partition, suffix) for suffix in SEGMENT_FILES]

    def to_document(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_document(cls, document: dict[str, Any]) -> RemoteSegment:
        segment = cls(**{field.name: document[field.name] for field in dataclasses.fields(cls)
                         if field.name in document})
        if segment.state not in STATES:
            raise ValueError(f"unknown remote segment state {segment.state!r}")
        return segment


@dataclass(frozen=True, slots=True)
class RemoteLog:
    """One partition's archived segments, by base offset, as of `version` of its document."""

    topic: str
    partition: int
    segments: tuple[RemoteSegment, ...] = ()
    leader_epoch: int = -1
    version: int = -1  # -1: no document yet

    @property
    def finished(self) -> list[RemoteSegment]:
        return [s for s in self.segments if s.state == COPY_FINISHED]

    @property
    def highest_offset(self) -> int:
        """The last offset archived (-1 when none): Kafka's highestOffsetInRemoteStorage."""
        return max((s.end_offset for s in self.finished), default=-1)

    @property
    def earliest_offset(self) -> int | None:
        finished = self.finished
        return min(s.base_offset for s in finished) if finished else None

    @property
    def size(self) -> int:
        return sum(s.size for s in self.finished)

    def segment_for(self, offset: int) -> RemoteSegment | None:
        """The finished segment holding `offset`, if any."""
        for segment in self.finished:
            if segment.base_offset <= offset <= segment.end_offset:
                return segment
        return None

    def with_segments(self, segments: list[RemoteSegment] | tuple[RemoteSegment, ...],
                      leader_epoch: int) -> RemoteLog:
        ordered = tuple(sorted(segments, key=lambda s: (s.base_offset, s.id)))
        return dataclasses.replace(self, segments=ordered, leader_epoch=max(self.leader_epoch, leader_epoch))

    def to_document(self) -> dict[str, Any]:
        return {"format": FORMAT, "leader_epoch": self.leader_epoch,
                "segments": [s.to_document() for s in self.segments]}

    @classmethod
    def from_document(cls, topic: str, partition: int, document: dict[str, Any] | None, version: int) -> RemoteLog:
        if document is None:
            return cls(topic, partition, version=-1)
        segments = tuple(RemoteSegment.from_document(s) for s in document.get("segments", []))
        return cls(topic, partition, segments, int(document.get("leader_epoch", -1)), version)
