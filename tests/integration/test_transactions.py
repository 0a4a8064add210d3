"""Acceptance: idempotent producers, transactions and read_committed consumers, with real clients."""

from __future__ import annotations

import contextlib
import random
import subprocess
import sys
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from kafka import KafkaConsumer, KafkaProducer

from kbroker.client import Client
from protocol.errors import ErrorCode
from protocol.record_batch import Record, encode_batch
from tests.brokers import BrokerProcess
from tests.conftest import create_topic
from tests.rawclient import RawClient

PROJECT = Path(__file__).resolve().parents[2]
TXN_SETTINGS = {
    "group.initial.rebalance.delay.ms": "0",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "300",
}


@pytest.fixture
def txn_broker(make_broker) -> BrokerProcess:
    return make_broker(**TXN_SETTINGS)


def read_all(bootstrap: str, topic: str, isolation: str, expected_at_least: int = 0, timeout_s: float = 20) -> list[str]:
    """Every value of `topic` a fresh consumer with `isolation` sees (after waiting for `expected_at_least`)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"reader-{random.random()}",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False,
                         "isolation.level": isolation, "enable.partition.eof": True})
    consumer.subscribe([topic])
    values: list[str] = []
    eof: set[int] = set()
    partitions = None
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if partitions is None and consumer.assignment():
                partitions = {tp.partition for tp in consumer.assignment()}
            if message is None:
                if partitions and eof >= partitions and len(values) >= expected_at_least:
                    break
                continue
            if message.error():
                eof.add(message.partition())
                continue
            eof.discard(message.partition())
            values.append(message.value().decode())
        return values
    finally:
        consumer.close()


# -- idempotence ---------------------------------------------------------------------------------


@pytest.mark.parametrize("restart", ["clean", "kill -9"])
def test_a_retried_batch_is_acknowledged_once_and_stored_once(txn_broker: BrokerProcess, restart: str) -> None:
    topic = create_topic(txn_broker.bootstrap, "retried")
    with RawClient(txn_broker.bootstrap) as client:
        producer = client.request(22, 4, {"transactional_id": None, "transaction_timeout_ms": 0,
                                          "producer_id": -1, "producer_epoch": -1})

    def send(sequence: int, values: list[bytes]) -> object:
        batch = encode_batch([Record(i, int(time.time() * 1000), None, v) for i, v in enumerate(values)],
                             producer_id=producer.producer_id, producer_epoch=producer.producer_epoch,
                             base_sequence=sequence)
        with RawClient(txn_broker.bootstrap) as client:
            return client.request(0, 9, {"acks": -1, "timeout_ms": 5000, "topic_data": [
                {"name": topic, "partition_data": [{"index": 0, "records": batch}]}]}
            ).responses[0].partition_responses[0]

    first = send(0, [b"a", b"b"])
    again = send(0, [b"a", b"b"])  # the retry of a request whose answer was lost
    assert (first.error_code, again.error_code) == (ErrorCode.NO_ERROR, ErrorCode.NO_ERROR)
    assert again.base_offset == first.base_offset
    assert send(5, [b"gap"]).error_code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert send(2, [b"c"]).base_offset == 2
    # The producer state outlives the broker: from the snapshot, or rebuilt from the log after a crash.
    if restart == "clean":
        txn_broker.restart()
    else:
        txn_broker.kill()
        txn_broker.start()
    retry = send(2, [b"c"])
    assert (retry.error_code, retry.base_offset) == (ErrorCode.NO_ERROR, 2)
    assert send(4, [b"e"]).error_code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert send(3, [b"d"]).base_offset == 3
    assert read_all(txn_broker.bootstrap, topic, "read_uncommitted", 4) == ["a", "b", "c", "d"]


class DelayingProxy:
    """A TCP proxy that holds back the broker's answers for a while, like a slow network."""

    def __init__(self, target_port: int, hold_s: float, hold_for_s: float) -> None:
        import socket
        import threading

        self.hold_s, self.until = hold_s, time.monotonic() + hold_for_s
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.target_port = target_port
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        import socket
        import threading

        while True:
            try:
                client, _ = self.server.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.target_port))
            threading.Thread(target=self._pipe, args=(client, upstream, False), daemon=True).start()
            threading.Thread(target=self._pipe, args=(upstream, client, True), daemon=True).start()

    def _pipe(self, source: object, sink: object, delay: bool) -> None:
        try:
            while data := source.recv(65536):  # type: ignore[attr-defined]
                if delay and time.monotonic() < self.until:
                    time.sleep(self.hold_s)
                sink.sendall(data)  # type: ignore[attr-defined]
        except OSError:
            pass
        finally:
            for s in (source, sink):
                with contextlib.suppress(OSError):
                    s.close()  # type: ignore[attr-defined]

    def close(self) -> None:
        self.server.close()


