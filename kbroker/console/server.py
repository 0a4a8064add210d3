"""`kbroker console`: a read-only web page over a running cluster.

One poller thread reads the cluster (`snapshot.take_snapshot`) and scrapes the brokers'
metrics endpoints every `refresh_s`; the HTTP server threads only hand out the latest
result. So any number of open pages costs the cluster the same, a slow cluster never makes
a page hang, and the page shows the poller's error when the cluster cannot be read.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from kbroker.client import BrokerUnreachable, Client
from kbroker.console.metrics_history import MetricsHistory
from kbroker.console.snapshot import take_snapshot
from kbroker.security.client_config import ClientSecurity
from protocol.errors import KafkaError

log = logging.getLogger("kbroker.console")

STATIC_DIR = Path(__file__).parent / "static"
CONTENT_TYPES = {".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8",
                 ".css": "text/css; charset=utf-8"}


class ClusterPoller:
    """Reads the cluster and its metrics every `refresh_s` in a thread of its own."""

    def __init__(self, bootstrap: str, metrics_urls: list[str], refresh_s: float,
                 security: ClientSecurity | None = None,
                 connect: Callable[[], Client] | None = None) -> None:
        self.refresh_s = refresh_s
        self.history = MetricsHistory(metrics_urls)
        self._connect = connect or (lambda: Client(bootstrap, client_id="kbroker-console", timeout=10.0,
                                                   security=security))
        self._client: Client | None = None
        self._lock = threading.Lock()
        self._snapshot: dict[str, Any] | None = None
        self._error: str | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="kbroker-console-poller", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=15)
        if self._client is not None:
            self._client.close()

    def state(self) -> dict[str, Any]:
        """The latest snapshot, the chart series and the last error, as the page reads them."""
        with self._lock:
            snapshot, error = self._snapshot, self._error
        series = self.history.series(int(time.time() * 1000), time.monotonic())
        return {"snapshot": snapshot, "error": error, "metrics": series, "refresh_s": self.refresh_s}

    def poll_once(self) -> None:
        snapshot, error = None, None
        try:
            if self._client is None:
                self._client = self._connect()
            snapshot = take_snapshot(self._client)
        except (BrokerUnreachable, KafkaError, OSError) as e:
            error = f"cannot read the cluster: {e}"
            if self._client is not None:
                self._client.close()
                self._client = None  # reconnect (through the bootstrap list) next time
        self.history.scrape(time.monotonic())  # appends one whole scrape: readers never see half of one
        with self._lock:
            if snapshot is not None:
                self._snapshot = snapshot
            self._error = error

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.poll_once()
            except Exception:  # the page must keep showing the last state, and the poller keep going
                log.exception("reading the cluster failed")
            self._stop.wait(self.refresh_s)


def make_server(host: str, port: int, poller: ClusterPoller) -> ThreadingHTTPServer:
    """An HTTP server (not yet serving) for the page, its files and /api/state."""
    files = {"/": STATIC_DIR / "index.html"}
    files.update((f"/static/{p.relative_to(STATIC_DIR).as_posix()}", p)
                 for p in STATIC_DIR.rglob("*") if p.is_file())

    class Handler(BaseHTTPRequestHandler):
        server_version = "kbroker-console"

        def do_GET(self) -> None:  # noqa: N802 (the stdlib's name)
            path = self.path.split("?", 1)[0]
            if path == "/api/state":
                self._send(HTTPStatus.OK, "application/json", json.dumps(poller.state()).encode())
            elif path in files:
                file = files[path]
                self._send(HTTPStatus.OK, CONTENT_TYPES.get(file.suffix, "application/octet-stream"),
                           file.read_bytes())
            else:
                self._send(HTTPStatus.NOT_FOUND, "text/plain", b"not found\n")

        def _send(self, status: HTTPStatus, content_type: str, body: bytes) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Cache-Control", "no-store")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (the stdlib's name)
            log.debug("%s " + format, self.address_string(), *args)

    server = ThreadingHTTPServer((host, port), Handler)
    server.daemon_threads = True
    return server
