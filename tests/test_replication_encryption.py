"""Replication between two real brokers that encrypt at rest, each with its own key: followers
fetch the leader's decrypted batches and store them sealed with their own key, so both serve the
same bytes while their files differ; a returning replica's truncation works on encrypted logs."""

from __future__ import annotations

import asyncio
import base64
from contextlib import AbstractAsyncContextManager
from pathlib import Path

from kbroker.broker import Broker
from kbroker.clock import wall_clock_ms
from kbroker.cluster.partition import Partition
from protocol.errors import ErrorCode
from tests.test_replication import batch, follow, lead, log_bytes, two_brokers, until


def two_encrypting_brokers(tmp_path: Path) -> AbstractAsyncContextManager[tuple[Broker, Broker]]:
    """Two brokers, each with a key of its own (ids 5 and 6)."""
    def own_key(broker_id: int) -> list[str]:
        key_file = tmp_path / f"keys-{broker_id}"
        key_file.write_text(f"{broker_id + 5}:{base64.b64encode(bytes([broker_id + 1]) * 32).decode()}\n")
        return [f"log.encryption.key.file={key_file}"]
    return two_brokers(tmp_path, own_key)


def served(partition: Partition) -> bytes:
    """What the replica's log serves from offset 0 (decrypted)."""
    read = partition.log.read(0, 1 << 20)
    return b"" if read is None else read.read_bytes()


def files_holding(root: Path, pattern: bytes) -> list[Path]:
    return [path for path in root.rglob("*") if path.is_file() and pattern in path.read_bytes()]


def test_followers_store_what_they_fetch_sealed_with_their_own_key(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with two_encrypting_brokers(tmp_path) as (a, b):
            leader, follower = lead(a, 1, [0, 1]), follow(b, 0, 1)
            info = leader.append_as_leader(batch(b"secret-1", b"secret-2"), wall_clock_ms(), required_acks=-1)
            assert await leader.wait_for_replication(info.last_offset + 1, 10) == ErrorCode.NO_ERROR
            assert follower.log_end_offset == 2
            assert served(follower) == served(leader)  # same batches, offsets and epochs
            assert log_bytes(follower) != log_bytes(leader)  # each sealed under its own key and nonces
            assert [s.key_id for s in leader.log.segments] == [5] and [s.key_id for s in follower.log.segments] == [6]
            await b.replicas.stop()
            leader.append_as_leader(batch(b"secret-lost"), wall_clock_ms(), required_acks=1)  # never replicated

            new_leader = lead(b, 2, [1])
            new_leader.append_as_leader(batch(b"secret-3"), wall_clock_ms(), required_acks=1)
            returning = follow(a, 1, 2)
            await until(lambda: returning.log_end_offset == 3 and returning.log.latest_epoch == 2)
            assert served(returning) == served(new_leader)  # the divergent tail is gone
            assert not files_holding(tmp_path / "0", b"secret") and not files_holding(tmp_path / "1", b"secret")

    asyncio.run(asyncio.wait_for(scenario(), 60))
