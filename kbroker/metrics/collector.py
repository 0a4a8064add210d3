"""The broker's metric families, built when a scraper asks (docs/operations.md, "Metrics").

Runs in prometheus_client's HTTP server thread, not on the event loop: it only reads. Counters
come from `BrokerStats` (see stats.py for why reading them there is safe); gauges are read from
the broker's state as it stands: every dict is copied (`list(d.items())`) before it is walked,
only plain attributes are read, and nothing awaits or calls into asyncio. A section whose
state changed under it mid-read is tried once more, then left out of that scrape, so one
unlucky moment never turns the whole answer into an error.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from kbroker.metrics.loop_monitor import LoopMonitor
from kbroker.metrics.stats import BrokerStats, Histogram
from protocol.errors import ErrorCode
from protocol.messages import BY_KEY

if TYPE_CHECKING:
    from kbroker.broker import Broker

log = logging.getLogger("kbroker.metrics")
NO_LEADER = -1
SECTION_TRIES = 2


def api_name(api_key: int) -> str:
    api = BY_KEY.get(api_key)
    return api.NAME if api is not None else str(api_key)


def error_name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return str(code)


def histogram(name: str, doc: str, labels: list[str],
              series: Iterable[tuple[list[str], Histogram]]) -> HistogramMetricFamily:
    family = HistogramMetricFamily(name, doc, labels=labels)
    for values, each in series:
        buckets, total = each.snapshot()
        family.add_metric(values, buckets, total)
    return family


class BrokerCollector(Collector):
    """Every kbroker_* series of one broker."""

    def __init__(self, broker: Broker, stats: BrokerStats, loop: LoopMonitor) -> None:
        self.broker = broker
        self.stats = stats
        self.loop = loop

    def collect(self) -> Iterator[Metric]:
        sections: list[Callable[[], list[Metric]]] = [
            self._traffic, self._requests, self._event_loop, self._partitions, self._logs, self._groups,
            self._connections, self._throttles, self._views, self._archive]
        for section in sections:
            yield from self._guarded(section)

    def _guarded(self, section: Callable[[], list[Metric]]) -> list[Metric]:
        for attempt in range(SECTION_TRIES):
            try:
                return section()
            except (RuntimeError, KeyError, AttributeError) as e:  # state changed while it was read
                if attempt == SECTION_TRIES - 1:
                    log.warning("metrics: leaving %s out of this scrape: %r", section.__name__, e)
        return []

    # -- counters of the hot paths ----------------------------------------------------------------

    def _traffic(self) -> list[Metric]:
        bytes_in = CounterMetricFamily("kbroker_topic_bytes_in", "Record-batch bytes appended as leader by "
                                       "Produce requests, per topic (Kafka's BytesInPerSec).", labels=["topic"])
        messages_in = CounterMetricFamily("kbroker_topic_messages_in", "Records appended as leader by Produce "
                                          "requests, per topic (Kafka's MessagesInPerSec).", labels=["topic"])
        bytes_out = CounterMetricFamily("kbroker_topic_bytes_out", "Record bytes sent in Fetch answers to "
                                        "consumers, per topic (Kafka's BytesOutPerSec).", labels=["topic"])
        replication = CounterMetricFamily("kbroker_topic_replication_bytes_out", "Record bytes sent in Fetch "
                                          "answers to follower brokers, per topic (Kafka's "
                                          "ReplicationBytesOutPerSec).", labels=["topic"])
        for topic, each in list(self.stats.topics.items()):
            bytes_in.add_metric([topic], each.bytes_in)
            messages_in.add_metric([topic], each.messages_in)
            bytes_out.add_metric([topic], each.bytes_out)
            replication.add_metric([topic], each.replication_bytes_out)
        return [bytes_in, messages_in, bytes_out, replication]

    def _requests(self) -> list[Metric]:
        apis = [(api_name(key), each) for key, each in list(self.stats.apis.items())]
        requests = CounterMetricFamily("kbroker_requests", "Requests handled, per API (Kafka's RequestsPerSec).",
                                       labels=["request"])
        errors = CounterMetricFamily("kbroker_request_errors", "Answers carrying a non-zero error code, per API "
                                     "and code: each distinct code of an answer (top level or any entry) counts "
                                     "once (Kafka's ErrorsPerSec).", labels=["request", "error"])
        for name, each in apis:
            requests.add_metric([name], each.requests)
            for code, count in list(each.errors.items()):
                errors.add_metric([name, error_name(code)], count)
        return [
            requests, errors,
            histogram("kbroker_request_total_time_seconds", "From a request's last byte received to its answer "
                      "written, per API (Kafka's TotalTimeMs).", ["request"],
                      (([name], each.total_time) for name, each in apis)),
            histogram("kbroker_request_queue_time_seconds", "From a request's last byte received to the start "
                      "of its handling (Kafka's RequestQueueTimeMs).", ["request"],
                      (([name], each.queue_time) for name, each in apis)),
            histogram("kbroker_response_send_time_seconds", "Writing an encoded answer to the socket, until the "
                      "transport took it (Kafka's ResponseSendTimeMs).", ["request"],
                      (([name], each.send_time) for name, each in apis)),
        ]

    def _event_loop(self) -> list[Metric]:
        found: list[Metric] = [histogram("kbroker_event_loop_lag_seconds", "How late a timer set to fire every "
                                         "second ran: time a ready callback waited behind others.", [],
                                         [([], self.loop.lag)])]
        if self.loop.measures_idle:
            idle = CounterMetricFamily("kbroker_event_loop_idle_seconds", "Time the event loop spent waiting "
                                       "for sockets and timers (blocked in select).")
            idle.add_metric([], self.loop.idle_seconds)
            found.append(idle)
        busy = self.loop.busy_ratio()
        if busy is not None:
            found.append(GaugeMetricFamily("kbroker_event_loop_busy_ratio", "Share of the last 10 s the event "
                                           "loop spent running callbacks (1 - Kafka's "
                                           "NetworkProcessorAvgIdlePercent).", value=busy))
        return found

    # -- partitions and logs, read at scrape time ---------------------------------------------------

    def _hosted(self) -> list[Any]:
        return list(self.broker.replicas.partitions())

    def _partitions(self) -> list[Metric]:
        hosted = self._hosted()
        led = [p for p in hosted if p.is_leader]
        under_replicated = sum(1 for p in led if len(p.isr) < len(p.replicas))
        under_min_isr = sum(1 for p in led if len(p.isr) < p.log.config.min_insync_replicas)
        controller = self._is_controller()
        offline = self._offline_partitions() if controller else 0
        gauges = [
            ("kbroker_partitions", "Partition replicas hosted by this broker (Kafka's PartitionCount).", len(hosted)),
            ("kbroker_leader_partitions", "Partitions this broker leads (Kafka's LeaderCount).", len(led)),
            ("kbroker_under_replicated_partitions", "Partitions led here whose ISR is smaller than their "
             "replica set (Kafka's UnderReplicatedPartitions).", under_replicated),
            ("kbroker_under_min_isr_partitions", "Partitions led here whose ISR is below min.insync.replicas "
             "(Kafka's UnderMinIsrPartitionCount).", under_min_isr),
            ("kbroker_offline_partitions", "Partitions without a leader; reported by the active controller only, "
             "0 elsewhere (Kafka's OfflinePartitionsCount).", offline),
            ("kbroker_active_controller_count", "1 on the active controller (and on a single node), else 0 "
             "(Kafka's ActiveControllerCount).", 1 if controller else 0),
        ]
        found: list[Metric] = [GaugeMetricFamily(name, doc, value=value) for name, doc, value in gauges]
        shrinks = CounterMetricFamily("kbroker_isr_shrinks", "ISR shrinks of partitions led here (Kafka's "
                                      "IsrShrinksPerSec).")
        shrinks.add_metric([], self.stats.isr_shrinks)
        expands = CounterMetricFamily("kbroker_isr_expands", "ISR expansions of partitions led here (Kafka's "
                                      "IsrExpandsPerSec).")
        expands.add_metric([], self.stats.isr_expands)
        return [*found, shrinks, expands]

    def _is_controller(self) -> bool:
        if self.broker.cluster is None:
            return True  # the embedded single node decides its own partitions' states
        return self.broker.metadata_cache.controller_id == self.broker.config.broker_id

    def _offline_partitions(self) -> int:
        states = list(self.broker.metadata_cache.states.values())
        return sum(1 for state in states if state.leader == NO_LEADER)

    def _logs(self) -> list[Metric]:
        size = GaugeMetricFamily("kbroker_log_size_bytes", "Bytes of a hosted partition's log segments (Kafka's "
                                 "Log Size).", labels=["topic", "partition"])
        end = GaugeMetricFamily("kbroker_log_end_offset", "A hosted partition's log end offset (Kafka's Log "
                                "LogEndOffset).", labels=["topic", "partition"])
        for partition in self._hosted():
            labels = [partition.topic, str(partition.index)]
            size.add_metric(labels, partition.log.size_in_bytes)
            end.add_metric(labels, partition.log.log_end_offset)
        flush = histogram("kbroker_log_flush_time_seconds", "fsyncs of logs: flush.ms flushes and those of rolled "
                          "segments (Kafka's LogFlushRateAndTimeMs).", [], [([], self.stats.flush_time)])
        return [size, end, flush]

    # -- groups -----------------------------------------------------------------------------------

    def _groups(self) -> list[Metric]:
        coordinator = self.broker.groups
        states: Counter[tuple[str, str]] = Counter()
        for group in list(coordinator.groups.values()):
            states[("classic", group.state.value)] += 1
        for group in list(coordinator.consumer.groups.values()):
            states[("consumer", group.state.value)] += 1
        count = GaugeMetricFamily("kbroker_consumer_groups", "Consumer groups this broker coordinates, by "
                                  "protocol and state (Kafka's NumGroups*).", labels=["protocol", "state"])
        for (protocol, state), number in sorted(states.items()):
            count.add_metric([protocol, state], number)
        return [count, self._lag()]

    def _lag(self) -> GaugeMetricFamily:
        """High watermark - committed offset, for the groups coordinated here and the partitions
        led here: what kafka-consumer-groups.sh --describe shows as LAG."""
        lag = GaugeMetricFamily("kbroker_consumer_group_lag", "Records of a partition led here that a group "
                                "coordinated here has not committed: high watermark - committed offset.",
                                labels=["group", "topic", "partition"])
        led = {(p.topic, p.index): p for p in self._hosted() if p.is_leader}
        for group_id, offsets in list(self.broker.groups.committed.offsets.items()):
            for (topic, index), value in list(offsets.items()):
                partition = led.get((topic, index))
                if partition is not None:
                    lag.add_metric([group_id, topic, str(index)], max(partition.log.high_watermark - value.offset, 0))
        return lag

    # -- connections, security, quotas --------------------------------------------------------------

    def _connections(self) -> list[Metric]:
        connections = GaugeMetricFamily("kbroker_connections", "Open client connections, per listener (Kafka's "
                                        "connection-count).", labels=["listener"])
        for listener, number in sorted(self.broker.server.connections_by_listener().items()):
            connections.add_metric([listener], number)
        failures = CounterMetricFamily("kbroker_authentication_failures", "Failed authentications, per listener: "
                                       "SASL exchanges, TLS handshakes and client certificates no "
                                       "ssl.principal.mapping.rules rule maps (Kafka's "
                                       "failed-authentication-total).", labels=["listener"])
        for listener, number in sorted(self.stats.authentication_failures.items()):
            failures.add_metric([listener], number)
        return [connections, failures]

    def _views(self) -> list[Metric]:
        records = CounterMetricFamily("kbroker_view_records", "Source records a filtered view's fetches read, "
                                      "per view and outcome (kept for the consumer, or filtered out).",
                                      labels=["view", "outcome"])
        batches = CounterMetricFamily("kbroker_view_batches", "Source batches a filtered view's fetches read, per "
                                      "view and what the consumer got: whole, rebuilt or emptied.",
                                      labels=["view", "outcome"])
        reader = self.broker.replicas.view_reader
        remembered = GaugeMetricFamily("kbroker_view_verdicts", "Source batches whose verdict (kept whole, or "
                                       "emptied) the views remember, all views together: read again, they are "
                                       "answered without being decoded.", value=len(reader.verdicts))
        indexer = self.broker.replicas.view_indexer
        indexed = CounterMetricFamily("kbroker_view_batches_indexed", "Source batches filtered as they were "
                                      "appended (all views together), so that first reads find their verdicts.",
                                      value=indexer.batches_indexed)
        for view, counted in list(reader.stats.items()):
            records.add_metric([view, "kept"], counted.records_kept)
            records.add_metric([view, "filtered"], counted.records_in - counted.records_kept)
            batches.add_metric([view, "whole"], counted.batches_whole)
            batches.add_metric([view, "rebuilt"], counted.batches_rebuilt)
            batches.add_metric([view, "emptied"], counted.batches_emptied)
        return [records, batches, remembered, indexed]

    def _archive(self) -> list[Metric]:
        """The archive (docs/archive.md), when the broker archives."""
        archiver = self.broker.archiver
        if archiver is None:
            return []
        return [
            CounterMetricFamily("kbroker_archive_segments_copied", "Segments copied to the object store.",
                                value=archiver.segments_copied),
            CounterMetricFamily("kbroker_archive_bytes_copied", "Bytes of segments copied to the object store.",
                                value=archiver.bytes_copied),
            CounterMetricFamily("kbroker_archive_segments_deleted", "Archived segments the total retention "
                                "deleted.", value=archiver.segments_deleted),
            CounterMetricFamily("kbroker_archive_failures", "Archiving rounds of a partition that failed (the "
                                "object store unreachable, a metadata conflict); its local data is kept.",
                                value=archiver.failures),
            GaugeMetricFamily("kbroker_archive_partitions_backing_off", "Tiered partitions waiting to retry "
                              "archiving after a failure.", value=archiver.backing_off),
            GaugeMetricFamily("kbroker_archive_cache_bytes", "Bytes of archived segments cached on local disk for "
                              "consumers' reads.", value=archiver.reader.cached_bytes),
            CounterMetricFamily("kbroker_archive_reads_from_store", "Chunks of archived segments fetched from the "
                                "object store (reads the cache did not answer).", value=archiver.reader.gets),
        ]

    def _throttles(self) -> list[Metric]:
        throttled = CounterMetricFamily("kbroker_throttled_requests", "Answers a quota throttled, per quota "
                                        "entity.", labels=["entity_type", "entity"])
        seconds = CounterMetricFamily("kbroker_throttle_time_seconds", "Throttle time given to answers, per quota "
                                      "entity (Kafka's throttle-time).", labels=["entity_type", "entity"])
        for (entity_type, entity), (count, millis) in list(self.stats.throttles.items()):
            throttled.add_metric([entity_type, entity], count)
            seconds.add_metric([entity_type, entity], millis / 1000)
        return [throttled, seconds]
