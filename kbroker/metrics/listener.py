"""`metrics.listener`: where the metrics endpoint listens. No dependencies, so the
configuration can check the value without loading the HTTP server."""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit


class MetricsListenerError(ValueError):
    """A `metrics.listener` the broker cannot serve on."""


@dataclass(frozen=True, slots=True)
class MetricsListener:
    host: str  # "" or 0.0.0.0: every interface
    port: int

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/metrics"


def parse_metrics_listener(text: str) -> MetricsListener | None:
    """`http://host:port` (a bracketed IPv6 host, or an empty one for every interface); an
    empty text turns the endpoint off (None). Raises MetricsListenerError saying what is wrong."""
    text = text.strip()
    if not text:
        return None
    parts = urlsplit(text)
    if parts.scheme != "http":
        raise MetricsListenerError(f"{text!r}: expected http://host:port (only plain HTTP is served)")
    if parts.path not in ("", "/") or parts.query or parts.fragment or parts.username or parts.password:
        raise MetricsListenerError(f"{text!r}: expected http://host:port, nothing after the port")
    try:
        port = parts.port
    except ValueError as e:
        raise MetricsListenerError(f"{text!r}: {e}") from None
    if port is None:
        raise MetricsListenerError(f"{text!r}: a port is needed, e.g. http://0.0.0.0:9404")
    return MetricsListener(parts.hostname or "", port)
