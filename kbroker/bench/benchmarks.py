"""The benchmarks: each measures kbroker and the references alternately and summarises the runs."""

from __future__ import annotations

import os
import shutil
import statistics
import time
import uuid
from array import array
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kbroker.bench import profiling
from kbroker.bench.ceiling import ReplicationCeiling, WriteCeiling
from kbroker.bench.references import MockServer
from kbroker.bench.servers import KbrokerServer, Server, evict_from_page_cache, new_data_dir
from kbroker.bench.ui import UI, Step
from kbroker.bench.workers import run_workers

MB = 1_000_000
MIB = 1024 * 1024
# The mock cluster keeps at most 5 MiB per partition (older batches are dropped), so a topic
# preloaded for a consume benchmark stays under that for both brokers to read the same data.
MOCK_PARTITION_BYTES = 5 * MIB
# Where the latency CDF is sampled: the body evenly, the tail in decades (99%, 99.9%, ...).
CDF_QUANTILES = [i / 100 for i in range(100)] + [0.995, 0.999, 0.9995, 0.9999, 1.0]


class BenchError(RuntimeError):
    pass


@dataclass
class Env:
    """What every benchmark needs: the brokers (kbroker first), how many runs, where output goes."""

    servers: list[Server]
    ui: UI
    runs: int
    out: Path
    work_dir: str | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def kbroker(self) -> Server:
        return self.servers[0]

    def cluster_label(self) -> str:
        """What a case's label adds when kbroker is a cluster ("" for one broker)."""
        server = self.kbroker
        if server.brokers == 1:
            return ""
        return (f" on {server.brokers} brokers (rf={server.replication_factor}, "
                f"min.insync.replicas={server.min_insync_replicas})")

    def cluster_params(self) -> dict[str, int]:
        server = self.kbroker
        return {"brokers": server.brokers, "replication_factor": server.replication_factor,
                "min_insync_replicas": server.min_insync_replicas}

    def cpu_metrics(self) -> list[str]:
        """The CPU metrics a case keeps: a cluster's total, and its leader's and followers' shares."""
        return ["server_cpu", "leader_cpu", "followers_cpu"] if self.kbroker.brokers > 1 else ["server_cpu"]


def topic_name(kind: str) -> str:
    return f"bench-{kind}-{uuid.uuid4().hex[:8]}"


# -- running and summarising ----------------------------------------------------------------------


def alternate(env: Env, label: str, run_once: Callable[[Server, Step], dict[str, Any]], metrics: list[str],
              seconds: float | None, describe: Callable[[dict[str, Any]], str],
              servers: list[Server] | None = None, writes: bool = False) -> dict[str, Any]:
    """Run kbroker, reference, kbroker, reference, ... `env.runs` times; medians and ratios per metric.

    Interleaving spreads the machine's drifts (other tenants, thermal, page cache) over both
    brokers instead of letting one of them take a quiet or a noisy minute; the order rotates
    from run to run, so no broker always follows the same one. `servers`: the
    environment's and any stand-ins (the write ceiling). `writes`: a run writes gigabytes, so
    each starts with the brokers' files out of the page cache (below).
    """
    servers = servers or env.servers
    runs: dict[str, list[dict[str, Any]]] = {server.name: [] for server in servers}
    for index in range(env.runs):
        # Each run starts with the next server, so no server always holds the same place (an
        # identical second kbroker measured 0.77x of the first in a fixed order; docs/performance.md).
        shift = index % len(servers)
        for server in servers[shift:] + servers[:shift]:
            description = f"{label} · {server.name} · run {index + 1}/{env.runs}"
            # The previous run's writes reach the disk first: no run pays for another's writeback.
            os.sync()
            if writes:
                # And no run gets memory another freed: a run right after the write ceiling (which
                # deletes its file) found gigabytes of free pages, one after a broker's run had to
                # reclaim them from the page cache first, and measured 0.6-0.7x as fast.
                for each in env.servers:
                    for directory in each.log_dirs:
                        evict_from_page_cache(directory)
            with env.ui.step(description, seconds) as step:
                result = run_once(server, step)
            runs[server.name].append(result)
            env.ui.log(f"  {description}: {describe(result)}")
    return summarize_runs(runs, metrics)


