"""Whether a log dir takes writes and serves reads, and what a failed disk operation does to it.

Kafka takes a log dir offline at its first I/O error and serves nothing from it until a
restart. kbroker tells two cases apart:

- FULL (ENOSPC, EDQUOT): writes fail, reads do not. Appends to the dir's partitions answer
  KAFKA_STORAGE_ERROR at once (never a dropped connection or a hang), reads go on, and every few
  seconds a probe writes a small file there: once it succeeds (an operator freed space) the dir
  is ONLINE again.
- OFFLINE (EIO, EROFS and other errors): neither; reads and writes answer KAFKA_STORAGE_ERROR
  until a restart, as in Kafka.

Running out of file descriptors (EMFILE, ENFILE) says nothing about the disk: the request that
hit it gets KAFKA_STORAGE_ERROR and the dir keeps its state.
"""

from __future__ import annotations

import contextlib
import enum
import errno
import logging
import os
from collections.abc import Callable
from pathlib import Path

from protocol.errors import ErrorCode, KafkaError

log = logging.getLogger("kbroker.storage")

PROBE_FILE = ".kbroker-write-probe"
PROBE_BYTES = 256 * 1024  # what an append needs to succeed, roughly: a few batches and their index entries
_SPACE_ERRORS = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)
_DESCRIPTOR_ERRORS = (errno.EMFILE, errno.ENFILE)


class DirState(enum.Enum):
    ONLINE = "online"
    FULL = "full"
    OFFLINE = "offline"


class KafkaStorageError(KafkaError):
    def __init__(self, message: str) -> None:
        super().__init__(ErrorCode.KAFKA_STORAGE_ERROR, message)


class LogDirHealth:
    def __init__(self, path: Path, on_change: Callable[[LogDirHealth], None] | None = None) -> None:
        self.path = path
        self.state = DirState.ONLINE
        self.reason = ""
        self.on_change = on_change
        self.failures = 0  # I/O errors seen, for operators (and metrics)

    @property
    def writable(self) -> bool:
        return self.state is DirState.ONLINE

    @property
    def readable(self) -> bool:
        return self.state is not DirState.OFFLINE

    def check_writable(self, what: str) -> None:
        if self.state is not DirState.ONLINE:
            raise KafkaStorageError(f"cannot write {what}: log dir {self.path} is {self.state.value} ({self.reason})")

    def check_readable(self, what: str) -> None:
        if self.state is DirState.OFFLINE:
            raise KafkaStorageError(f"cannot read {what}: log dir {self.path} is offline ({self.reason})")

    def failed(self, error: OSError, what: str) -> KafkaStorageError:
        """Record an I/O error of `what`; returns the error to answer the request with."""
        self.failures += 1
        if error.errno in _DESCRIPTOR_ERRORS:
            return KafkaStorageError(f"{what}: out of file descriptors ({error.strerror})")
        new_state = DirState.FULL if error.errno in _SPACE_ERRORS else DirState.OFFLINE
        if self.state is DirState.ONLINE or (self.state is DirState.FULL and new_state is DirState.OFFLINE):
            self._become(new_state, f"{what}: {error.strerror or error}")
        return KafkaStorageError(f"{what}: {error.strerror or error} (log dir {self.path} is {self.state.value})")

    def probe(self) -> bool:
        """For a FULL dir: try a write; True (and ONLINE again) if there is room now."""
        if self.state is not DirState.FULL:
            return self.state is DirState.ONLINE
        probe = self.path / PROBE_FILE
        try:
            fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                os.write(fd, bytes(PROBE_BYTES))
                os.fsync(fd)
            finally:
                os.close(fd)
        except OSError:
            return False
        finally:
            with contextlib.suppress(OSError):
                probe.unlink()
        self._become(DirState.ONLINE, "")
        return True

    def _become(self, state: DirState, reason: str) -> None:
        previous, self.state, self.reason = self.state, state, reason
        if state is DirState.ONLINE:
            log.warning("log dir %s is writable again (it was %s)", self.path, previous.value)
        else:
            log.error("log dir %s is now %s: %s; its partitions answer KAFKA_STORAGE_ERROR to %s",
                      self.path, state.value, reason, "writes" if state is DirState.FULL else "reads and writes")
        if self.on_change is not None:
            self.on_change(self)

