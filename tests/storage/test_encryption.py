"""Encryption at rest: the stored format, nonces, tamper detection, key rotation, mixed logs,
and the storage features that read records (compaction, timestamps, transactions, moves)."""

from __future__ import annotations

import asyncio
import base64
import os
import struct
from pathlib import Path

import pytest

from kbroker.config import BrokerConfig, ConfigError
from kbroker.storage import encryption
from kbroker.storage.cleaner import compact
from kbroker.storage.encryption import (
    ENCRYPTED_MAGIC,
    HEADER_SIZE,
    OVERHEAD,
    AuthenticationFailed,
    BatchCipher,
    KeyFileError,
    Keyring,
    MissingKey,
    NonceSequence,
    load_key_file,
    parse_key_file,
)
from kbroker.storage.log import Log
from kbroker.storage.log_config import LogConfig
from kbroker.storage.log_manager import LogManager
from kbroker.storage.log_mover import LogDirMover
from kbroker.storage.read_results import BatchBytes, ReadResult
from protocol.errors import ErrorCode, KafkaError
from protocol.records import read_header
from tests.storage.batches import GZIP, Rec, batch, header_fields
from tests.storage.conftest import T0, Clock, OpenLog, read_all

CONFIG = LogConfig(segment_bytes=3000, index_interval_bytes=200)
KEY_1 = bytes(range(32))
KEY_2 = bytes(range(100, 132))


def ring(*ids: int) -> Keyring:
    keys = {1: KEY_1, 2: KEY_2}
    return Keyring([(key_id, keys[key_id]) for key_id in ids])


def payload(i: int) -> bytes:
    return f"secret-payload-{i:05d}-".encode() * 3


def fill(log: Log, count: int, start: int = 0, compression: int = 0) -> list[bytes]:
    """Append `count` batches of 3 records; returns the values written, in offset order."""
    values = []
    for i in range(start, start + count):
        records = [Rec(f"key-{i}-{j}".encode(), payload(i) + bytes([j]), T0 + i) for j in range(3)]
        log.append_as_leader(batch(records, compression=compression), 0, T0)
        values.extend(r.value for r in records)
    log.high_watermark = log.log_end_offset
    return values


def stored_batches(path: Path) -> list[tuple[int, bytes]]:
    """(position, stored bytes) of each batch of a segment file."""
    data = path.read_bytes()
    out, position = [], 0
    while position < len(data):
        size = struct.unpack_from(">i", data, position + 8)[0] + 12
        out.append((position, data[position:position + size]))
        position += size
    return out


def files_holding(directory: Path, pattern: bytes) -> list[Path]:
    return [path for path in directory.rglob("*") if path.is_file() and pattern in path.read_bytes()]


def flip(path: Path, at: int) -> None:
    data = bytearray(path.read_bytes())
    data[at] ^= 0x01
    path.write_bytes(bytes(data))


def assert_corrupt(log: Log, offset: int) -> None:
    with pytest.raises(KafkaError) as refused:
        log.read(offset, 1 << 20)
    assert refused.value.code == ErrorCode.CORRUPT_MESSAGE


# -- format ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("compression", [0, GZIP], ids=["uncompressed", "gzip"])
def test_no_payload_reaches_the_disk_and_reads_are_exact(open_log: OpenLog, compression: int) -> None:
    log = open_log(CONFIG, keyring=ring(1))
    plain = open_log(CONFIG, name="plain-0")
    values = fill(log, 40, compression=compression)
    fill(plain, 40, compression=compression)
    assert len(log.segments) > 1
    for i in range(40):
        assert not files_holding(log.directory, payload(i)[:20])
    if not compression:
        assert files_holding(plain.directory, payload(0)[:20])  # the pattern is findable when in clear
    assert [r.value for r in read_all(log)] == values
    # Byte for byte what a plaintext log serves: the producer's batch with its offsets.
    for offset in range(0, log.log_end_offset, 7):
        encrypted_read, plain_read = log.read(offset, 1 << 20), plain.read(offset, 1 << 20)
        assert isinstance(encrypted_read, BatchBytes) and isinstance(plain_read, ReadResult)
        first = read_header(plain_read.read_bytes()).size
        assert encrypted_read.read_bytes()[:first] == plain_read.read_bytes()[:first]


