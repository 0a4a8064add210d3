"""One segment of a partition log: a `.log` file of record batches plus its sparse indexes.

Batches are written exactly as the log hands them over (offsets already assigned). Every
`index.interval.bytes` of log the segment adds an offset-index entry (the batch's last offset
-> its file position) and, when the max timestamp grew, a time-index entry, as Kafka does.
Writes use `pwrite` at the segment's own size, never the file position, because `sendfile`
users may move the shared file object's position.

With encryption at rest (kbroker/storage/encryption.py) batches arrive already sealed; every
batch of a segment is written under one key (the log rolls when its key changes), and a
segment holding encrypted batches is read into memory and decrypted rather than sent with
`sendfile`. A batch that fails authentication on a read is recorded as damage, as recovery
records a CRC failure.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import BinaryIO

from kbroker.storage.batch_records import record_timestamp, records_of
from kbroker.storage.batch_scan import RECOVERY_CHUNK, CorruptBatch, pread_exact, scan_batches
from kbroker.storage.damage import DAMAGE_SUFFIX, Damage, DamagedData, read_damage, write_damage
from kbroker.storage.encryption import (
    ENCRYPTED_MAGIC,
    PREFIX_SIZE,
    AuthenticationFailed,
    BatchCipher,
    MissingKey,
    open_stored,
    plain_header,
    plain_size,
    stored_key_id,
)
from kbroker.storage.index import INT32_MAX, OffsetIndex, TimeIndex, segment_file_name
from kbroker.storage.read_results import BatchBytes, Read, ReadResult
from kbroker.storage.txn_index import TransactionIndex
from kbroker.storage.write_behind import pwrite_all
from protocol.records import HEADER_SIZE, NO_TIMESTAMP, BatchHeader, read_header

log = logging.getLogger("kbroker.storage")

DELETED_SUFFIX = ".deleted"


class LogSegment:
    def __init__(
        self,
        directory: Path,
        base_offset: int,
        *,
        index_interval_bytes: int,
        max_index_bytes: int,
        now_ms: int,
        roll_jitter_ms: int = 0,
        fresh: bool = False,
        cipher: BatchCipher | None = None,
    ) -> None:
        self.directory = directory
        self.base_offset = base_offset
        self.index_interval_bytes = index_interval_bytes
        self.roll_jitter_ms = roll_jitter_ms
        self.created_ms = now_ms
        self.log_path = directory / segment_file_name(base_offset, ".log")
        self.file: BinaryIO = open(self.log_path, "w+b" if fresh else "r+b", buffering=0)  # noqa: SIM115
        self.offset_index = OffsetIndex(directory / segment_file_name(base_offset, ".index"), base_offset,
                                        max_index_bytes)
        self.time_index = TimeIndex(directory / segment_file_name(base_offset, ".timeindex"), base_offset,
                                    max_index_bytes)
        self.txn_index = TransactionIndex(directory / segment_file_name(base_offset, ".txnindex"))
        self.damage_path = directory / segment_file_name(base_offset, DAMAGE_SUFFIX)
        if fresh:
            self.offset_index.reset()
            self.time_index.reset()
            self.txn_index.reset()
            self.damage_path.unlink(missing_ok=True)
        self.damage: list[Damage] = [] if fresh else read_damage(self.damage_path)
        self._size = os.fstat(self.file.fileno()).st_size
        self.cipher = cipher
        # The key id of the segment's batches (None: plaintext); `encrypted` once one is seen.
        self.key_id: int | None = None
        self.encrypted = False
        self._reset_state()
        try:
            self._check_key()
        except BaseException:
            self.close()
            raise

    def _check_key(self) -> None:
        """Note how the first batch is stored; refuse a segment whose key is not in the ring."""
        if self._size < HEADER_SIZE + PREFIX_SIZE:
            return
        first = pread_exact(self.fd, HEADER_SIZE + PREFIX_SIZE, 0)
        if len(first) < HEADER_SIZE + PREFIX_SIZE or read_header(first).magic != ENCRYPTED_MAGIC:
            return
        self.encrypted = True
        self.key_id = stored_key_id(first)
        if self.cipher is None:
            raise MissingKey(f"{self.log_path} is encrypted (key id {self.key_id}) but log.encryption.key.file "
                             "is not set")
        if self.key_id not in self.cipher.keyring:
            raise MissingKey(f"{self.log_path} is encrypted with key id {self.key_id}, which "
                             f"{self.cipher.keyring.source} does not hold (it holds {self.cipher.keyring.key_ids})")

    def _reset_state(self) -> None:
        self.next_offset = self.base_offset  # one past the last offset held
        self.max_timestamp = NO_TIMESTAMP
        self.offset_of_max_timestamp = -1  # last offset of the batch that holds max_timestamp
        self._bytes_since_index_entry = 0
        self._first_batch_timestamp: int | None = None

    def __repr__(self) -> str:
        return f"LogSegment({self.log_path}, size={self._size})"

    # -- properties ---------------------------------------------------------------------------

    @property
    def fd(self) -> int:
        return self.file.fileno()

    @property
    def size(self) -> int:
        return self._size

    @property
    def is_empty(self) -> bool:
        return self._size == 0

    @property
    def name(self) -> str:
        return self.log_path.name

    @property
    def largest_timestamp(self) -> int:
        """What retention compares: the max timestamp, or the file's mtime when there is none."""
        if self.max_timestamp >= 0:
            return self.max_timestamp
        return int(os.fstat(self.fd).st_mtime * 1000)

    def first_batch_timestamp(self) -> int:
        if self._first_batch_timestamp is None and self._size >= HEADER_SIZE:
            self._first_batch_timestamp = read_header(pread_exact(self.fd, HEADER_SIZE, 0)).max_timestamp
        return NO_TIMESTAMP if self._first_batch_timestamp is None else self._first_batch_timestamp

    def time_waited_for_roll(self, now_ms: int, message_timestamp: int) -> int:
        """Kafka's measure for segment.ms: record time since the first batch, else wall time."""
        first = self.first_batch_timestamp()
        if first >= 0:
            return message_timestamp - first
        return now_ms - self.created_ms

    def can_hold_offset(self, offset: int) -> bool:
        return 0 <= offset - self.base_offset <= INT32_MAX

    # -- loading --------------------------------------------------------------------------------

    def load(self) -> None:
        """Open a cleanly closed segment: trust its indexes after sanity checks, scan only the tail.

        Raises CorruptIndex (the caller then calls `recover`), also for a segment with recorded
        damage: its batches are verified again on every start.
        """
        if self.damage:
            raise CorruptBatch(self.damage[0].start, f"damage recorded in {self.damage_path.name}")
        self.offset_index.check_against(self._size)
        self._load_tail()
        self.time_index.check_against(self.next_offset)

    def _load_tail(self) -> None:
        self._reset_state()
        timestamp, offset = self.time_index.last_entry()
        if timestamp >= 0:
            self.max_timestamp, self.offset_of_max_timestamp = timestamp, offset
        last_offset, position = self.offset_index.last_entry()
        if self.offset_index.entries:
            self.next_offset = last_offset + 1
        for batch_position, header in scan_batches(self.fd, position, self._size):
            self._note_batch(batch_position, header)
        self._bytes_since_index_entry = self._size - position

    def recover(self, *, is_last: bool) -> tuple[int, int, str | None]:
        """Verify every batch (framing, magic, CRC, offsets) and rebuild the indexes.

        Only a torn tail of the last segment is cut: the bytes from the first bad batch to the
        end, when no sound batch follows them (what a crash mid-write leaves). Anything else that
        fails is kept as it is and recorded as damage (see `Damage`): a bad batch whose length
        is sound is skipped, and when the framing itself is lost the rest of the segment is.
        The aborted-transaction index is emptied too: the log rebuilds it when it replays its
        producer state over this segment. Returns (bytes cut, position of the cut, reason).
        """
        self.offset_index.reset()
        self.time_index.reset()
        self.txn_index.reset()
        self._reset_state()
        # Bytes already found bad while whole (on a read) are no torn write: never cut them.
        known_damage = {d.start for d in self.damage}
        self.damage = []
        valid_end = 0
        position = 0
        reason = None
        while position < self._size:
            try:
                for batch_position, header in scan_batches(self.fd, position, self._size, verify=True,
                                                           chunk_size=RECOVERY_CHUNK, cipher=self.cipher):
                    self._check_offsets(batch_position, header)
                    self._index_batch(batch_position, header)
                    valid_end = position = batch_position + header.size
                break
            except CorruptBatch as e:
                reason = e.reason
                resume = self._skippable_end(e.position)
                if resume is None and is_last and e.position not in known_damage:
                    break  # a torn tail: cut below
                end = self._size if resume is None else resume
                self._note_damage(e.position, end, e.reason)
                if resume is None and e.position in known_damage:
                    self._keep_offsets_of(e.position)
                position = valid_end = end
        cut = self._size - valid_end
        if cut:
            self.file.truncate(valid_end)
            self._size = valid_end
        self._add_final_time_entry()
        self._finish_damage()
        return cut, valid_end, reason

    def _keep_offsets_of(self, position: int) -> None:
        """A kept damaged tail whose framing is sound still holds its offsets: the log end stays
        past them, so new batches never reuse them."""
        try:
            header = read_header(pread_exact(self.fd, HEADER_SIZE, position))
        except Exception:
            return
        if position + header.size <= self._size and self.can_hold_offset(header.last_offset):
            self.next_offset = max(self.next_offset, header.last_offset + 1)

    def _skippable_end(self, position: int) -> int | None:
        """Where the batch at `position` ends, if a sound batch (or the segment's end) follows it."""
        try:
            header = read_header(pread_exact(self.fd, HEADER_SIZE, position))
        except Exception:
            return None
        end = position + header.size
        if header.batch_length < HEADER_SIZE - 12 or end > self._size:
            return None
        if end == self._size:
            return None  # nothing sound after it: a tail
        try:
            next(scan_batches(self.fd, end, self._size, verify=True, chunk_size=RECOVERY_CHUNK, cipher=self.cipher))
        except (CorruptBatch, StopIteration):
            return None
        return end

    def _note_damage(self, start: int, end: int, reason: str) -> None:
        # The offsets the bytes may hold run from after the last sound batch to the next one's
        # base offset, filled in by `_finish_damage` once the whole segment has been read.
        self.damage.append(Damage(start, end, self.next_offset, -1, reason))
        log.error("%s: %d damaged bytes at position %d (%s) are kept but cannot be served; later data is "
                  "unaffected", self.log_path, end - start, start, reason)

    def _finish_damage(self) -> None:
        finished = []
        for damage in self.damage:
            following = self._first_batch_from(damage.end)
            end_offset = following.base_offset if following is not None else -1
            finished.append(Damage(damage.start, damage.end, damage.first_offset, end_offset, damage.reason))
        self.damage = finished
        if finished:
            write_damage(self.damage_path, finished)
        else:
            self.damage_path.unlink(missing_ok=True)

    def _first_batch_from(self, position: int) -> BatchHeader | None:
        for _, header in self.batches(position):
            return header
        return None

    def damage_at(self, offset: int, segment_end_offset: int) -> Damage | None:
        """The damage that may hold `offset`; `segment_end_offset` bounds damage at the segment's end."""
        for damage in self.damage:
            end = damage.end_offset if damage.end_offset >= 0 else segment_end_offset
            if damage.first_offset <= offset < end:
                return damage
        return None

    def _check_offsets(self, position: int, header: BatchHeader) -> None:
        if header.base_offset < self.next_offset or header.last_offset < header.base_offset:
            raise CorruptBatch(position, f"offsets {header.base_offset}..{header.last_offset} out of order")
        if not self.can_hold_offset(header.last_offset):
            raise CorruptBatch(position, f"offset {header.last_offset} does not belong in this segment")

    # -- appending ------------------------------------------------------------------------------

    def append(self, data: bytes | bytearray | memoryview, headers: Sequence[BatchHeader], *,
               written: bool = False) -> None:
        """Write `data`, the batches described by `headers` (offsets assigned), and index them;
        `written`: a writer thread put them at the segment's end already (write_behind.py).

        A write that fails (a full disk) leaves the segment as it was: the bytes that did reach
        the file and the index entries made are taken back.
        """
        start = self._size
        before = (self.next_offset, self.max_timestamp, self.offset_of_max_timestamp,
                  self._bytes_since_index_entry, self._first_batch_timestamp)
        position = start
        if start == 0 and headers[0].magic == ENCRYPTED_MAGIC:
            self.key_id = stored_key_id(data)
        try:
            if not written:
                pwrite_all(self.fd, data, position)
            for header in headers:
                self._index_batch(position, header)
                position += header.size
        except OSError:
            self._undo_append(start, headers[0].base_offset, before)
            raise
        self._size = position

    def take_back(self, start: int) -> None:
        """Cut off what a failed write by a writer thread left past the segment's end."""
        if start == self._size:
            try:
                self.file.truncate(start)
            except OSError as e:
                log.error("%s: could not take back a failed append (%s); recovery will at the next start",
                          self.log_path, e)

    def _undo_append(self, start: int, first_offset: int, before: tuple) -> None:
        (self.next_offset, self.max_timestamp, self.offset_of_max_timestamp, self._bytes_since_index_entry,
         self._first_batch_timestamp) = before
        try:  # shrinking needs no space
            self.file.truncate(start)
            self.offset_index.truncate_to(first_offset)
            self.time_index.truncate_to(first_offset)
        except OSError as e:
            log.error("%s: could not take back a failed append (%s); recovery will at the next start",
                      self.log_path, e)

    def _note_batch(self, position: int, header: BatchHeader) -> None:
        if header.magic == ENCRYPTED_MAGIC:
            self.encrypted = True
        if header.max_timestamp > self.max_timestamp:
            self.max_timestamp = header.max_timestamp
            self.offset_of_max_timestamp = header.last_offset
        if position == 0:
            self._first_batch_timestamp = header.max_timestamp
        self.next_offset = header.last_offset + 1

    def _index_batch(self, position: int, header: BatchHeader) -> None:
        self._note_batch(position, header)
        if self._bytes_since_index_entry > self.index_interval_bytes:
            self.offset_index.append(header.last_offset, position)
            self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)
            self._bytes_since_index_entry = 0
        self._bytes_since_index_entry += header.size

    def _add_final_time_entry(self) -> None:
        # Kafka's rule on roll and recovery: the time index ends with the segment's max timestamp.
        if self.max_timestamp >= 0:
            self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)

    def on_become_inactive(self) -> None:
        self._add_final_time_entry()
        self.offset_index.close_for_writes()
        self.time_index.close_for_writes()

    # -- reading --------------------------------------------------------------------------------

    def batches(self, start_position: int = 0) -> Iterator[tuple[int, BatchHeader]]:
        """(position, header) of each sound batch from `start_position`; damaged bytes are passed over."""
        return scan_batches(self.fd, start_position, self._size, skip=self._skips())

    def _skips(self) -> dict[int, int] | None:
        return {d.start: d.end for d in self.damage if d.end > d.start} if self.damage else None

    def check_readable(self, offset: int, segment_end_offset: int) -> None:
        """Raise CORRUPT_MESSAGE when `offset` may lie in damaged bytes: never serve them silently."""
        damage = self.damage_at(offset, segment_end_offset) if self.damage else None
        if damage is not None:
            raise DamagedData(f"offset {offset} may lie in damaged bytes of {self.log_path.name} at position "
                              f"{damage.start} ({damage.reason})")

    def read_at(self, position: int, size: int) -> bytes:
        """Stored bytes as they are on disk (encrypted batches stay encrypted)."""
        return pread_exact(self.fd, size, position)

    def read_batch(self, position: int, header: BatchHeader) -> tuple[bytes, BatchHeader]:
        """The batch at `position` as it was appended (decrypted), and its header.

        Raises CORRUPT_MESSAGE for a batch that fails authentication (recorded as damage) and
        KAFKA_STORAGE_ERROR for one whose key is missing.
        """
        return self._open(self.read_at(position, header.size), 0, position, header), plain_header(header)

    def read_batches(self, start: int, end: int) -> bytes:
        """The batches in [start, end) as appended (decrypted), concatenated."""
        stored = self.read_at(start, end - start)
        return b"".join(self._open(stored, position - start, position, header)
                        for position, header in scan_batches(self.fd, start, end, skip=self._skips()))

    def _open(self, stored: bytes, at: int, position: int, header: BatchHeader) -> bytes:
        try:
            return open_stored(self.cipher, stored, at, header)
        except AuthenticationFailed as e:
            self._noteread_damage(position, header, str(e))
            raise DamagedData(f"{self.log_path.name}: {e}") from None

    def _noteread_damage(self, position: int, header: BatchHeader, reason: str) -> None:
        """A batch failed authentication on a read: refuse it from now on, and verify it at the next start."""
        if any(d.start == position for d in self.damage):
            return
        log.error("%s: the batch at position %d (offsets %d..%d) failed authentication: it is kept but "
                  "cannot be served", self.log_path, position, header.base_offset, header.last_offset)
        self.damage.append(Damage(position, position + header.size, header.base_offset, header.last_offset + 1,
                                  f"authentication failed: {reason}"))
        write_damage(self.damage_path, self.damage)

    def translate_offset(self, offset: int) -> tuple[int, BatchHeader] | None:
        """The first batch whose last offset is >= `offset`: (position, header)."""
        _, position = self.offset_index.lookup(offset)
        for batch_position, header in self.batches(position):
            if header.last_offset >= offset:
                return batch_position, header
        return None

    def bound_position(self, offset: int) -> int:
        """Where batches with base offset >= `offset` begin, or the end of the segment."""
        found = self.translate_offset(offset)
        if found is None:
            return self._size
        position, header = found
        return position if header.base_offset >= offset else position + header.size

    def read(
        self, start_offset: int, max_size: int, max_position: int | None = None, min_one_batch: bool = True
    ) -> Read | None:
        """Bytes from the batch holding `start_offset` (a whole batch, even from its middle).

        At most `max_size` bytes, unless `min_one_batch` and the first batch alone is larger
        (KIP-74). The slice may end inside a batch, as Kafka's does; clients drop the partial tail.
        """
        found = self.translate_offset(start_offset)
        if found is None:
            return None
        position, header = found
        if max_size < plain_size(header) and not min_one_batch:
            return None  # Kafka sends nothing rather than an incomplete first batch
        limit = self._size if max_position is None else min(max_position, self._size)
        for damage in self.damage:  # the slice ends where damage begins
            if damage.start > position:
                limit = min(limit, damage.start)
        if self.encrypted:
            return self._read_decrypted(position, header, limit, max_size)
        size = min(limit - position, max(max_size, header.size))
        if size <= 0:
            return None
        return ReadResult(self.file, position, size, header.base_offset)

    def _read_decrypted(self, position: int, first: BatchHeader, limit: int, max_size: int) -> BatchBytes | None:
        """Whole batches from `position` before `limit`, decrypted: the first one always, then
        as many as fit in `max_size` (no partial tail: a partial batch cannot be decrypted).
        A batch that fails authentication ends the read, or fails it when it is the first."""
        chosen: list[tuple[int, BatchHeader]] = []
        total = 0
        for batch_position, header in self.batches(position):
            if batch_position + header.size > limit:
                break
            total += plain_size(header)
            if chosen and total > max_size:
                break
            chosen.append((batch_position, header))
        if not chosen:
            return None
        last_position, last = chosen[-1]
        stored = self.read_at(position, last_position + last.size - position)
        parts: list[bytes] = []
        for batch_position, header in chosen:
            try:
                parts.append(self._open(stored, batch_position - position, batch_position, header))
            except DamagedData:
                if not parts:
                    raise
                break
        return BatchBytes(b"".join(parts), first.base_offset)

    def find_offset_by_timestamp(self, timestamp: int, starting_offset: int) -> tuple[int, int] | None:
        """The first record at or after `starting_offset` with timestamp >= `timestamp`: (offset, ts)."""
        _, indexed_offset = self.time_index.lookup(timestamp)
        _, position = self.offset_index.lookup(max(indexed_offset, starting_offset))
        for batch_position, header in self.batches(position):
            if header.max_timestamp < timestamp or header.last_offset < starting_offset:
                continue
            for record in records_of(*self.read_batch(batch_position, header)):
                offset = header.base_offset + record.offset_delta
                record_ts = record_timestamp(header, record)
                if record_ts >= timestamp and offset >= starting_offset:
                    return offset, record_ts
        return None

    def max_timestamp_record(self) -> tuple[int, int] | None:
        """The offset of the (first) record holding the segment's max timestamp, and that timestamp."""
        if self.max_timestamp < 0:
            return None
        found = self.translate_offset(self.offset_of_max_timestamp)
        if found is None:
            return None
        position, header = found
        if not header.log_append_time:
            for record in records_of(*self.read_batch(position, header)):
                if header.base_timestamp + record.timestamp_delta == self.max_timestamp:
                    return header.base_offset + record.offset_delta, self.max_timestamp
        return header.base_offset, self.max_timestamp

    # -- changing -------------------------------------------------------------------------------

    def truncate_to(self, offset: int, now_ms: int) -> int:
        """Drop every batch whose last offset is >= `offset`; returns the bytes removed."""
        found = self.translate_offset(offset)
        if found is None:
            return 0
        position, _ = found
        removed = self._size - position
        self.offset_index.truncate_to(offset)
        self.time_index.truncate_to(offset)
        self.txn_index.truncate_to(offset)
        self.file.truncate(position)
        self._size = position
        if self.damage:
            self.damage = [d for d in self.damage if d.end <= position]
            write_damage(self.damage_path, self.damage) if self.damage else self.damage_path.unlink(missing_ok=True)
        self._load_tail()
        if position == 0:
            self.created_ms = now_ms  # an emptied segment waits for segment.ms afresh
        return removed

    def flush(self) -> None:
        os.fsync(self.fd)
        self.offset_index.flush()
        self.time_index.flush()
        self.txn_index.flush()

    def rename_to_deleted(self) -> None:
        """Mark for deletion; the open file keeps serving reads until `delete_files`."""
        new_log = self.log_path.with_name(self.log_path.name + DELETED_SUFFIX)
        os.replace(self.log_path, new_log)
        self.log_path = new_log
        for index in (self.offset_index, self.time_index):
            index.rename(index.path.with_name(index.path.name + DELETED_SUFFIX))
            index.close()
        self.txn_index.rename(self.txn_index.path.with_name(self.txn_index.path.name + DELETED_SUFFIX))
        if self.damage_path.exists():
            new_damage = self.damage_path.with_name(self.damage_path.name + DELETED_SUFFIX)
            os.replace(self.damage_path, new_damage)
            self.damage_path = new_damage

    def repoint(self, directory: Path) -> None:
        """The segment's directory was renamed: its files keep their names under `directory`."""
        self.directory = directory
        self.log_path = directory / self.log_path.name
        for index in (self.offset_index, self.time_index, self.txn_index):
            index.path = directory / index.path.name
        self.damage_path = directory / self.damage_path.name

    def close(self) -> None:
        self.offset_index.close()
        self.time_index.close()
        self.file.close()

    def delete_files(self) -> None:
        self.close()
        self.log_path.unlink(missing_ok=True)
        self.offset_index.delete()
        self.time_index.delete()
        self.txn_index.delete()
        self.damage_path.unlink(missing_ok=True)
