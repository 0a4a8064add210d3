"""Kafka's clients skip pending batches and read deliveries: the premise of the design.

A real broker serves a log holding a record, a pending batch of three delayed records, the
delivery of one of them, a retry topic's forward batch and done marker, and a record after it; librdkafka (confluent-kafka, both isolation
levels), kafka-python and the Java console consumer must see the three ordinary records only,
the delivery with its `kbroker.delayed.from` header. The pending and delivery batches are
written into the stopped broker's log with the storage layer, as a follower would append them:
the produce path does not make them yet.
"""

from __future__ import annotations

import time
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition
from kafka import KafkaConsumer

from compat_tests.kafka_local import kafka_home_or_skip, run_tool
from kbroker.delay.forward_batches import ForwardRecord, encode_forward_batch, encode_forward_done_batch
from kbroker.delay.pending_batches import decode_pending_batch, encode_delivery_batch, encode_pending_batch
from kbroker.delay.retries import Route
from kbroker.storage.log import Log
from kbroker.storage.log_config import LogConfig
from protocol.record_batch import Record
from protocol.records import read_header, set_base_offset, set_partition_leader_epoch
from tests.brokers import BrokerProcess
from tests.conftest import create_topic

TOPIC = "delayed"
EXPECTED = [b"before", b"delayed-2", b"after"]


def write_pending_and_delivery(data_dir: Path) -> None:
    log_dir = next(p for p in data_dir.rglob(f"{TOPIC}-0") if p.is_dir())
    log = Log(log_dir, LogConfig(), had_clean_shutdown=True)
    try:
        epoch = max(log.epochs.latest_epoch, 0)
        base = log.log_end_offset
        now = int(time.time() * 1000)
        records = [Record(i, now, b"k%d" % i, b"delayed-%d" % i, [("kbroker.delay.ms", b"60000")]) for i in range(3)]
        pending = encode_pending_batch(records, [now + 60_000] * 3, base_offset=base, partition_leader_epoch=epoch)
        log.append_as_follower(pending)
        due = decode_pending_batch(pending, read_header(pending))[2]
        log.append_as_follower(encode_delivery_batch(TOPIC, 0, [due], base_offset=base + 3,
                                                     partition_leader_epoch=epoch))
        # A retry topic's forward batch and done marker: control batches of kbroker's own types too.
        forward = ForwardRecord(Route.TARGET, now, 1000, 0, 0, "elsewhere", 0, (base, base + 1))
        log.append_as_follower(_at(encode_forward_batch([forward]), base + 4, epoch))
        log.append_as_follower(_at(encode_forward_done_batch(base + 4, now), base + 5, epoch))
        log.flush()
    finally:
        log.close()


def _at(batch: bytes, base_offset: int, epoch: int) -> bytes:
    """`batch` as a leader would have stored it: at `base_offset`, in `epoch`."""
    stored = bytearray(batch)
    set_base_offset(stored, 0, base_offset)
    set_partition_leader_epoch(stored, 0, epoch)
    return bytes(stored)


def read_with_librdkafka(bootstrap: str, isolation: str) -> list[tuple[bytes, list]]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{isolation}",
                         "enable.auto.commit": False, "isolation.level": isolation})
    consumer.assign([TopicPartition(TOPIC, 0, 0)])
    seen: list[tuple[bytes, list]] = []
    deadline = time.monotonic() + 30
    try:
        while len(seen) < len(EXPECTED) and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                seen.append((message.value(), message.headers() or []))
        # Nothing more arrives: the pending records are not handed out late either.
        extra = consumer.poll(1.0)
        assert extra is None or extra.error() is not None, extra.value()
    finally:
        consumer.close()
    return seen


def test_kafka_clients_skip_pending_batches_and_read_deliveries(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "broker").start()
    try:
        create_topic(broker.bootstrap, TOPIC, 1)
        producer = Producer({"bootstrap.servers": broker.bootstrap})
        producer.produce(TOPIC, b"before")
        assert producer.flush(30) == 0
        assert broker.stop() == 0, broker.log_tail()
        write_pending_and_delivery(tmp_path / "broker")
        broker.start()
        producer = Producer({"bootstrap.servers": broker.bootstrap})
        producer.produce(TOPIC, b"after")
        assert producer.flush(30) == 0

        for isolation in ("read_uncommitted", "read_committed"):
            seen = read_with_librdkafka(broker.bootstrap, isolation)
            assert [value for value, _ in seen] == EXPECTED
            assert ("kbroker.delayed.from", b"delayed-0@3") in seen[1][1]

        kp = KafkaConsumer(TOPIC, bootstrap_servers=broker.bootstrap, auto_offset_reset="earliest",
                           consumer_timeout_ms=3000)
        try:
            assert [m.value for m in kp] == EXPECTED
        finally:
            kp.close()

        home = kafka_home_or_skip()
        out = run_tool(home, "kafka-console-consumer", "--bootstrap-server", broker.bootstrap, "--topic", TOPIC,
                       "--from-beginning", "--max-messages", "3", "--timeout-ms", "20000",
                       "--property", "print.offset=true")
        assert out.stdout.split() == ["Offset:0", "before", "Offset:4", "delayed-2", "Offset:7", "after"], out.stderr
    finally:
        broker.kill()