def summarize_runs(runs: dict[str, list[dict[str, Any]]], metrics: list[str]) -> dict[str, Any]:
    servers = {
        name: {"runs": results, "median": {m: _median([r.get(m) for r in results]) for m in metrics}}
        for name, results in runs.items()
    }
    ours = servers["kbroker"]["median"]
    ratios = {}
    for name, summary in servers.items():
        if name == "kbroker":
            continue
        ratios[name] = {m: (round(ours[m] / summary["median"][m], 4)
                            if ours[m] is not None and summary["median"][m] else None) for m in metrics}
    return {"servers": servers, "ratios": ratios}


def _median(values: list[Any]) -> float | None:
    numbers = [v for v in values if v is not None]
    return statistics.median(numbers) if numbers else None


def _cpu_share(server: Server, before: float | None, elapsed: float) -> float | None:
    """CPU the broker process used during a run, in cores (1.0 = one core busy throughout)."""
    after = server.cpu_seconds()
    if before is None or after is None or elapsed <= 0:
        return None
    return round((after - before) / elapsed, 3)


def _cpu_part_shares(server: Server, before: dict[str, float] | None, elapsed: float) -> dict[str, float]:
    """A cluster's CPU during a run by part ("leader_cpu", "followers_cpu"), in cores; {} for one process."""
    after = server.cpu_parts()
    if before is None or after is None or elapsed <= 0:
        return {}
    return {f"{part}_cpu": round((after[part] - before.get(part, 0.0)) / elapsed, 3) for part in after}


def _throughput(server: Server, results: list[dict[str, Any]], cpu_before: float | None,
                message_size: int, parts_before: dict[str, float] | None = None) -> dict[str, Any]:
    acked = sum(r["acked"] for r in results)
    errors = sum(r["errors"] for r in results)
    if acked <= 0:
        first = next((r["first_error"] for r in results if r["first_error"]), "nothing acknowledged")
        raise BenchError(f"{server.name}: no message acknowledged: {first}")
    elapsed = max(r["end"] for r in results) - min(r["start"] for r in results)
    return {
        "messages": acked, "errors": errors, "elapsed_s": round(elapsed, 3),
        "msgs_per_s": round(acked / elapsed, 1), "mb_per_s": round(acked * message_size / elapsed / MB, 3),
        "server_cpu": _cpu_share(server, cpu_before, elapsed),
        **_cpu_part_shares(server, parts_before, elapsed),
        "client_cpu": round(sum(r["cpu_s"] for r in results) / elapsed, 3),
    }


def _describe_throughput(result: dict[str, Any]) -> str:
    if result.get("client_cpu") is None and result.get("server_cpu") is None:
        return f"{result['mb_per_s']:.1f} MB/s"  # the write ceiling
    cpu = f", broker CPU {result['server_cpu']:.0%}" if result.get("server_cpu") is not None else ""
    if result.get("leader_cpu") is not None:
        cpu += f" (leader {result['leader_cpu']:.0%}, followers {result['followers_cpu']:.0%})"
    cpu += f", client CPU {result['client_cpu']:.0%}" if result.get("client_cpu") is not None else ""
    return f"{result['mb_per_s']:.1f} MB/s ({result['msgs_per_s']:,.0f} msg/s){cpu}"


# -- produce ------------------------------------------------------------------------------------------


def producer_config(acks: str, linger_ms: float, batch_size: int, compression: str,
                    extra: dict[str, str] | None = None) -> dict[str, Any]:
    return {"acks": acks, "linger.ms": linger_ms, "batch.size": batch_size, "compression.type": compression,
            **(extra or {})}


