"""Network server behaviour: pipelining, ordering, many connections."""

from __future__ import annotations

import socket

from protocol.connection import ClientProtocol
from tests.rawclient import RawClient

API_VERSIONS, METADATA = 18, 3


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
    with socket.create_connection(("127.0.0.1", broker.port), timeout=30) as sock:
        sock.sendall(b"".join(frames))
        seen = []
        while len(seen) < len(expected):
            chunk = sock.recv(1 << 16)
            assert chunk, "broker closed a pipelining connection"
            client.receive_data(chunk)
            while (response := client.next_response()) is not None:
                seen.append(response[0])
    assert seen == expected


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
