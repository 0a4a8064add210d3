"""The console's charts: bytes in and out per second and request latency, from successive
scrapes of the brokers' metrics endpoints (Prometheus text format), summed over brokers.

Only totals are kept per scrape (a few numbers and one histogram per charted API), so the
history of the last minutes is small whatever the number of topics.
"""

from __future__ import annotations

import urllib.request
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

# Series as the broker's metrics endpoint names them (docs/operations.md, "Metrics"); counters
# are summed over their label sets (topics), request times kept for the charted APIs.
BYTES_IN = "kbroker_topic_bytes_in"
BYTES_OUT = "kbroker_topic_bytes_out"
REQUEST_TIME = "kbroker_request_total_time_seconds"
CHARTED_APIS = ("Produce", "Fetch")
LATENCY_QUANTILE = 0.99
SCRAPE_TIMEOUT_S = 2.0


@dataclass
class Histogram:
    buckets: dict[float, float] = field(default_factory=dict)  # upper bound -> cumulative count
    count: float = 0.0


@dataclass
class Scrape:
    """Totals of one scrape of every endpoint, at time `at` (seconds, monotonic)."""
    at: float
    bytes_in: float = 0.0
    bytes_out: float = 0.0
    requests: dict[str, Histogram] = field(default_factory=dict)


def parse_totals(text: str, at: float, into: Scrape | None = None) -> Scrape:
    """Add one endpoint's totals (its exposition `text`) to `into`."""
    scrape = into or Scrape(at)
    for family in text_string_to_metric_families(text):
        for sample in family.samples:  # by sample name: a family's own name varies with its TYPE line
            if sample.name == BYTES_IN + "_total":
                scrape.bytes_in += sample.value
            elif sample.name == BYTES_OUT + "_total":
                scrape.bytes_out += sample.value
            elif sample.name.startswith(REQUEST_TIME) and sample.labels.get("request") in CHARTED_APIS:
                histogram = scrape.requests.setdefault(sample.labels["request"], Histogram())
                if sample.name == REQUEST_TIME + "_bucket":
                    bound = float(sample.labels["le"])
                    histogram.buckets[bound] = histogram.buckets.get(bound, 0.0) + sample.value
                elif sample.name == REQUEST_TIME + "_count":
                    histogram.count += sample.value
    return scrape


def quantile_between(before: Histogram, after: Histogram, q: float) -> float | None:
    """The q-quantile (seconds) of the requests between two scrapes, interpolated inside its
    bucket as Prometheus' histogram_quantile does; None when no request came."""
    bounds = sorted(after.buckets)
    counts = [after.buckets[b] - before.buckets.get(b, 0.0) for b in bounds]
    total = counts[-1] if counts else 0.0
    if total <= 0:
        return None
    rank = q * total
    lower, below = 0.0, 0.0
    for bound, cumulative in zip(bounds, counts, strict=True):
        if cumulative >= rank:
            if bound == float("inf"):
                return lower  # beyond the last finite bucket: its bound is all that is known
            inside = cumulative - below
            return lower + (bound - lower) * ((rank - below) / inside if inside else 1.0)
        lower, below = bound, cumulative
    return lower


class MetricsHistory:
    """The last `keep` scrapes of the endpoints at `urls`, and the rates between them."""

    def __init__(self, urls: list[str], keep: int = 300) -> None:
        self.urls = urls
        self.scrapes: deque[Scrape] = deque(maxlen=keep)
        self.errors: dict[str, str] = {}

    def scrape(self, at: float) -> None:
        scrape = Scrape(at)
        for url in self.urls:
            try:
                with urllib.request.urlopen(url, timeout=SCRAPE_TIMEOUT_S) as response:
                    parse_totals(response.read().decode(), at, scrape)
                self.errors.pop(url, None)
            except (OSError, ValueError) as e:
                self.errors[url] = str(e)
        self.scrapes.append(scrape)

    def series(self, wall_now_ms: int, monotonic_now: float) -> dict[str, Any]:
        """Per interval between scrapes: its end (ms since the epoch), bytes in and out per
        second, and each charted API's latency quantile in ms."""
        points = list(self.scrapes)
        times, bytes_in, bytes_out = [], [], []
        latency: dict[str, list[float | None]] = {api: [] for api in CHARTED_APIS}
        for before, after in zip(points, points[1:], strict=False):
            elapsed = after.at - before.at
            if elapsed <= 0:
                continue
            times.append(wall_now_ms - int((monotonic_now - after.at) * 1000))
            # A broker restart resets its counters: show no negative rate.
            bytes_in.append(max(0.0, after.bytes_in - before.bytes_in) / elapsed)
            bytes_out.append(max(0.0, after.bytes_out - before.bytes_out) / elapsed)
            for api in CHARTED_APIS:
                value = quantile_between(before.requests.get(api, Histogram()),
                                         after.requests.get(api, Histogram()), LATENCY_QUANTILE)
                latency[api].append(None if value is None else round(value * 1000, 3))
        return {"times_ms": times, "bytes_in_per_s": bytes_in, "bytes_out_per_s": bytes_out,
                "latency_quantile": LATENCY_QUANTILE, "latency_ms": latency,
                "endpoints": self.urls, "errors": dict(self.errors)}