def produce_case(env: Env, message_size: int, config: dict[str, Any], partitions: int = 1, producers: int = 1,
                 duration_s: float = 3.0, keyed: bool = False, profile: bool = False,
                 label: str | None = None) -> dict[str, Any]:
    """Producer throughput: `producers` processes sending `message_size` messages for duration_s."""
    label = label or (f"produce {message_size} B acks={config.get('acks')} {config.get('compression.type')} "
                      f"p={partitions} x{producers}{env.cluster_label()}")
    topics = {server.name: topic_name("produce") for server in env.servers}
    for server in env.servers:
        server.create_topic(topics[server.name], partitions)

    def run_once(server: Server, step: Step) -> dict[str, Any]:
        if isinstance(server, WriteCeiling):
            return server.run(duration_s, message_size)
        spec = {"bootstrap": server.client_bootstrap, "topic": topics[server.name], "message_size": message_size,
                "duration_s": duration_s, "config": {**config, **server.client_settings}, "keyed": keyed}
        cpu_before, parts_before = server.cpu_seconds(), server.cpu_parts()
        results = run_workers([("produce", spec)] * producers, step.update)
        return _throughput(server, results, cpu_before, message_size, parts_before)

    summary = alternate(env, label, run_once, ["mb_per_s", "msgs_per_s", *env.cpu_metrics(), "client_cpu"],
                        duration_s, _describe_throughput, [*env.servers, *_ceiling(env, config)], writes=True)
    case: dict[str, Any] = {
        "name": label,
        "params": {"message_size": message_size, "partitions": partitions, "producers": producers,
                   "duration_s": duration_s, "keyed": keyed, **env.cluster_params()},
        "client_config": config, **summary,
    }
    if profile:
        case["profile"] = profile_run(env, label, lambda step: run_once(env.kbroker, step), duration_s)
    for server in env.servers:
        server.delete_topic(topics[server.name])
    return case


def _ceiling(env: Env, config: dict[str, Any]) -> list[Server]:
    """The write ceiling of kbroker's log directories, in chunks of the producer's batch size: one
    loop for one broker, one per broker at once for a cluster (its topics have a copy on every
    broker); none for a broker measured over --bootstrap (no local log directory)."""
    directories = env.kbroker.log_dirs
    if not directories or len(directories) != env.kbroker.replication_factor:
        return []
    chunk = int(config.get("batch.size", 1_000_000))
    if len(directories) == 1:
        return [WriteCeiling(directories, chunk)]
    # A cluster's bytes also cross the loopback to every follower: the second ceiling moves them so.
    return [WriteCeiling(directories, chunk), ReplicationCeiling(directories, chunk)]


def profile_run(env: Env, label: str, run: Callable[[Step], dict[str, Any]], seconds: float) -> dict[str, Any]:
    """One more kbroker run (not in the medians: sampling costs the broker a little) under py-spy."""
    pid = env.kbroker.pid
    if pid is None:
        return {"skipped": "the broker's pid is unknown (give --broker-pid with --bootstrap)"}
    if profiling.py_spy() is None:
        return {"skipped": "py-spy is not installed (pip install 'kbroker[bench]')"}
    output = env.out / "profile-produce.txt"
    process = env.kbroker.describe_pid()  # on a cluster: the leader, which does most of the work
    # Startup of the load generator takes about a second before the timed part: sample past it.
    recorder = profiling.Recorder(pid, output, seconds + 2)
    time.sleep(0.5)  # py-spy attaches before the load starts
    with env.ui.step(f"{label} · {process} · under py-spy", seconds) as step:
        result = run(step)
    try:
        recorder.wait()
    except (RuntimeError, OSError) as e:
        return {"skipped": f"py-spy failed: {e}"}
    env.ui.log(f"  profiled run: {_describe_throughput(result)}")
    return {"run": result, "process": process, "collapsed_stacks": output.name, **profiling.summarize(output)}


