"""Network server behaviour: pipelining, ordering, many connections."""

from __future__ import annotations

import random
import socket
from pathlib import Path
from typing import Any

from protocol.connection import ClientProtocol
from tests.brokers import BrokerProcess
from tests.conftest import create_topic
from tests.rawclient import RawClient
from tests.storage.batches import batch, read_records

API_VERSIONS, METADATA, PRODUCE, FETCH = 18, 3, 0, 1


def send_pipelined(port: int, client: ClientProtocol, frames: list[bytes]) -> list[tuple[int, Any]]:
    """Send every frame at once on one connection; the (correlation id, body) of each answer, in
    the order they came."""
    answers: list[tuple[int, Any]] = []
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(b"".join(frames))
        while len(answers) < len(frames):
            chunk = sock.recv(1 << 16)
            assert chunk, "broker closed a pipelining connection"
            client.receive_data(chunk)
            while (response := client.next_response()) is not None:
                answers.append(response)
    return answers


def test_pipelined_requests_are_answered_in_order(broker, new_topic) -> None:
    topic = new_topic()
    client = ClientProtocol("pipeline")
    frames, expected = [], []
    for i in range(500):  # far more than the broker queues per connection
        if i % 2:
            correlation, frame = client.encode_request(METADATA, 12, {"topics": [{"name": topic}]})
        else:
            correlation, frame = client.encode_request(API_VERSIONS, 3, {})
        frames.append(frame)
        expected.append(correlation)
    answers = send_pipelined(broker.port, client, frames)
    assert [correlation for correlation, _ in answers] == expected


def test_deferred_answers_leave_in_order_when_many_complete_at_once(tmp_path: Path) -> None:
    """Every append written by the log dir's writer thread: each Produce answer is deferred until
    its write completes, and answers already complete go out together, behind any not yet
    complete, with the Metadata answers between them in their places."""
    broker = BrokerProcess(tmp_path, env={"KBROKER_WRITE_BEHIND_MIN_BYTES": "1"}).start()
    try:
        topic = create_topic(broker.bootstrap, "deferred", 1)
        client = ClientProtocol("deferred")
        frames, expected = [], []
        for i in range(300):
            if i % 3 == 2:
                correlation, frame = client.encode_request(METADATA, 12, {"topics": [{"name": topic}]})
            else:
                correlation, frame = client.encode_request(PRODUCE, 9, {"acks": 1, "timeout_ms": 30000, "topic_data": [
                    {"name": topic, "partition_data": [{"index": 0, "records": batch(values=[b"v%d" % i])}]}]})
            frames.append(frame)
            expected.append(correlation)
        answers = send_pipelined(broker.port, client, frames)
        assert [correlation for correlation, _ in answers] == expected
        produced = [body.responses[0].partition_responses[0] for _, body in answers if hasattr(body, "responses")]
        assert [answer.error_code for answer in produced] == [0] * 200
        assert [answer.base_offset for answer in produced] == list(range(200))
    finally:
        broker.kill()


def test_a_fetch_answer_larger_than_the_socket_takes_arrives_whole(broker, new_topic) -> None:
    """An 8 MB fetch answer to a client with a small receive window: sendfile sends what the
    socket takes at once and the rest as the client reads on, every byte in order."""
    topic = new_topic()
    values = [random.Random(i).randbytes(16_000) for i in range(8 * 60)]
    with RawClient(broker.bootstrap) as producer:
        for first in range(0, len(values), 60):  # batches of 0.96 MB, under message.max.bytes
            answer = producer.request(PRODUCE, 9, {"acks": 1, "timeout_ms": 30000, "topic_data": [
                {"name": topic, "partition_data": [{"index": 0, "records": batch(values=values[first:first + 60])}]}]})
            assert answer.responses[0].partition_responses[0].error_code == 0
    client = ClientProtocol("slow-reader")
    _, frame = client.encode_request(FETCH, 12, {
        "replica_id": -1, "max_wait_ms": 0, "min_bytes": 1, "max_bytes": 16 << 20, "isolation_level": 0,
        "session_id": 0, "session_epoch": -1, "topics": [{"topic": topic, "partitions": [
            {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 16 << 20, "current_leader_epoch": -1,
             "log_start_offset": -1}]}], "forgotten_topics_data": [], "rack_id": ""})
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8192)  # before connecting: the window
        sock.settimeout(30)
        sock.connect(("127.0.0.1", broker.port))
        sock.sendall(frame)
        while (response := client.next_response()) is None:
            chunk = sock.recv(4096)
            assert chunk, "the broker closed the connection mid-answer"
            client.receive_data(chunk)
    partition = response[1].responses[0].partitions[0]
    assert partition.error_code == 0
    assert [record.value for record in read_records(bytes(partition.records))] == values


def test_a_client_that_vanishes_mid_pipeline_does_not_hurt_others(broker) -> None:
    client = ClientProtocol("vanish")
    burst = b"".join(client.encode_request(API_VERSIONS, 3, {})[1] for _ in range(2000))
    for _ in range(5):
        with socket.create_connection(("127.0.0.1", broker.port), timeout=30) as sock:
            sock.sendall(burst)
    with RawClient(broker.bootstrap) as other:
        assert other.request(API_VERSIONS, 3, {}).error_code == 0


def test_many_concurrent_connections(broker) -> None:
    clients = [RawClient(broker.bootstrap) for _ in range(200)]
    try:
        for client in clients:
            _, frame = client.conn.encode_request(API_VERSIONS, 3, {})
            client.sock.sendall(frame)
        assert all(client.read_response().error_code == 0 for client in clients)
    finally:
        for client in clients:
            client.close()
