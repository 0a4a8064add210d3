"""Connections are limited, idle and stalled ones are closed, and request memory is bounded.

Reproductions of what used to happen: 1,100 idle connections against a 1,024-descriptor limit
locked out every new client and logged a traceback per failed accept; a client that sends the
first bytes of a request and then nothing held its connection forever; four concurrent 90 MB
frames raised the broker's RSS by 440 MB (each frame copied two or three times, no overall cap).
"""

from __future__ import annotations

import socket
import struct
import threading
import time
from pathlib import Path

import pytest

from protocol.connection import ClientProtocol
from tests.brokers import BrokerProcess
from tests.rawclient import RawClient
from tests.waiting import wait_until

API_VERSIONS = 18


def is_closed(sock: socket.socket) -> bool:
    """Whether the broker closed `sock` (EOF or reset), without blocking."""
    sock.setblocking(False)
    try:
        return sock.recv(1) == b""
    except BlockingIOError:
        return False
    except ConnectionError:
        return True
    finally:
        sock.setblocking(True)


def api_versions_works(sock: socket.socket, timeout_s: float = 5.0) -> bool:
    client = ClientProtocol("limits")
    sock.settimeout(timeout_s)
    sock.sendall(client.encode_request(API_VERSIONS, 3, {})[1])
    try:
        while (response := client.next_response()) is None:
            chunk = sock.recv(65536)
            if not chunk:
                return False
            client.receive_data(chunk)
    except (TimeoutError, ConnectionError):
        return False
    return response[1].error_code == 0


def connect(broker: BrokerProcess) -> socket.socket:
    return socket.create_connection(("127.0.0.1", broker.port), timeout=10)


def test_connections_over_the_per_ip_limit_are_closed(make_broker) -> None:
    broker = make_broker(**{"max.connections.per.ip": "5"})
    sockets = [connect(broker) for _ in range(10)]
    try:
        wait_until(lambda: sum(is_closed(s) for s in sockets) == 5, 10, "five connections closed")
        open_ones = [s for s in sockets if not is_closed(s)]
        assert len(open_ones) == 5
        assert all(api_versions_works(s) for s in open_ones)
    finally:
        for s in sockets:
            s.close()
    # Once the broker has seen them go (their closes reach it asynchronously), the address may
    # connect again.
    def connects_again() -> bool:
        with connect(broker) as again:
            return api_versions_works(again, timeout_s=2.0)

    wait_until(connects_again, 10, "a new connection from the same address served")


def test_per_ip_overrides(make_broker) -> None:
    broker = make_broker(**{"max.connections.per.ip": "1", "max.connections.per.ip.overrides": "127.0.0.1:3"})
    sockets = [connect(broker) for _ in range(5)]
    try:
        wait_until(lambda: sum(is_closed(s) for s in sockets) == 2, 10, "two connections closed")
    finally:
        for s in sockets:
            s.close()


def test_at_max_connections_new_clients_wait_for_a_slot(make_broker) -> None:
    broker = make_broker(**{"max.connections": "3"})
    first = [connect(broker) for _ in range(3)]
    assert all(api_versions_works(s) for s in first)
    waiting = connect(broker)  # completes in the listen backlog, but is not accepted yet
    try:
        assert not api_versions_works(waiting, timeout_s=1.0)
        first.pop().close()
        assert api_versions_works(waiting, timeout_s=10)
    finally:
        waiting.close()
        for s in first:
            s.close()


def test_idle_connections_are_closed(make_broker) -> None:
    broker = make_broker(**{"connections.max.idle.ms": "1000"})
    idle = connect(broker)
    busy = connect(broker)
    try:
        started = time.monotonic()
        while time.monotonic() - started < 2.5:  # well past the idle limit, with a request every 300 ms
            assert api_versions_works(busy)
            time.sleep(0.3)
        wait_until(lambda: is_closed(idle), 10, "the idle connection to be closed")
        assert not is_closed(busy)
    finally:
        idle.close()
        busy.close()


