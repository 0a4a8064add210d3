"""Client quotas enforced on a real broker against real clients: a confluent-kafka producer held
to its client id's producer_byte_rate, consumers (confluent-kafka and kafka-python) held to their
consumer_byte_rate, clients without a quota not slowed, every message delivered once.

The rate that must hold is Kafka's: the average over the quota's sampled windows. Kafka's Rate
spans at least 10 whole windows of its 11 (one second each), so a client that sends as fast as
it can first sends about ten seconds' worth of its quota at once, is then held back until that
burst's sample ages out of the 11 windows (11 s later), and starts over: a sawtooth of period
11 s whose average is the quota, but whose rate over an arbitrary 10 s may be twice the quota or
nearly nothing. So the rate is measured as Kafka measures it, over whole spans of the sampled
windows: the client's delivered (or consumed) bytes over two consecutive 11 s spans from its
first delivery, less half a second (the third burst is due exactly 22 s after the first: the
margin keeps it out whatever the network's latencies).
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable

import pytest
from confluent_kafka import Consumer, Producer

from kbroker.client import Client
from kbroker.ports import free_port
from tests.brokers import BrokerProcess
from tests.conftest import create_topic
from tests.integration.test_metrics import scrape, value

MB = 1_000_000
SPAN_S = 22.0 - 0.5  # two spans of Kafka's 11 sampled windows, over which the rate is measured
RUN_S = SPAN_S + 1.0
TOLERANCE = 0.10
VALUE_SIZE = 1000


def _set_quota(bootstrap: str, client_id: str, key: str, value: float) -> None:
    with Client(bootstrap) as client:
        [result] = client.alter_client_quotas([((("client-id", client_id),), {key: value})])
        assert result.error_code == 0, result


def _rate(events: list[tuple[float, int]]) -> float:
    """Bytes per second over SPAN_S seconds from the first event."""
    start = min(at for at, _ in events)
    return sum(size for at, size in events if start <= at < start + SPAN_S) / SPAN_S


def _per_second(events: list[tuple[float, int]]) -> list[float]:
    return [round(sum(b for at, b in events if i <= at < i + 1) / MB, 2) for i in range(int(RUN_S) + 1)]


def _value(n: int) -> bytes:
    prefix = f"{n:010d}:".encode()
    return prefix + b"x" * (VALUE_SIZE - len(prefix))


def _produce_for(bootstrap: str, topic: str, client_id: str, seconds: float | None = None, count: int | None = None,
                 throttles: list[int] | None = None) -> tuple[list[tuple[float, int]], int, float]:
    """Produce as fast as the producer goes, for `seconds` or `count` messages; returns the
    deliveries (time since start, bytes), the count produced and when producing stopped."""
    delivered: list[tuple[float, int]] = []
    failed: list[str] = []
    start = time.monotonic()

    def on_delivery(error: object, message: object) -> None:
        if error is not None:
            failed.append(str(error))
        else:
            delivered.append((time.monotonic() - start, len(message.value())))  # type: ignore[attr-defined]

    def on_throttle(event: object) -> None:
        if throttles is not None:
            throttles.append(int(event.throttle_time * 1000))  # type: ignore[attr-defined]

    # Batches of 64 KiB (the Java producer's are 16 KiB; librdkafka's default is 1 MB, which at 1
    # MB/s would make each request a second's worth of quota).
    producer = Producer({"bootstrap.servers": bootstrap, "client.id": client_id, "linger.ms": 5, "acks": 1,
                         "batch.size": 65536,
                         "queue.buffering.max.messages": 2000, "throttle_cb": on_throttle})
    produced = 0
    while (seconds is None or time.monotonic() - start < seconds) and (count is None or produced < count):
        try:
            producer.produce(topic, _value(produced), on_delivery=on_delivery)
            produced += 1
        except BufferError:
            producer.poll(0.01)
            continue
        producer.poll(0)
    stopped = time.monotonic() - start
    assert producer.flush(60) == 0
    assert not failed, failed[:5]
    return delivered, produced, stopped


def _ids(bootstrap: str, topic: str, expected: int) -> list[int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{topic}", "auto.offset.reset": "earliest",
                         "enable.auto.commit": False})
    consumer.subscribe([topic])
    ids: list[int] = []
    deadline = time.monotonic() + 120
    try:
        while len(ids) < expected and time.monotonic() < deadline:
            for message in consumer.consume(1000, timeout=1.0):
                assert message.error() is None, message.error()
                ids.append(int(message.value()[:10]))
        # Anything beyond the expected count (a duplicate) would arrive now.
        for message in consumer.consume(1000, timeout=1.0):
            ids.append(int(message.value()[:10]))
    finally:
        consumer.close()
    return ids


def test_producer_is_held_to_its_client_id_quota(make_broker: Callable[..., BrokerProcess]) -> None:
    metrics_port = free_port()
    broker = make_broker(**{"metrics.listener": f"http://127.0.0.1:{metrics_port}"})
    limited_topic = create_topic(broker.bootstrap, "quota-limited")
    free_topic = create_topic(broker.bootstrap, "quota-free")
    _set_quota(broker.bootstrap, "limited-producer", "producer_byte_rate", 1 * MB)

    free_result: dict[str, float] = {}

    def free_producer() -> None:
        # Another client id on the same broker, while the limited one runs: not slowed.
        count = 30_000  # 30 MB
        delivered, _, _ = _produce_for(broker.bootstrap, free_topic, "free-producer", count=count)
        assert len(delivered) == count
        free_result["rate"] = count * VALUE_SIZE / max(at for at, _ in delivered)

    throttles: list[int] = []
    thread = threading.Thread(target=free_producer)
    thread.start()
    delivered, produced, stopped = _produce_for(broker.bootstrap, limited_topic, "limited-producer", seconds=RUN_S,
                                                throttles=throttles)
    thread.join(120)

    rate = _rate(delivered)
    print("per second:", _per_second(delivered))
    print(f"limited producer: {rate / MB:.3f} MB/s over {SPAN_S:g} s; "
          f"{len(throttles)} throttled answers, max {max(throttles, default=0)} ms; "
          f"free producer: {free_result.get('rate', 0) / MB:.1f} MB/s")
    assert abs(rate - MB) <= TOLERANCE * MB, f"{rate / MB:.3f} MB/s is not 1 MB/s within 10 %"
    assert throttles and max(throttles) > 0  # the producer was told (throttle_cb)
    # ... and the operator sees it, under the quota's entity (librdkafka reports a throttle once
    # per answer at most, so the broker counts at least what the client heard).
    samples, _ = scrape(metrics_port)
    entity = {"entity_type": "client-id", "entity": "limited-producer"}
    assert (value(samples, "kbroker_throttled_requests_total", **entity) or 0) >= len([t for t in throttles if t])
    assert (value(samples, "kbroker_throttle_time_seconds_total", **entity) or 0) * 1000 >= max(throttles)
    assert value(samples, "kbroker_throttled_requests_total", entity_type="client-id", entity="free-producer") is None
    assert free_result["rate"] > 5 * MB, f"the producer without a quota ran at {free_result['rate'] / MB:.2f} MB/s"
    assert len(delivered) == produced
    ids = _ids(broker.bootstrap, limited_topic, produced)
    assert sorted(ids) == list(range(produced)), "a message was lost or delivered twice"


def test_kafka_python_producer_is_held_to_its_quota(make_broker: Callable[..., BrokerProcess]) -> None:
    from kafka import KafkaProducer

    broker = make_broker()
    topic = create_topic(broker.bootstrap, "quota-kafka-python-producer")
    _set_quota(broker.bootstrap, "limited-kafka-python-producer", "producer_byte_rate", 1 * MB)
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, client_id="limited-kafka-python-producer",
                             linger_ms=5, batch_size=65536, acks=1)
    delivered: list[tuple[float, int]] = []
    failed: list[BaseException] = []
    in_flight: deque = deque()
    start = time.monotonic()
    produced = 0
    try:
        while time.monotonic() - start < RUN_S:
            # At most 2 MB unacknowledged (this client's buffer has no bound of its own): what is
            # still queued when the run ends is sent within a few seconds.
            if len(in_flight) >= 2000:
                in_flight.popleft().get(timeout=60)
            future = producer.send(topic, _value(produced))
            future.add_callback(lambda _meta: delivered.append((time.monotonic() - start, VALUE_SIZE)))
            future.add_errback(failed.append)
            in_flight.append(future)
            produced += 1
        producer.flush(60)
        # Its network layer's throttle-time sensor records the answers' throttle_time_ms.
        throttle_max = max(value for group in producer.metrics().values() for name, value in group.items()
                           if name.endswith("throttle-time-max"))
    finally:
        producer.close()
    rate = _rate(delivered)
    print("per second:", _per_second(delivered))
    print(f"kafka-python producer: {rate / MB:.3f} MB/s over {SPAN_S:g} s; throttle max {throttle_max} ms")
    assert not failed, failed[:3]
    assert abs(rate - MB) <= TOLERANCE * MB, f"{rate / MB:.3f} MB/s is not 1 MB/s within 10 %"
    assert throttle_max > 0  # the client heard of it
    assert len(delivered) == produced
    assert sorted(_ids(broker.bootstrap, topic, produced)) == list(range(produced))


@pytest.fixture
def filled_topic(make_broker: Callable[..., BrokerProcess]) -> tuple[BrokerProcess, str, int]:
    broker = make_broker()
    topic = create_topic(broker.bootstrap, "quota-fetch")
    count = 60_000  # 60 MB: more than a run at 2 MB/s may read
    delivered, _, _ = _produce_for(broker.bootstrap, topic, "filler", count=count)
    assert len(delivered) == count
    return broker, topic, count


def _held_consumer_rate(events: list[tuple[float, int]]) -> float:
    rate = _rate(events)
    print("per second:", _per_second(events))
    print(f"consumer: {rate / MB:.3f} MB/s over {SPAN_S:g} s")
    return rate


def test_confluent_consumer_is_held_to_its_quota(filled_topic: tuple[BrokerProcess, str, int]) -> None:
    broker, topic, count = filled_topic
    _set_quota(broker.bootstrap, "limited-confluent", "consumer_byte_rate", 2 * MB)
    throttles: list[int] = []
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "quota-confluent",
                         "client.id": "limited-confluent", "auto.offset.reset": "earliest",
                         "enable.auto.commit": False,
                         "throttle_cb": lambda event: throttles.append(int(event.throttle_time * 1000))})
    consumer.subscribe([topic])
    events: list[tuple[float, int]] = []
    ids: list[int] = []
    start: float | None = None
    try:
        while start is None or time.monotonic() - start < RUN_S:
            for message in consumer.consume(500, timeout=0.2):
                assert message.error() is None, message.error()
                now = time.monotonic()
                start = start or now
                events.append((now - start, len(message.value())))
                ids.append(int(message.value()[:10]))
    finally:
        consumer.close()
    rate = _held_consumer_rate(events)
    assert abs(rate - 2 * MB) <= TOLERANCE * 2 * MB, f"{rate / MB:.3f} MB/s is not 2 MB/s within 10 %"
    assert throttles and max(throttles) > 0
    assert ids == list(range(len(ids)))  # in order, once each


def test_kafka_python_consumer_is_held_to_its_quota(filled_topic: tuple[BrokerProcess, str, int]) -> None:
    from kafka import KafkaConsumer

    broker, topic, count = filled_topic
    _set_quota(broker.bootstrap, "limited-kafka-python", "consumer_byte_rate", 2 * MB)
    consumer = KafkaConsumer(topic, bootstrap_servers=broker.bootstrap, client_id="limited-kafka-python",
                             group_id="quota-kafka-python", auto_offset_reset="earliest", enable_auto_commit=False)
    events: list[tuple[float, int]] = []
    ids: list[int] = []
    start: float | None = None
    try:
        while start is None or time.monotonic() - start < RUN_S:
            for records in consumer.poll(timeout_ms=200).values():
                for record in records:
                    now = time.monotonic()
                    start = start or now
                    events.append((now - start, len(record.value)))
                    ids.append(int(record.value[:10]))
    finally:
        consumer.close()
    rate = _held_consumer_rate(events)
    assert abs(rate - 2 * MB) <= TOLERANCE * 2 * MB, f"{rate / MB:.3f} MB/s is not 2 MB/s within 10 %"
    assert ids == list(range(len(ids)))
