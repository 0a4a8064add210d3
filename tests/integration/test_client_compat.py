"""Acceptance: real clients produce and read back 1 KB keyed messages with every codec.

kafka-python, confluent-kafka (librdkafka) and kcat each write MESSAGES messages to a
3-partition topic and read them back; keys, values, headers and timestamps must come
back intact and in order within each partition.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections import defaultdict
from collections.abc import Callable

import pytest

MESSAGES = int(os.environ.get("KBROKER_COMPAT_MESSAGES", "10000"))
CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
PARTITIONS = 3
VALUE_SIZE = 1024

# (key, value, headers, timestamp ms)
Message = tuple[bytes, bytes, list[tuple[str, bytes]], int]


def make_messages(count: int, base_ts: int) -> list[Message]:
    messages = []
    for i in range(count):
        key = f"key-{i % 101}".encode()
        value = f"{i:08d}:".encode().ljust(VALUE_SIZE, b"v")
        headers = [("index", str(i).encode()), ("origin", b"compat-test")]
        messages.append((key, value, headers, base_ts + i))
    return messages


def index_of(value: bytes) -> int:
    return int(value[:8])


def assert_per_partition(
    sent: dict[int, list[Message]], received: dict[int, list[Message]], check_ts: bool = True
) -> None:
    assert sorted(received) == sorted(sent), "partitions differ"
    for partition, expected in sent.items():
        got = received[partition]
        assert len(got) == len(expected), f"partition {partition}: {len(got)} of {len(expected)}"
        for want, have in zip(expected, got, strict=True):
            assert have[0] == want[0] and have[1] == want[1], f"partition {partition} order/content"
            assert have[2] == want[2], "headers"
            if check_ts:
                assert have[3] == want[3], "timestamp"


# --- confluent-kafka ------------------------------------------------------------


def confluent_round_trip(bootstrap: str, topic: str, codec: str, messages: list[Message]) -> None:
    from confluent_kafka import Consumer, Producer, TopicPartition

    producer = Producer(
        {"bootstrap.servers": bootstrap, "compression.type": codec, "linger.ms": 20, "acks": "all"}
    )
    sent: dict[int, list[tuple[int, Message]]] = defaultdict(list)
    failures: list[str] = []

    def on_delivery(err, msg, message=None) -> None:  # noqa: ANN001 - librdkafka callback
        if err is not None:
            failures.append(str(err))
        else:
            sent[msg.partition()].append((msg.offset(), message))

    for message in messages:
        key, value, headers, ts = message
        while True:
            try:
                producer.produce(
                    topic, value, key, headers=headers, timestamp=ts,
                    on_delivery=lambda e, m, message=message: on_delivery(e, m, message),
                )
                break
            except BufferError:
                producer.poll(0.1)
    assert producer.flush(60) == 0
    assert not failures, failures[:3]
    expected = {p: [m for _, m in sorted(items)] for p, items in sent.items()}

    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": f"compat-{topic}", "enable.auto.commit": False,
         "enable.partition.eof": True}
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    received: dict[int, list[Message]] = defaultdict(list)
    done: set[int] = set()
    deadline = time.monotonic() + 120
    while len(done) < PARTITIONS and time.monotonic() < deadline:
        msg = consumer.poll(1.0)
        if msg is None:
            continue
        if msg.error():
            assert msg.error().code() == -191, msg.error()  # _PARTITION_EOF
            if len(received[msg.partition()]) >= len(expected.get(msg.partition(), [])):
                done.add(msg.partition())
            continue
        received[msg.partition()].append((msg.key(), msg.value(), list(msg.headers() or []), msg.timestamp()[1]))
    consumer.close()
    assert_per_partition(expected, {p: v for p, v in received.items() if v})


# --- kafka-python ----------------------------------------------------------------


def kafka_python_round_trip(bootstrap: str, topic: str, codec: str, messages: list[Message]) -> None:
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    producer = KafkaProducer(
        bootstrap_servers=bootstrap, compression_type=None if codec == "none" else codec, linger_ms=20
    )
    futures = [
        (producer.send(topic, value=value, key=key, headers=headers, timestamp_ms=ts), (key, value, headers, ts))
        for key, value, headers, ts in messages
    ]
    producer.flush(60)
    sent: dict[int, list[tuple[int, Message]]] = defaultdict(list)
    for future, message in futures:
        metadata = future.get(timeout=60)
        sent[metadata.partition].append((metadata.offset, message))
    producer.close()
    expected = {p: [m for _, m in sorted(items)] for p, items in sent.items()}

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, consumer_timeout_ms=10000)
    partitions = [TopicPartition(topic, p) for p in range(PARTITIONS)]
    consumer.assign(partitions)
    consumer.seek_to_beginning(*partitions)
    received: dict[int, list[Message]] = defaultdict(list)
    for total, record in enumerate(consumer, start=1):
        received[record.partition].append((record.key, record.value, list(record.headers), record.timestamp))
        if total == len(messages):
            break
    consumer.close()
    assert_per_partition(expected, received)


# --- kcat --------------------------------------------------------------------------


def kcat_round_trip(bootstrap: str, topic: str, codec: str, messages: list[Message]) -> None:
    if shutil.which("kcat") is None:
        pytest.skip("kcat is not installed")
    lines = b"".join(key + b"\t" + value + b"\n" for key, value, _, _ in messages)
    before_ms = int(time.time() * 1000)
    produce = subprocess.run(
        ["kcat", "-P", "-b", bootstrap, "-t", topic, "-z", codec, "-K", "\t", "-H", "origin=kcat",
         "-X", "linger.ms=20"],
        input=lines, capture_output=True, timeout=180,
    )
    assert produce.returncode == 0, produce.stderr.decode()
    after_ms = int(time.time() * 1000)
    consume = subprocess.run(
        ["kcat", "-C", "-b", bootstrap, "-t", topic, "-o", "beginning", "-e", "-q",
         "-f", "%p\t%T\t%h\t%k\t%s\n"],
        capture_output=True, timeout=180,
    )
    assert consume.returncode == 0, consume.stderr.decode()
    by_partition: dict[int, list[int]] = defaultdict(list)
    seen = set()
    for line in consume.stdout.splitlines():
        partition, ts, headers, key, value = line.split(b"\t", 4)
        index = index_of(value)
        key_sent, value_sent, _, _ = messages[index]
        assert (key, value) == (key_sent, value_sent)
        assert headers == b"origin=kcat"
        assert before_ms - 1000 <= int(ts) <= after_ms + 1000
        by_partition[int(partition)].append(index)
        seen.add(index)
    assert len(seen) == len(messages), f"{len(seen)} of {len(messages)} read back"
    for partition, indexes in by_partition.items():
        # kcat produces in stdin order, so each partition holds an increasing subsequence.
        assert indexes == sorted(indexes), f"partition {partition} out of order"


CLIENTS: dict[str, Callable[[str, str, str, list[Message]], None]] = {
    "confluent-kafka": confluent_round_trip,
    "kafka-python": kafka_python_round_trip,
    "kcat": kcat_round_trip,
}


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("client", list(CLIENTS))
def test_produce_and_consume(broker, new_topic, client: str, codec: str) -> None:
    topic = new_topic(partitions=PARTITIONS)
    messages = make_messages(MESSAGES, base_ts=int(time.time() * 1000) - MESSAGES)
    CLIENTS[client](broker.bootstrap, topic, codec, messages)
