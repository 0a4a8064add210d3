"""A consumer-group member run as its own process, so tests can kill it like a crashed client.

    python -m tests.group_member BOOTSTRAP GROUP TOPIC --client confluent|kafka-python
        [--assignor range|cooperative-sticky] [--instance-id ID] [--commit after|before]
        [--session-timeout-ms MS] [--group-protocol classic|consumer]

With `--group-protocol consumer` (KIP-848) the broker assigns and times sessions, so the
assignor and session settings are not the client's; TOPIC may then be a regex (^prefix.*).

It prints one JSON object per line: {"assigned": [[topic, partition], ...]} whenever its
assignment changes, {"msg": [partition, offset, value]} for each message processed, and
{"ready": true} once subscribed. It commits each message's offset after processing it
(at-least-once) or before (at-most-once); the confluent client reports each commit as
{"commit": [partition, offset, error]} (error null when it succeeded: a failed commit, e.g. in
a rebalance, is reported, not fatal). SIGTERM closes the consumer cleanly (it leaves the
group); SIGKILL is a crash.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
from typing import Any

stopping = False


def emit(event: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(event) + "\n")
    sys.stdout.flush()


def _stop(*_: object) -> None:
    global stopping
    stopping = True


def run_confluent(args: argparse.Namespace) -> None:
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    config: dict[str, Any] = {
        "bootstrap.servers": args.bootstrap,
        "group.id": args.group,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
    }
    incremental = args.assignor == "cooperative-sticky" or args.group_protocol == "consumer"
    if args.group_protocol == "consumer":
        config["group.protocol"] = "consumer"
    else:
        config.update({"session.timeout.ms": args.session_timeout_ms, "heartbeat.interval.ms": 500,
                       "partition.assignment.strategy": args.assignor})
    if args.instance_id:
        config["group.instance.id"] = args.instance_id
    consumer = Consumer(config)
    owned: set[tuple[str, int]] = set()

    def on_assign(c: Any, partitions: list[Any]) -> None:
        owned.update((p.topic, p.partition) for p in partitions)
        if incremental:
            c.incremental_assign(partitions)
        emit({"assigned": sorted(owned)})

    def on_revoke(c: Any, partitions: list[Any]) -> None:
        owned.difference_update((p.topic, p.partition) for p in partitions)
        if incremental:
            c.incremental_unassign(partitions)
        emit({"assigned": sorted(owned)})

    consumer.subscribe([args.topic], on_assign=on_assign, on_revoke=on_revoke)
    emit({"ready": True})
    while not stopping:
        message = consumer.poll(0.2)
        if message is None or message.error():
            continue
        position = [TopicPartition(message.topic(), message.partition(), message.offset() + 1)]
        if args.commit == "before":
            commit(consumer, position, KafkaException)
        emit({"msg": [message.partition(), message.offset(), message.value().decode()]})
        if args.commit == "after":
            commit(consumer, position, KafkaException)
    consumer.close()


def commit(consumer: Any, position: list[Any], kafka_exception: type[Exception]) -> None:
    error = None
    try:
        result = consumer.commit(offsets=position, asynchronous=False)
        error = next((str(tp.error) for tp in result or [] if tp.error is not None), None)
    except kafka_exception as e:
        error = str(e)
    emit({"commit": [position[0].partition, position[0].offset, error]})


def run_kafka_python(args: argparse.Namespace) -> None:
    from kafka import ConsumerRebalanceListener, KafkaConsumer
    from kafka.coordinator.assignors.cooperative_sticky import CooperativeStickyAssignor
    from kafka.coordinator.assignors.range import RangePartitionAssignor
    from kafka.structs import OffsetAndMetadata

    assignor = CooperativeStickyAssignor if args.assignor == "cooperative-sticky" else RangePartitionAssignor
    kwargs: dict[str, Any] = {}
    if args.instance_id:
        kwargs["group_instance_id"] = args.instance_id
    consumer = KafkaConsumer(
        bootstrap_servers=args.bootstrap,
        group_id=args.group,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        session_timeout_ms=args.session_timeout_ms,
        heartbeat_interval_ms=500,
        partition_assignment_strategy=[assignor],
        **kwargs,
    )

    class Listener(ConsumerRebalanceListener):
        def on_partitions_revoked(self, revoked: Any) -> None:
            emit({"assigned": sorted((tp.topic, tp.partition) for tp in consumer.assignment() - set(revoked))})

        def on_partitions_assigned(self, assigned: Any) -> None:
            emit({"assigned": sorted((tp.topic, tp.partition) for tp in consumer.assignment())})

    consumer.subscribe([args.topic], listener=Listener())
    emit({"ready": True})
    while not stopping:
        for tp, messages in consumer.poll(timeout_ms=200).items():
            for message in messages:
                position = {tp: OffsetAndMetadata(message.offset + 1, "", -1)}
                if args.commit == "before":
                    consumer.commit(position)
                emit({"msg": [message.partition, message.offset, message.value.decode()]})
                if args.commit == "after":
                    consumer.commit(position)
    consumer.close()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("bootstrap")
    parser.add_argument("group")
    parser.add_argument("topic")
    parser.add_argument("--client", choices=["confluent", "kafka-python"], default="confluent")
    parser.add_argument("--assignor", default="range")
    parser.add_argument("--instance-id")
    parser.add_argument("--commit", choices=["after", "before"], default="after")
    parser.add_argument("--session-timeout-ms", type=int, default=6000)
    parser.add_argument("--group-protocol", choices=["classic", "consumer"], default="classic")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, _stop)
    (run_confluent if args.client == "confluent" else run_kafka_python)(args)


if __name__ == "__main__":
    main()
