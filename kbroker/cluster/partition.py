"""A partition replica hosted by this broker, and the waiters woken when it grows."""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass, field

from kbroker.storage.log import AppendInfo, Log
from kbroker.storage.producer_state import AppendOrigin
from protocol.errors import ErrorCode, KafkaError


@dataclass(eq=False)
class Partition:
    topic: str
    index: int
    topic_id: uuid.UUID
    log: Log
    leader_id: int
    leader_epoch: int = 0
    replicas: list[int] = field(default_factory=list)
    isr: list[int] = field(default_factory=list)
    _waiters: set[asyncio.Future[None]] = field(default_factory=set)

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.index}"

    @property
    def high_watermark(self) -> int:
        return self.log.high_watermark

    @property
    def last_stable_offset(self) -> int:
        """Below it every transaction is decided: what read_committed consumers may see."""
        return self.log.last_stable_offset

    @property
    def log_start_offset(self) -> int:
        return self.log.log_start_offset

    @property
    def log_end_offset(self) -> int:
        return self.log.log_end_offset

    def append_as_leader(self, records: bytes, now_ms: int, origin: AppendOrigin = AppendOrigin.CLIENT) -> AppendInfo:
        info = self.log.append_as_leader(records, self.leader_epoch, now_ms, origin=origin)
        # One replica: everything appended is replicated, so the HW follows the log end.
        self.log.high_watermark = self.log.log_end_offset
        self.wake_waiters()
        return info

    def delete_records(self, before_offset: int) -> int:
        """DeleteRecords: move the log start offset up (-1: to the high watermark); returns it."""
        return self.log.delete_records_before(before_offset)

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """OffsetForLeaderEpoch: the largest epoch <= `epoch` this log knows, and where it ends."""
        return self.log.end_offset_for_epoch(epoch)

    def check_leader_epoch(self, current_leader_epoch: int) -> None:
        """Validate a client's view of the leader epoch (-1 means it does not know)."""
        if current_leader_epoch < 0 or current_leader_epoch == self.leader_epoch:
            return
        if current_leader_epoch < self.leader_epoch:
            raise KafkaError(ErrorCode.FENCED_LEADER_EPOCH)
        raise KafkaError(ErrorCode.UNKNOWN_LEADER_EPOCH)

    def add_waiter(self, waiter: asyncio.Future[None]) -> None:
        self._waiters.add(waiter)

    def remove_waiter(self, waiter: asyncio.Future[None]) -> None:
        self._waiters.discard(waiter)

    def wake_waiters(self) -> None:
        if not self._waiters:
            return
        for waiter in self._waiters:
            if not waiter.done():
                waiter.set_result(None)
        self._waiters.clear()