# -- consume -----------------------------------------------------------------------------------------


def consume_case(env: Env, cold: bool, partitions: int, message_size: int, bytes_per_partition: int,
                 passes: int, config: dict[str, Any], preload_config: dict[str, Any]) -> dict[str, Any]:
    """Consumer throughput over a preloaded topic: from the page cache, or after a cold start.

    Cold: kbroker is stopped, its log files are evicted from the page cache and it is started
    again; the mock cluster keeps its data in memory, so for it a cold start is only a new consumer.
    """
    per_partition = max(1, bytes_per_partition // message_size)
    label = f"consume {'cold' if cold else 'page cache'} {message_size} B p={partitions}"
    passes = 1 if cold else passes

    def run_once(server: Server, step: Step) -> dict[str, Any]:
        topic = topic_name("consume")
        server.create_topic(topic, partitions)
        preload = {"bootstrap": server.bootstrap, "topic": topic, "message_size": message_size, "duration_s": 0,
                   "config": preload_config, "max_messages": per_partition, "partitions": partitions}
        run_workers([("produce", preload)])
        restart_s = None
        if cold and server.can_restart:
            restart_s = round(server.restart(drop_page_cache=True), 3)
        spec = {"bootstrap": server.client_bootstrap, "topic": topic, "partitions": partitions, "passes": passes,
                "message_size": message_size, "config": {**config, **server.client_settings}}
        cpu_before = server.cpu_seconds()
        result = run_workers([("consume", spec)], step.update)[0]
        elapsed = result["end"] - result["start"]
        server.delete_topic(topic)
        return {
            "messages": result["messages"], "elapsed_s": round(elapsed, 3),
            "msgs_per_s": round(result["messages"] / elapsed, 1),
            "mb_per_s": round(result["bytes"] / elapsed / MB, 3),
            "first_message_ms": round((result["first_message"] - result["start"]) * 1000, 2),
            "server_cpu": _cpu_share(server, cpu_before, elapsed),
            "client_cpu": round(result["cpu_s"] / elapsed, 3),
            "restart_s": restart_s,
        }

    summary = alternate(env, label, run_once, ["mb_per_s", "msgs_per_s", "first_message_ms", "server_cpu", "client_cpu"], None,
                        lambda r: _describe_throughput(r) + f", first message after {r['first_message_ms']} ms")
    return {
        "name": label,
        "params": {"cold": cold, "partitions": partitions, "message_size": message_size,
                   "messages_per_partition": per_partition, "passes": passes},
        "client_config": config, "preload_config": preload_config, **summary,
    }


# -- end-to-end latency --------------------------------------------------------------------------------


def latency_case(env: Env, rate: float, message_size: int, duration_s: float, warmup_s: float, partitions: int,
                 producer_conf: dict[str, Any], consumer_conf: dict[str, Any],
                 label: str | None = None) -> dict[str, Any]:
    """Produce at a fixed rate, consume in another process; latency from send call to poll() return."""
    label = label or (f"latency {message_size} B at {rate:,.0f} msg/s acks={producer_conf.get('acks')}"
                      f"{env.cluster_label()}")
    topics = {server.name: topic_name("latency") for server in env.servers}
    for server in env.servers:
        server.create_topic(topics[server.name], partitions)
    pooled: dict[str, list[int]] = {server.name: [] for server in env.servers}

    def run_once(server: Server, step: Step) -> dict[str, Any]:
        common = {"bootstrap": server.bootstrap, "topic": topics[server.name], "partitions": partitions}
        cpu_before, parts_before = server.cpu_seconds(), server.cpu_parts()
        consumed, produced = run_workers([
            ("latency_consume", {**common, "config": consumer_conf, "timeout_s": warmup_s + duration_s + 60}),
            ("latency_produce", {**common, "rate": rate, "duration_s": duration_s, "warmup_s": warmup_s,
                                 "message_size": message_size, "config": producer_conf}),
        ], step.update)
        latencies = array("q")
        latencies.frombytes(consumed["latencies_ns"])
        if not latencies:
            raise BenchError(f"{server.name}: no latency sample")
        ordered = sorted(latencies)
        pooled[server.name].extend(ordered)
        return {
            # Measured messages that never arrived (the mock cluster drops the oldest batches
            # past 5 MiB per partition, so a consumer that falls behind loses them).
            "samples": len(ordered), "lost": produced["measured"] - len(ordered),
            "sent": produced["sent"], "errors": produced["errors"],
            "rate": round(produced["rate"], 1),
            "p50_ms": _ms(_quantile(ordered, 0.5)), "p99_ms": _ms(_quantile(ordered, 0.99)),
            "p999_ms": _ms(_quantile(ordered, 0.999)), "max_ms": _ms(ordered[-1]),
            "mean_ms": _ms(sum(ordered) / len(ordered)),
            "max_ms_per_100ms": _timeline(latencies, rate),
            "server_cpu": _cpu_share(server, cpu_before, warmup_s + duration_s),
            **_cpu_part_shares(server, parts_before, warmup_s + duration_s),
        }

    summary = alternate(
        env, label, run_once, ["p50_ms", "p99_ms", "p999_ms", "max_ms", "mean_ms", *env.cpu_metrics()],
        warmup_s + duration_s,
        lambda r: f"p50 {r['p50_ms']} ms, p99 {r['p99_ms']} ms, p99.9 {r['p999_ms']} ms, max {r['max_ms']} ms "
                  f"({r['samples']:,} samples)",
    )
    for server in env.servers:
        server.delete_topic(topics[server.name])
    cdf = {}
    for name, values in pooled.items():
        values.sort()
        cdf[name] = [[_ms(_quantile(values, q)), q] for q in CDF_QUANTILES]
    return {
        "name": label,
        "params": {"rate": round(rate, 1), "message_size": message_size, "duration_s": duration_s,
                   "warmup_s": warmup_s, "partitions": partitions, **env.cluster_params()},
        "producer_config": producer_conf, "consumer_config": consumer_conf, "cdf": cdf, **summary,
    }


def _timeline(latencies: array[int], rate: float) -> list[float]:
    """The largest latency of each 100 ms of messages, in the order they arrived: a stall (a
    segment roll, a flush) shows as a run of high values that a quantile would hide."""
    step = max(1, int(rate / 10))
    return [_ms(max(latencies[i:i + step])) for i in range(0, len(latencies), step)]


def _quantile(ordered: list[int], q: float) -> float:
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _ms(ns: float) -> float:
    return round(ns / 1e6, 3)


def probe_max_rate(env: Env, message_size: int, config: dict[str, Any], duration_s: float) -> float:
    """kbroker's producer throughput (msg/s) from one short run, to set a latency benchmark's rate."""
    server = env.kbroker
    topic = topic_name("probe")
    server.create_topic(topic, 1)
    spec = {"bootstrap": server.bootstrap, "topic": topic, "message_size": message_size,
            "duration_s": duration_s, "config": config}
    with env.ui.step(f"probing kbroker's maximum producer rate{env.cluster_label()}", duration_s) as step:
        result = _throughput(server, run_workers([("produce", spec)], step.update), None, message_size)
    server.delete_topic(topic)
    env.ui.log(f"  maximum: {_describe_throughput(result)}")
    return result["msgs_per_s"]


# -- memory and start time -------------------------------------------------------------------------


def memory_bench(env: Env, partitions: int, steps: int, restarts: int, topic_partitions: int = 1000,
                 server_config: str | None = None, overrides: dict[str, str] | None = None,
                 settle_s: float = 1.0) -> dict[str, Any]:
    """RSS against idle partitions (fresh broker, topics added in steps) and start time with them all.

    Runs its own kbroker so the count starts from zero; the mock cluster's RSS is measured the
    same way as a reference.
    """
    sizes = _step_sizes(partitions, steps)
    data_dir = new_data_dir(env.work_dir, "kbroker-bench-memory-")
    broker = KbrokerServer(data_dir, config_file=server_config, overrides=overrides)
    mock = MockServer()
    result: dict[str, Any] = {"params": {"partitions": partitions, "steps": steps, "restarts": restarts,
                                         "topic_partitions": topic_partitions},
                              "servers": {"kbroker": broker.description, "mock": mock.description}}
    try:
        first_start = broker.start()
        for server in (broker, mock):
            points, create_s = _grow(env, server, sizes, topic_partitions, settle_s)
            result[server.name] = {"points": points, "create_s": create_s,
                                   "mb_per_100_partitions": _slope_per_100(points)}
        shutdown_s, start_s = [], []
        for index in range(restarts):
            with env.ui.step(f"memory · kbroker restart {index + 1}/{restarts} with {partitions:,} partitions"):
                shutdown_s.append(round(broker.stop(), 3))
                start_s.append(round(broker.start(), 3))
            env.ui.log(f"  restart {index + 1}: stopped in {shutdown_s[-1]} s, started in {start_s[-1]} s")
        time.sleep(settle_s)
        rss = broker.rss_bytes()
        result["kbroker"].update({
            "first_start_s": round(first_start, 3), "shutdown_s": shutdown_s, "start_s": start_s,
            "start_s_median": _median(start_s), "rss_after_restart_mb": round(rss / MIB, 2) if rss else None,
        })
    finally:
        broker.close()
        mock.close()
        shutil.rmtree(data_dir, ignore_errors=True)
    ours, reference = result["kbroker"]["mb_per_100_partitions"], result["mock"]["mb_per_100_partitions"]
    result["ratios"] = {"mock": {"mb_per_100_partitions": round(ours / reference, 3) if reference else None}}
    return result


def _step_sizes(total: int, steps: int) -> list[int]:
    steps = max(1, min(steps, total))
    return [total * (i + 1) // steps - total * i // steps for i in range(steps)]


def _grow(env: Env, server: Server, sizes: list[int], topic_partitions: int,
          settle_s: float) -> tuple[list[list[float]], list[float]]:
    """Add partitions step by step; (partitions, RSS MiB) after each step, and each step's seconds."""
    time.sleep(settle_s)
    rss = server.rss_bytes() or 0
    points = [[0, round(rss / MIB, 2)]]
    create_s = []
    total = 0
    for size in sizes:
        topics = {}
        left = size
        while left > 0:
            count = min(left, topic_partitions)
            topics[topic_name("idle")] = count
            left -= count
        with env.ui.step(f"memory · {server.name} · adding {size:,} partitions (now {total:,})"):
            started = time.monotonic()
            if isinstance(server, KbrokerServer):
                server.create_topics(topics)
            else:
                for name, count in topics.items():
                    server.create_topic(name, count)
            create_s.append(round(time.monotonic() - started, 3))
        total += size
        time.sleep(settle_s)
        rss = server.rss_bytes() or 0
        points.append([total, round(rss / MIB, 2)])
        env.ui.log(f"  {server.name}: {total:,} partitions, RSS {rss / MIB:.1f} MiB "
                   f"(this step created in {create_s[-1]} s)")
    return points, create_s


def _slope_per_100(points: list[list[float]]) -> float | None:
    """Least-squares MiB per 100 partitions."""
    if len(points) < 2:
        return None
    xs = [p[0] for p in points]
    ys = [p[1] for p in points]
    mean_x, mean_y = statistics.fmean(xs), statistics.fmean(ys)
    var = sum((x - mean_x) ** 2 for x in xs)
    if var == 0:
        return None
    slope = sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys, strict=True)) / var
    return round(slope * 100, 4)
