"""Incremental fetch sessions (KIP-227) on the wire: a full fetch with epoch 0 opens a session,
incremental fetches name only what changed and get back only partitions with news, and
session errors are the ones Kafka clients recover from."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from kbroker.client import Client
from protocol.errors import ErrorCode
from protocol.record_batch import Record, encode_batch
from tests.brokers import BrokerProcess
from tests.conftest import create_topic
from tests.rawclient import RawClient

FETCH = 1
VERSION = 12  # topics by name; v13+ by id is covered by the Java client scenarios


def batch(*values: bytes) -> bytes:
    return encode_batch([Record(i, int(time.time() * 1000), None, v) for i, v in enumerate(values)])


def partition(index: int, offset: int) -> dict[str, Any]:
    return {"partition": index, "fetch_offset": offset, "partition_max_bytes": 1 << 20, "current_leader_epoch": -1,
            "log_start_offset": -1}


def fetch(client: RawClient, session_id: int, epoch: int, topics: dict[str, list[dict[str, Any]]],
          forgotten: dict[str, list[int]] | None = None, max_wait_ms: int = 0) -> Any:
    body = {"replica_id": -1, "max_wait_ms": max_wait_ms, "min_bytes": 1, "max_bytes": 50 << 20,
            "isolation_level": 0, "session_id": session_id, "session_epoch": epoch,
            "topics": [{"topic": t, "partitions": ps} for t, ps in topics.items()],
            "forgotten_topics_data": [{"topic": t, "partitions": ps} for t, ps in (forgotten or {}).items()],
            "rack_id": ""}
    return client.request(FETCH, VERSION, body)


def answered(response: Any) -> dict[tuple[str, int], Any]:
    return {(t.topic, p.partition_index): p for t in response.responses for p in t.partitions}


def test_an_incremental_fetch_returns_only_the_partitions_with_news(broker: BrokerProcess,
                                                                    new_topic: Callable[..., str]) -> None:
    topic = new_topic(partitions=3)
    with Client(broker.bootstrap) as producer:
        for p in range(3):
            producer.produce(topic, p, batch(f"first-{p}".encode()))
    client = RawClient(broker.bootstrap)
    full = fetch(client, 0, 0, {topic: [partition(p, 1) for p in range(3)]})
    assert full.error_code == ErrorCode.NO_ERROR and full.session_id > 0
    assert sorted(answered(full)) == [(topic, 0), (topic, 1), (topic, 2)]  # a full response names all

    quiet = fetch(client, full.session_id, 1, {}, max_wait_ms=50)
    assert quiet.error_code == ErrorCode.NO_ERROR and quiet.session_id == full.session_id
    assert answered(quiet) == {}  # nothing new anywhere: nothing listed

    with Client(broker.bootstrap) as producer:
        producer.produce(topic, 1, batch(b"second-1"))
    news = fetch(client, full.session_id, 2, {}, max_wait_ms=5000)
    [(key, result)] = answered(news).items()
    assert key == (topic, 1) and result.high_watermark == 2 and len(result.records) > 0

    # The fetcher moves on (naming only that partition); the session keeps the others' positions.
    moved = fetch(client, full.session_id, 3, {topic: [partition(1, 2)]}, max_wait_ms=50)
    assert answered(moved) == {}
    client.sock.close()


def test_session_errors_and_ends(broker: BrokerProcess, new_topic: Callable[..., str]) -> None:
    topic = new_topic(partitions=2)
    client = RawClient(broker.bootstrap)
    session = fetch(client, 0, 0, {topic: [partition(0, 0), partition(1, 0)]}).session_id
    assert session > 0

    wrong_epoch = fetch(client, session, 5, {})
    assert (wrong_epoch.error_code, wrong_epoch.session_id, wrong_epoch.responses) == (
        ErrorCode.INVALID_FETCH_SESSION_EPOCH, 0, [])
    assert fetch(client, session ^ 0x5A5A, 1, {}).error_code == ErrorCode.FETCH_SESSION_ID_NOT_FOUND

    # Forgetting a partition removes it; forgetting the last ends the session.
    assert fetch(client, session, 1, {}, forgotten={topic: [0]}).error_code == ErrorCode.NO_ERROR
    emptied = fetch(client, session, 2, {}, forgotten={topic: [1]})
    assert emptied.error_code == ErrorCode.NO_ERROR and emptied.session_id == 0
    assert fetch(client, session, 3, {}).error_code == ErrorCode.FETCH_SESSION_ID_NOT_FOUND

    # A full fetch with epoch -1 closes the session it names and opens none.
    other = fetch(client, 0, 0, {topic: [partition(0, 0)]}).session_id
    closing = fetch(client, other, -1, {topic: [partition(0, 0)]})
    assert closing.error_code == ErrorCode.NO_ERROR and closing.session_id == 0
    assert fetch(client, other, 1, {}).error_code == ErrorCode.FETCH_SESSION_ID_NOT_FOUND
    client.sock.close()


def test_an_error_is_repeated_in_every_incremental_response(broker: BrokerProcess,
                                                           new_topic: Callable[..., str]) -> None:
    topic = new_topic(partitions=1)
    client = RawClient(broker.bootstrap)
    full = fetch(client, 0, 0, {topic: [partition(0, 0), partition(7, 0)]})
    assert answered(full)[(topic, 7)].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    again = fetch(client, full.session_id, 1, {})
    assert {k: p.error_code for k, p in answered(again).items()} == {(topic, 7): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
    client.sock.close()


def test_a_full_cache_answers_without_a_session(make_broker: Callable[..., BrokerProcess]) -> None:
    node = make_broker(**{"max.incremental.fetch.session.cache.slots": "1"})
    create_topic(node.bootstrap, "few")
    first, second = RawClient(node.bootstrap), RawClient(node.bootstrap)
    assert fetch(first, 0, 0, {"few": [partition(0, 0)]}).session_id > 0
    refused = fetch(second, 0, 0, {"few": [partition(0, 0)]})
    assert refused.error_code == ErrorCode.NO_ERROR and refused.session_id == 0  # fetched, sessionless
    assert answered(refused)[("few", 0)].error_code == ErrorCode.NO_ERROR
    first.sock.close()
    second.sock.close()
