"""`kbroker bench delayed`: the acceptance measurements of delayed delivery (docs/delayed-and-retry.md).

kbroker alone: Apache Kafka and the mock cluster have no delayed delivery. Three parts, each
on fresh brokers of its own (stopped afterwards, so idle brokers do not share the machine with
the next part), each runnable alone with `--part`:

- **lateness**: N delayed records from P producer processes, delays uniform over 0–D s, sent
  over `--spread-s` seconds to a topic of K partitions, while a plain producer writes to the same
  topic at a fixed rate and a consumer reads it all. Every delayed record carries its id, the
  partition it was sent to, its CreateTime and delay (delayed_workers.RECORD_HEAD), so the run
  counts what came, twice, never, on another partition, before its due time, how late, and out
  of due order. The plain producer's throughput and produce latency are compared with a run of
  the same length without delayed records (same broker, alternated). With `--kill broker` (one
  broker) or `--kill leader --brokers 3` (a cluster, rf=3), a broker is killed -9 in the middle
  of the deliveries (delayed_kill.py) and lateness is split by its outage window; no control run.
- **memory**: M records due in a day on a fresh broker against the same M records on another
  fresh broker whose topic has `delayed.delivery.enable=false`: RSS growth per record, raw and
  the difference. Then restarts with them pending (kill -9, then a clean stop), each timed to
  the first acknowledged produce, checked by a few records due soon (they come out, nothing
  else does) and by the pending count of the snapshot the next clean stop writes.
- **throughput**: 1 KB acks=1 produce (the settings of `kbroker bench produce`) to a topic with
  the feature (default config) against a topic with `delayed.delivery.enable=false`, same broker,
  alternated; and, after the memory part, the same against the topic that holds the M pending
  records.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from array import array
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kbroker.bench import profiling
from kbroker.bench.benchmarks import (
    MIB,
    BenchError,
    Env,
    _cpu_share,
    _describe_throughput,
    _throughput,
    producer_config,
    summarize_runs,
    topic_name,
)
from kbroker.bench.delayed_kill import Killer, killing
from kbroker.bench.delayed_report import LATENESS_P99_TARGET_MS
from kbroker.bench.delayed_workers import DELAY_MS_HEADER, DELAYED, RECORD_HEAD
from kbroker.bench.servers import KbrokerServer, Server
from kbroker.bench.ui import Step
from kbroker.bench.workers import run_workers
from kbroker.delay.delay_index import EntryState
from kbroker.delay.delay_snapshot import (
    CorruptSnapshotError,
    latest_snapshot,
    read_snapshot,
    snapshot_offsets,
)

PARTS = ("lateness", "memory", "throughput")
WORKER = "kbroker.bench.delayed_workers:"
DISABLED = {"delayed.delivery.enable": "false"}
# The delayed producers: idempotent, as today's clients are by default, so a client retry cannot
# pass for a duplicate delivery.
DELAYED_CONFIG = {"acks": "all", "enable.idempotence": True, "linger.ms": 5}
# The plain producer: linger.ms=1 as in `kbroker bench latency` (its produce latency is measured).
PLAIN_CONFIG = {"acks": "1", "linger.ms": 1}
FILL_CONFIG = {"acks": "1", "linger.ms": 50, "batch.size": 1_000_000}
# With --kill: librdkafka's reconnect backoff grows to 10 s by default, which would show as the
# broker's lateness; and each client would print every failed reconnection (the consumer counts
# them through its error_cb instead). An idempotent producer retries a lost request with its
# sequence (retries are unlimited with idempotence) until message.timeout.ms, set here to what
# the default is, 5 min, far above a restart or an election, so that no produce fails.
KILL_CLIENT_CONFIG = {"reconnect.backoff.max.ms": 1000, "log_level": 2}
KILL_PRODUCER_CONFIG = {**KILL_CLIENT_CONFIG, "message.timeout.ms": 300_000}
KILL_GRACE_S = 120.0  # the consumer's extra wait with --kill: a restart, an election
KILL_AT_FRACTION = 0.4  # the default kill time, of --max-delay-s after the release
# How the consumer knew it had read everything (delayed_workers._Ending), and its client's errors.
END_CHECK = ("nothing_pending_ms", "sentinels", "client_errors", "first_client_errors")
TAIL_S = 2.0  # the plain producer goes on this long after the last due time
GRACE_S = 60.0  # how long past that the consumer waits for records still missing
SETTLE_S = 2.0  # before reading a broker's RSS: let the last requests' buffers go
EXTRAS = 10  # records due soon, produced after each restart to see the broker deliver
EXTRA_DELAY_MS = 1000
EXTRA_FIRST_ID = 1 << 40  # ids of the extras: apart from the filled records'
LIVE_STATES = {EntryState.HELD, EntryState.SCHEDULED, EntryState.IN_FLIGHT}

StartBroker = Callable[[], Server]


def run(env: Env, start_broker: StartBroker, args: argparse.Namespace, consumer_config: dict[str, str],
        producer_config: dict[str, str]) -> dict[str, Any]:
    """The parts `args.part` asks for, each on brokers of its own. The lateness part's consumer
    gets `consumer_config` on top of librdkafka's defaults, its delayed producers
    `producer_config` on top of DELAYED_CONFIG."""
    _check(args)
    parts = PARTS if args.part == "all" else (args.part,)
    result: dict[str, Any] = {"params": _params(args)}
    if "lateness" in parts:
        clients = _lateness_clients(args.kill != "none", consumer_config, producer_config)
        result["lateness"] = lateness_part(env, start_broker, args, clients)
    if "throughput" in parts:
        result["throughput"] = throughput_part(env, start_broker, args)
    if "memory" in parts:
        result["memory"] = memory_part(env, start_broker, args, with_throughput="throughput" in parts)
    return result


def _lateness_clients(kill: bool, consumer_config: dict[str, str],
                      producer_config: dict[str, str]) -> dict[str, dict[str, Any]]:
    """The lateness part's client configs: ours, the kill's (KILL_CLIENT_CONFIG), then the user's."""
    client, producer = (KILL_CLIENT_CONFIG, KILL_PRODUCER_CONFIG) if kill else ({}, {})
    return {"consumer": {**client, **consumer_config}, "plain_producer": {**PLAIN_CONFIG, **client},
            "delayed_producer": {**DELAYED_CONFIG, **producer, **producer_config}}


