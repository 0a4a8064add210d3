"""Load generators of `kbroker bench delayed` (kbroker/bench/delayed.py), each run in its own
process by `workers.run_workers` as "kbroker.bench.delayed_workers:NAME".

Every record a worker sends starts with `RECORD_HEAD`: its kind, a unique id, the CreateTime
the producer set explicitly, its delay and the partition it was sent to. The consumer reads
the due time (CreateTime + delay, the broker's own rule) and the sent-to partition from the
value, so it needs nothing from the producers but the number of ids to wait for. Times are
wall-clock milliseconds (`time.time`): the broker decides what is due by the same clock, and
everything runs on one machine.
"""

from __future__ import annotations

import struct
import time
from array import array
from typing import Any

from kbroker.bench.workers import BENCH_GROUP, QUEUE_FULL_WAIT_S, Channel, WorkerError, payload
from protocol.errors import KafkaError

DELAY_MS_HEADER = "kbroker.delay.ms"
DELAYED_FROM_HEADER = "kbroker.delayed.from"
# kind (int8) | id (int64) | CreateTime ms (int64) | delay ms (int64) | partition sent to (int16)
RECORD_HEAD = struct.Struct(">bqqqh")
DELAYED, PLAIN, SENTINEL = 1, 0, 2
NO_TIME = -1
PENDING_POLL_S = 0.2  # DescribeDelayed while waiting for the leaders to hold nothing pending


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _paced(count: int, spread_s: float) -> Any:
    """Yield 0..count-1, spread evenly over `spread_s` seconds (0: as fast as the caller goes).

    It sleeps until the next index is due rather than busy-waiting, which would take a core
    from the broker on a two-core machine.
    """
    interval = spread_s / count if count and spread_s > 0 else 0.0
    start = time.monotonic()
    for index in range(count):
        if interval:
            while (wait := start + index * interval - time.monotonic()) > 0:
                time.sleep(wait)
        yield index


def delayed_produce(ch: Channel, bootstrap: str, topic: str, partitions: int, first_id: int, count: int,
                    min_delay_ms: int, max_delay_ms: int, spread_s: float, value_size: int,
                    config: dict[str, Any], seed: int = 1) -> dict[str, Any]:
    """Send ids first_id..first_id+count-1 with `kbroker.delay.ms` uniform in [min, max], over
    `spread_s` seconds, to partition id % partitions.

    Returns, per id, when its acknowledgement arrived (an upper bound of when the broker appended
    it: a record due before that may have been due on arrival, so not held at all) and the ids
    that failed.
    """
    import random

    from confluent_kafka import Producer

    acked_ms = array("q", [NO_TIME]) * count
    failed = array("q")

    def on_delivery(err: Any, message: Any) -> None:
        record_id = RECORD_HEAD.unpack_from(message.value())[1]
        if err is None:
            acked_ms[record_id - first_id] = _now_ms()
        else:
            failed.append(record_id)

    producer = Producer({"bootstrap.servers": bootstrap, **config, "on_delivery": on_delivery})
    producer.list_topics(topic, timeout=30)
    rng = random.Random(seed)
    padding = payload(max(0, value_size - RECORD_HEAD.size), seed)
    ch.ready_and_wait()

    start = time.monotonic()
    for index in _paced(count, spread_s):
        record_id = first_id + index
        partition = record_id % partitions
        delay = rng.randint(min_delay_ms, max_delay_ms)
        created = _now_ms()
        value = RECORD_HEAD.pack(DELAYED, record_id, created, delay, partition) + padding
        _send(producer, topic, value, partition, created, [(DELAY_MS_HEADER, b"%d" % delay)])
        producer.poll(0)  # serves acknowledgements as they come: their times bound the append times
        ch.progress(index)
    unsent = producer.flush(120)
    return {"first_id": first_id, "count": count, "sent": count, "unsent": unsent, "failed": failed.tobytes(),
            "acked_ms": acked_ms.tobytes(), "elapsed_s": time.monotonic() - start}


