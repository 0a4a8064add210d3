"""The HTTP endpoint scrapers read: `metrics.listener` (http://host:port), off by default.

prometheus_client's WSGI server runs in daemon threads, so serving a scrape never blocks the
event loop; what it calls (the collector) only reads the broker's state (collector.py). Each
broker has a `CollectorRegistry` of its own, not the process-wide default, so several brokers
in one process (tests) each serve their own series.
"""

from __future__ import annotations

import asyncio
import threading
from typing import TYPE_CHECKING
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, start_http_server

from kbroker.metrics.collector import BrokerCollector
from kbroker.metrics.listener import MetricsListener
from kbroker.metrics.loop_monitor import LoopMonitor
from kbroker.metrics.stats import BrokerStats

if TYPE_CHECKING:
    from kbroker.broker import Broker


class MetricsEndpoint:
    """The running endpoint of one broker: its registry, HTTP server and loop monitor."""

    def __init__(self, broker: Broker, stats: BrokerStats, listener: MetricsListener) -> None:
        self.listener = listener
        self.loop_monitor = LoopMonitor()
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(BrokerCollector(broker, stats, self.loop_monitor))
        self._server: WSGIServer | None = None
        self._thread: threading.Thread | None = None
        self.port = listener.port

    def start(self) -> None:
        """Bind and serve (raises OSError when the address cannot be bound), then start
        measuring the running event loop."""
        self._server, self._thread = start_http_server(self.listener.port, self.listener.host or "0.0.0.0",
                                                       registry=self.registry)
        self.port = self._server.server_port
        self.loop_monitor.install(asyncio.get_running_loop())

    @property
    def url(self) -> str:
        """Where it serves, with the bound port."""
        return MetricsListener(self.listener.host, self.port).url

    async def stop(self) -> None:
        await self.loop_monitor.stop()
        if self._server is not None:
            server = self._server
            # shutdown() waits for serve_forever's next poll (up to half a second): not on the loop.
            await asyncio.to_thread(server.shutdown)
            server.server_close()
            self._server = None
