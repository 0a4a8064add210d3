"""controller_mutation_rate enforced on a real broker (KIP-599): partitions created and deleted are
charged to the client's token bucket. With `controller.quota.window.num=2` and
`controller.quota.window.size.seconds=1` a quota of 10 gives a bucket of 20 partitions, refilled at 10 a second, so topics of 6 partitions
take it from 20 to 14, 8, 2 and -4: at versions that know THROTTLING_QUOTA_EXCEEDED the fifth
topic is refused, older versions do everything and answer a throttle time instead."""

from __future__ import annotations

import time
from collections.abc import Callable

from confluent_kafka.admin import AdminClient, NewTopic

from kbroker.client import Client
from kbroker.ports import free_port
from protocol.errors import ErrorCode
from protocol.primitives import ZERO_UUID
from tests.brokers import BrokerProcess
from tests.integration.test_metrics import scrape, value

CREATE_TOPICS, DELETE_TOPICS, CREATE_PARTITIONS = 19, 20, 37
QUOTA = 10.0
PARTITIONS = 6
THROTTLED = ErrorCode.THROTTLING_QUOTA_EXCEEDED


def _broker(make_broker: Callable[..., BrokerProcess], **extra: str) -> BrokerProcess:
    return make_broker(**{"controller.quota.window.num": "2", "controller.quota.window.size.seconds": "1", **extra})


def _set_quota(bootstrap: str, *client_ids: str) -> None:
    with Client(bootstrap) as admin:
        results = admin.alter_client_quotas([((("client-id", c),), {"controller_mutation_rate": QUOTA})
                                             for c in client_ids])
        assert [r.error_code for r in results] == [0] * len(client_ids)


def _create(client: Client, names: list[str], version: int, validate_only: bool = False):
    body = {"topics": [{"name": n, "num_partitions": PARTITIONS, "replication_factor": 1, "assignments": [],
                        "configs": []} for n in names],
            "timeout_ms": 30000, "validate_only": validate_only}
    return client.request(CREATE_TOPICS, body, version=version)


def _delete(client: Client, names: list[str], version: int):
    body = {"topic_names": names, "topics": [{"name": n, "topic_id": ZERO_UUID} for n in names], "timeout_ms": 30000}
    return client.request(DELETE_TOPICS, body, version=version)


def _existing(bootstrap: str) -> set[str]:
    with Client(bootstrap) as admin:
        return set(admin.metadata(None).topics)


def test_strict_and_permissive_create_topics(make_broker: Callable[..., BrokerProcess]) -> None:
    metrics_port = free_port()
    broker = _broker(make_broker, **{"metrics.listener": f"http://127.0.0.1:{metrics_port}"})
    _set_quota(broker.bootstrap, "mutator")
    with Client(broker.bootstrap, client_id="mutator") as client:
        # Validate-only charges nothing.
        checked = _create(client, [f"v{i}" for i in range(10)], version=7, validate_only=True)
        assert [t.error_code for t in checked.topics] == [0] * 10 and checked.throttle_time_ms == 0

        strict = _create(client, [f"s{i}" for i in range(6)], version=7)
        codes = {t.name: t.error_code for t in strict.topics}
        # The fourth topic takes the bucket below zero and passes; the next are refused.
        assert codes == {"s0": 0, "s1": 0, "s2": 0, "s3": 0, "s4": THROTTLED, "s5": THROTTLED}, codes
        refused = next(t for t in strict.topics if t.name == "s4")
        assert refused.error_message is None and refused.num_partitions == -1
        assert 0 < strict.throttle_time_ms <= 400  # 4 partitions below zero at 10 a second
        # The broker mutes the connection for the throttle time (kbroker's client does not wait).
        started = time.monotonic()
        client.request(CREATE_TOPICS, {"topics": [], "timeout_ms": 1000, "validate_only": False}, version=7)
        assert time.monotonic() - started >= strict.throttle_time_ms / 1000 * 0.5

        # CreateTopics v5 does not know THROTTLING_QUOTA_EXCEEDED: everything, and a throttle time.
        permissive = _create(client, [f"p{i}" for i in range(3)], version=5)
        assert [t.error_code for t in permissive.topics] == [0, 0, 0]
        assert permissive.throttle_time_ms > 500  # about 18 partitions below zero: 1.8 s

    with Client(broker.bootstrap, client_id="free") as other:  # no quota for this client id
        free = _create(other, [f"f{i}" for i in range(6)], version=7)
        assert [t.error_code for t in free.topics] == [0] * 6 and free.throttle_time_ms == 0

    topics = _existing(broker.bootstrap)
    assert {"s0", "s1", "s2", "s3", "p0", "p1", "p2", "f5"} <= topics
    assert not topics & {"s4", "s5", "v0"}
    samples, _ = scrape(metrics_port)
    assert value(samples, "kbroker_throttled_requests_total", entity_type="client-id", entity="mutator") == 2
    assert value(samples, "kbroker_throttled_requests_total", entity_type="client-id", entity="free") is None


