"""Load generators: confluent-kafka producers and consumers, each in its own process.

Processes rather than threads because a Python loop calling produce() is itself CPU-bound: two
producers in threads would share one interpreter lock. They are spawned (not forked) so no
librdkafka thread state is copied. Each worker connects and fetches metadata, reports ready,
and waits for a common start signal, so setup is never timed and parallel workers start
together. Times are `time.monotonic()`, CLOCK_MONOTONIC on Linux: one clock for all processes
of the machine, which is what lets a consumer process compare a producer process's timestamps.
"""

from __future__ import annotations

import importlib
import json
import multiprocessing
import queue
import random
import string
import struct
import time
import traceback
from array import array
from collections.abc import Callable
from typing import Any

BENCH_GROUP = "kbroker-bench"
# Latency messages start with the producer's send time (ns) and a kind byte.
LATENCY_HEAD = struct.Struct(">qB")
WARMUP, MEASURED, END = 0, 1, 2
PROGRESS_INTERVAL_S = 0.25
STALL_TIMEOUT_S = 60.0
# How long a producer whose queue is full waits for it to drain. confluent-kafka truncates a
# poll's timeout to whole milliseconds: the 0.5 ms waited here before was no wait at all, and
# the spinning took up to half a core from the brokers measured on the same machine.
QUEUE_FULL_WAIT_S = 0.001


class WorkerError(RuntimeError):
    pass


class Channel:
    """A worker's line to the parent: ready/start handshake, throttled progress, and a count
    shared by all the workers of a run (so that workers splitting one job know when it is done)."""

    def __init__(self, index: int, messages: Any, start: Any, shared_count: Any = None) -> None:
        self.index = index
        self._messages = messages
        self._start = start
        self._shared_count = shared_count
        self._last_progress = 0.0

    def ready_and_wait(self, timeout_s: float = 300) -> None:
        self._messages.put(("ready", self.index, None))
        if not self._start.wait(timeout_s):
            raise WorkerError("no start signal")

    def add_to_shared_count(self, count: int) -> int:
        """Add to the count all workers of the run share; the new total."""
        with self._shared_count.get_lock():
            self._shared_count.value += count
            return self._shared_count.value

    def shared_count(self) -> int:
        return self._shared_count.value

    def progress(self, count: int) -> None:
        now = time.monotonic()
        if now - self._last_progress >= PROGRESS_INTERVAL_S:
            self._last_progress = now
            self._messages.put(("progress", self.index, count))


def payload(size: int, seed: int = 7) -> bytes:
    """Random capital letters, as Kafka's producer-perf-test sends: compressible like text is."""
    rng = random.Random(seed)
    return "".join(rng.choices(string.ascii_uppercase, k=size)).encode()


# -- workers (run in child processes) -----------------------------------------------------------


def _producer(bootstrap: str, config: dict[str, Any], topic: str) -> tuple[Any, list[str]]:
    """A producer reporting only failed deliveries (into the returned list), its topic's metadata known."""
    from confluent_kafka import Producer

    errors: list[str] = []

    def on_delivery(err: Any, _msg: Any) -> None:
        if err is not None:
            errors.append(str(err))

    producer = Producer({"bootstrap.servers": bootstrap, **config, "delivery.report.only.error": True,
                         "on_delivery": on_delivery})
    producer.list_topics(topic, timeout=30)
    return producer, errors


def produce(ch: Channel, bootstrap: str, topic: str, message_size: int, duration_s: float,
            config: dict[str, Any], max_messages: int = 0, keyed: bool = False,
            partitions: int = 0) -> dict[str, Any]:
    """Send as fast as the client allows for duration_s (or max_messages); time includes the final flush.

    keyed: keys spread the messages over all partitions (the partition sweep). partitions > 0:
    max_messages per partition, sent partition by partition (preloading a topic evenly).
    """
    producer, errors = _producer(bootstrap, config, topic)
    value = payload(message_size)
    keys = [b"key-%d" % i for i in range(4096)]
    send = producer.produce
    poll = producer.poll
    ch.ready_and_wait()

    start = time.monotonic()
    cpu_start = time.process_time()  # all threads: the Python loop and librdkafka's own
    deadline = start + duration_s
    sent = 0
    plan = [(p, max_messages) for p in range(partitions)] if partitions else [(-1, max_messages or 1 << 62)]
    for partition, count in plan:
        done = 0
        while done < count:
            try:
                if partition >= 0:
                    send(topic, value, partition=partition)
                elif keyed:
                    send(topic, value, keys[sent & 4095])
                else:
                    send(topic, value)
            except BufferError:
                poll(QUEUE_FULL_WAIT_S)  # the client's queue is full: let it drain
                continue
            sent += 1
            done += 1
            if not sent & 1023:
                poll(0)
                now = time.monotonic()
                if not partitions and now >= deadline:
                    break
                ch.progress(sent)
    unsent = producer.flush(120)
    end = time.monotonic()
    acked = sent - len(errors) - unsent
    return {"sent": sent, "acked": acked, "errors": len(errors), "first_error": errors[0] if errors else None,
            "start": start, "end": end, "bytes": acked * message_size, "cpu_s": time.process_time() - cpu_start}