def test_lost_acks_do_not_duplicate_messages(txn_broker: BrokerProcess) -> None:
    topic = create_topic(txn_broker.bootstrap, "slow-acks")
    proxy = DelayingProxy(txn_broker.port, hold_s=2.5, hold_for_s=6)
    try:
        # The producer only knows the proxy; metadata sends it to the broker itself afterwards,
        # so the first requests (and their retries) are the ones whose answers come too late.
        producer = Producer({"bootstrap.servers": f"127.0.0.1:{proxy.port}", "enable.idempotence": True,
                             "request.timeout.ms": 1000, "message.timeout.ms": 60000, "linger.ms": 50,
                             "retry.backoff.ms": 100})
        errors: list[object] = []
        for i in range(200):
            producer.produce(topic, f"m{i}".encode(), on_delivery=lambda e, _m: e and errors.append(e))
        assert producer.flush(60) == 0
        assert errors == []
    finally:
        proxy.close()
    assert read_all(txn_broker.bootstrap, topic, "read_uncommitted", 200) == [f"m{i}" for i in range(200)]


# -- transactions ----------------------------------------------------------------------------------


def confluent_transaction(bootstrap: str, topic: str, transactional_id: str, values: list[str], commit: bool) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id})
    producer.init_transactions(30)
    producer.begin_transaction()
    for value in values:
        producer.produce(topic, value.encode())
    if commit:
        producer.commit_transaction(30)
    else:
        producer.flush(30)
        producer.abort_transaction(30)


def kafka_python_transaction(bootstrap: str, topic: str, transactional_id: str, values: list[str], commit: bool) -> None:
    producer = KafkaProducer(bootstrap_servers=bootstrap, transactional_id=transactional_id)
    producer.init_transactions()
    producer.begin_transaction()
    for value in values:
        producer.send(topic, value.encode())
    if commit:
        producer.commit_transaction()
    else:
        producer.flush()
        producer.abort_transaction()
    producer.close()


@pytest.mark.parametrize("client", ["confluent", "kafka-python"])
def test_aborted_transactions_are_invisible_to_read_committed(txn_broker: BrokerProcess, client: str) -> None:
    bootstrap = txn_broker.bootstrap
    topic = create_topic(bootstrap, f"txn-{client}", partitions=2)
    run = confluent_transaction if client == "confluent" else kafka_python_transaction
    run(bootstrap, topic, f"tx-{client}", ["c1", "c2"], commit=True)
    run(bootstrap, topic, f"tx-{client}", ["a1", "a2", "a3"], commit=False)
    txn_broker.restart()  # the aborted-transaction index and the transactional id survive it
    run(bootstrap, topic, f"tx-{client}", ["c3"], commit=True)
    committed = read_all(bootstrap, topic, "read_committed", 3)
    assert sorted(committed) == ["c1", "c2", "c3"]
    uncommitted = read_all(bootstrap, topic, "read_uncommitted", 6)
    assert sorted(uncommitted) == ["a1", "a2", "a3", "c1", "c2", "c3"]  # and no control records
    kp = KafkaConsumer(topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                       isolation_level="read_committed", consumer_timeout_ms=5000)
    assert sorted(m.value.decode() for m in kp) == ["c1", "c2", "c3"]
    kp.close()


def test_a_second_producer_fences_the_first(txn_broker: BrokerProcess) -> None:
    bootstrap = txn_broker.bootstrap
    topic = create_topic(bootstrap, "fencing")
    first = Producer({"bootstrap.servers": bootstrap, "transactional.id": "shared-id"})
    first.init_transactions(30)
    first.begin_transaction()
    first.produce(topic, b"zombie")
    first.flush(30)
    txn_broker.restart()  # the open transaction is in __transaction_state, so the next producer still finds it
    second = Producer({"bootstrap.servers": bootstrap, "transactional.id": "shared-id"})
    second.init_transactions(30)  # aborts the first one's open transaction
    second.begin_transaction()
    second.produce(topic, b"current")
    second.commit_transaction(30)
    with pytest.raises(KafkaException) as excinfo:
        first.commit_transaction(30)
    assert excinfo.value.args[0].fatal() or excinfo.value.args[0].txn_requires_abort()
    assert read_all(bootstrap, topic, "read_committed", 1) == ["current"]


