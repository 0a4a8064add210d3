"""Producer ids: unique across restarts, handed out from blocks persisted before use."""

from __future__ import annotations

import os
from pathlib import Path

BLOCK_SIZE = 1000
FILE_NAME = "producer-id-block"


class ProducerIdManager:
    def __init__(self, directory: Path) -> None:
        self._path = directory / FILE_NAME
        self._next = 0
        self._block_end = 0

    def next_id(self) -> int:
        if self._next >= self._block_end:
            self._claim_block()
        producer_id = self._next
        self._next += 1
        return producer_id

    def _claim_block(self) -> None:
        start = int(self._path.read_text()) if self._path.exists() else 0
        end = start + BLOCK_SIZE
        # Persist the end first: after a crash the next block starts past every id used.
        tmp = self._path.with_suffix(".tmp")
        with open(tmp, "w") as f:
            f.write(str(end))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self._path)
        self._next, self._block_end = start, end