def consume(ch: Channel, bootstrap: str, topic: str, partitions: int, passes: int, message_size: int,
            config: dict[str, Any]) -> dict[str, Any]:
    """Read every message of the topic `passes` times (assign, no group: no rebalance to wait for).

    Each pass has a consumer of its own, connected beforehand: one consumer re-assigned for the
    next pass would first wait out the long-poll fetch it left at the end of the log
    (fetch.wait.max.ms), which would measure the client's setting, not the broker.
    """
    from confluent_kafka import Consumer, TopicPartition

    consumers = [Consumer({"bootstrap.servers": bootstrap, "group.id": BENCH_GROUP, "enable.auto.commit": False,
                           "enable.partition.eof": False, **config}) for _ in range(passes)]
    marks = [consumers[0].get_watermark_offsets(TopicPartition(topic, p), timeout=30) for p in range(partitions)]
    for consumer in consumers[1:]:
        consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=30)  # connects it
    per_pass = sum(high - low for low, high in marks)
    if per_pass <= 0:
        raise WorkerError(f"{topic} is empty")
    ch.ready_and_wait()

    start = time.monotonic()
    cpu_start = time.process_time()
    first_message: float | None = None
    total = 0
    for consumer in consumers:
        consumer.assign([TopicPartition(topic, p, low) for p, (low, _high) in enumerate(marks)])
        got = 0
        last_progress = time.monotonic()
        while got < per_pass:
            # Never ask for more than is left: consume() waits for a full batch or its timeout.
            batch = consumer.consume(min(10_000, per_pass - got), 1.0)
            now = time.monotonic()
            if not batch:
                if now - last_progress > STALL_TIMEOUT_S:
                    raise WorkerError(f"no message for {STALL_TIMEOUT_S}s after {got} of {per_pass}")
                continue
            if first_message is None:
                first_message = now
            for message in batch:
                if message.error():
                    raise WorkerError(str(message.error()))
            got += len(batch)
            last_progress = now
            ch.progress(total + got)
        total += got
    end = time.monotonic()
    cpu_s = time.process_time() - cpu_start
    for consumer in consumers:
        consumer.close()
    return {"messages": total, "bytes": total * message_size, "start": start, "end": end,
            "first_message": first_message, "per_pass": per_pass, "cpu_s": cpu_s}


def share_consume(ch: Channel, bootstrap: str, topic: str, group: str, expected: int, message_size: int,
                  config: dict[str, Any]) -> dict[str, Any]:
    """One share consumer of `group` (implicit acknowledgement: each poll accepts what the one
    before returned) polling until the run's workers together received `expected` records.

    It subscribes before reporting ready; the parent waits for its assignment before the start
    (the client fetches only when polled, so nothing is acquired before). Its end is when it
    received its last record: the polls after it only wait for the other workers to finish.
    Returns the offsets received per partition, for the parent to check each record came once.
    """
    from confluent_kafka import ShareConsumer

    # log_level 3: no "share consumer is in Preview" warning in the benchmark's output.
    consumer = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group,
                              "share.acknowledgement.mode": "implicit", "log_level": 3, **config})
    consumer.subscribe([topic])
    ch.ready_and_wait()

    start = time.monotonic()
    cpu_start = time.process_time()
    first_message: float | None = None
    last_message = start
    offsets: dict[int, array] = {}
    redelivered = got = 0
    run_total, run_moved = 0, start  # the run's count, and when it last grew (for stalls)
    while True:
        # Polled at least once, even when the others already received everything: the client
        # takes in its assignment meanwhile, and librdkafka's close() can hang otherwise.
        batch = consumer.poll(0.1)
        now = time.monotonic()
        if not batch:
            total = ch.shared_count()
            if total >= expected:
                break
            if total != run_total:
                run_total, run_moved = total, now
            elif now - run_moved > STALL_TIMEOUT_S:
                raise WorkerError(f"no record for {STALL_TIMEOUT_S}s; the run received {total} of {expected}")
            continue
        for message in batch:
            if message.error():
                raise WorkerError(str(message.error()))
            offsets.setdefault(message.partition(), array("q")).append(message.offset())
            redelivered += message.delivery_count() > 1
        if first_message is None:
            first_message = now
        last_message = now
        got += len(batch)
        total = ch.add_to_shared_count(len(batch))
        ch.progress(got)
        if total >= expected:
            break
    cpu_s = time.process_time() - cpu_start
    # Acknowledge the last poll's records before closing: librdkafka's close() does not (its final
    # ShareAcknowledge carries none), so they would go back to the queue and to the other
    # consumers still polling.
    consumer.commit_sync(30)
    consumer.close()
    return {"messages": got, "bytes": got * message_size, "start": start, "end": last_message,
            "first_message": first_message, "redelivered": redelivered, "cpu_s": cpu_s,
            "offsets": {partition: values.tobytes() for partition, values in offsets.items()}}