def test_delete_topics_and_create_partitions_count_partitions(make_broker: Callable[..., BrokerProcess]) -> None:
    broker = _broker(make_broker)
    names = [f"d{i}" for i in range(6)]
    with Client(broker.bootstrap) as admin:
        for name in [*names, "grown"]:
            admin.create_topic(name, partitions=PARTITIONS, replication_factor=1)
    _set_quota(broker.bootstrap, "deleter", "grower")

    with Client(broker.bootstrap, client_id="deleter") as client:
        strict = _delete(client, names[:5], version=6)
        codes = {r.name: r.error_code for r in strict.responses}
        assert codes == {"d0": 0, "d1": 0, "d2": 0, "d3": 0, "d4": THROTTLED}, codes
        assert 0 < strict.throttle_time_ms <= 400
        # DeleteTopics v4 is permissive: deleted, and throttled.
        permissive = _delete(client, names[4:], version=4)
        assert [r.error_code for r in permissive.responses] == [0, 0]
        assert permissive.throttle_time_ms > 0
    assert not _existing(broker.bootstrap) & set(names)

    with Client(broker.bootstrap, client_id="grower") as client:
        def grow(count: int):
            body = {"topics": [{"name": "grown", "count": count, "assignments": None}],
                    "timeout_ms": 30000, "validate_only": False}
            return client.request(CREATE_PARTITIONS, body, version=3)

        assert grow(18).results[0].error_code == 0  # 12 new partitions: 8 left
        assert grow(30).results[0].error_code == 0  # 12 more: -4, the request that goes over passes
        refused = grow(31)
        assert refused.results[0].error_code == THROTTLED and refused.throttle_time_ms > 0
    with Client(broker.bootstrap) as admin:
        assert len(admin.metadata(["grown"]).topics["grown"].partitions) == 30


def test_confluent_kafka_admin_client_is_throttled_not_refused(make_broker: Callable[..., BrokerProcess]) -> None:
    """librdkafka's CreateTopics predates THROTTLING_QUOTA_EXCEEDED (below v6): its requests get the
    permissive quota, so everything is created and the client is held back instead."""
    broker = _broker(make_broker)
    _set_quota(broker.bootstrap, "rdkafka-admin")
    admin = AdminClient({"bootstrap.servers": broker.bootstrap, "client.id": "rdkafka-admin"})
    futures = admin.create_topics([NewTopic(f"r{i}", PARTITIONS, 1) for i in range(5)], operation_timeout=10)
    for future in futures.values():
        future.result(timeout=30)  # 30 partitions from 20 credits: all created, 1 s throttled
    started = time.monotonic()
    admin.create_topics([NewTopic("r5", 1, 1)], operation_timeout=10)["r5"].result(timeout=30)
    assert time.monotonic() - started >= 0.5
    assert {f"r{i}" for i in range(6)} <= _existing(broker.bootstrap)
