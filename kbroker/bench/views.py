"""Filtered views (docs/views.md) against their source topic: what a filtered fetch moves over the
wire and what the broker pays for it, as ratios to reading the source in the same run.

Each case preloads one topic with 1 KB records, each tagged (a header `tag`) with one of ten
tags drawn per record from a seeded generator, so every batch holds every tag and no batch
boundary follows them, with views made before the records arrive: `all` keeps every record,
`ten` one tag (~10 %), `none` nothing. The broker learns their verdicts on the batches as they
are appended (docs/views.md), so even their first read answers batches kept whole or emptied
from their headers. `all-new` is `all`'s filter in a view created over the existing records just
before each of its reads: the broker knows none of its verdicts, and it decodes every batch.
Each round reads the source and every view once, from the start to the high
watermark, each reader a fresh confluent-kafka consumer in its own process, the order rotating
from round to round. The ratios are per round (a view against the source read next to it),
then the median over the rounds.

The rate is MB of source data covered per second (the source's records times their size, over
the time the position took to reach the end): how fast a consumer moves through the log,
whether it is given the records or not. The bytes are librdkafka's `rxbytes`: what came over the
wire, protocol included. Broker CPU per MB of source data, minus the source's in the same round,
is what filtering costs.

kbroker alone: neither the mock cluster nor Apache Kafka has views.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kbroker.bench import profiling
from kbroker.bench.benchmarks import MB, BenchError, Env, _median, topic_name
from kbroker.bench.servers import Server
from kbroker.bench.ui import Step
from kbroker.bench.workers import run_workers

SOURCE = "source"
TAGS = 10
KEPT_TAG = 3
SEED = 20240601


@dataclass(frozen=True)
class ViewSpec:
    filter: str
    kept_tags: tuple[int, ...]  # the tags (indexes) whose records the filter keeps

    def expected(self, tag_counts: list[list[int]]) -> int:
        """The records this view gives of a preload with these counts (partition -> per tag)."""
        return sum(counts[tag] for counts in tag_counts for tag in self.kept_tags)


VIEWS = {
    "all": ViewSpec("tag exists", tuple(range(TAGS))),  # every batch whole, as it is
    "ten": ViewSpec(f"tag = 't{KEPT_TAG}'", (KEPT_TAG,)),  # ~10 %: every batch rebuilt
    "none": ViewSpec("tag = 'no-such-tag'", ()),  # every batch emptied, gap markers
}
# `all`'s filter in a view created anew over the existing records for each read: its first read,
# which decodes every batch.
FIRST_READ = "all-new"
# Every reader's librdkafka settings unless --consumer-config says otherwise. librdkafka
# postpones a partition's next fetch by fetch.queue.backoff.ms (1 s by default) once the
# application is queued.max.messages.kbytes (64 MiB) behind: a 400 MB read of the source that
# hits it once takes twice as long, and one source read in five did, so the ratios measured the
# client's back-off. 10 ms keeps the broker the thing measured.
READER_CONFIG = {"fetch.queue.backoff.ms": 10}
METRICS = ["elapsed_s", "mb_per_s", "records_per_s", "wire_bytes", "server_cpu", "server_cpu_ms_per_mb", "client_cpu",
           "first_message_ms"]


def views_case(env: Env, partitions: int, records: int, message_size: int, compression: str, views: list[str],
               consumer_config: dict[str, Any], preload_config: dict[str, Any], profile: bool = False) -> dict[str, Any]:
    """The source and each view read `env.runs` times, alternated; medians per reader and the
    views' ratios to the source."""
    server = env.kbroker
    consumer_config = {**READER_CONFIG, **consumer_config}
    per_partition = max(1, records // partitions)
    label = f"views {message_size} B {compression} p={partitions} {per_partition * partitions:,} records"
    source = topic_name("view-source")
    server.create_topic(source, partitions)
    readers = {SOURCE: source, **{name: f"{source}-{name}" for name in views}}
    first_reads = "all" in views
    created = [source]  # deleted afterwards, views first: a source with views cannot be deleted
    try:
        # What indexing costs the producer: the same records into a topic without views first.
        plain = topic_name("view-plain")
        server.create_topic(plain, partitions)
        try:
            unindexed = _preload(env, server, plain, partitions, per_partition, message_size,
                                 {**preload_config, "compression.type": compression}, f"{label} (no views)")
        finally:
            server.delete_topic(plain)
        # The views exist before the records arrive, as a view's users create them: the broker
        # learns the verdicts of the batches as they are appended (kbroker/views/view_indexer.py).
        create_views(server, source, {readers[name]: VIEWS[name].filter for name in views})
        created[:0] = [readers[name] for name in views]
        preloaded = _preload(env, server, source, partitions, per_partition, message_size,
                             {**preload_config, "compression.type": compression}, label)
        expected = {SOURCE: per_partition * partitions,
                    **{name: VIEWS[name].expected(preloaded["tag_counts"]) for name in views}}
        if first_reads:
            readers[FIRST_READ] = f"{source}-{FIRST_READ}"
            expected[FIRST_READ] = expected["all"]
        source_mb = per_partition * partitions * message_size / MB
        log_mb = source_log_mb(server, source, partitions)

        new_views = iter(range(1, 1 << 30))

        def read(name: str, step: Step) -> dict[str, Any]:
            if name != FIRST_READ:
                return read_once(server, readers[name], partitions, consumer_config, source_mb, expected[name], step)
            topic = f"{readers[name]}-{next(new_views)}"
            create_views(server, source, {topic: VIEWS["all"].filter})
            try:
                return read_once(server, topic, partitions, consumer_config, source_mb, expected[name], step)
            finally:
                server.delete_topic(topic)

        runs = _alternate(env, label, list(readers), read)
        case = _summarize(runs, [*views, FIRST_READ] if first_reads else views, log_mb)
        if profile:
            slug = f"views-{compression}-p{partitions}"
            case["profiles"] = {name: profile_reads(env, label, f"{slug}-{name}", lambda step, n=name: read(n, step))
                                for name in views if name in ("all", "ten")}
    finally:
        for topic in created:
            server.delete_topic(topic)
    filters = {name: VIEWS[name].filter for name in views}
    if first_reads:
        filters[FIRST_READ] = VIEWS["all"].filter
    case.update(name=label, views=filters, expected=expected,
                params={"partitions": partitions, "records": per_partition * partitions, "message_size": message_size,
                        "compression": compression, "tags": TAGS, "kept_tag": f"t{KEPT_TAG}", "seed": SEED,
                        "source_mb": round(source_mb, 3), "source_log_mb": log_mb,
                        # With the views there already: the broker indexes the batches as they come.
                        "preload_mb_per_s": _rate(source_mb, preloaded),
                        "preload_without_views_mb_per_s": _rate(source_mb, unindexed)},
                consumer_config=consumer_config, preload_config=preload_config)
    return case


def _preload(env: Env, server: Server, topic: str, partitions: int, per_partition: int, message_size: int,
             config: dict[str, Any], label: str) -> dict[str, Any]:
    spec = {"bootstrap": server.bootstrap, "topic": topic, "partitions": partitions, "per_partition": per_partition,
            "message_size": message_size, "tags": TAGS, "seed": SEED, "config": config}
    with env.ui.step(f"{label} · preloading") as step:
        (result,) = run_workers([("tagged_produce", spec)], step.update)
    if result["acked"] != per_partition * partitions:
        raise BenchError(f"preload of {topic}: {result['acked']} of {per_partition * partitions} acknowledged "
                         f"({result['first_error']})")
    return result


def _rate(mb: float, preloaded: dict[str, Any]) -> float:
    return round(mb / max(preloaded["end"] - preloaded["start"], 1e-9), 1)


def source_log_mb(server: Server, topic: str, partitions: int) -> float | None:
    """The size of the source's log (its segment files), None for a broker elsewhere. A consumer
    of the source receives more: a fetch answer ends with the part of a batch that did not fit
    its byte limit, which the client drops and fetches again (Kafka answers the same way)."""
    if not server.log_dirs:
        return None
    directory = server.log_dirs[0]
    segments = [f for p in range(partitions) for f in (directory / f"{topic}-{p}").glob("*.log")]
    return round(sum(f.stat().st_size for f in segments) / MB, 3) if segments else None


def create_views(server: Server, source: str, filters: dict[str, str], timeout_s: float = 60) -> None:
    """One view of `source` per name -> filter, created as any client creates one: a topic
    creation with the view's configs and no partition count (the source's)."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": server.bootstrap})
    topics = [NewTopic(name, -1, config={"view.source.topic": source, "view.filter": text})
              for name, text in filters.items()]
    for future in admin.create_topics(topics, operation_timeout=timeout_s, request_timeout=timeout_s).values():
        future.result(timeout=timeout_s + 30)


def read_once(server: Server, topic: str, partitions: int, config: dict[str, Any], source_mb: float,
              expected: int, step: Step) -> dict[str, Any]:
    """One reader (a consumer process) from the start of `topic` to its end; BenchError if it
    received other than `expected` records."""
    spec = {"bootstrap": server.client_bootstrap, "topic": topic, "partitions": partitions,
            "config": {**config, **server.client_settings}}
    cpu_before: list[float | None] = []
    (result,) = run_workers([("read_to_end", spec)], step.update,
                            before_start=lambda: cpu_before.append(server.cpu_seconds()))
    cpu_after = server.cpu_seconds()
    if result["messages"] != expected:
        raise BenchError(f"{topic}: {result['messages']:,} records received, {expected:,} expected")
    elapsed = result["end"] - result["start"]
    cpu_s = cpu_after - cpu_before[0] if cpu_after is not None and cpu_before[0] is not None else None
    first = result["first_message"]
    return {
        "records": result["messages"], "elapsed_s": round(elapsed, 3),
        "mb_per_s": round(source_mb / elapsed, 3), "records_per_s": round(result["messages"] / elapsed, 1),
        "wire_bytes": result["rx_bytes"],
        "server_cpu": round(cpu_s / elapsed, 3) if cpu_s is not None else None,
        "server_cpu_ms_per_mb": round(cpu_s * 1000 / source_mb, 3) if cpu_s is not None else None,
        "client_cpu": round(result["cpu_s"] / elapsed, 3),
        "first_message_ms": round((first - result["start"]) * 1000, 2) if first is not None else None,
    }


def _alternate(env: Env, label: str, readers: list[str],
               read: Callable[[str, Step], dict[str, Any]]) -> list[dict[str, dict[str, Any]]]:
    """`env.runs` rounds, each reading every reader once, starting one reader later each round
    (no reader always follows the same one); each round's results by reader."""
    rounds = []
    for index in range(env.runs):
        shift = index % len(readers)
        results: dict[str, dict[str, Any]] = {}
        for name in readers[shift:] + readers[:shift]:
            description = f"{label} · {name} · run {index + 1}/{env.runs}"
            with env.ui.step(description) as step:
                results[name] = read(name, step)
            env.ui.log(f"  {description}: {describe(results[name])}")
        rounds.append(results)
    return rounds


def describe(result: dict[str, Any]) -> str:
    cpu = f", broker CPU {result['server_cpu']:.0%}" if result.get("server_cpu") is not None else ""
    return (f"{result['mb_per_s']:.1f} MB/s of source, {result['records_per_s']:,.0f} records/s, "
            f"{result['wire_bytes'] / MB:.1f} MB over the wire{cpu}, client CPU {result['client_cpu']:.0%}")


def _summarize(rounds: list[dict[str, dict[str, Any]]], views: list[str], log_mb: float | None) -> dict[str, Any]:
    """Medians per reader; per view, the median over the rounds of its ratios to the source (and
    of the source's log size to its bytes over the wire)."""
    readers = {name: [r[name] for r in rounds] for name in rounds[0]}
    summary = {name: {"runs": runs, "median": {m: _median([r.get(m) for r in runs]) for m in METRICS}}
               for name, runs in readers.items()}
    ratios = {name: {
        "rate": _median([_ratio(r[name]["mb_per_s"], r[SOURCE]["mb_per_s"]) for r in rounds]),
        "wire": _median([_ratio(r[SOURCE]["wire_bytes"], r[name]["wire_bytes"]) for r in rounds]),
        "log_to_wire": _median([_ratio(log_mb * MB if log_mb else None, r[name]["wire_bytes"]) for r in rounds]),
        "filter_cpu_ms_per_mb": _median([_difference(r[name]["server_cpu_ms_per_mb"],
                                                     r[SOURCE]["server_cpu_ms_per_mb"]) for r in rounds]),
    } for name in views}
    return {"readers": summary, "ratios": ratios}


def _ratio(ours: float | None, reference: float | None) -> float | None:
    return round(ours / reference, 4) if ours is not None and reference else None


def _difference(ours: float | None, reference: float | None) -> float | None:
    return round(ours - reference, 3) if ours is not None and reference is not None else None


def profile_reads(env: Env, label: str, name: str, read: Callable[[Step], dict[str, Any]],
                  seconds: float = 15.0) -> dict[str, Any]:
    """py-spy on the broker for `seconds` while a reader reads again and again (not in the
    medians: sampling costs the broker a little); its samples go to profile-NAME.txt. Between
    reads the broker idles, which py-spy does not sample, so every sample is of a read."""
    pid = env.kbroker.pid
    if pid is None:
        return {"skipped": "the broker's pid is unknown (give --broker-pid with --bootstrap)"}
    if profiling.py_spy() is None:
        return {"skipped": "py-spy is not installed (pip install 'kbroker[bench]')"}
    output = env.out / f"profile-{name}.txt"
    recorder = profiling.Recorder(pid, output, seconds)
    reads = []
    while recorder.proc.poll() is None:
        with env.ui.step(f"{label} · {name} · under py-spy") as step:
            reads.append(read(step))
    try:
        recorder.wait()
    except (RuntimeError, OSError) as e:
        return {"skipped": f"py-spy failed: {e}"}
    env.ui.log(f"  profiled {name}: {len(reads)} read(s), the first {describe(reads[0])}")
    return {"reads": reads, "collapsed_stacks": output.name, **profiling.summarize(output)}


# -- results -----------------------------------------------------------------------------------------------


def targets(cases: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
    """The issue's acceptance point 2, for each case that read the views it is about."""
    found = []
    for case in cases or []:
        ratios = case["ratios"]
        of = f" ({case['params']['compression']}, p={case['params']['partitions']})"
        if "ten" in ratios:
            wire = ratios["ten"]["wire"]
            found.append(_target("filtered view keeping ~10 %: source bytes / view bytes over the wire" + of, "≥ 5×",
                                 wire, "×", wire is not None and wire >= 5, case["name"]))
        for name, which in (("all", "made before the records"), (FIRST_READ, "made over existing records")):
            if name in ratios:
                rate = ratios[name]["rate"]
                found.append(_target(f"view matching everything, {which}: read rate / the source's" + of,
                                     "≥ 0.9× source", rate, "× source", rate is not None and rate >= 0.9,
                                     case["name"]))
    return found


def _target(name: str, goal: str, measured: float | None, unit: str, met: bool, note: str) -> dict[str, Any]:
    return {"name": name, "goal": goal, "measured": measured, "unit": unit,
            "met": met if measured is not None else None, "note": note}


def summary_lines(cases: list[dict[str, Any]] | None) -> list[str]:
    """A table per case: each reader's medians and each view's ratios to the source."""
    lines: list[str] = []
    for case in cases or []:
        params = case["params"]
        log = f"{params['source_log_mb']:.1f} MB" if params["source_log_mb"] is not None else "an unknown size"
        lines += [f"## {case['name']}", "",
                  f"{params['source_mb']:.1f} MB of records in {log} of {params['compression']} log, produced at "
                  f"{params.get('preload_mb_per_s', 0):.1f} MB/s with the views there "
                  f"({params.get('preload_without_views_mb_per_s', 0):.1f} MB/s into a topic without views); each view's "
                  "ratios are per round, against the source read in the same round, then the median.", "",
                  "| reader | records | MB/s of source | records/s | MB over the wire | broker CPU | "
                  "broker CPU ms/MB | filtering ms/MB | client CPU | rate / source | source bytes / view's "
                  "| log / view's |",
                  "|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for name, summary in case["readers"].items():
            m = summary["median"]
            ratios = case["ratios"].get(name, {})
            filters = f" (`{case['views'][name]}`)" if name in case["views"] else ""
            lines.append(
                f"| {name}{filters} | {case['expected'][name]:,} | {m['mb_per_s']:.1f} | {m['records_per_s']:,.0f} | "
                f"{_mb(m['wire_bytes'])} | {_pct(m['server_cpu'])} | {_fmt(m['server_cpu_ms_per_mb'])} | "
                f"{_fmt(ratios.get('filter_cpu_ms_per_mb'))} | {_pct(m['client_cpu'])} | "
                f"{_times(ratios.get('rate'))} | {_times(ratios.get('wire'))} | {_times(ratios.get('log_to_wire'))} |")
        lines.append("")
        for name, profile in case.get("profiles", {}).items():
            top = ", ".join(f"{f['function']} {f['share']:.0%}" for f in profile.get("self", [])[:5])
            where = f" ({profile['collapsed_stacks']})" if "collapsed_stacks" in profile else ""
            lines.append(f"- profile of {name}: {profile.get('skipped') or top}{where}")
        if case.get("profiles"):
            lines.append("")
    return lines


def _fmt(value: float | None, digits: int = 2) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def _pct(value: float | None) -> str:
    return "–" if value is None else f"{value:.0%}"


def _times(value: float | None) -> str:
    if value is None:
        return "–"
    return f"{value:,.0f}×" if value >= 100 else f"{value:.2f}×"  # a view that keeps nothing moves next to nothing


def _mb(count: float | None) -> str:
    if count is None:
        return "–"
    return f"{count / MB:.2f}" if count >= MB / 10 else f"{count / MB:.4f}"