def test_abandoned_transaction_is_aborted_after_its_timeout(txn_broker: BrokerProcess) -> None:
    bootstrap = txn_broker.bootstrap
    topic = create_topic(bootstrap, "abandoned")
    script = ("import sys, os; from confluent_kafka import Producer\n"
              "p = Producer({'bootstrap.servers': sys.argv[1], 'transactional.id': 'crashy',"
              " 'transaction.timeout.ms': 2000})\n"
              "p.init_transactions(30); p.begin_transaction(); p.produce(sys.argv[2], b'never'); p.flush(30)\n"
              "print('open', flush=True); os.kill(os.getpid(), 9)\n")
    crashed = subprocess.run([sys.executable, "-c", script, bootstrap, topic], capture_output=True, text=True,
                             timeout=60)
    assert "open" in crashed.stdout, crashed.stderr
    txn_broker.kill()  # the broker crashes too: on restart it finds the open transaction and its deadline
    txn_broker.start()
    confluent_transaction(bootstrap, topic, "other", ["after"], commit=True)
    # The open transaction pins the LSO until the coordinator aborts it; then "after" shows.
    assert read_all(bootstrap, topic, "read_committed", 1, timeout_s=30) == ["after"]
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "lso", "isolation.level": "read_committed"})
    low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
    consumer.close()
    assert high >= 3  # data, abort marker, committed data (+ its marker): the LSO passed them all


def test_exactly_once_pipeline_survives_kill_minus_nine(txn_broker: BrokerProcess) -> None:
    bootstrap = txn_broker.bootstrap
    source = create_topic(bootstrap, "eos-in", partitions=3)
    sink = create_topic(bootstrap, "eos-out", partitions=3)
    values = [f"event-{i}" for i in range(3000)]
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for value in values:
        producer.produce(source, value.encode(), key=value.encode())
    assert producer.flush(30) == 0
    rng = random.Random(42)
    command = [sys.executable, "-m", "tests.eos_pipeline", bootstrap, source, sink, "eos-group", "eos-tx", "3"]
    for round_ in range(4):
        pipeline = subprocess.Popen(command, cwd=PROJECT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert pipeline.stdout is not None
        assert pipeline.stdout.readline().strip() == "ready", pipeline.stderr.read() if pipeline.stderr else ""
        time.sleep(rng.uniform(0.2, 1.5))  # let it get somewhere, then crash it at a random point
        pipeline.kill()
        pipeline.wait()
        if round_ == 1:
            txn_broker.restart()  # a broker restart in the middle, too
    final = subprocess.run(command, cwd=PROJECT, capture_output=True, text=True, timeout=300)
    assert final.returncode == 0, final.stderr
    output = read_all(bootstrap, sink, "read_committed", len(values), timeout_s=60)
    assert sorted(output) == sorted(v.upper() for v in values)  # each exactly once


def test_fetch_and_list_offsets_honour_the_isolation_level(txn_broker: BrokerProcess) -> None:
    from tests.integration.test_fetch_semantics import fetch

    bootstrap = txn_broker.bootstrap
    topic = create_topic(bootstrap, "isolation")
    confluent_transaction(bootstrap, topic, "iso", ["a1", "a2"], commit=False)  # offsets 0-1, marker 2
    open_txn = Producer({"bootstrap.servers": bootstrap, "transactional.id": "iso-open"})
    open_txn.init_transactions(30)
    open_txn.begin_transaction()
    open_txn.produce(topic, b"pending")  # offset 3, open
    assert open_txn.flush(30) == 0

    def latest(isolation: int) -> int:
        body = {"replica_id": -1, "isolation_level": isolation,
                "topics": [{"name": topic, "partitions": [{"partition_index": 0, "timestamp": -1}]}]}
        with RawClient(bootstrap) as client:
            return client.request(2, 7, body).topics[0].partitions[0].offset

    assert (latest(0), latest(1)) == (4, 3)  # the high watermark; the LSO, at the open transaction
    with RawClient(bootstrap) as client:
        committed, uncommitted = fetch(client, topic, 0, isolation_level=1), fetch(client, topic, 0)
    assert committed.last_stable_offset == 3 and committed.high_watermark == 4
    with Client(bootstrap) as admin:
        producers = {p.current_txn_start_offset: p.producer_id for p in admin.describe_producers(topic, 0)}
    assert [(t.producer_id, t.first_offset) for t in committed.aborted_transactions] == [(producers[-1], 0)]
    assert producers[3] != producers[-1]
    assert not uncommitted.aborted_transactions
    open_txn.commit_transaction(30)
    assert latest(1) == 5


def test_idle_producers_are_forgotten_after_producer_id_expiration(make_broker) -> None:
    broker = make_broker(**{"producer.id.expiration.ms": "1000", "producer.id.expiration.check.interval.ms": "200"})
    topic = create_topic(broker.bootstrap, "expiring")
    producer = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True})
    producer.produce(topic, b"once")
    assert producer.flush(30) == 0
    with Client(broker.bootstrap) as admin:
        assert len(admin.describe_producers(topic, 0)) == 1
        deadline = time.monotonic() + 30
        while admin.describe_producers(topic, 0):
            assert time.monotonic() < deadline, "the idle producer was never forgotten"
            time.sleep(0.2)  # polling the broker's state: it announces nothing
    producer.produce(topic, b"again")  # the partition no longer knows it: any sequence is accepted
    assert producer.flush(30) == 0
    assert read_all(broker.bootstrap, topic, "read_uncommitted", 2) == ["once", "again"]