def test_the_stored_batch_keeps_its_header_in_clear(open_log: OpenLog) -> None:
    log = open_log(CONFIG, keyring=ring(1))
    sent = batch([Rec(b"k", b"v" * 50, T0)], producer_id=9, producer_epoch=2, base_sequence=0)
    log.append_as_leader(sent, 4, T0)
    [(_, stored)] = stored_batches(log.active_segment.log_path)
    fields, original = header_fields(stored), header_fields(sent)
    assert fields["magic"] == ENCRYPTED_MAGIC
    assert fields["batch_length"] == original["batch_length"] + OVERHEAD
    assert len(stored) == len(sent) + OVERHEAD
    same = ("crc", "attributes", "last_offset_delta", "base_timestamp", "max_timestamp", "producer_id",
            "producer_epoch", "base_sequence", "record_count")
    assert {k: fields[k] for k in same} == {k: original[k] for k in same}
    assert fields["partition_leader_epoch"] == 4
    assert struct.unpack_from(">I", stored, HEADER_SIZE)[0] == 1  # the key id follows the header
    served = log.read(0, 1 << 20).read_bytes()
    assert served[HEADER_SIZE:] == sent[HEADER_SIZE:]  # records (and so the CRC) exactly as sent
    assert header_fields(served)["magic"] == 2 and header_fields(served)["crc"] == original["crc"]


