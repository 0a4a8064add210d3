"""Producer ids: unique across restarts, handed out from blocks persisted before use."""

from __future__ import annotations

from pathlib import Path

from kbroker.fsutil import write_atomically

BLOCK_SIZE = 1000
FILE_NAME = "producer-id-block"
NAMESPACE_SHIFT = 40  # a broker's ids: its id above bit 40, so 2**40 ids per broker


class ProducerIdManager:
    def __init__(self, directory: Path, namespace: int = 0) -> None:
        self._path = directory / FILE_NAME
        self._base = namespace << NAMESPACE_SHIFT
        self._next = 0
        self._block_end = 0

    def next_id(self) -> int:
        if self._next >= self._block_end:
            self._claim_block()
        producer_id = self._next
        self._next += 1
        return self._base + producer_id

    def _claim_block(self) -> None:
        start = int(self._path.read_text()) if self._path.exists() else 0
        end = start + BLOCK_SIZE
        # Persist the end first: after a crash the next block starts past every id used.
        write_atomically(self._path, str(end))
        self._next, self._block_end = start, end