def _check(args: argparse.Namespace) -> None:
    for name in ("records", "producers", "partitions", "pending", "pending_partitions", "lateness_runs"):
        if getattr(args, name) < 1:
            raise BenchError(f"--{name.replace('_', '-')} must be at least 1")
    if args.max_delay_s <= 0 or args.spread_s < 0 or args.plain_rate <= 0:
        raise BenchError("--max-delay-s and --plain-rate must be positive, --spread-s not negative")
    _check_kill(args)


def _check_kill(args: argparse.Namespace) -> None:
    """--kill and --brokers: which broker dies follows from the broker count; a cluster serves only
    the lateness part (the others restart and measure one broker process). Fills in the default
    --kill-at-s, which depends on --max-delay-s."""
    if args.kill_at_s is None:
        args.kill_at_s = round(KILL_AT_FRACTION * args.max_delay_s, 3)
    if args.brokers > 1 and args.part != "lateness":
        raise BenchError("--brokers 3 is for --part lateness")
    if args.kill == "broker" and args.brokers != 1:
        raise BenchError("--kill broker kills the single broker: --brokers 1 (--kill leader on a cluster)")
    if args.kill == "leader" and args.brokers < 3:
        raise BenchError("--kill leader needs --brokers 3")
    if args.kill != "none" and not 0 < args.kill_at_s < args.spread_s + args.max_delay_s:
        raise BenchError("--kill-at-s must fall while records are still due (after the release, before "
                         "--spread-s + --max-delay-s)")
    if args.kill != "none" and args.profile:
        raise BenchError("--profile samples one broker process: not with --kill")


def _params(args: argparse.Namespace) -> dict[str, Any]:
    names = ("records", "producers", "max_delay_s", "partitions", "spread_s", "delayed_size", "plain_rate",
             "plain_size", "lateness_runs", "pending", "pending_partitions", "pending_delay_s",
             "message_size", "duration", "brokers", "kill", "kill_at_s", "outage_margin_s")
    return {name: getattr(args, name) for name in names}


# -- lateness and exactly-once -----------------------------------------------------------------------