def _send(producer: Any, topic: str, value: bytes, partition: int, created_ms: int,
          headers: list[tuple[str, bytes]] | None = None) -> None:
    while True:
        try:
            producer.produce(topic, value, partition=partition, timestamp=created_ms, headers=headers)
            return
        except BufferError:
            producer.poll(QUEUE_FULL_WAIT_S)  # the client's queue is full: let it drain


def plain_produce(ch: Channel, bootstrap: str, topic: str, partitions: int, rate: float, duration_s: float,
                  value_size: int, config: dict[str, Any]) -> dict[str, Any]:
    """Records without delay at a fixed rate for `duration_s`, round robin over the partitions;
    each one's send time (its CreateTime) and produce latency (produce() to acknowledgement)."""
    from confluent_kafka import Producer

    sent_ms = array("q")
    latency_us = array("q")
    errors: list[str] = []

    def on_delivery(err: Any, message: Any) -> None:
        if err is not None:
            errors.append(str(err))
            return
        sent_ms.append(message.timestamp()[1])
        latency_us.append(int(message.latency() * 1e6))

    producer = Producer({"bootstrap.servers": bootstrap, **config, "on_delivery": on_delivery})
    producer.list_topics(topic, timeout=30)
    padding = payload(max(0, value_size - RECORD_HEAD.size))
    ch.ready_and_wait()

    start_ms = _now_ms()
    start = time.monotonic()
    total = max(1, int(rate * duration_s))
    for index in _paced(total, duration_s):
        created = _now_ms()
        partition = index % partitions
        value = RECORD_HEAD.pack(PLAIN, index, created, 0, partition) + padding
        _send(producer, topic, value, partition, created)
        producer.poll(0)
        ch.progress(index)
    unsent = producer.flush(60)
    elapsed = time.monotonic() - start
    return {"sent": total, "acked": len(latency_us), "errors": len(errors) + unsent,
            "first_error": errors[0] if errors else None, "start_ms": start_ms, "elapsed_s": elapsed,
            "sent_ms": sent_ms.tobytes(), "latency_us": latency_us.tobytes()}


class _Arrivals:
    """The delayed records a consumer received, as columns (a million tuples would not fit a
    small process as well)."""

    COLUMNS = ("ids", "sent_partition", "partition", "due_ms", "received_us", "pending_offset", "offset")

    def __init__(self) -> None:
        for name in self.COLUMNS:
            setattr(self, name, array("q"))

    def add(self, message: Any, received_us: int) -> int:
        _kind, record_id, created, delay, sent_to = RECORD_HEAD.unpack_from(message.value())
        pending = -1
        for name, value in message.headers() or ():
            if name == DELAYED_FROM_HEADER:
                pending = int(value.rpartition(b"@")[2])
        for column, value in zip(self.COLUMNS, (record_id, sent_to, message.partition(), created + delay,
                                                received_us, pending, message.offset()), strict=True):
            getattr(self, column).append(value)
        return record_id

    def as_bytes(self) -> dict[str, bytes]:
        return {name: getattr(self, name).tobytes() for name in self.COLUMNS}