def test_a_request_trickled_byte_by_byte_is_cut_off(make_broker) -> None:
    # Slowloris: a frame header promising 100 bytes, then one byte every 200 ms, which keeps the
    # connection from ever being idle.
    broker = make_broker(**{"socket.request.read.timeout.ms": "1000"})
    with connect(broker) as slow, connect(broker) as partial:
        partial.sendall(b"\x00\x00")  # not even a whole frame size
        slow.sendall(struct.pack(">i", 100))
        started = time.monotonic()
        closed_after = None
        while time.monotonic() - started < 10:
            try:
                slow.sendall(b"x")
            except (BrokenPipeError, ConnectionResetError):
                closed_after = time.monotonic() - started
                break
            if is_closed(slow):
                closed_after = time.monotonic() - started
                break
            time.sleep(0.2)
        assert closed_after is not None and closed_after < 5, closed_after
        wait_until(lambda: is_closed(partial), 10, "the partial header's connection to be closed")
        with connect(broker) as healthy:
            assert api_versions_works(healthy)


def test_running_out_of_descriptors_does_not_lock_clients_out(make_broker, tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "few-fds", max_open_files=128).start()
    try:
        hogs = [connect(broker) for _ in range(200)]  # more than the broker has descriptors for
        time.sleep(0)  # (no wait needed: the accept failures happen as the broker tries)
        wait_until(lambda: "cannot accept connections" in broker.log_text(), 15, "the descriptor shortage to be logged")
        for s in hogs:
            s.close()
        # The backlog drains (the hogs are gone) and a new client is served.
        deadline = time.monotonic() + 30
        served = False
        while not served and time.monotonic() < deadline:
            with connect(broker) as fresh:
                served = api_versions_works(fresh, timeout_s=2)
        assert served
        lines = [line for line in broker.log_text().splitlines() if "accept" in line]
        assert len(lines) < 20, lines  # not a traceback per failed accept
        assert "Traceback" not in broker.log_text()
    finally:
        broker.kill()


def rss_peak_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise AssertionError("no VmHWM")


