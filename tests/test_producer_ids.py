"""Producer id blocks: persisted durably before any id of the block is handed out."""

from __future__ import annotations

from pathlib import Path

import pytest

from kbroker.cluster.producer_ids import BLOCK_SIZE, FILE_NAME, ProducerIdManager
from tests.fsyncs import record_syncs


def test_ids_continue_after_a_restart_past_every_id_handed_out(tmp_path: Path) -> None:
    first = ProducerIdManager(tmp_path)
    used = [first.next_id() for _ in range(3)]
    assert ProducerIdManager(tmp_path).next_id() == BLOCK_SIZE > max(used)


def test_a_claimed_block_is_on_disk_before_its_first_id(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A claim lost in a power cut would hand the same ids out again after the restart: the rename
    # of the block file must be made durable by fsyncing its directory.
    directory = tmp_path.resolve()
    syncs = record_syncs(monkeypatch)
    ProducerIdManager(directory).next_id()
    assert syncs.index("fsync", directory) > syncs.index("replace", directory / FILE_NAME)
