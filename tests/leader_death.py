"""Nothing acknowledged is lost when a partition's leader dies: the scenario the secured cluster
tests (TLS, SASL_SSL) run over their own listeners and credentials."""

from __future__ import annotations

import time
from collections.abc import Callable

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.brokers import BrokerProcess
from tests.waiting import wait_until

ClientConf = Callable[[list[BrokerProcess]], dict[str, str]]  # the live brokers -> a client's settings


def partition_state(admin: AdminClient, topic: str) -> tuple[int, list[int]]:
    """Partition 0's leader and sorted ISR as Metadata says; (-1, []) while unknown."""
    try:
        partition = admin.list_topics(topic, timeout=5).topics[topic].partitions[0]
    except (KafkaException, KeyError):
        return -1, []
    return partition.leader, sorted(partition.isrs)


def acknowledged_records_survive_leader_death(brokers: list[BrokerProcess], conf: ClientConf,
                                              producer_conf: dict[str, str], over: str,
                                              topic: str = "secured") -> list[BrokerProcess]:
    """A 3-replica topic (min.insync.replicas=2) written with acks=all, its leader killed with
    kill -9, then read from the new leader: exactly what was acknowledged. Returns the survivors."""
    admin = AdminClient(conf(brokers))
    admin.create_topics([NewTopic(topic, 1, 3, config={"min.insync.replicas": "2"})])[topic].result(30)
    wait_until(lambda: partition_state(admin, topic)[1] == [0, 1, 2], what=f"a full ISR over {over}")
    acknowledged: list[bytes] = []

    def delivered(error: object, message: object) -> None:
        if error is None:
            acknowledged.append(message.value())  # type: ignore[attr-defined]

    producer = Producer({**producer_conf, "acks": "all", "enable.idempotence": True})
    for i in range(300):
        producer.produce(topic, f"record {i}".encode(), on_delivery=delivered)
    assert producer.flush(30) == 0
    assert len(acknowledged) == 300

    leader = partition_state(admin, topic)[0]
    brokers[leader].kill()  # kill -9
    survivors = [b for b in brokers if b.alive]
    admin = AdminClient(conf(survivors))
    wait_until(lambda: partition_state(admin, topic)[0] not in (leader, -1), what="a new leader")
    consumer = Consumer({**conf(survivors), "group.id": "check", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, 0)])
    read: list[bytes] = []
    deadline = time.monotonic() + 30
    while len(read) < len(acknowledged) and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            read.append(message.value())
    consumer.close()
    assert read == acknowledged
    return survivors
