"""Retry topics through a leader's death on three brokers (rf=3): a consumer fails every record,
and the broker leading the retry partition is killed (kill -9) while records wait in it and some
were forwarded. The new leader forwards the rest: every record comes back once per attempt and
lands once in the dead-letter topic, never before its backoff."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from kbroker.client import Client
from tests.brokers import BrokerProcess, bootstrap_of, running_cluster
from tests.integration.test_retry_topics import (
    ATTEMPT,
    BROKER_LATE_MS,
    FailingConsumer,
    _check_attempts,
    _now_ms,
    _produce_orders,
    _retry_configs,
)
from tests.waiting import wait_until

pytestmark = pytest.mark.timeout(300)

SETTINGS = {"replica.lag.time.max.ms": "3000", "replica.fetch.wait.max.ms": "100", "replica.fetch.backoff.ms": "100",
            "zookeeper.session.timeout.ms": "4000", "offsets.topic.num.partitions": "1"}
KEYS = [b"order-%d" % i for i in range(12)]
SETTLE_MS = 3000


@pytest.fixture
def brokers(tmp_path: Path, zk_connect: str) -> Iterator[list[BrokerProcess]]:
    with running_cluster(tmp_path, zk_connect, 3, SETTINGS) as started:
        yield started


def _leader(brokers: list[BrokerProcess], topic: str) -> int:
    with Client(bootstrap_of(brokers)) as client:
        return client.metadata([topic], refresh=True).topic(topic).partitions[0].leader


def test_killing_the_retry_partitions_leader_forwards_each_record_once_per_attempt(
        brokers: list[BrokerProcess]) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap_of(brokers)})
    replicated = {"min.insync.replicas": "2"}
    for name, configs in (("orders", replicated), ("orders.dead", replicated),
                          ("orders.retry", {**replicated, **_retry_configs("orders", "orders.dead")})):
        admin.create_topics([NewTopic(name, 1, 3, config=configs)])[name].result(30)
    _produce_orders(bootstrap_of(brokers), "orders", KEYS)
    consumer = FailingConsumer(bootstrap_of(brokers), "orders", "orders.retry", "orders.dead", 1)
    # Killed once some records came back: others wait in the retry partition, or are on their way.
    consumer.run_until(lambda c: sum(s.headers.get(ATTEMPT) == b"1" for s in c.seen) >= len(KEYS) // 3,
                       what="the first retries")
    killed = _leader(brokers, "orders.retry")
    killed_at = _now_ms()
    brokers[killed].kill()
    wait_until(lambda: _leader(brokers, "orders.retry") not in (killed, -1), 60, "a new leader")
    # Every topic's leadership and the clients' metadata settle within a few seconds of it.
    settled_at = _now_ms() + SETTLE_MS
    consumer.run_until(lambda c: len(c.dead_letters()) >= len(KEYS), 180, "every dead letter")
    # Anything forwarded twice would be in the logs by now (each retry partition's leader appends
    # the target batches in order): read both topics to their ends.
    consumer.watcher.drain()
    consumer.close()
    # Records due while the leader was gone come late, but never early or twice; the others are
    # forwarded as promptly as on one broker.
    _check_attempts(consumer, KEYS, 1, excused=lambda due_ms: killed_at - BROKER_LATE_MS <= due_ms <= settled_at)
