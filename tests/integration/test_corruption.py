"""A real broker with one damaged batch on disk loses nothing else, and tells consumers.

Reproduction of the loss (before: 11,766 of 20,000 acknowledged messages gone for one damaged
batch): 20,000 acknowledged messages over many segments, a clean shutdown, one flipped byte in
the length of a closed segment's last batch, a restart. The broker cut that segment and deleted
every later one. Now the damaged batch is refused with CORRUPT_MESSAGE and every other
acknowledged message is read back.
"""

from __future__ import annotations

import struct
import time
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition

from protocol.errors import ErrorCode
from tests.conftest import create_topic
from tests.rawclient import RawClient

MESSAGES = 20_000


def produce_acked(bootstrap: str, topic: str) -> list[tuple[int, bytes]]:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 20, "batch.size": 32768,
                         "batch.num.messages": 1000})
    acked: list[tuple[int, bytes]] = []
    errors: list[object] = []
    for i in range(MESSAGES):
        while True:
            try:
                producer.produce(topic, f"message-{i:05d}".encode() * 8, partition=0,
                                 on_delivery=lambda err, msg: acked.append((msg.offset(), msg.value())) if err is None else errors.append(err))
                break
            except BufferError:
                producer.poll(0.05)
    assert producer.flush(60) == 0
    assert not errors, errors[:3]
    return sorted(acked)


def batches(path: Path) -> list[tuple[int, int, int]]:
    """(position, base offset, last offset) of each batch of a segment file."""
    data = path.read_bytes()
    out, position = [], 0
    while position < len(data):
        base, length = struct.unpack_from(">qi", data, position)
        (last_delta,) = struct.unpack_from(">i", data, position + 23)
        out.append((position, base, base + last_delta))
        position += length + 12
    return out


def read_range(bootstrap: str, topic: str, start: int, stop: int) -> list[tuple[int, bytes]]:
    """Records of partition 0 from `start` through offset `stop - 1`, as a consumer gets them."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"reader-{start}", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, start)])
    found: list[tuple[int, bytes]] = []
    deadline = time.monotonic() + 60
    try:
        while (not found or found[-1][0] < stop - 1) and time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is not None and not message.error() and message.offset() < stop:
                found.append((message.offset(), message.value()))
    finally:
        consumer.close()
    return found


def fetch_error(bootstrap: str, topic: str, offset: int) -> int:
    with RawClient(bootstrap) as client:
        answer = client.request(1, 12, {"max_wait_ms": 10, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": 0,
                                        "session_id": 0, "session_epoch": -1, "topics": [{"topic": topic, "partitions": [
                                            {"partition": 0, "fetch_offset": offset, "partition_max_bytes": 1 << 20,
                                             "current_leader_epoch": -1, "log_start_offset": -1}]}],
                                        "forgotten_topics_data": [], "rack_id": ""})
    partition = answer.responses[0].partitions[0]
    assert partition.records is not None  # never null, even with an error
    return partition.error_code


def test_one_damaged_batch_after_a_clean_shutdown_loses_only_itself(make_broker) -> None:
    node = make_broker()
    topic = create_topic(node.bootstrap, "damaged-closed", 1, {"segment.bytes": "262144"})
    acked = produce_acked(node.bootstrap, topic)
    assert len(acked) == MESSAGES
    assert node.stop() == 0
    segments = sorted((node.log_dir / f"{topic}-0").glob("*.log"))
    assert len(segments) >= 5
    closed = segments[2]
    position, first, last = batches(closed)[-1]
    data = bytearray(closed.read_bytes())
    data[position + 9] = 0x7F  # the batch length now runs past the file
    closed.write_bytes(bytes(data))

    node.start()
    assert "damaged bytes" in node.log_text()
    assert fetch_error(node.bootstrap, topic, first) == ErrorCode.CORRUPT_MESSAGE
    next_segment = int(segments[3].stem)
    before = read_range(node.bootstrap, topic, 0, first)
    after = read_range(node.bootstrap, topic, next_segment, MESSAGES)
    damaged = {o for o, _ in acked if first <= o < next_segment}
    assert damaged == set(range(first, last + 1))
    assert before + after == [(o, v) for o, v in acked if o not in damaged]
    # The rest of the log takes appends where it ended.
    more = produce_acked(node.bootstrap, topic)
    assert more[0][0] == MESSAGES
