"""What a read of a log returns: a slice of a segment file (sent with `sendfile` when large),
or decrypted batches in memory (encryption at rest)."""

from __future__ import annotations

import errno
from dataclasses import dataclass
from typing import BinaryIO

from kbroker.storage.batch_scan import pread_exact


@dataclass(frozen=True, slots=True)
class FileSlice:
    """A byte range of a segment file, for `os.sendfile` or `read_bytes()`.

    `file` belongs to the segment; it stays open for `file.delete.delay.ms` after the
    segment is deleted, so a slice in flight can still be sent.
    """

    file: BinaryIO
    position: int
    size: int

    def read_bytes(self) -> bytes:
        data = pread_exact(self.file.fileno(), self.size, self.position)
        if len(data) != self.size:
            raise OSError(errno.EIO, f"segment shrank under a read ({len(data)} of {self.size} bytes)")
        return data


@dataclass(frozen=True, slots=True)
class ReadResult(FileSlice):
    """What a log read returns: the slice to send, and the base offset of its first batch."""

    first_offset: int


@dataclass(frozen=True, slots=True)
class BatchBytes:
    """What a read of encrypted batches returns: the decrypted batches, whole, in memory.

    It has no `file`, so the connection writes it rather than using `sendfile`.
    """

    data: bytes
    first_offset: int

    @property
    def size(self) -> int:
        return len(self.data)

    def read_bytes(self) -> bytes:
        return self.data


Read = ReadResult | BatchBytes