def lateness_part(env: Env, start_broker: StartBroker, args: argparse.Namespace,
                  clients: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """`lateness_runs` rounds of a delayed run and a control run (plain producer only), alternated.
    With --kill, delayed runs only: the plain producer's numbers through a crash say nothing of
    what delayed records cost it."""
    server = start_broker()
    length = args.spread_s + args.max_delay_s + TAIL_S
    runs: dict[str, list[dict[str, Any]]] = {"delayed": [], "control": []}
    try:
        for index in range(args.lateness_runs):
            # Which goes first alternates too, so neither always follows the other's disk writes.
            for mode in _modes(index, args.kill != "none"):
                label = f"delayed · lateness · {mode} · run {index + 1}/{args.lateness_runs}"
                with env.ui.step(label, length) as step:
                    profile = args.profile and mode == "delayed" and index == 0
                    result = _lateness_run(env, server, args, clients, mode == "delayed", step, profile)
                runs[mode].append(result)
                env.ui.log(f"  {label}: {_describe_lateness(result)}")
    finally:
        server.close()
    return {"length_s": length, "client_configs": clients, "runs": runs,
            "plain_vs_control": _plain_ratios(runs)}


def _modes(index: int, kill: bool) -> tuple[str, ...]:
    if kill:
        return ("delayed",)
    return ("delayed", "control") if index % 2 == 0 else ("control", "delayed")


def _lateness_run(env: Env, server: Server, args: argparse.Namespace, clients: dict[str, dict[str, Any]],
                  delayed: bool, step: Step, profile: bool) -> dict[str, Any]:
    length = args.spread_s + args.max_delay_s + TAIL_S
    topic = topic_name("delayed" if delayed else "control")
    server.create_topic(topic, args.partitions)
    kill = delayed and args.kill != "none"
    common = {"bootstrap": server.bootstrap, "topic": topic, "partitions": args.partitions}
    consumer = {**common, "expected": args.records if delayed else 0, "min_run_s": 0 if delayed else length,
                "deadline_s": length + GRACE_S + (KILL_GRACE_S if kill else 0), "config": clients["consumer"]}
    plain = {**common, "rate": args.plain_rate, "duration_s": length, "value_size": args.plain_size,
             "config": clients["plain_producer"]}
    specs = [(WORKER + "delayed_consume", consumer), (WORKER + "plain_produce", plain)]
    if delayed:
        specs += [(WORKER + "delayed_produce", {**common, **spec})
                  for spec in _producer_specs(args, clients["delayed_producer"])]
    cpu_before = server.cpu_seconds()
    killer = Killer(server, args.kill, topic, args.kill_at_s, args.outage_margin_s) if kill else None
    with _maybe_profile(env, server, profile, length) as profiled, killing(killer):
        results = run_workers(specs, step.update, timeout_s=length + GRACE_S + KILL_GRACE_S + 300,
                              before_start=killer.release if killer else None)
    # The machine's 1-minute load at the end: other work on its two cores shows in the latencies.
    # A killed broker's CPU time went with it: no CPU share then.
    result = {"topic": topic, "server_cpu": None if kill else _cpu_share(server, cpu_before, length),
              "load_average": round(os.getloadavg()[0], 2), "plain": plain_stats(results[1], args.spread_s)}
    if delayed:
        result.update(delivery_stats(results[0], results[2:], args.partitions))
        result["end_check"] = {key: results[0][key] for key in END_CHECK}
    if killer is not None:
        outage = killer.finish()
        result["outage"] = {**outage, **outage_stats(results[0], results[2:], killer.windows())}
        env.ui.log(f"  {_describe_outage(result['outage'])}")
    if profiled:
        result["profile"] = profiled
    server.delete_topic(topic)
    return result


def _producer_specs(args: argparse.Namespace, config: dict[str, Any]) -> list[dict[str, Any]]:
    """Ids 0..N-1 split over the producers, each sending its share over --spread-s."""
    specs = []
    for index in range(args.producers):
        first = args.records * index // args.producers
        count = args.records * (index + 1) // args.producers - first
        specs.append({"first_id": first, "count": count, "min_delay_ms": 0,
                      "max_delay_ms": int(args.max_delay_s * 1000), "spread_s": args.spread_s,
                      "value_size": args.delayed_size, "config": config, "seed": index + 1})
    return specs


@contextmanager
def _maybe_profile(env: Env, server: Server, profile: bool, seconds: float) -> Iterator[dict[str, Any]]:
    """py-spy on the broker for the run when asked; yields the summary, filled in at the end."""
    summary: dict[str, Any] = {}
    if not profile:
        yield summary
        return
    if profiling.py_spy() is None or server.pid is None:
        summary["skipped"] = "py-spy is not installed (pip install 'kbroker[bench]')"
        yield summary
        return
    output = env.out / "profile-delayed.txt"
    recorder = profiling.Recorder(server.pid, output, seconds + 3)
    yield summary
    try:
        recorder.wait(seconds + 120)
        summary.update({"collapsed_stacks": output.name, **profiling.summarize(output)})
    except (RuntimeError, OSError) as e:
        summary["skipped"] = f"py-spy failed: {e}"


def _describe_lateness(result: dict[str, Any]) -> str:
    plain = result["plain"]
    text = (f"plain producer {plain['msgs_per_s']:,.0f} msg/s, produce latency p50 {plain['p50_ms']} ms "
            f"p99 {plain['p99_ms']} ms")
    if "delivered" not in result:
        return text
    late = result["lateness_ms"]
    return (f"{result['delivered']:,} of {result['produced']:,} delivered, "
            f"{result['duplicates']} duplicates, {result['early']} early, "
            f"{result['order_violations']} out of order, lateness p50 {late['p50']} p99 {late['p99']} "
            f"max {late['max']} ms; {text}")


def _describe_outage(outage: dict[str, Any]) -> str:
    serving = outage["serving_after_kill_s"].values()
    inside, outside = outage["lateness_inside_ms"], outage["lateness_outside_ms"]
    return (f"killed broker {outage['victim']} (leading partitions {outage['led']}) "
            f"{outage['kill_at_s']:g} s after the release; partitions serving again "
            f"{min(serving):g}–{max(serving):g} s after; {outage['acked_after_kill']:,} acknowledgements "
            f"after it; in the windows {outage['inside']:,} records, lateness p50 {inside['p50']} "
            f"p99 {inside['p99']} max {inside['max']} ms; outside {outage['outside']:,}, "
            f"p50 {outside['p50']} p99 {outside['p99']} max {outside['max']} ms")


# -- what a delayed run received ---------------------------------------------------------------------------


def _column(data: bytes) -> array:
    column = array("q")
    column.frombytes(data)
    return column


def _columns(consumed: dict[str, Any]) -> dict[str, array]:
    names = ("ids", "sent_partition", "partition", "due_ms", "received_us", "pending_offset", "offset")
    return {name: _column(consumed[name]) for name in names}


def _acknowledged(producers: list[dict[str, Any]]) -> tuple[array, set[int]]:
    """Per id (0..N-1), when its acknowledgement came (-1: never), and the ids that failed."""
    acked = array("q")
    failed: set[int] = set()
    for result in sorted(producers, key=lambda r: r["first_id"]):
        acked.frombytes(result["acked_ms"])
        ids = array("q")
        ids.frombytes(result["failed"])
        failed.update(ids)
    return acked, failed


def delivery_stats(consumed: dict[str, Any], producers: list[dict[str, Any]],
                   partitions: int) -> dict[str, Any]:
    """Counts, lateness and order of the delayed records a consumer received."""
    acked, failed = _acknowledged(producers)
    c = _columns(consumed)
    total = len(acked)
    times = array("i", [0]) * total
    lateness: list[float] = []
    held_lateness: list[float] = []
    held: list[list[tuple[int, int, int]]] = [[] for _ in range(partitions)]
    early = wrong = duplicate_deliveries = not_held = 0
    first_pending: dict[int, tuple[int, int]] = {}
    for i, record_id in enumerate(c["ids"]):
        late = c["received_us"][i] / 1000 - c["due_ms"][i]
        early += late < 0
        wrong += c["partition"][i] != c["sent_partition"][i]
        pending = c["pending_offset"][i]
        not_held += pending < 0
        times[record_id] += 1
        if times[record_id] > 1:
            # The same pending record delivered twice is the broker's fault; a record sent
            # twice is the client's.
            duplicate_deliveries += first_pending.get(record_id) == (c["partition"][i], pending)
            continue
        first_pending[record_id] = (c["partition"][i], pending)
        lateness.append(late)
        # Only records due after their acknowledgement were surely held: the order rule is theirs,
        # and their lateness is the broker's (the others' includes their produce latency).
        if pending >= 0 and c["due_ms"][i] > acked[record_id] >= 0:
            held[c["partition"][i]].append((c["offset"][i], c["due_ms"][i], pending))
            held_lateness.append(late)
    produced = total - len(failed)
    delivered = sum(1 for n in times if n)
    violations = [order_violations(deliveries) for deliveries in held]
    return {
        "produced": produced, "failed_to_produce": len(failed), "delivered": delivered,
        "missing": sum(1 for record_id, n in enumerate(times) if not n and record_id not in failed),
        "duplicates": sum(n - 1 for n in times if n > 1), "duplicate_deliveries": duplicate_deliveries,
        "wrong_partition": wrong, "early": early, "not_held": not_held,
        "lateness_ms": _percentiles(lateness), "lateness_held_ms": _percentiles(held_lateness),
        "late_over_target": sum(1 for late in lateness if late > LATENESS_P99_TARGET_MS),
        "plain_end_to_end_ms": _percentiles([us / 1000 for us in _column(consumed["plain_latency_us"])]),
        "order_checked": sum(len(d) for d in held), "order_violations": sum(violations),
        "order_violations_by_partition": violations,
        "consumer_timed_out": consumed["timed_out"],
    }


def outage_stats(consumed: dict[str, Any], producers: list[dict[str, Any]],
                 windows: dict[int, tuple[int, int]]) -> dict[str, Any]:
    """Lateness of each record's first delivery in and out of its partition's outage window
    (delayed_kill's definition: in when received after the kill and due before the window's end),
    the records out of it split into those received before the kill and those due after the
    window; and how many acknowledgements came after the kill (0: all were stored before it)."""
    c = _columns(consumed)
    kill_ms = min(start for start, _end in windows.values())
    seen: set[int] = set()
    lateness: dict[str, list[float]] = {"before_kill": [], "inside": [], "after_window": []}
    by_second: dict[int, list[float]] = {}
    caught = 0
    for i, record_id in enumerate(c["ids"]):
        if record_id in seen:
            continue
        seen.add(record_id)
        due, received_ms = c["due_ms"][i], c["received_us"][i] / 1000
        start, end = windows[c["partition"][i]]
        late = received_ms - due
        by_second.setdefault(int((due - kill_ms) // 1000), []).append(late)
        where = "before_kill" if received_ms < start else "inside" if due <= end else "after_window"
        lateness[where].append(late)
        caught += where == "inside" and due < start
    outside = lateness["before_kill"] + lateness["after_window"]
    acked, _failed = _acknowledged(producers)
    return {"inside": len(lateness["inside"]), "caught_by_kill": caught,
            "lateness_inside_ms": _percentiles(lateness["inside"]),
            "outside": len(outside), "lateness_outside_ms": _percentiles(outside),
            "outside_over_target": sum(1 for late in outside if late > LATENESS_P99_TARGET_MS),
            "before_kill": len(lateness["before_kill"]),
            "lateness_before_kill_ms": _percentiles(lateness["before_kill"]),
            "after_window": len(lateness["after_window"]),
            "lateness_after_window_ms": _percentiles(lateness["after_window"]),
            "acked_after_kill": sum(1 for at in acked if at >= kill_ms),
            "window_after_kill_s": {p: round((end - start) / 1000, 3) for p, (start, end) in windows.items()},
            "lateness_by_due_second": _by_second(by_second)}


def _by_second(by_second: dict[int, list[float]]) -> list[list[float | None]]:
    """[second of the due time after the kill, records, lateness p50, p99, max] for each second: how
    lateness comes back to normal after the window."""
    rows: list[list[float | None]] = []
    for second, lateness in sorted(by_second.items()):
        p = _percentiles(lateness)
        rows.append([second, len(lateness), p["p50"], p["p99"], p["max"]])
    return rows


def order_violations(deliveries: list[tuple[int, int, int]]) -> int:
    """Deliveries (delivery offset, due ms, pending offset) of one partition that came after a
    delivery due later, or due as early and produced later, appended while they were pending.

    "While they were pending" is what makes it a violation: a record appended after a later-due
    one was already delivered could not have gone first. Such a record (its pending offset below
    the other's delivery offset) is found by looking back only over the deliveries appended since
    its pending record, and only when one of those may be due later (the running maximum says so).
    """
    deliveries = sorted(deliveries)
    violations = 0
    highest: tuple[int, int] | None = None
    for i, (_offset, due, pending) in enumerate(deliveries):
        key = (due, pending)
        if highest is not None and key < highest:
            j = i - 1
            while j >= 0 and deliveries[j][0] > pending:
                if (deliveries[j][1], deliveries[j][2]) > key:
                    violations += 1
                    break
                j -= 1
        if highest is None or key > highest:
            highest = key
    return violations


def _percentiles(values: list[float]) -> dict[str, float | None]:
    if not values:
        return {"p50": None, "p99": None, "p999": None, "max": None}
    ordered = sorted(values)

    def at(q: float) -> float:
        return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 1)

    return {"p50": at(0.5), "p99": at(0.99), "p999": at(0.999), "max": round(ordered[-1], 1)}


def plain_stats(result: dict[str, Any], spread_s: float) -> dict[str, Any]:
    """The plain producer's throughput and produce latency, overall and in two windows: while
    the delayed records are sent (the first `spread_s`), and after (deliveries only)."""
    sent_ms, latency_us = array("q"), array("q")
    sent_ms.frombytes(result["sent_ms"])
    latency_us.frombytes(result["latency_us"])
    split = result["start_ms"] + spread_s * 1000
    sending = [latency / 1000 for at, latency in zip(sent_ms, latency_us, strict=True) if at < split]
    after = [latency / 1000 for at, latency in zip(sent_ms, latency_us, strict=True) if at >= split]
    overall = _percentiles([latency / 1000 for latency in latency_us])
    return {
        "sent": result["sent"], "acked": result["acked"], "errors": result["errors"],
        "first_error": result["first_error"], "elapsed_s": round(result["elapsed_s"], 3),
        "msgs_per_s": round(result["acked"] / result["elapsed_s"], 1) if result["elapsed_s"] else None,
        "p50_ms": overall["p50"], "p99_ms": overall["p99"], "max_ms": overall["max"],
        "while_sending": _percentiles(sending), "after_sending": _percentiles(after),
    }


def _plain_ratios(runs: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """Medians of the plain producer's numbers over the delayed runs and the control runs, and
    delayed / control."""
    medians = {}
    for mode, results in runs.items():
        medians[mode] = {metric: _median([r["plain"][metric] for r in results])
                         for metric in ("msgs_per_s", "p50_ms", "p99_ms", "max_ms")}
        for window in ("while_sending", "after_sending"):
            medians[mode][f"{window}_p99_ms"] = _median([r["plain"][window]["p99"] for r in results])
    ratios = {metric: _ratio(medians["delayed"][metric], medians["control"][metric])
              for metric in medians["delayed"]}
    return {"medians": medians, "ratios": ratios}


def _median(values: list[float | None]) -> float | None:
    numbers = [v for v in values if v is not None]
    return round(statistics.median(numbers), 3) if numbers else None


def _ratio(ours: float | None, reference: float | None) -> float | None:
    return round(ours / reference, 4) if ours is not None and reference else None


# -- produce throughput with and without the feature -------------------------------------------------------


class TopicView(Server):
    """One broker seen through one topic: two of them (a topic with the feature, one without)
    make a pair of "servers" whose runs alternate and whose medians give a ratio."""

    def __init__(self, broker: Server, name: str, topic: str, description: str) -> None:
        self.broker = broker
        self.name = name
        self.topic = topic
        self.description = description

    @property
    def bootstrap(self) -> str:
        return self.broker.bootstrap

    @property
    def pid(self) -> int | None:
        return self.broker.pid


def throughput_part(env: Env, start_broker: StartBroker, args: argparse.Namespace) -> dict[str, Any]:
    server = start_broker()
    try:
        feature = topic_name("feature")
        return produce_against_disabled(env, server, args, feature, create=True,
                                        label=f"delayed · produce {args.message_size} B, feature on vs off")
    finally:
        server.close()


def produce_against_disabled(env: Env, server: Server, args: argparse.Namespace, feature_topic: str,
                             create: bool, label: str) -> dict[str, Any]:
    """1 KB acks=1 produce to `feature_topic` ("kbroker") and to a new topic with
    delayed.delivery.enable=false ("disabled") on the same broker, `--throughput-runs` each, alternated."""
    disabled_topic = topic_name("disabled")
    partitions = args.pending_partitions if not create else 1
    if create:
        server.create_topic(feature_topic, partitions)
    assert isinstance(server, KbrokerServer)
    server.create_topics({disabled_topic: partitions}, DISABLED)
    views = [TopicView(server, "kbroker", feature_topic, f"topic {feature_topic} (delayed delivery on)"),
             TopicView(server, "disabled", disabled_topic,
                       f"topic {disabled_topic} (delayed.delivery.enable=false)")]
    config = producer_config("1", 5, 1_000_000, "none")
    runs: dict[str, list[dict[str, Any]]] = {view.name: [] for view in views}
    # A 5 % difference hides in this machine's run-to-run noise (one topic's 3 s runs spread over
    # 164-318 MB/s): --throughput-runs each (7 by default), and the broker's CPU per MB beside it.
    count = args.throughput_runs
    for index in range(count):
        for view in views if index % 2 == 0 else views[::-1]:
            description = f"{label} · {view.name} · run {index + 1}/{count}"
            with env.ui.step(description, args.duration) as step:
                result = _produce_run(view, args, config, step)
                cpu = result.get("server_cpu")
                result["cpu_ms_per_mb"] = round(cpu * 1000 / result["mb_per_s"], 3) if cpu else None
                runs[view.name].append(result)
            env.ui.log(f"  {description}: {_describe_throughput(runs[view.name][-1])}")
    server.delete_topic(disabled_topic)
    if create:
        server.delete_topic(feature_topic)
    return {"name": label, "params": {"message_size": args.message_size, "duration_s": args.duration,
                                      "partitions": partitions},
            "client_config": config, "topics": {view.name: view.description for view in views},
            **summarize_runs(runs, ["mb_per_s", "msgs_per_s", "server_cpu", "client_cpu", "cpu_ms_per_mb"])}


def _produce_run(view: TopicView, args: argparse.Namespace, config: dict[str, Any],
                 step: Step) -> dict[str, Any]:
    spec = {"bootstrap": view.bootstrap, "topic": view.topic, "message_size": args.message_size,
            "duration_s": args.duration, "config": config}
    cpu_before = view.cpu_seconds()
    return _throughput(view, run_workers([("produce", spec)], step.update), cpu_before, args.message_size)


# -- memory and restarts with pending records ------------------------------------------------------------


@dataclass
class Filled:
    """A broker of the memory part, its topic and what it was filled with."""

    name: str
    server: KbrokerServer
    topic: str
    partitions: int
    pending: int  # records it holds pending: M on the delayed broker, 0 on the control
    before: dict[str, int] | None = None

    @property
    def delayed(self) -> bool:
        return self.pending > 0


def memory_part(env: Env, start_broker: StartBroker, args: argparse.Namespace,
                with_throughput: bool) -> dict[str, Any]:
    """RSS per pending record against a same-run control, then restarts with them pending."""
    partitions = args.pending_partitions
    brokers = [Filled("delayed", _own(start_broker()), topic_name("pending"), partitions, args.pending),
               Filled("control", _own(start_broker()), topic_name("plain"), partitions, 0)]
    result: dict[str, Any] = {"records": args.pending}
    try:
        for broker in brokers:
            configs = None if broker.delayed else DISABLED
            broker.server.create_topics({broker.topic: broker.partitions}, configs)
            broker.before = _memory(broker.server)
        for broker in brokers:
            result[broker.name] = _fill(env, broker, args)
        result["bytes_per_record"] = _memory_difference(result, args.pending, "after_fill")
        for broker in brokers:
            result[broker.name]["restarts"] = _restarts(env, broker, args)
            result[broker.name]["after_restart"] = _memory(broker.server)
        result["bytes_per_record_after_restart"] = _memory_difference(result, args.pending, "after_restart")
        if with_throughput:
            delayed = brokers[0]
            result["throughput_with_pending"] = produce_against_disabled(
                env, delayed.server, args, delayed.topic, create=False,
                label=f"delayed · produce {args.message_size} B to the topic holding {args.pending:,} "
                      "pending vs off")
        for broker in brokers:
            result[broker.name]["final_check"] = _stop_and_count(broker)
    finally:
        for broker in brokers:
            broker.server.close()
    return result


def _own(server: Server) -> KbrokerServer:
    if not isinstance(server, KbrokerServer):
        raise BenchError("the memory part restarts its brokers: it needs brokers of its own (no --bootstrap)")
    return server


def _memory(server: KbrokerServer) -> dict[str, int]:
    """The broker's VmRSS and RssAnon (its heap: what the index takes), after a settling pause."""
    time.sleep(SETTLE_S)  # nothing tells when freed request buffers are back with the allocator
    fields = {}
    try:
        with open(f"/proc/{server.pid}/status") as f:
            for line in f:
                name, _, value = line.partition(":")
                if name in ("VmRSS", "RssAnon"):
                    fields[name] = int(value.split()[0]) * 1024
    except OSError as e:
        raise BenchError(f"cannot read the broker's memory: {e}") from None
    return {"rss": fields.get("VmRSS", 0), "anon": fields.get("RssAnon", 0)}


def _fill(env: Env, broker: Filled, args: argparse.Namespace) -> dict[str, Any]:
    """M records due in `--pending-delay-s` from one producer, as fast as it goes; RSS before and after."""
    delay_ms = int(args.pending_delay_s * 1000)
    spec = {"bootstrap": broker.server.bootstrap, "topic": broker.topic, "partitions": broker.partitions,
            "first_id": 0, "count": args.pending, "min_delay_ms": delay_ms, "max_delay_ms": delay_ms,
            "spread_s": 0, "value_size": args.delayed_size, "config": FILL_CONFIG}
    label = f"delayed · memory · {broker.name} · {args.pending:,} records due in {args.pending_delay_s:g} s"
    with env.ui.step(label) as step:
        (produced,) = run_workers([(WORKER + "delayed_produce", spec)], step.update, timeout_s=1800)
    failed = len(produced["failed"]) // 8 + produced["unsent"]
    if failed:
        raise BenchError(f"{broker.name}: {failed} of {args.pending:,} records were not acknowledged")
    after = _memory(broker.server)
    assert broker.before is not None
    growth = {kind: after[kind] - broker.before[kind] for kind in after}
    env.ui.log(f"  {label}: {args.pending / produced['elapsed_s']:,.0f} records/s, RSS "
               f"{broker.before['rss'] / MIB:.1f} → {after['rss'] / MIB:.1f} MiB "
               f"({growth['rss'] / args.pending:.1f} B a record)")
    return {"fill_s": round(produced["elapsed_s"], 3), "before": broker.before, "after_fill": after,
            "growth": growth, "growth_per_record": {k: round(v / args.pending, 1) for k, v in growth.items()}}


def _memory_difference(result: dict[str, Any], records: int, point: str) -> dict[str, float]:
    """(delayed - control) / records: at `point`, less each broker's own start."""
    delayed, control = result["delayed"], result["control"]
    return {kind: round(((delayed[point][kind] - delayed["before"][kind])
                         - (control[point][kind] - control["before"][kind])) / records, 1)
            for kind in ("rss", "anon")}


def _restarts(env: Env, broker: Filled, args: argparse.Namespace) -> list[dict[str, Any]]:
    """kill -9 then start, clean stop then start: each timed to its ready line and to the first
    acknowledged produce, then checked (records due soon come out, nothing else does). The
    kill -9 comes first, so its start finds no snapshot but the one of a segment roll."""
    restarts = []
    for how in ("kill -9", "clean stop"):
        ends = _high_watermarks(broker.server.bootstrap, broker.topic, args.pending_partitions)
        label = f"delayed · memory · {broker.name} · {how} and start with {args.pending:,} pending"
        with env.ui.step(label):
            if how == "kill -9":
                broker.server.kill()
                restart: dict[str, Any] = {"how": how, "stop_s": None}
            else:
                restart = {"how": how, **_stop_and_count(broker)}
            restart["log_end_offsets"] = ends
            restart["snapshots_at_start"] = _snapshots(broker.server, broker.topic, args.pending_partitions)
            restart.update(_start_and_answer(broker))
            restart["extras"] = _check_extras(broker, ends)
        env.ui.log(f"  {label}: ready after {restart['ready_s']} s, first produce answered after "
                   f"{restart['answer_s']} s; {restart['extras']['verdict']}")
        restarts.append(restart)
    return restarts


def _partition_dirs(server: KbrokerServer, topic: str, partitions: int) -> list[Path]:
    return [server.log_dir / f"{topic}-{p}" for p in range(partitions)]


def _snapshots(server: KbrokerServer, topic: str, partitions: int) -> list[int | None]:
    """The newest delay snapshot's offset per partition (None: none): where a start's log scan begins."""
    return [(snapshot_offsets(d) or [None])[-1] for d in _partition_dirs(server, topic, partitions)]


def _stop_and_count(broker: Filled) -> dict[str, Any]:
    """Clean stop, then the pending records of the snapshots it wrote: the index the broker
    held, so the count after a restart, until `kbroker delayed --describe` can ask a live broker."""
    stop_s = broker.server.stop()
    counted = 0
    for directory in _partition_dirs(broker.server, broker.topic, broker.partitions):
        path = latest_snapshot(directory)
        if path is None:
            return {"stop_s": round(stop_s, 3), "pending_at_stop": None, "count_ok": False,
                    "count_problem": f"no delay snapshot in {directory.name} after a clean stop"}
        try:
            state = read_snapshot(path)
        except CorruptSnapshotError as e:
            return {"stop_s": round(stop_s, 3), "pending_at_stop": None, "count_ok": False,
                    "count_problem": str(e)}
        counted += sum(1 for state_byte in state.states if state_byte in LIVE_STATES)
    return {"stop_s": round(stop_s, 3), "pending_at_stop": counted, "count_ok": counted == broker.pending}


def _start_and_answer(broker: Filled) -> dict[str, Any]:
    """Start; seconds to the ready line and to the acknowledgement of the first produce to the
    topic (records due soon, which `_check_extras` then waits for)."""
    started = time.monotonic()
    ready_s = broker.server.start()
    _produce_extras(broker.server.bootstrap, broker.topic)
    return {"ready_s": round(ready_s, 3), "answer_s": round(time.monotonic() - started, 3)}


def _produce_extras(bootstrap: str, topic: str) -> None:
    from confluent_kafka import Producer

    errors: list[str] = []
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5,
                         "on_delivery": lambda err, _msg: errors.append(str(err)) if err else None})
    now = time.time_ns() // 1_000_000
    for n in range(EXTRAS):
        value = RECORD_HEAD.pack(DELAYED, EXTRA_FIRST_ID + n, now, EXTRA_DELAY_MS, 0)
        producer.produce(topic, value, partition=0, timestamp=now,
                         headers=[(DELAY_MS_HEADER, b"%d" % EXTRA_DELAY_MS)])
    unsent = producer.flush(120)
    if errors or unsent:
        raise BenchError(f"records produced after a restart failed: {errors[:3] or f'{unsent} unsent'}")


def _high_watermarks(bootstrap: str, topic: str, partitions: int) -> list[int]:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "kbroker-bench"})
    try:
        return [consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1]
                for p in range(partitions)]
    finally:
        consumer.close()


