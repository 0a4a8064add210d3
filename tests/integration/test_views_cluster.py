"""Filtered views on three brokers (rf=3): every broker knows a view and answers its partitions
with the source's leaders, and when a source partition's leader is killed (kill -9) the view
follows the new leader: a consumer reads exactly the matching records written before and after."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from kbroker.client import Client
from tests.brokers import BrokerProcess, bootstrap_of, running_cluster
from tests.integration.test_views import TAGS, _consume_all, _headers
from tests.waiting import wait_until

pytestmark = pytest.mark.timeout(300)

SETTINGS = {"replica.lag.time.max.ms": "3000", "replica.fetch.wait.max.ms": "100", "replica.fetch.backoff.ms": "100",
            "zookeeper.session.timeout.ms": "4000", "offsets.topic.num.partitions": "1",
            "transaction.state.log.num.partitions": "1"}
PARTITIONS = 3


@pytest.fixture
def brokers(tmp_path: Path, zk_connect: str) -> Iterator[list[BrokerProcess]]:
    with running_cluster(tmp_path, zk_connect, 3, SETTINGS) as started:
        yield started


def _leaders(bootstrap: str, topic: str) -> dict[int, int]:
    with Client(bootstrap) as client:
        return {i: p.leader for i, p in client.metadata([topic], refresh=True).topic(topic).partitions.items()}


def _produce(bootstrap: str, topic: str, start: int, count: int) -> list[tuple[int, int, bytes, str | None]]:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "compression.type": "lz4", "linger.ms": 5})
    written: list[tuple[int, int, bytes, str | None]] = []

    def delivered(error: object, message: object, tag: str | None) -> None:
        assert error is None, error
        written.append((message.partition(), message.offset(), message.value(), tag))

    for i in range(start, start + count):
        tag, _, headers = _headers(i)
        producer.produce(topic, value=b"v%d" % i, headers=headers, partition=i % PARTITIONS,
                         on_delivery=lambda e, m, t=tag: delivered(e, m, t))
        producer.poll(0)
    assert producer.flush(60) == 0
    return written


def test_a_view_follows_its_sources_leaders_through_a_leader_kill(brokers: list[BrokerProcess]) -> None:
    bootstrap = bootstrap_of(brokers)
    source, view = f"orders-{uuid.uuid4().hex[:6]}", f"paid-{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": brokers[1].bootstrap})
    admin.create_topics([NewTopic(source, PARTITIONS, 3, config={"min.insync.replicas": "2"})])[source].result(30)
    admin.create_topics([NewTopic(view, -1, config={"view.source.topic": source,
                                                    "view.filter": f"tag = '{TAGS[0]}'"})])[view].result(30)
    # Every broker knows the view (from ZooKeeper's watch) and names the source's leaders.
    for broker in brokers:
        wait_until(lambda b=broker: _leaders(b.bootstrap, view) == _leaders(b.bootstrap, source), 30,
                   f"broker {broker.bootstrap} to answer the view with the source's leaders")
    written = _produce(bootstrap, source, 0, 600)

    killed = _leaders(bootstrap, source)[0]
    brokers[killed].kill()
    alive = bootstrap_of(brokers)
    wait_until(lambda: _leaders(alive, source)[0] not in (killed, -1), 60, "a new leader of partition 0")
    wait_until(lambda: _leaders(alive, view) == _leaders(alive, source), 30, "the view to follow it")
    written += _produce(alive, source, 600, 600)

    expected = sorted((p, o, v) for p, o, v, tag in written if tag == TAGS[0])
    assert len(expected) > 100
    assert _consume_all(alive, view, PARTITIONS) == expected