def test_reads_return_whole_batches_within_max_bytes(open_log: OpenLog) -> None:
    log = open_log(LogConfig(segment_bytes=1 << 20), keyring=ring(1))
    fill(log, 10)
    size = read_header(log.read(0, 1).read_bytes()).size
    assert log.read(0, 1).size == size  # the first batch even when larger than max_bytes
    assert log.read(0, 3 * size + size // 2).size == 3 * size  # no partial tail
    assert log.read(0, 1, min_one_batch=False) is None
    assert log.read(4, 1 << 20, max_offset_exclusive=9).size == 2 * size  # batches [3..5], [6..8]


# -- nonces ---------------------------------------------------------------------------------------

def nonces(log: Log) -> list[bytes]:
    return [stored[HEADER_SIZE + 4:HEADER_SIZE + 16]
            for segment in log.segments for _, stored in stored_batches(segment.log_path)]


def test_nonces_never_repeat_even_when_offsets_are_rewritten(open_log: OpenLog) -> None:
    log = open_log(CONFIG, keyring=ring(1))
    fill(log, 30)
    before = nonces(log)
    log.truncate_to(45)  # a follower's divergent tail: the same offsets are written again
    fill(log, 15, start=100)
    after = nonces(log)
    assert len(set(before)) == len(before) and len(set(after)) == len(after)
    rewritten = after[15:]
    assert not set(rewritten) & set(before)


def test_a_wrapped_nonce_counter_draws_a_new_salt(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(encryption, "_COUNTER_LIMIT", 3)
    sequence = NonceSequence()
    drawn = [sequence.next() for _ in range(9)]
    assert len(set(drawn)) == 9
    assert len({nonce[:8] for nonce in drawn}) == 3  # one salt per 3 nonces


# -- tampering ------------------------------------------------------------------------------------

def test_a_flipped_byte_is_detected_on_read_and_after_restarts(open_log: OpenLog) -> None:
    log = open_log(CONFIG, keyring=ring(1))
    values = fill(log, 40)
    closed = log.segments[0]
    [_, (position, stored), *_] = stored_batches(closed.log_path)
    damaged = read_header(stored)
    log.close()
    flip(closed.log_path, position + HEADER_SIZE + 30)  # inside the ciphertext

    reopened = open_log(CONFIG, keyring=ring(1), had_clean_shutdown=True)
    assert_corrupt(reopened, damaged.base_offset)
    assert reopened.segments[0].damage  # recorded, so the next start verifies the segment
    good = [v for offset, v in enumerate(values) if not damaged.base_offset <= offset <= damaged.last_offset]
    assert reopened.read(0, 1 << 20).size == read_header(stored).size - OVERHEAD  # the batch before it
    reopened.close()

    for clean in (True, False):  # detected again whether the segment is loaded or recovered
        again = open_log(CONFIG, keyring=ring(1), had_clean_shutdown=clean)
        assert_corrupt(again, damaged.base_offset)
        remaining = [r.value for r in read_all(again, 0, stop_before=damaged.base_offset)]
        remaining += [r.value for r in read_all(again, damaged.last_offset + 1)]
        assert remaining == good
        again.close()


def test_recovery_verifies_tags_and_keeps_the_damaged_batch(open_log: OpenLog) -> None:
    log = open_log(LogConfig(segment_bytes=1 << 20, index_interval_bytes=200), keyring=ring(1))
    fill(log, 10)
    path = log.active_segment.log_path
    log.release()  # a crash: the next open recovers the active segment
    batches = stored_batches(path)
    position, stored = batches[4]
    flip(path, position + len(stored) - 1)  # inside the tag
    recovered = open_log(LogConfig(segment_bytes=1 << 20, index_interval_bytes=200), keyring=ring(1))
    assert recovered.log_end_offset == 30  # nothing cut
    assert_corrupt(recovered, read_header(stored).base_offset)
    assert recovered.segments[0].damage[0].reason.startswith("authentication failed")
    assert len(read_all(recovered, 15)) == 15


def test_a_damaged_last_batch_found_on_a_read_is_never_cut(open_log: OpenLog) -> None:
    log = open_log(LogConfig(segment_bytes=1 << 20), keyring=ring(1))
    fill(log, 5)
    path = log.active_segment.log_path
    position, stored = stored_batches(path)[-1]
    flip(path, position + HEADER_SIZE + 20)
    assert_corrupt(log, 12)
    log.release()  # then a crash: recovery would take a bad last batch for a torn write
    recovered = open_log(LogConfig(segment_bytes=1 << 20), keyring=ring(1))
    assert recovered.log_end_offset == 15 and path.stat().st_size == position + len(stored)
    assert_corrupt(recovered, 12)


def test_a_changed_header_or_a_batch_moved_elsewhere_fails_authentication() -> None:
    keyring = ring(1)
    sent = batch([Rec(b"k", b"v", T0)], base_offset=7)
    stored = BatchCipher(keyring, "t-0").seal(sent, 0, read_header(sent))
    header = read_header(stored)
    assert BatchCipher(keyring, "t-0").open(stored, 0, header) == sent
    with pytest.raises(AuthenticationFailed):
        BatchCipher(keyring, "t-1").open(stored, 0, header)  # another partition
    moved = struct.pack(">q", 8) + stored[8:]  # another offset
    with pytest.raises(AuthenticationFailed):
        BatchCipher(keyring, "t-0").open(moved, 0, read_header(moved))


# -- keys -----------------------------------------------------------------------------------------

def test_rotation_keeps_old_data_readable_and_writes_with_the_new_key(open_log: OpenLog) -> None:
    log = open_log(CONFIG, keyring=ring(1))
    values = fill(log, 10)
    log.close()
    rotated = open_log(CONFIG, keyring=ring(1, 2), had_clean_shutdown=True)
    values += fill(rotated, 10, start=10)
    assert [s.key_id for s in rotated.segments if not s.is_empty] == sorted(
        s.key_id for s in rotated.segments if not s.is_empty)
    assert {s.key_id for s in rotated.segments if not s.is_empty} == {1, 2}
    assert rotated.segments[-1].key_id == 2
    assert [r.value for r in read_all(rotated)] == values
    rotated.close()
    with pytest.raises(MissingKey, match="key id 1"):  # a key still in use was dropped: refuse, delete nothing
        open_log(CONFIG, keyring=ring(2), had_clean_shutdown=True)
    with pytest.raises(MissingKey, match="not set"):
        open_log(CONFIG, had_clean_shutdown=True)
    assert [r.value for r in read_all(open_log(CONFIG, keyring=ring(1, 2), had_clean_shutdown=False))] == values


def test_a_plaintext_log_gains_encrypted_segments(open_log: OpenLog) -> None:
    log = open_log(CONFIG)
    values = fill(log, 10)
    log.close()
    encrypted = open_log(CONFIG, keyring=ring(1), had_clean_shutdown=True)
    values += fill(encrypted, 10, start=10)
    plain_segments = [s for s in encrypted.segments if s.key_id is None and not s.is_empty]
    assert plain_segments and all(s.base_offset < 30 for s in plain_segments)
    assert isinstance(encrypted.read(0, 1 << 20), ReadResult)  # still sent with sendfile
    assert isinstance(encrypted.read(30, 1 << 20), BatchBytes)
    assert [r.value for r in read_all(encrypted)] == values
    encrypted.close()
    assert [r.value for r in read_all(open_log(CONFIG, keyring=ring(1), had_clean_shutdown=False))] == values


def test_key_files(tmp_path: Path) -> None:
    good = tmp_path / "keys"
    good.write_text(f"# rotated yearly\n1:{base64.b64encode(KEY_1).decode()}\n\n"
                    f"7:{base64.b64encode(KEY_2).decode()}\n")
    os.chmod(good, 0o600)
    keyring = load_key_file(good)
    assert (keyring.current_id, keyring.key_ids) == (7, [1, 7])
    for text, reason in [
        ("", "holds no key"),
        ("1:" + base64.b64encode(b"short").decode(), "has 5 bytes"),
        ("1:not base64!", "not valid base64"),
        (f"x:{base64.b64encode(KEY_1).decode()}", "expected <key id>"),
        (f"1:{base64.b64encode(KEY_1).decode()}\n1:{base64.b64encode(KEY_2).decode()}", "appears twice"),
        (f"4294967296:{base64.b64encode(KEY_1).decode()}", "outside"),
    ]:
        with pytest.raises(KeyFileError, match=reason):
            parse_key_file(text, "keys")
    with pytest.raises(KeyFileError, match="cannot read"):
        load_key_file(tmp_path / "missing")


def test_a_key_file_the_broker_cannot_use_stops_the_start(tmp_path: Path) -> None:
    bad = tmp_path / "keys"
    bad.write_text("1:" + base64.b64encode(b"x" * 16).decode())
    for value in (str(bad), str(tmp_path / "missing"), " "):
        with pytest.raises(ConfigError, match="refusing to start"):
            BrokerConfig({"log.dirs": str(tmp_path / "logs"), "log.encryption.key.file": value})


# -- what reads records -----------------------------------------------------------------------

def test_compaction_of_an_encrypted_log(open_log: OpenLog) -> None:
    config = LogConfig(cleanup_policy=("compact",), segment_bytes=1200, min_cleanable_dirty_ratio=0.01)
    log = open_log(config, keyring=ring(1))
    for start in range(0, 300, 5):
        records = [Rec(f"k{i % 10}".encode(), f"secret-value-{i:04d}".encode(), T0 + i) for i in range(start, start + 5)]
        log.append_as_leader(batch(records), 0, T0)
    log.high_watermark = log.log_end_offset
    assert compact(log, T0)
    seen = read_all(log)
    cleaned = {r.key: r.value for r in seen if r.offset < log.active_segment.base_offset}
    assert len(cleaned) == 10 and all(v.startswith(b"secret-value-") for v in cleaned.values())
    assert all(s.key_id == 1 for s in log.segments if not s.is_empty)
    assert not files_holding(log.directory, b"secret-value-")


def test_timestamp_lookups_and_transactions_on_an_encrypted_log(open_log: OpenLog) -> None:
    log = open_log(CONFIG, keyring=ring(1))
    fill(log, 10)
    assert log.offset_for_timestamp(T0 + 4) == (12, T0 + 4)
    assert log.max_timestamp_offset() == (27, T0 + 9)
    # An aborted transaction: its marker is read back (decrypted) when producer state is rebuilt.
    log.append_as_leader(batch([Rec(b"k", b"in-txn", T0)], attributes=0x10, producer_id=5, producer_epoch=0,
                               base_sequence=0), 0, T0)
    marker = batch([Rec(b"\x00\x00\x00\x00", b"\x00\x00\x00\x00\x00\x00", T0)], attributes=0x30,
                   base_offset=31, producer_id=5, producer_epoch=0)
    log.append_as_follower(marker)
    log.high_watermark = log.log_end_offset
    assert log.collect_aborted_transactions(0, 32) == [(5, 30)]
    log.release()  # a crash: the transaction index is rebuilt from the (encrypted) marker
    reopened = open_log(CONFIG, keyring=ring(1), recovery_point=0)
    assert reopened.collect_aborted_transactions(0, 32) == [(5, 30)]
    assert reopened.first_unstable_offset() is None


def test_a_move_to_another_log_dir_copies_encrypted_batches(tmp_path: Path, clock: Clock) -> None:
    dirs = [tmp_path / "d0", tmp_path / "d1"]
    manager = LogManager(dirs, lambda _topic: CONFIG, clock=clock, keyring=ring(1))

    async def scenario() -> None:
        source = manager.get_or_create_log("t", 0)
        values = fill(source, 30)
        mover = LogDirMover(manager)
        mover.start()
        dest = next(d for d in dirs if d != source.directory.parent)
        mover.move(("t", 0), dest)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 10
        while ("t", 0) in manager.future_logs:
            assert loop.time() < deadline, "the move did not finish"
            await asyncio.sleep(0.01)
        moved = manager.get_log("t", 0)
        assert moved is not None and moved.directory == dest / "t-0"
        assert [r.value for r in read_all(moved)] == values
        assert all(s.key_id == 1 for s in moved.segments if not s.is_empty)
        assert not files_holding(dest, payload(3)[:20])
        await mover.stop()

    try:
        asyncio.run(scenario())
    finally:
        for each in manager.logs():
            each.release()
