"""Acceptance: data, offsets and configs survive clean restarts, kill -9 and damaged segments."""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource

from protocol.errors import ErrorCode
from tests.conftest import create_topic
from tests.rawclient import RawClient


def read_all(bootstrap: str, topic: str, partitions: int, timeout_s: float = 60) -> dict[int, list[tuple[int, bytes]]]:
    """Every (offset, value) of every partition, up to the high watermark at call time."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "durability-reader",
                         "enable.auto.commit": False, "enable.partition.eof": True})
    ends = {}
    for p in range(partitions):
        _, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
        ends[p] = high
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    found: dict[int, list[tuple[int, bytes]]] = defaultdict(list)
    pending = {p for p, end in ends.items() if end > 0}
    deadline = time.monotonic() + timeout_s
    while pending and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is None or msg.error():
            continue
        found[msg.partition()].append((msg.offset(), msg.value()))
        if msg.offset() >= ends[msg.partition()] - 1:
            pending.discard(msg.partition())
    consumer.close()
    assert not pending, f"partitions {pending} not fully read"
    return found


def produce(bootstrap: str, topic: str, values: list[bytes]) -> dict[int, list[tuple[int, bytes]]]:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    acked: dict[int, list[tuple[int, bytes]]] = defaultdict(list)
    for value in values:
        producer.produce(topic, value, on_delivery=lambda err, msg: err is None and acked[msg.partition()].append(
            (msg.offset(), msg.value())))
    assert producer.flush(30) == 0
    return acked


def test_clean_restart_keeps_data_offsets_and_configs(make_broker) -> None:
    node = make_broker()
    topic = create_topic(node.bootstrap, "restart-me", 3, {"retention.ms": "123456789", "segment.bytes": "65536"})
    acked = produce(node.bootstrap, topic, [f"m{i}".encode() * 50 for i in range(3000)])
    assert node.stop() == 0
    node.start()
    found = read_all(node.bootstrap, topic, 3)
    for partition, records in acked.items():
        assert sorted(found[partition]) == sorted(records)
    admin = AdminClient({"bootstrap.servers": node.bootstrap})
    resource = ConfigResource("topic", topic)
    configs = admin.describe_configs([resource])[resource].result(timeout=15)
    assert configs["retention.ms"].value == "123456789"
    # New appends continue after the old offsets.
    more = produce(node.bootstrap, topic, [b"after"] * 30)
    for partition, records in more.items():
        assert records[0][0] == (max(o for o, _ in acked[partition]) + 1 if acked[partition] else 0)


def test_kill_during_produce_loses_nothing_acknowledged(make_broker) -> None:
    node = make_broker()
    topic = create_topic(node.bootstrap, "kill-me", 3, {"segment.bytes": "200000"})
    acked: dict[int, dict[int, bytes]] = defaultdict(dict)
    stop = threading.Event()

    def load() -> None:
        producer = Producer({"bootstrap.servers": node.bootstrap, "acks": "1", "linger.ms": 2,
                             "message.timeout.ms": 5000, "retries": 0})

        def on_delivery(err, msg) -> None:  # noqa: ANN001 - librdkafka callback
            if err is None:
                acked[msg.partition()][msg.offset()] = msg.value()

        i = 0
        while not stop.is_set():
            try:
                producer.produce(topic, f"value-{i}".encode() * 20, on_delivery=on_delivery)
                i += 1
            except BufferError:
                pass
            producer.poll(0)
        producer.flush(10)

    thread = threading.Thread(target=load)
    thread.start()
    deadline = time.monotonic() + 60
    while sum(len(v) for v in acked.values()) < 20_000 and time.monotonic() < deadline:
        time.sleep(0.05)
    node.kill()
    stop.set()
    thread.join(30)
    total = sum(len(v) for v in acked.values())
    assert total >= 20_000
    node.start()
    found = read_all(node.bootstrap, topic, 3)
    for partition, records in acked.items():
        stored = dict(found[partition])
        missing = [o for o in records if stored.get(o) != records[o]]
        assert not missing, f"partition {partition}: {len(missing)} acknowledged records lost"


def _segments(log_dir: Path, topic: str, partition: int) -> list[Path]:
    return sorted((log_dir / f"{topic}-{partition}").glob("*.log"))


def test_a_torn_tail_is_cut_and_a_flipped_byte_costs_only_its_batch(make_broker) -> None:
    node = make_broker()
    topic = create_topic(node.bootstrap, "damaged", 2)
    values = [f"record-{i}".encode() * 10 for i in range(200)]
    producer = Producer({"bootstrap.servers": node.bootstrap, "acks": "all", "linger.ms": 0})
    acked: dict[int, list[int]] = defaultdict(list)
    for i, value in enumerate(values):  # one batch per record: flush after each
        producer.produce(topic, value, partition=i % 2,
                         on_delivery=lambda err, msg: acked[msg.partition()].append(msg.offset()))
        producer.flush(10)
    node.kill()  # unclean: recovery runs on the next start

    torn = _segments(node.log_dir, topic, 0)[-1]
    size = torn.stat().st_size
    with open(torn, "r+b") as f:
        f.truncate(size - 7)  # the last batch is cut short
    flipped = _segments(node.log_dir, topic, 1)[-1]
    data = bytearray(flipped.read_bytes())
    middle = len(data) // 2
    data[middle] ^= 0xFF  # a flipped byte inside some batch, sound batches after it
    flipped.write_bytes(bytes(data))

    node.start()
    log_text = node.log_text()
    assert "damaged-0" in log_text and "damaged bytes" in log_text, log_text[-2000:]
    found = read_all(node.bootstrap, topic, 1)
    # Partition 0 lost only its torn last batch.
    assert [o for o, _ in found[0]] == acked[0][:-1]
    # Partition 1 keeps everything but the one damaged batch (one record), which readers are refused.
    with RawClient(node.bootstrap) as client:
        codes = {offset: _fetch_code(client, topic, 1, offset) for offset in acked[1]}
    refused = [offset for offset, code in codes.items() if code != 0]
    assert len(refused) == 1 and codes[refused[0]] == ErrorCode.CORRUPT_MESSAGE
    # Appends continue right after what was kept.
    next_offsets: dict[int, int] = {}
    for partition in (0, 1):
        producer.produce(topic, b"x", partition=partition,
                         on_delivery=lambda err, msg: next_offsets.__setitem__(msg.partition(), msg.offset()))
    assert producer.flush(30) == 0
    assert next_offsets == {0: len(found[0]), 1: len(acked[1])}


def _fetch_code(client: RawClient, topic: str, partition: int, offset: int) -> int:
    answer = client.request(1, 12, {"max_wait_ms": 0, "min_bytes": 0, "max_bytes": 1 << 16, "isolation_level": 0,
                                    "session_id": 0, "session_epoch": -1, "topics": [{"topic": topic, "partitions": [
                                        {"partition": partition, "fetch_offset": offset, "partition_max_bytes": 1 << 16,
                                         "current_leader_epoch": -1, "log_start_offset": -1}]}],
                                    "forgotten_topics_data": [], "rack_id": ""})
    return answer.responses[0].partitions[0].error_code