def test_concurrent_huge_frames_hold_bounded_memory(make_broker) -> None:
    # Four clients each send a 90 MB frame at once. The request memory pool (here the 100 MB
    # minimum, socket.request.max.bytes) lets one frame in at a time, read with one copy.
    frame_size = 90 * 1024 * 1024
    broker = make_broker(**{"queued.max.request.bytes": str(100 * 1024 * 1024)})
    with connect(broker) as warm:
        assert api_versions_works(warm)
    before = rss_peak_kib(broker.pid)
    # A Metadata v1 header, then bytes that are not a valid body: each frame is refused once read.
    header = struct.pack(">hhih", 3, 1, 1, 1) + b"x"
    body = header + b"\xff" * (frame_size - len(header))
    frame = struct.pack(">i", frame_size) + body

    def send() -> None:
        with connect(broker) as sock:
            try:
                sock.sendall(frame)
                sock.recv(1)
            except OSError:
                pass

    threads = [threading.Thread(target=send) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    grown_mib = (rss_peak_kib(broker.pid) - before) / 1024
    print(f"broker peak RSS grew by {grown_mib:.0f} MiB for four concurrent 90 MiB frames")
    assert grown_mib < 250, grown_mib
    with RawClient(broker.bootstrap) as client:
        assert client.request(API_VERSIONS, 3, {}).error_code == 0


@pytest.mark.parametrize("props", [{"queued.max.request.bytes": "1000"}, {"max.connections": "0"},
                                   {"max.connections.per.ip.overrides": "nonsense"},
                                   {"max.connection.creation.rate": "0"},
                                   {"listener.name.plaintext.max.connection.creation.rate": "5"}])
def test_invalid_limits_stop_the_start(props: dict[str, str]) -> None:
    from kbroker.config import BrokerConfig, ConfigError

    with pytest.raises(ConfigError):
        BrokerConfig(props)


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def raise_open_files_limit(wanted: int) -> None:
    """Let this process (and the brokers it starts from now on) hold `wanted` descriptors."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft >= wanted:
        return
    if hard != resource.RLIM_INFINITY and hard < wanted:
        pytest.skip(f"the hard limit of open files is {hard}, below {wanted}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))


def test_three_thousand_idle_connections_cost_bounded_memory(make_broker) -> None:
    raise_open_files_limit(8192)
    broker = make_broker()
    with connect(broker) as warm:
        assert api_versions_works(warm)
    before = rss_kib(broker.pid)
    idle = [connect(broker) for _ in range(3000)]
    try:
        # Every one accepted and served: the last one opened answers a request.
        assert api_versions_works(idle[-1])
        grown_kib = rss_kib(broker.pid) - before
        print(f"broker RSS grew by {grown_kib / 1024:.1f} MiB for 3,000 idle connections "
              f"({grown_kib * 1024 / 3000:.0f} bytes each)")
        # No buffer is allocated for a connection until it sends: a few KiB of Python objects each.
        assert grown_kib < 3000 * 16, grown_kib
        with connect(broker) as another:
            assert api_versions_works(another)
    finally:
        for s in idle:
            s.close()


def test_a_client_that_never_reads_its_answers_is_held_back(make_broker) -> None:
    # Requests whose answers are large (Metadata of all topics) sent as fast as the broker reads
    # them, and no answer ever read: once the socket buffers and a few answers are queued, the
    # broker stops reading from this client (TCP backpressure), so it holds bounded memory and
    # goes on serving others.
    broker = make_broker()
    for i in range(20):
        from tests.conftest import create_topic

        create_topic(broker.bootstrap, f"unread-{i:02d}-" + "x" * 200, partitions=20)
    with connect(broker) as warm:
        assert api_versions_works(warm)
    before = rss_kib(broker.pid)
    client = ClientProtocol("never-reads")
    request = client.encode_request(3, 1, {"topics": None})[1]  # Metadata v1, all topics
    sent = 0
    with connect(broker) as greedy:
        greedy.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        greedy.settimeout(3.0)
        try:
            for _ in range(200_000):
                greedy.sendall(request)
                sent += 1
        except TimeoutError:
            pass  # the broker stopped reading: what we sent fills the socket buffers
        assert sent < 200_000, "the broker kept reading requests nobody reads the answers of"
        grown_kib = rss_kib(broker.pid) - before
        print(f"{sent:,} requests accepted before backpressure; broker RSS grew by {grown_kib / 1024:.1f} MiB")
        assert grown_kib < 64 * 1024, grown_kib
        with connect(broker) as other:
            assert api_versions_works(other)


def test_a_200_mb_frame_header_is_refused_without_allocating(make_broker) -> None:
    broker = make_broker()  # socket.request.max.bytes: Kafka's default, 100 MiB
    with connect(broker) as warm:
        assert api_versions_works(warm)
    before = rss_peak_kib(broker.pid)
    with connect(broker) as huge:
        huge.sendall(struct.pack(">i", 200 * 1024 * 1024) + b"\x00\x03\x00\x01")
        wait_until(lambda: is_closed(huge), 10, "the connection announcing 200 MB to be closed")
    assert rss_peak_kib(broker.pid) - before < 10 * 1024
    with connect(broker) as other:
        assert api_versions_works(other)


def test_connection_creation_rate_delays_new_connections(make_broker) -> None:
    # 5 per second over two 1 s windows: 20 connections, each served, take several seconds
    # (without the limit they take a few milliseconds each).
    broker = make_broker(**{"max.connection.creation.rate": "5", "quota.window.num": "2",
                            "quota.window.size.seconds": "1"})
    started = time.monotonic()
    for _ in range(20):
        with connect(broker) as sock:
            assert api_versions_works(sock, timeout_s=10)
    elapsed = time.monotonic() - started
    print(f"20 connections at max.connection.creation.rate=5: {elapsed:.2f} s")
    assert elapsed >= 2.0, elapsed
    assert "max.connection.creation.rate=5 exceeded" in broker.log_text()
