"""A consume-transform-produce loop with exactly-once semantics, run as its own process so a
test can kill -9 it anywhere.

    python -m tests.eos_pipeline BOOTSTRAP INPUT OUTPUT GROUP TRANSACTIONAL_ID

It reads INPUT (read_committed, in group GROUP), writes each value upper-cased to OUTPUT and
commits its input offsets inside the same transaction (send_offsets_to_transaction), so a
crash anywhere leaves either the whole batch (output + offsets) or none of it. It prints
"ready" once it has its assignment and exits after a quiet period with nothing left to read
(the quiet period starts with the assignment: joining may wait out a killed member's session).
"""

from __future__ import annotations

import sys
import time

from confluent_kafka import Consumer, KafkaError, Producer

JOIN_TIMEOUT_S = 60.0


def main() -> None:
    bootstrap, source, sink, group, transactional_id = sys.argv[1:6]
    quiet_exit_s = float(sys.argv[6]) if len(sys.argv) > 6 else 5.0
    consumer = Consumer({
        "bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
        "enable.auto.commit": False, "isolation.level": "read_committed", "session.timeout.ms": 6000,
    })
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id,
                         "transaction.timeout.ms": 10000, "linger.ms": 5})
    producer.init_transactions(30)
    assigned_at: list[float] = []

    def on_assign(_consumer: Consumer, _partitions: object) -> None:
        if not assigned_at:
            print("ready", flush=True)
        assigned_at.append(time.monotonic())

    consumer.subscribe([source], on_assign=on_assign)
    last_data = 0.0
    deadline = time.monotonic() + JOIN_TIMEOUT_S
    while not assigned_at or time.monotonic() - max(last_data, assigned_at[-1]) < quiet_exit_s:
        if not assigned_at and time.monotonic() > deadline:
            raise SystemExit("no partitions assigned")
        messages = [m for m in consumer.consume(num_messages=50, timeout=0.5) if not _is_eof(m)]
        if not messages:
            continue
        last_data = time.monotonic()
        producer.begin_transaction()
        for message in messages:
            producer.produce(sink, message.value().upper(), key=message.key())
        producer.send_offsets_to_transaction(consumer.position(consumer.assignment()),
                                             consumer.consumer_group_metadata(), 30)
        producer.commit_transaction(30)
    consumer.close()


def _is_eof(message: object) -> bool:
    error = message.error()  # type: ignore[attr-defined]
    if error is None:
        return False
    if error.code() == KafkaError._PARTITION_EOF:
        return True
    raise RuntimeError(error)


if __name__ == "__main__":
    main()
