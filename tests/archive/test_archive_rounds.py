"""An archiving round (kbroker/archive/archiver.py) over several partitions: they are archived
side by side, `remote.log.manager.copier.thread.pool.size` at a time, their uploads on the copier
threads; real logs, the embedded metadata store and moto's S3 server."""

from __future__ import annotations

import asyncio
import threading
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from kbroker.archive.archiver import Archiver, ArchiveSettings, archive_key
from kbroker.archive.object_store import ObjectStore
from kbroker.cluster.store_writer import StoreWriter
from kbroker.metadata.local_store import LocalMetadataStore
from kbroker.s3_server import S3Server
from kbroker.storage.log import Log
from kbroker.storage.log_config import LogConfig
from tests.archive.conftest import new_bucket_name, store_config
from tests.storage.batches import Rec, batch

ONE = len(batch([Rec(b"k", b"r" * 100)]))
T0 = 1_700_000_000_000


@dataclass
class Hosted:
    log: Log
    index: int
    topic: str = "t"
    topic_id: uuid.UUID = field(default_factory=lambda: uuid.UUID(int=7))
    leader_epoch: int = 0
    is_leader: bool = True


class PairedUploads(ObjectStore):
    """The real store, whose `.log` uploads wait for one another in pairs: a round that copied one
    partition at a time would never pair them (the barrier breaks after its timeout)."""

    def __init__(self, *args: object) -> None:
        super().__init__(*args)  # type: ignore[arg-type]
        self.pairs = threading.Barrier(2, timeout=20)
        self.lock = threading.Lock()
        self.in_flight = self.most = 0
        self.threads: set[str] = set()

    def put_file(self, key: str, path: Path, start: int = 0) -> None:
        if key.endswith(".log"):
            with self.lock:
                self.in_flight += 1
                self.most = max(self.most, self.in_flight)
                self.threads.add(threading.current_thread().name)
            self.pairs.wait()
        try:
            super().put_file(key, path, start)
        finally:
            if key.endswith(".log"):
                with self.lock:
                    self.in_flight -= 1


def two_segments(directory: Path) -> Log:
    """[0..4] closed, [5] active."""
    log = Log(directory, LogConfig(segment_bytes=ONE * 5, remote_storage_enable=True), clock=lambda: T0,
              archiving=True)
    for _ in range(6):
        log.append_as_leader(batch([Rec(b"k", b"r" * 100, T0)]), 0, T0)
    log.high_watermark = log.log_end_offset
    return log


def test_a_round_archives_partitions_side_by_side_within_the_pool(s3_server: S3Server, tmp_path: Path) -> None:
    bucket = new_bucket_name()
    store = PairedUploads(store_config(s3_server.endpoint, bucket))
    store.ensure_bucket()
    hosted = [Hosted(two_segments(tmp_path / f"t-{i}"), i) for i in range(4)]
    metadata = LocalMetadataStore(tmp_path)
    archiver = Archiver(ArchiveSettings(copier_threads=2), store, metadata, StoreWriter(threaded=False),
                        lambda: iter(hosted), tmp_path / "cache", clock=lambda: T0)

    async def one_round() -> None:
        try:
            await archiver.round()
        finally:
            await archiver.stop()

    try:
        asyncio.run(one_round())
        assert store.most == 2  # two at once, never more
        assert store.threads and all(name.startswith("archive-copy") for name in store.threads)
        for partition in hosted:
            document, _ = metadata.get_remote_log(archive_key("t", uuid.UUID(int=7)), partition.index)
            assert document is not None
            assert [(s["base_offset"], s["end_offset"], s["state"]) for s in document["segments"]] == [
                (0, 4, "COPY_SEGMENT_FINISHED")]
            assert partition.log.highest_offset_in_remote == 4
    finally:
        for partition in hosted:
            partition.log.release()