class _Ending:
    """When the consumer has seen every delivery there will be, with no pause taken on trust.

    Once the last record is due and came: wait until the leaders hold nothing pending
    (DescribeDelayed), so nothing more is to be delivered; then append a sentinel to each
    partition with acks=all. Its acknowledgement means every offset below it is committed,
    deliveries included, so the consumer has read everything once it has read the sentinels.
    """

    def __init__(self, bootstrap: str, topic: str, partitions: int) -> None:
        self.bootstrap = bootstrap
        self.topic = topic
        self.partitions = partitions
        self.sentinels: list[int] | None = None
        self.nothing_pending_ms: int | None = None
        self._next_ask = 0.0

    def reached(self, positions: list[int]) -> bool:
        """Whether `positions` (the last offset read per partition) are past the sentinels; sends
        them once nothing is pending (asked at most every PENDING_POLL_S)."""
        if self.sentinels is None:
            if time.monotonic() < self._next_ask:
                return False
            self._next_ask = time.monotonic() + PENDING_POLL_S
            if not self._nothing_pending():
                return False
            self.nothing_pending_ms = _now_ms()
            self.sentinels = self._send_sentinels()
        return all(at >= sentinel for at, sentinel in zip(positions, self.sentinels, strict=True))

    def _nothing_pending(self) -> bool:
        from kbroker.client import Client

        try:
            with Client(self.bootstrap, client_id="kbroker-bench-end", timeout=10) as client:
                found = client.describe_delayed([self.topic])
        except (KafkaError, OSError):
            return False  # a leader moving or coming back: ask again
        return len(found) == self.partitions and not any(p.pending_count for p in found)

    def _send_sentinels(self) -> list[int]:
        from confluent_kafka import Producer

        offsets = [-1] * self.partitions
        errors: list[str] = []

        def on_delivery(err: Any, message: Any) -> None:
            if err is not None:
                errors.append(str(err))
            else:
                offsets[message.partition()] = message.offset()

        producer = Producer({"bootstrap.servers": self.bootstrap, "acks": "all", "enable.idempotence": True,
                             "on_delivery": on_delivery})
        now = _now_ms()
        for partition in range(self.partitions):
            producer.produce(self.topic, RECORD_HEAD.pack(SENTINEL, partition, now, 0, partition),
                             partition=partition, timestamp=now)
        unsent = producer.flush(120)
        if errors or unsent or min(offsets) < 0:
            raise WorkerError(f"the sentinels failed: {errors[:3] or f'{unsent} unsent'}")
        return offsets


def delayed_consume(ch: Channel, bootstrap: str, topic: str, partitions: int, expected: int, min_run_s: float,
                    deadline_s: float, config: dict[str, Any]) -> dict[str, Any]:
    """Read the topic from its start; for each delayed record, what `_Arrivals` keeps.

    Done once `expected` distinct ids came, `min_run_s` passed, the last due time passed and
    `_Ending` says everything delivered was read; or at `deadline_s`, whatever is missing then.
    The client's transient errors (a broker killed by the run) are counted, not fatal.
    """
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    errors: list[str] = []
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": BENCH_GROUP, "enable.auto.commit": False,
                         "enable.partition.eof": False, "error_cb": lambda e: errors.append(str(e)),
                         **config})
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=30)  # connected before the start
    arrivals = _Arrivals()
    seen = bytearray(expected)
    distinct = 0
    last_due_ms = 0
    plain_latency_us = array("q")
    ending = _Ending(bootstrap, topic, partitions)
    ch.ready_and_wait()

    start = time.monotonic()
    positions = [-1] * partitions
    done = False
    while not done and time.monotonic() - start < deadline_s:
        message = consumer.poll(0.1)
        if message is not None and message.error():
            if message.error().fatal():
                raise WorkerError(str(message.error()))
            errors.append(str(message.error()))
        elif message is not None:
            positions[message.partition()] = message.offset()
            received_us = time.time_ns() // 1000
            kind = message.value()[0]
            if kind == DELAYED:
                record_id = arrivals.add(message, received_us)
                last_due_ms = max(last_due_ms, arrivals.due_ms[-1])
                if 0 <= record_id < expected and not seen[record_id]:
                    seen[record_id] = 1
                    distinct += 1
                ch.progress(distinct)
            elif kind == PLAIN:
                # The plain records' end-to-end latency: what this consumer on this machine adds
                # anyway, against which the delayed records' lateness can be read.
                plain_latency_us.append(received_us - RECORD_HEAD.unpack_from(message.value())[2] * 1000)
        done = (distinct >= expected and time.monotonic() - start >= min_run_s and _now_ms() >= last_due_ms
                and ending.reached(positions))
    consumer.close()
    return {"distinct": distinct, "timed_out": not done, "plain_latency_us": plain_latency_us.tobytes(),
            "nothing_pending_ms": ending.nothing_pending_ms, "sentinels": ending.sentinels,
            "client_errors": len(errors), "first_client_errors": errors[:5], **arrivals.as_bytes()}
