"""Encryption at rest with a real broker and a real client (confluent-kafka).

Known payloads, produced uncompressed and gzip-compressed, leave no byte pattern in any file
under log.dirs and are consumed back exactly; flipped bytes are refused with CORRUPT_MESSAGE on
a read and found by recovery after a crash; a rotated key keeps old data readable and writes
new data with the new key; a key file missing a key still in use stops the start.
"""

from __future__ import annotations

import base64
import os
import struct
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import Producer

from kbroker.storage.encryption import ENCRYPTED_MAGIC, HEADER_SIZE
from protocol.errors import ErrorCode
from tests.brokers import BrokerProcess
from tests.conftest import create_topic
from tests.integration.test_corruption import fetch_error
from tests.integration.test_corruption import read_range as consumed

MESSAGES = 3_000
KEY_1 = base64.b64encode(bytes(range(32))).decode()
KEY_2 = base64.b64encode(bytes(range(50, 82))).decode()


def write_keys(path: Path, *lines: str) -> str:
    path.write_text("".join(f"{line}\n" for line in lines))
    os.chmod(path, 0o600)
    return str(path)


def value(i: int, tag: str) -> bytes:
    return f"TOPSECRET-{tag}-{i:06d}|".encode() * 4


def produce(bootstrap: str, topic: str, start: int, count: int, compression: str) -> list[tuple[int, bytes, bytes]]:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5, "batch.num.messages": 50,
                         "compression.type": compression})
    acked: list[tuple[int, bytes, bytes]] = []
    errors: list[object] = []

    def delivered(err: object, msg: object) -> None:
        if err is None:
            acked.append((msg.offset(), msg.key(), msg.value()))  # type: ignore[attr-defined]
        else:
            errors.append(err)

    for i in range(start, start + count):
        producer.produce(topic, value(i, compression), key=f"KEYSECRET-{i}".encode(), partition=0,
                         on_delivery=delivered)
        if i % 500 == 0:
            producer.poll(0)
    assert producer.flush(60) == 0
    assert not errors, errors[:3]
    return sorted(acked)


def files_with_patterns(root: Path) -> list[Path]:
    return [path for path in root.rglob("*") if path.is_file()
            and (b"TOPSECRET" in (data := path.read_bytes()) or b"KEYSECRET" in data)]


def stored_batches(path: Path) -> list[tuple[int, int, int]]:
    """(position, size, base offset) of each stored batch of a segment file."""
    data = path.read_bytes()
    out, position = [], 0
    while position < len(data):
        base, length = struct.unpack_from(">qi", data, position)
        out.append((position, length + 12, base))
        position += length + 12
    return out


def flip(path: Path, at: int) -> None:
    data = bytearray(path.read_bytes())
    data[at] ^= 0x01
    path.write_bytes(bytes(data))


def key_id_of(segment: Path) -> int | None:
    head = segment.read_bytes()[:HEADER_SIZE + 4]
    if len(head) < HEADER_SIZE + 4 or head[16] != ENCRYPTED_MAGIC:
        return None
    return struct.unpack_from(">I", head, HEADER_SIZE)[0]


def test_encrypted_partitions_end_to_end(make_broker: Callable[..., BrokerProcess], tmp_path: Path) -> None:
    keys = tmp_path / "keys"
    # No recovery-point checkpoint is written before a crash in this test: recovery verifies everything.
    node = make_broker(**{"log.encryption.key.file": write_keys(keys, f"1:{KEY_1}"),
                          "log.initial.task.delay.ms": "600000"})
    topics = {codec: create_topic(node.bootstrap, f"secret-{codec}", 1, {"segment.bytes": "65536"})
              for codec in ("none", "gzip")}
    acked = {codec: produce(node.bootstrap, topic, 0, MESSAGES, codec) for codec, topic in topics.items()}
    for codec, topic in topics.items():
        assert consumed(node.bootstrap, topic, 0, MESSAGES) == [(o, v) for o, _, v in acked[codec]]
    node.kill()
    assert not files_with_patterns(node.log_dir)

    topic = topics["none"]
    segments = sorted((node.log_dir / f"{topic}-0").glob("*.log"))
    assert len(segments) >= 3 and all(key_id_of(s) == 1 for s in segments)
    # Batch B, changed while the broker is down after a crash: recovery finds it.
    position_b, _, base_b = stored_batches(segments[1])[2]
    last_b = stored_batches(segments[1])[3][2] - 1
    flip(segments[1], position_b + HEADER_SIZE + 20)
    node.start()
    assert f"damaged bytes at position {position_b}" in node.log_text()
    assert fetch_error(node.bootstrap, topic, base_b) == ErrorCode.CORRUPT_MESSAGE
    assert node.stop() == 0

    # Batch A, changed after a clean shutdown (nothing is verified at start): a read finds it.
    position_a, size_a, base_a = stored_batches(segments[0])[3]
    last_a = stored_batches(segments[0])[4][2] - 1
    flip(segments[0], position_a + size_a // 2)
    found_a = f"the batch at position {position_a} (offsets {base_a}..{last_a}) failed authentication"
    node.start()
    assert found_a not in node.log_text()
    assert fetch_error(node.bootstrap, topic, base_a) == ErrorCode.CORRUPT_MESSAGE
    assert found_a in node.log_text()
    node.kill()
    node.start()  # still refused after a crash and recovery, and nothing else is lost
    for base in (base_a, base_b):
        assert fetch_error(node.bootstrap, topic, base) == ErrorCode.CORRUPT_MESSAGE
    damaged = set(range(base_a, last_a + 1)) | set(range(base_b, last_b + 1))
    readable = (consumed(node.bootstrap, topic, 0, base_a) + consumed(node.bootstrap, topic, last_a + 1, base_b)
                + consumed(node.bootstrap, topic, last_b + 1, MESSAGES))
    assert readable == [(o, v) for o, _, v in acked["none"] if o not in damaged]
    assert node.stop() == 0

    # Rotation: key 2 encrypts from now on, key 1 still reads what it wrote.
    write_keys(keys, f"1:{KEY_1}", f"2:{KEY_2}")
    node.start()
    more = produce(node.bootstrap, topics["gzip"], MESSAGES, 500, "gzip")
    expected = [(o, v) for o, _, v in acked["gzip"] + more]
    assert consumed(node.bootstrap, topics["gzip"], 0, MESSAGES + 500) == expected
    assert node.stop() == 0
    gzip_segments = sorted((node.log_dir / f"{topics['gzip']}-0").glob("*.log"))
    assert key_id_of(gzip_segments[0]) == 1 and key_id_of(gzip_segments[-1]) == 2
    assert not files_with_patterns(node.log_dir)

    # Dropping key 1 while data still needs it: the broker refuses to start and deletes nothing.
    sizes = {path: path.stat().st_size for path in node.log_dir.rglob("*.log")}
    write_keys(keys, f"2:{KEY_2}")
    with pytest.raises(RuntimeError, match="exited"):
        node.start()
    assert "refusing to start" in node.log_text() and "key id 1" in node.log_text()
    assert {path: path.stat().st_size for path in node.log_dir.rglob("*.log")} == sizes
