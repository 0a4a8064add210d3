"""The TCP listeners: accept connections within the limits, and sweep idle or stalled ones.

Accepting is done here rather than by asyncio's server, for four things Kafka's acceptor does:
a client address over `max.connections.per.ip` (or its override) is closed at once; at
`max.connections` the broker stops accepting until a connection ends (new clients wait in the
listen backlog instead of being refused); over `max.connection.creation.rate` accepting waits
long enough to bring the rate back; and running out of file descriptors (EMFILE/ENFILE)
pauses accepting for a moment with one log line per interval, instead of a traceback per try
and a busy loop, while existing connections keep being served.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import socket
import ssl
import time
from collections import Counter
from typing import TYPE_CHECKING

from kbroker.clock import monotonic_ms
from kbroker.config import parse_ip_overrides
from kbroker.handlers import api_versions
from kbroker.log_limiter import RateLimitedLog
from kbroker.metrics.stats import BrokerStats
from kbroker.rates import Rate
from kbroker.security.sasl_config import SaslListenerSettings
from kbroker.security.sasl_server import SaslSession
from kbroker.security.tls import TlsSettings
from kbroker.server.connection import ConnectionLimits, ServedConnection
from kbroker.server.memory_pool import MemoryPool

if TYPE_CHECKING:
    from kbroker.broker import Broker

log = logging.getLogger("kbroker.server")
limited_log = RateLimitedLog(log)

# Errors of accept() that mean "out of resources", not "this one client failed".
_RESOURCE_ERRORS = (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM)
ACCEPT_BACKOFF_S = 0.5
ACCEPTS_PER_WAKEUP = 64
SWEEP_INTERVAL_S = 0.25
STALL_WARNING_S = 0.5


class ConnectionCreationRate:
    """`max.connection.creation.rate` (KIP-612): new connections per second, measured as Kafka
    measures quotas (`quota.window.num` windows of `quota.window.size.seconds`). A connection
    that takes the rate over the limit gets a delay, at most one window, during which the broker
    accepts nothing more: as Kafka's acceptor, it waits rather than refusing, so clients keep
    their connection attempts in the listen backlog and none is lost."""

    def __init__(self, limit: int, window_num: int, window_s: int) -> None:
        self.limit = limit
        self._rate = Rate(window_num, window_s * 1000)
        self._max_delay_ms = window_s * 1000

    def record(self, now_ms: int) -> int:
        """Count a new connection at `now_ms`; the ms accepting must wait (0: none). Every
        connection is recorded, so a limit set later has the history."""
        return self._rate.record_over(1.0, self.limit, now_ms, self._max_delay_ms)


class _Listener:
    def __init__(self, sock: socket.socket, name: str, tls: TlsSettings | None,
                 sasl: SaslListenerSettings | None = None) -> None:
        self.sock = sock
        self.name = name  # the listener's name: Metadata answers with this listener's addresses
        self.tls = tls
        self.sasl = sasl  # SASL_PLAINTEXT / SASL_SSL: clients authenticate before anything else
        self.ssl_context: ssl.SSLContext | None = tls.server_context() if tls is not None else None
        self.reading = False


class Server:
    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        config = broker.config
        self.limits = ConnectionLimits(
            max_request_size=config.socket_request_max_bytes,
            max_request_entries=config.get("socket.request.max.entries"),
            idle_ms=config.get("connections.max.idle.ms"),
            read_timeout_ms=config.get("socket.request.read.timeout.ms"),
            failed_authentication_delay_ms=config.get("connection.failed.authentication.delay.ms"),
        )
        self.max_connections = config.get("max.connections")
        self.max_per_ip = config.get("max.connections.per.ip")
        self.per_ip_overrides = parse_ip_overrides(config.get("max.connections.per.ip.overrides"))
        self.connection_rate = ConnectionCreationRate(config.get("max.connection.creation.rate"),
                                                      config.get("quota.window.num"),
                                                      config.get("quota.window.size.seconds"))
        self.memory = MemoryPool(config.get("queued.max.request.bytes"))
        self.stats: BrokerStats = broker.stats  # requests, their times and errors, failed authentications
        self._listeners: list[_Listener] = []
        self._connections: set[ServedConnection] = set()
        self._per_ip: Counter[str] = Counter()
        self._accept_paused_until = 0.0
        self._sweeper: asyncio.Task[None] | None = None
        self._attaching: set[asyncio.Task[None]] = set()  # connections in their TLS handshake
        self._stopping = False

    @property
    def connection_count(self) -> int:
        return len(self._connections)

    def connections_by_listener(self) -> dict[str, int]:
        """Open connections per listener name; read by the metrics thread (a copy of the set)."""
        counts: Counter[str] = Counter(c.listener for c in list(self._connections))
        return dict(counts)

    async def start(self, host: str, port: int, name: str = "PLAINTEXT", tls: TlsSettings | None = None,
                    sasl: SaslListenerSettings | None = None) -> int:
        """Listen on host:port (0 picks a free port) as listener `name`, with TLS when `tls` is
        given and SASL authentication when `sasl` is; returns the bound port."""
        loop = asyncio.get_running_loop()
        infos = await loop.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        family, _, _, _, address = infos[0]
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(address)
            sock.listen(1024)
            sock.setblocking(False)
        except BaseException:
            sock.close()
            raise
        try:
            listener = _Listener(sock, name, tls, sasl)
        except BaseException:
            sock.close()
            raise
        self._listeners.append(listener)
        self._resume_accepting(listener)
        if self._sweeper is None:
            self._sweeper = asyncio.create_task(self._sweep_forever())
        return sock.getsockname()[1]

    # -- accepting --------------------------------------------------------------------------------

    def _resume_accepting(self, listener: _Listener) -> None:
        if not listener.reading and not self._stopping and listener.sock.fileno() >= 0:
            asyncio.get_running_loop().add_reader(listener.sock.fileno(), self._accept_ready, listener)
            listener.reading = True

    def _pause_accepting(self, listener: _Listener) -> None:
        if listener.reading:
            asyncio.get_running_loop().remove_reader(listener.sock.fileno())
            listener.reading = False

    def _accept_ready(self, listener: _Listener) -> None:
        for _ in range(ACCEPTS_PER_WAKEUP):
            if self.connection_count >= self.max_connections:
                # As Kafka: at the broker-wide limit new clients wait until a connection ends.
                self._pause_accepting(listener)
                limited_log.warning("max-connections", "max.connections=%d reached; accepting paused until a "
                                    "connection closes", self.max_connections)
                return
            try:
                conn, address = listener.sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as e:
                if e.errno in _RESOURCE_ERRORS:
                    self._back_off(listener, e)
                    return
                limited_log.warning("accept", "accepting a connection failed: %s", e)
                return
            delay_ms = self.connection_rate.record(monotonic_ms())
            if delay_ms:
                self._delay_accepting(conn, address[0], listener, delay_ms)
                return
            self._admit(conn, address[0], listener)

    def _delay_accepting(self, conn: socket.socket, ip: str, listener: _Listener, delay_ms: int) -> None:
        """Over max.connection.creation.rate: this connection is served, and the listener accepts
        again, once the delay has passed (Kafka's acceptor blocks for it the same way)."""
        limited_log.info("connection-rate", "max.connection.creation.rate=%d exceeded; accepting waits %d ms",
                         self.connection_rate.limit, delay_ms)
        self._pause_accepting(listener)
        self._accept_paused_until = max(self._accept_paused_until, time.monotonic() + delay_ms / 1000)
        asyncio.get_running_loop().call_later(delay_ms / 1000, self._accept_after_delay, conn, ip, listener)

    def _accept_after_delay(self, conn: socket.socket, ip: str, listener: _Listener) -> None:
        if self._stopping:
            conn.close()
            return
        self._admit(conn, ip, listener)
        self._resume_accepting(listener)

    def _back_off(self, listener: _Listener, error: OSError) -> None:
        """Out of descriptors: stop accepting for a moment (or until a connection closes)."""
        limited_log.warning("accept-resources", "cannot accept connections: %s; pausing accepting for %.1f s "
                            "(existing connections are still served)", error.strerror, ACCEPT_BACKOFF_S)
        self._pause_accepting(listener)
        self._accept_paused_until = time.monotonic() + ACCEPT_BACKOFF_S
        asyncio.get_running_loop().call_later(ACCEPT_BACKOFF_S, self._resume_accepting, listener)

    def _admit(self, conn: socket.socket, ip: str, listener: _Listener) -> None:
        limit = self.per_ip_overrides.get(ip, self.max_per_ip)
        if self._per_ip[ip] >= limit:
            limited_log.info(f"per-ip-{ip}", "rejected connection from %s: it already has max.connections.per.ip"
                             "=%d connections", ip, limit)
            conn.close()
            return
        conn.setblocking(False)
        with contextlib.suppress(OSError):
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        mapper = listener.tls.principal_mapper if listener.tls is not None else None
        session = None
        if listener.sasl is not None:
            session = SaslSession(listener.sasl, self.broker.credentials.scram,
                                  (api_versions.MIN_VERSION, api_versions.MAX_VERSION))
        connection = ServedConnection(self, ip, listener.name, mapper, session)
        self._connections.add(connection)
        self._per_ip[ip] += 1
        task = asyncio.get_running_loop().create_task(self._attach(conn, connection, listener))
        self._attaching.add(task)
        task.add_done_callback(self._attaching.discard)

    async def _attach(self, conn: socket.socket, connection: ServedConnection, listener: _Listener) -> None:
        """Hand the socket to asyncio; on a TLS listener its handshake runs first, on the event
        loop without blocking it (asyncio's SSL protocol over memory BIOs), within
        socket.request.read.timeout.ms. A failed handshake (a plaintext client, an untrusted or
        expired certificate) closes this connection only."""
        loop = asyncio.get_running_loop()
        try:
            if listener.ssl_context is None:
                await loop.connect_accepted_socket(lambda: connection, sock=conn)
            else:
                await loop.connect_accepted_socket(
                    lambda: connection, sock=conn, ssl=listener.ssl_context,
                    ssl_handshake_timeout=self.limits.read_timeout_ms / 1000)
        except (OSError, asyncio.CancelledError) as e:
            if listener.ssl_context is not None:
                self.stats.authentication_failed(listener.name)  # as Kafka counts a failed TLS handshake
                limited_log.info(f"tls-{connection.ip}", "closing %s on listener %s: TLS handshake failed: %s",
                                 connection.ip, listener.name, e or type(e).__name__)
            else:
                limited_log.warning("attach", "setting up a connection failed: %s", e)
            conn.close()
            connection.never_started()
            self.connection_closed(connection)

    def connection_closed(self, connection: ServedConnection) -> None:
        if connection not in self._connections:
            return
        self._connections.discard(connection)
        self._per_ip[connection.ip] -= 1
        if self._per_ip[connection.ip] <= 0:
            del self._per_ip[connection.ip]
        # A slot (and a descriptor) is free: accept again unless out-of-descriptor backoff runs.
        if time.monotonic() >= self._accept_paused_until:
            for listener in self._listeners:
                self._resume_accepting(listener)

    # -- sweeping -----------------------------------------------------------------------------

    async def _sweep_forever(self) -> None:
        while True:
            expected = time.monotonic() + SWEEP_INTERVAL_S
            await asyncio.sleep(SWEEP_INTERVAL_S)
            now = time.monotonic()
            if now - expected > STALL_WARNING_S:
                # Something held the event loop: every client waited. Say what was being handled.
                busy = sorted({c.current_api for c in self._connections if c.current_api is not None})
                limited_log.warning("stall", "the event loop was held for %.0f ms (requests in progress: %s)",
                                    (now - expected) * 1000, busy or "none")
            for connection in list(self._connections):
                connection.check_timeouts(now)

    # -- stopping -----------------------------------------------------------------------------

    async def stop(self) -> None:
        self._stopping = True
        for listener in self._listeners:
            self._pause_accepting(listener)
            listener.sock.close()
        if self._sweeper is not None:
            self._sweeper.cancel()
        for task in list(self._attaching):
            task.cancel()  # handshakes in progress
        await asyncio.gather(*self._attaching, return_exceptions=True)
        connections = list(self._connections)
        for connection in connections:
            connection.shutdown()
        await asyncio.gather(*(c.finished() for c in connections), return_exceptions=True)