def latency_consume(ch: Channel, bootstrap: str, topic: str, partitions: int,
                    config: dict[str, Any], timeout_s: float) -> dict[str, Any]:
    """Receive timestamped messages from the end of the log; latency = receive time - send time."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": BENCH_GROUP, "enable.auto.commit": False,
                         "enable.partition.eof": False, **config})
    ends = [consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1] for p in range(partitions)]
    consumer.assign([TopicPartition(topic, p, end) for p, end in enumerate(ends)])
    ch.ready_and_wait()
    latencies = array("q")
    ended: set[int] = set()
    deadline = time.monotonic() + timeout_s
    warmup = 0
    while len(ended) < partitions and time.monotonic() < deadline:
        message = consumer.poll(0.1)
        received = time.monotonic_ns()
        if message is None:
            continue
        if message.error():
            raise WorkerError(str(message.error()))
        sent, kind = LATENCY_HEAD.unpack_from(message.value())
        if kind == MEASURED:
            latencies.append(received - sent)
            ch.progress(len(latencies))
        elif kind == END:
            ended.add(message.partition())
        else:
            warmup += 1
    consumer.close()
    if len(ended) < partitions:
        raise WorkerError(f"end markers missing after {timeout_s}s ({len(latencies)} messages received)")
    return {"latencies_ns": latencies.tobytes(), "warmup_messages": warmup}


def latency_produce(ch: Channel, bootstrap: str, topic: str, partitions: int, rate: float, duration_s: float,
                    warmup_s: float, message_size: int, config: dict[str, Any]) -> dict[str, Any]:
    """Send at a fixed rate; each message carries its send time.

    Pacing sleeps until the next message is due and then sends every message due by now: a
    busy-wait at tens of thousands of messages per second would take a core from the broker.
    """
    producer, errors = _producer(bootstrap, config, topic)
    padding = payload(max(0, message_size - LATENCY_HEAD.size))
    pack = LATENCY_HEAD.pack
    send = producer.produce
    interval_ns = 1e9 / rate
    ch.ready_and_wait()

    start = time.monotonic_ns()
    measure_from = start + int(warmup_s * 1e9)
    stop_at = measure_from + int(duration_s * 1e9)
    sent = measured = 0
    while True:
        now = time.monotonic_ns()
        if now >= stop_at:
            break
        due = start + int(sent * interval_ns)
        if now < due:
            time.sleep(min(due - now, 1_000_000) / 1e9)
            continue
        while due <= now:
            kind = MEASURED if now >= measure_from else WARMUP
            send(topic, pack(time.monotonic_ns(), kind) + padding, partition=sent % partitions)
            measured += kind == MEASURED
            sent += 1
            due = start + int(sent * interval_ns)
        producer.poll(0)
    for partition in range(partitions):
        send(topic, pack(time.monotonic_ns(), END) + padding, partition=partition)
    unsent = producer.flush(60)
    return {"sent": sent, "measured": measured, "errors": len(errors) + unsent,
            "first_error": errors[0] if errors else None, "rate": sent / ((time.monotonic_ns() - start) / 1e9)}


# -- filtered views (kbroker/bench/views.py) ------------------------------------------------------------

TAG_HEADER = "tag"
# Distinct values a tagged preload draws from: few enough to build quickly, enough that two
# records with the same value rarely share lz4's 64 KiB window (64 records of 1 KB).
TEXT_VALUES = 4096
# librdkafka's statistics while a view is read: its brokers' `rxbytes` are the bytes received.
STATS_INTERVAL_MS = 100


def text_values(count: int, size: int, seed: int) -> list[bytes]:
    """`count` distinct values of `size` bytes: words of random capital letters (workers.payload's
    alphabet) from one vocabulary, so that lz4 compresses them about as it compresses text,
    rather than not at all (random letters) or a hundredfold (one value repeated)."""
    rng = random.Random(seed)
    words = ["".join(rng.choices(string.ascii_uppercase, k=rng.randint(2, 9))) for _ in range(2000)]
    values = []
    for _ in range(count):
        text = " ".join(rng.choices(words, k=size // 3))  # words average 6.5 bytes: always enough
        values.append(text.encode()[:size])
    return values


def tagged_produce(ch: Channel, bootstrap: str, topic: str, partitions: int, per_partition: int,
                   message_size: int, tags: int, seed: int, config: dict[str, Any]) -> dict[str, Any]:
    """Preload `per_partition` records into each partition, each with a header `tag` = t0..t{tags-1}
    drawn per record from a seeded generator (a batch holds every tag, in no pattern a batch
    boundary follows), and a value drawn from `text_values`. Returns how many records of each
    tag went to each partition, which is what each view must give."""
    producer, errors = _producer(bootstrap, config, topic)
    values = text_values(TEXT_VALUES, message_size, seed)
    headers = [[(TAG_HEADER, b"t%d" % t)] for t in range(tags)]
    counts = [[0] * tags for _ in range(partitions)]
    rng = random.Random(seed)
    send = producer.produce
    ch.ready_and_wait()

    start = time.monotonic()
    cpu_start = time.process_time()
    sent = 0
    for partition in range(partitions):
        for _ in range(per_partition):
            tag = rng.randrange(tags)
            value = values[rng.randrange(TEXT_VALUES)]
            while True:
                try:
                    send(topic, value, partition=partition, headers=headers[tag])
                    break
                except BufferError:
                    producer.poll(QUEUE_FULL_WAIT_S)  # the client's queue is full: let it drain
            counts[partition][tag] += 1
            sent += 1
            if not sent & 1023:
                producer.poll(0)
                ch.progress(sent)
    unsent = producer.flush(120)
    return {"sent": sent, "acked": sent - len(errors) - unsent, "errors": len(errors) + unsent,
            "first_error": errors[0] if errors else None, "tag_counts": counts, "start": start,
            "end": time.monotonic(), "cpu_s": time.process_time() - cpu_start}


def read_to_end(ch: Channel, bootstrap: str, topic: str, partitions: int, config: dict[str, Any]) -> dict[str, Any]:
    """Read every partition of `topic` (a topic or a view) from its start until the consumer's
    position reaches the high watermark each had when the worker connected.

    A view has fewer records than its offsets span, so the end is the position, not a count:
    a view's answers end with a gap marker where the newest records did not match, which moves
    librdkafka's position on when the application polls past it. The bytes received are
    librdkafka's `rxbytes` of all its brokers, from the statistics: the first two callbacks
    after the setup (the second emitted after it) and after the end bracket the read.
    """
    from confluent_kafka import Consumer, TopicPartition

    received_bytes: list[int] = []

    def on_stats(text: str) -> None:
        brokers = json.loads(text)["brokers"].values()
        received_bytes.append(sum(b.get("rxbytes", 0) for b in brokers))

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": BENCH_GROUP, "enable.auto.commit": False,
                         "enable.partition.eof": False, "statistics.interval.ms": STATS_INTERVAL_MS,
                         "stats_cb": on_stats, **config})
    marks = [consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30) for p in range(partitions)]
    rx_before = _settled_rx(consumer, received_bytes)
    ch.ready_and_wait()

    start = time.monotonic()
    cpu_start = time.process_time()
    consumer.assign([TopicPartition(topic, p, low) for p, (low, _high) in enumerate(marks)])
    messages, first_message = _read_positions_to(consumer, topic, [high for _low, high in marks], ch)
    end = time.monotonic()
    cpu_s = time.process_time() - cpu_start
    rx_bytes = _settled_rx(consumer, received_bytes) - rx_before
    consumer.close()
    return {"messages": messages, "start": start, "end": end, "first_message": first_message, "cpu_s": cpu_s,
            "rx_bytes": rx_bytes, "offsets": sum(high - low for low, high in marks)}


def _read_positions_to(consumer: Any, topic: str, ends: list[int], ch: Channel) -> tuple[int, float | None]:
    """Consume until every partition's position is at its end; (messages, first message's time)."""
    from confluent_kafka import TopicPartition

    wanted = [TopicPartition(topic, p) for p, end in enumerate(ends)]
    messages = 0
    first_message: float | None = None
    moved, moved_at = -1, time.monotonic()
    while True:
        # A short timeout: consume() waits for a full batch or its timeout, and a view's last
        # answer may hold nothing but a gap marker, which fills no batch.
        batch = consumer.consume(10_000, 0.005)
        for message in batch:
            if message.error():
                raise WorkerError(str(message.error()))
        if batch:
            messages += len(batch)
            first_message = first_message or time.monotonic()
            ch.progress(messages)
        positions = [tp.offset for tp in consumer.position(wanted)]
        if all(position >= end for position, end in zip(positions, ends, strict=True)):
            return messages, first_message
        now = time.monotonic()
        if sum(positions) != moved:
            moved, moved_at = sum(positions), now
        elif now - moved_at > STALL_TIMEOUT_S:
            raise WorkerError(f"positions {positions} stopped short of {ends} for {STALL_TIMEOUT_S}s "
                              f"({messages} messages received)")


def _settled_rx(consumer: Any, received_bytes: list[int]) -> int:
    """The bytes received as of now: the second statistics callback from here was emitted
    after this call (the first may have been queued before it)."""
    wanted = len(received_bytes) + 2
    deadline = time.monotonic() + 30
    while len(received_bytes) < wanted:
        if time.monotonic() > deadline:
            raise WorkerError("no librdkafka statistics within 30s")
        consumer.poll(STATS_INTERVAL_MS / 1000)  # serves the statistics callback; nothing is left to read
    return received_bytes[-1]


WORKERS: dict[str, Callable[..., dict[str, Any]]] = {
    "produce": produce,
    "consume": consume,
    "share_consume": share_consume,
    "latency_consume": latency_consume,
    "latency_produce": latency_produce,
    "tagged_produce": tagged_produce,
    "read_to_end": read_to_end,
}


def _worker(name: str) -> Callable[..., dict[str, Any]]:
    """One of WORKERS, or "package.module:function": a benchmark keeps its own workers in its
    module (kbroker/bench/delayed_workers.py), imported by the spawned process."""
    if name in WORKERS:
        return WORKERS[name]
    module, _, function = name.partition(":")
    return getattr(importlib.import_module(module), function)


def _worker_main(name: str, kwargs: dict[str, Any], index: int, messages: Any, start: Any,
                 shared_count: Any) -> None:
    try:
        result = _worker(name)(Channel(index, messages, start, shared_count), **kwargs)
        messages.put(("result", index, result))
    except BaseException:  # the parent must hear about any failure, or it waits for nothing
        messages.put(("error", index, traceback.format_exc()))


def run_workers(specs: list[tuple[str, dict[str, Any]]], on_progress: Callable[[int], None] | None = None,
                timeout_s: float = 600, before_start: Callable[[], None] | None = None) -> list[dict[str, Any]]:
    """Start the workers, release them together once all are ready, and return their results in order.

    on_progress gets the sum of the workers' latest counts. before_start runs once all workers
    are ready, before they are released (to wait for what their setup set off, e.g. a group
    assignment). A worker's failure stops the others and raises WorkerError with its traceback.
    """
    ctx = multiprocessing.get_context("spawn")
    messages = ctx.Queue()
    start = ctx.Event()
    shared_count = ctx.Value("q", 0)
    procs = [ctx.Process(target=_worker_main, args=(name, kwargs, i, messages, start, shared_count), daemon=True)
             for i, (name, kwargs) in enumerate(specs)]
    for proc in procs:
        proc.start()
    results: dict[int, dict[str, Any]] = {}
    counts = [0] * len(specs)
    ready = 0
    deadline = time.monotonic() + timeout_s
    try:
        while len(results) < len(specs):
            try:
                kind, index, data = messages.get(timeout=1.0)
            except queue.Empty:
                if time.monotonic() > deadline:
                    raise WorkerError(f"workers did not finish within {timeout_s}s") from None
                dead = [p for i, p in enumerate(procs) if i not in results and not p.is_alive()]
                if dead and messages.empty():
                    raise WorkerError(f"worker exited with {dead[0].exitcode} without a result") from None
                continue
            if kind == "ready":
                ready += 1
                if ready == len(specs):
                    if before_start is not None:
                        before_start()
                    start.set()
            elif kind == "progress":
                counts[index] = data
                if on_progress is not None:
                    on_progress(sum(counts))
            elif kind == "result":
                results[index] = data
            else:
                raise WorkerError(f"worker {specs[index][0]} failed:\n{data}")
    finally:
        start.set()  # a worker still waiting must not hang
        for proc in procs:
            proc.join(timeout=10)
            if proc.is_alive():
                proc.terminate()
                proc.join(timeout=5)
        messages.close()
    return [results[i] for i in range(len(specs))]
