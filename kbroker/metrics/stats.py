"""Counters the broker's hot paths bump: plain ints, dicts and lists, no locks.

They are written on the event loop (and, for flush times, by the loop after a flusher thread's
fsync) and read by the HTTP server's thread at scrape time. Each update is one or two
operations on a builtin container, which the GIL keeps whole; a reader copies a dict's items
with `list(d.items())` before it walks them, so an insertion on the loop cannot break its
iteration. A scrape may see one request's numbers half applied (its count but not yet its
time); the next scrape sees all of it, which is all a counter promises.
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass, field

# Upper bounds (seconds) of request-time buckets: from 100 µs (a metadata answer on an idle
# broker) to 10 s (long polls and acks=all waits), about three per decade as Kafka's histograms.
REQUEST_TIME_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
                        0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
# fsyncs take from tens of microseconds (page cache already clean) to seconds (a whole segment).
FLUSH_TIME_BUCKETS = (0.0001, 0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0)


class Histogram:
    """Fixed buckets: `counts[i]` observations at or below `bounds[i]` and above the bound
    before it; the last slot is above every bound (+Inf). Cumulated only when scraped."""

    __slots__ = ("bounds", "counts", "total")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        self.total = 0.0  # the sum of observations

    def observe(self, value: float) -> None:
        self.counts[bisect_left(self.bounds, value)] += 1
        self.total += value

    def snapshot(self) -> tuple[list[tuple[str, int]], float]:
        """Cumulative (upper bound, count) pairs ending with +Inf, and the sum. The count of
        observations is the +Inf bucket's, taken from the same copy, so they always agree."""
        counts = list(self.counts)
        total = self.total
        buckets: list[tuple[str, int]] = []
        running = 0
        for bound, count in zip((*self.bounds, float("inf")), counts, strict=True):
            running += count
            buckets.append(("+Inf" if bound == float("inf") else repr(bound), running))
        return buckets, total


class ApiStats:
    """One API's requests: how many, how many answers carried each error, and three timings."""

    __slots__ = ("errors", "queue_time", "requests", "send_time", "total_time")

    def __init__(self) -> None:
        self.requests = 0
        self.errors: dict[int, int] = {}  # error code -> answers carrying it
        self.total_time = Histogram(REQUEST_TIME_BUCKETS)  # frame received -> answer written
        self.queue_time = Histogram(REQUEST_TIME_BUCKETS)  # frame received -> its handling starts
        self.send_time = Histogram(REQUEST_TIME_BUCKETS)  # answer encoded -> written to the socket


class TopicStats:
    """One topic's traffic through this broker."""

    __slots__ = ("bytes_in", "bytes_out", "messages_in", "replication_bytes_out")

    def __init__(self) -> None:
        self.bytes_in = 0  # record-batch bytes appended as leader by Produce
        self.messages_in = 0  # records in them
        self.bytes_out = 0  # record bytes in Fetch answers to consumers
        self.replication_bytes_out = 0  # record bytes in Fetch answers to follower brokers


@dataclass(slots=True)
class BrokerStats:
    """Everything one broker counts; the collector reads it (see the module docstring)."""

    topics: dict[str, TopicStats] = field(default_factory=dict)
    apis: dict[int, ApiStats] = field(default_factory=dict)  # by API key
    isr_shrinks: int = 0
    isr_expands: int = 0
    authentication_failures: dict[str, int] = field(default_factory=dict)  # by listener name
    flush_time: Histogram = field(default_factory=lambda: Histogram(FLUSH_TIME_BUCKETS))
    # (quota entity type, entity name) -> [throttled answers, milliseconds of throttle in all]
    throttles: dict[tuple[str, str], list[int]] = field(default_factory=dict)

    # -- topics -----------------------------------------------------------------------------------

    def topic(self, name: str) -> TopicStats:
        stats = self.topics.get(name)
        if stats is None:
            stats = self.topics[name] = TopicStats()
        return stats

    def forget_topic(self, name: str) -> None:
        """A deleted topic's series go (as Kafka removes its topic metrics), so their number
        does not grow with every topic ever created."""
        self.topics.pop(name, None)

    # -- requests ---------------------------------------------------------------------------------

    def api(self, api_key: int) -> ApiStats:
        stats = self.apis.get(api_key)
        if stats is None:
            stats = self.apis[api_key] = ApiStats()
        return stats

    def record_errors(self, api_key: int, body: object) -> None:
        """Count each distinct non-zero error code of an answer once (see `error_codes`)."""
        self.count_errors(api_key, error_codes(body))

    def count_errors(self, api_key: int, codes: set[int]) -> None:
        """`record_errors` with the codes found already (by a worker thread, for a large answer)."""
        if codes:
            errors = self.api(api_key).errors
            for code in codes:
                errors[code] = errors.get(code, 0) + 1

    # -- security and quotas ----------------------------------------------------------------------

    def authentication_failed(self, listener: str) -> None:
        self.authentication_failures[listener] = self.authentication_failures.get(listener, 0) + 1

    def record_throttle(self, entity_type: str, entity_name: str, throttle_ms: int) -> None:
        """The hook for quotas: call it once per answer a quota throttled, with the quota
        entity (Kafka's: entity_type "user", "client-id" or "user,client-id"; entity_name its
        name, e.g. "alice" or "alice,app-1") and the throttle_time_ms the answer carries.
        Exposed as kbroker_throttled_requests_total and kbroker_throttle_time_seconds_total."""
        entry = self.throttles.get((entity_type, entity_name))
        if entry is None:
            entry = self.throttles[(entity_type, entity_name)] = [0, 0]
        entry[0] += 1
        entry[1] += throttle_ms


def error_codes(body: object) -> set[int]:
    """The distinct non-zero error codes of an answer body (a dict as handlers build it): the
    top level's `error_code` and those of every entry of its arrays, at any depth (topics,
    partitions, groups, resources...). One set per answer, so a Produce whose 50 partitions
    all fail NOT_LEADER_OR_FOLLOWER counts once for that code."""
    found: set[int] = set()
    pending = [body]
    while pending:
        item = pending.pop()
        if isinstance(item, dict):
            code = item.get("error_code")
            if code:
                found.add(int(code))
            for value in item.values():
                if isinstance(value, list) and value and isinstance(value[0], dict):
                    pending.extend(value)
        elif isinstance(item, list):
            pending.extend(item)
    return found
