"""Delayed delivery through a leader's death on three brokers (rf=3): the broker leading the
partition is killed (kill -9) while records are pending and some are delivered; the new leader
delivers the rest, each record exactly once and none before its due time. The killed broker
then comes back, catches up (its log may hold an unreplicated tail the new leader truncates
away) and is elected leader again: it delivers what is due from then on, and nothing twice."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from kbroker.client import Client
from tests.brokers import BrokerProcess, bootstrap_of, running_cluster
from tests.integration.test_delayed_delivery import DELAY, DELIVER_AT, FROM, Reader, _now_ms, _produce
from tests.waiting import wait_until

pytestmark = pytest.mark.timeout(300)

SETTINGS = {"replica.lag.time.max.ms": "3000", "replica.fetch.wait.max.ms": "100", "replica.fetch.backoff.ms": "100",
            "zookeeper.session.timeout.ms": "4000", "offsets.topic.num.partitions": "1"}
TOPIC = "followups"
COUNT = 20


@pytest.fixture
def brokers(tmp_path: Path, zk_connect: str) -> Iterator[list[BrokerProcess]]:
    with running_cluster(tmp_path, zk_connect, 3, SETTINGS) as started:
        yield started


def _leader(brokers: list[BrokerProcess]) -> int:
    with Client(bootstrap_of(brokers)) as client:
        return client.metadata([TOPIC], refresh=True).topic(TOPIC).partitions[0].leader


def _isr(brokers: list[BrokerProcess]) -> set[int]:
    with Client(bootstrap_of(brokers)) as client:
        return set(client.metadata([TOPIC], refresh=True).topic(TOPIC).partitions[0].isr)


def test_killing_the_leader_delivers_each_record_exactly_once(brokers: list[BrokerProcess]) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap_of(brokers)})
    admin.create_topics([NewTopic(TOPIC, 1, 3, config={"min.insync.replicas": "2"})])[TOPIC].result(30)
    producer = Producer({"bootstrap.servers": bootstrap_of(brokers), "acks": "all", "enable.idempotence": True})
    sent = _now_ms()
    due = {b"f%02d" % i: sent + 1500 + 200 * i for i in range(COUNT)}
    for value, due_ms in due.items():
        _produce(producer, TOPIC, value, [(DELAY, b"%d" % (due_ms - sent))], timestamp=sent)
    assert producer.flush(30) == 0
    reader = Reader(bootstrap_of(brokers), TOPIC)
    reader.until(lambda got: len(got) >= 3, what="the first deliveries")
    assert len(reader.arrivals) < COUNT

    killed = _leader(brokers)
    brokers[killed].kill()
    wait_until(lambda: _leader(brokers) not in (killed, -1), 60, "a new leader")
    # Due after every other record: once it is here, a duplicate from the new leader would be too.
    due[b"sentinel"] = max(sent + 1500 + 200 * COUNT, _now_ms()) + 3000
    after = Producer({"bootstrap.servers": bootstrap_of(brokers), "acks": "all"})
    _produce(after, TOPIC, b"sentinel", [(DELIVER_AT, b"%d" % due[b"sentinel"])])
    assert after.flush(60) == 0
    assert _now_ms() < due[b"sentinel"], "the sentinel took too long to produce to be delayed"
    reader.until(lambda got: b"sentinel" in [a.value for a in got], 90, "the sentinel from the new leader")

    brokers[killed].start()
    wait_until(lambda: _isr(brokers) == {0, 1, 2}, 60, "the returned broker back in the ISR")
    with Client(bootstrap_of(brokers)) as client:
        client.elect_leaders(False, [(TOPIC, 0)])
    wait_until(lambda: _leader(brokers) == killed, 30, "the returned broker leading again")
    # Records it delivers itself now: a stale index on the returned broker would deliver an
    # earlier record again before these.
    back = _now_ms()
    for i in range(3):
        due[b"back%d" % i] = back + 1000 + 100 * i
        _produce(after, TOPIC, b"back%d" % i, [(DELIVER_AT, b"%d" % due[b"back%d" % i])])
    assert after.flush(60) == 0
    reader.until(lambda got: {b"back0", b"back1", b"back2"} <= {a.value for a in got}, 60,
                 "the records delivered by the returned leader")
    reader.close()

    assert all(FROM in a.headers for a in reader.arrivals), [(a.value, a.offset, a.headers) for a in reader.arrivals if FROM not in a.headers]
    sources = [a.headers[FROM] for a in reader.arrivals]
    assert len(sources) == len(set(sources)), "a record was delivered twice"
    assert sorted(a.value for a in reader.arrivals) == sorted(due)
    for arrival in reader.arrivals:
        assert arrival.seen_ms >= due[arrival.value], f"{arrival.value!r} arrived early"