def _check_extras(broker: Filled, ends: list[int], timeout_s: float = 30.0) -> dict[str, Any]:
    """Read partition 0 from its end before the restart: the extras must come (as deliveries on a
    delayed topic) and nothing else, and the log must end right after them (no pending record
    due in a day was delivered)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": broker.server.bootstrap, "group.id": "kbroker-bench",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(broker.topic, 0, ends[0])])
    extras = unexpected = 0
    deadline = time.monotonic() + timeout_s
    while extras < EXTRAS and time.monotonic() < deadline:
        message = consumer.poll(0.2)
        if message is None or message.error():
            continue
        record_id = RECORD_HEAD.unpack_from(message.value())[1]
        delivered = any(name == "kbroker.delayed.from" for name, _ in message.headers() or ())
        if record_id >= EXTRA_FIRST_ID and delivered == broker.delayed:
            extras += 1
        else:
            unexpected += 1
    consumer.close()
    now = _high_watermarks(broker.server.bootstrap, broker.topic, len(ends))
    expected = [ends[0] + EXTRAS * (2 if broker.delayed else 1), *ends[1:]]
    ok = extras == EXTRAS and not unexpected and now == expected
    verdict = (f"the {EXTRAS} records due soon came out, nothing else" if ok else
               f"CHECK FAILED: {extras} of {EXTRAS} records due soon, {unexpected} unexpected, "
               f"log ends {now} (expected {expected})")
    return {"came": extras, "unexpected": unexpected, "high_watermarks": now, "expected": expected, "ok": ok,
            "verdict": verdict}
