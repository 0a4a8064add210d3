"""Results: the JSON file, the targets of issue 7 (and of delayed delivery, delayed_report.py) with their
measured values, plots, a summary."""

from __future__ import annotations

import json
import os
import platform
import sys
from pathlib import Path
from typing import Any

from kbroker.bench import delayed_report

RESULTS_FILE = "results.json"
SCHEMA = "kbroker-bench/1"


def machine() -> dict[str, Any]:
    import confluent_kafka

    model = ""
    try:
        with open("/proc/cpuinfo") as f:
            model = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), "")
    except OSError:
        pass
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return {
        "cpus": os.cpu_count(), "cpu_model": model, "memory_gib": round(memory / 2**30, 1),
        "platform": platform.platform(), "python": sys.version.split()[0],
        "confluent_kafka": confluent_kafka.version(), "librdkafka": confluent_kafka.libversion()[0],
    }


def targets(results: dict[str, Any]) -> list[dict[str, Any]]:
    """The performance targets (docs/performance.md), each with what this run measured (None
    when the benchmark did not run)."""
    found: list[dict[str, Any]] = []

    produce = _one_kb_produce(results, "1", single=True)
    if produce:
        ratio = produce["ratios"].get("mock", {}).get("msgs_per_s")
        found.append(_target("produce 1 KB, acks=1, one producer", "≥ 0.5× mock", ratio, "× mock",
                             ratio is not None and ratio >= 0.5, produce["name"] + _half_mock_beside_ceiling(produce)))
        ceiling = produce["ratios"].get("ceiling", {}).get("mb_per_s")
        if ceiling is not None:
            found.append(_target("produce 1 KB, acks=1: share of the same-run write ceiling", "≥ 0.8× ceiling",
                                 ceiling, "× ceiling", ceiling >= 0.8, produce["name"]))
        kafka = produce["ratios"].get("kafka", {}).get("msgs_per_s")
        if kafka is not None:
            found.append(_target("produce 1 KB, acks=1, against Apache Kafka", "≥ 1.5× Kafka", kafka, "× Kafka",
                                 kafka >= 1.5, produce["name"]))
    replicated = _one_kb_produce(results, "all", single=False)
    if replicated:
        # The mock does not replicate (its acks=all answers at once): the yardstick is one
        # kbroker's acks=1 throughput in the same run.
        brokers = replicated["params"]["brokers"]
        mb_per_s = replicated["servers"]["kbroker"]["median"]["mb_per_s"]
        single = produce["servers"]["kbroker"]["median"]["mb_per_s"] if produce else None
        ratio = round(mb_per_s / single, 4) if single else None
        found.append(_target(f"produce 1 KB, acks=all, {brokers} brokers, one producer",
                             "≥ 0.5× one broker's acks=1", ratio, "× one broker",
                             ratio is not None and ratio >= 0.5, f"{replicated['name']}: {mb_per_s:.1f} MB/s"))
        ceiling = replicated["ratios"].get("ceiling", {}).get("mb_per_s")
        if ceiling is not None:
            # No goal of its own: it says how much of the 0.5× goal the machine leaves room for.
            found.append(_target(f"produce 1 KB, acks=all, {brokers} brokers: share of the same-run write ceiling "
                                 f"({brokers} copies at once)", "–", ceiling, "× ceiling", None,
                                 f"{replicated['name']}: ceiling "
                                 f"{replicated['servers']['ceiling']['median']['mb_per_s']:.1f} MB/s per copy"))
        replication = replicated["ratios"].get("replication-ceiling", {}).get("mb_per_s")
        if replication is not None:
            moved = replicated["servers"]["replication-ceiling"]["median"]["mb_per_s"]
            reach = f"; 0.5× one broker's acks=1 is {0.5 * single / moved:.2f}× it" if single else ""
            found.append(_target(f"produce 1 KB, acks=all, {brokers} brokers: share of the same-run replication "
                                 "ceiling (bare loops replicating by fetching, as Kafka does)", "–",
                                 replication, "× ceiling", None,
                                 f"{replicated['name']}: {moved:.1f} MB/s per copy{reach}"))

    cache = next((c for c in results.get("consume", []) if not c["params"]["cold"]), None)
    if cache:
        ratio = cache["ratios"].get("mock", {}).get("mb_per_s")
        found.append(_target("consume from page cache", "≥ 1.0× mock", ratio, "× mock",
                             ratio is not None and ratio >= 1.0, cache["name"]))
        kafka = cache["ratios"].get("kafka", {}).get("mb_per_s")
        if kafka is not None:
            found.append(_target("consume from page cache, against Apache Kafka", "≥ 1.0× Kafka", kafka,
                                 "× Kafka", kafka >= 1.0, cache["name"]))

    latency = next((c for c in results.get("latency", []) if str(c["producer_config"].get("acks")) == "1"
                    and c["params"].get("brokers", 1) == 1), None)
    if latency:
        p99 = latency["servers"]["kbroker"]["median"]["p99_ms"]
        ratio = latency["ratios"].get("mock", {}).get("p99_ms")
        target = _target("end-to-end p99 at 20% of max throughput, acks=1", "< 5 ms", p99, "ms",
                         p99 is not None and p99 < 5, latency["name"])
        target["ratio_to_mock"] = ratio
        found.append(target)
        kafka = latency["ratios"].get("kafka", {}).get("p99_ms")
        if kafka is not None:
            found.append(_target("end-to-end p99 at the same rate, against Apache Kafka", "< 1.0× Kafka's", kafka,
                                 "× Kafka", kafka < 1.0, latency["name"]))

    latency = next((c for c in results.get("latency", []) if str(c["producer_config"].get("acks")) in ("all", "-1")
                    and c["params"].get("brokers", 1) > 1), None)
    if latency:
        p99 = latency["servers"]["kbroker"]["median"]["p99_ms"]
        target = _target(f"end-to-end p99 at 20% of max throughput, acks=all, {latency['params']['brokers']} brokers",
                         "< 10 ms", p99, "ms", p99 is not None and p99 < 10, latency["name"])
        target["ratio_to_mock"] = latency["ratios"].get("mock", {}).get("p99_ms")
        found.append(target)

    for case in results.get("share", []):
        for mode, ratio in case["ratios"].items():
            measured = ratio.get("msgs_per_s")
            found.append(_target(f"{mode} consumption of {case['params']['message_size']} B records",
                                 "≥ 0.5× classic", measured, "× classic", measured is not None and measured >= 0.5,
                                 case["name"]))

    found += delayed_report.targets(results.get("delayed"))

    memory = results.get("memory")
    if memory and "kbroker" in memory:
        slope = memory["kbroker"]["mb_per_100_partitions"]
        found.append(_target("broker RSS per 100 idle partitions", "≤ 1 MB", slope, "MiB",
                             slope is not None and slope <= 1.0,
                             f"{memory['params']['partitions']:,} partitions; mock: "
                             f"{memory['mock']['mb_per_100_partitions']} MiB per 100"))
        start = memory["kbroker"]["start_s_median"]
        count = memory["params"]["partitions"]
        note = "" if count >= 10_000 else f"measured with {count:,} partitions, not 10,000"
        found.append(_target("start with 10,000 partitions", "< 30 s", start, "s",
                             start is not None and start < 30 and count >= 10_000, note))
    return found


def _one_kb_produce(results: dict[str, Any], acks: str, single: bool) -> dict[str, Any] | None:
    """The 1 KB, one producer, uncompressed produce case with these acks, on one broker or a cluster."""
    acks_values = ("all", "-1") if acks == "all" else (acks,)
    return next((c for c in results.get("produce", []) if c["params"]["message_size"] == 1024
                 and str(c["client_config"].get("acks")) in acks_values and c["params"]["producers"] == 1
                 and c["client_config"].get("compression.type") == "none"
                 and (c["params"].get("brokers", 1) == 1) == single), None)


def _half_mock_beside_ceiling(produce: dict[str, Any]) -> str:
    """Where half the mock's rate stands against the write ceiling: the mock keeps nothing, so on
    a machine whose disk writes less than half of what the mock moves, 0.5× mock is out of reach."""
    servers = produce["servers"]
    if "mock" not in servers or "ceiling" not in servers:
        return ""
    half = servers["mock"]["median"]["mb_per_s"] / 2
    ceiling = servers["ceiling"]["median"]["mb_per_s"]
    return f"; 0.5× mock is {half:.1f} MB/s, {half / ceiling:.2f}× the write ceiling ({ceiling:.1f} MB/s)"


def _target(name: str, goal: str, measured: float | None, unit: str, met: bool | None,
            note: str) -> dict[str, Any]:
    return {"name": name, "goal": goal, "measured": measured, "unit": unit,
            "met": met if measured is not None else None, "note": note}


def write(results: dict[str, Any], out: Path) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    path = out / RESULTS_FILE
    path.write_text(json.dumps(results, indent=2) + "\n")
    return path


# -- plots ------------------------------------------------------------------------------------------------

COLORS = {"kbroker": "tab:blue", "mock": "tab:orange", "kafka": "tab:green"}


def can_plot() -> bool:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def plot(results: dict[str, Any], out: Path) -> list[str]:
    """The plots this run's results allow; [] when matplotlib is missing (the `bench` extra)."""
    if not can_plot():
        return []
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    made = []
    sizes = [c for c in results.get("produce", []) if c["params"]["producers"] == 1
             and c["client_config"].get("compression.type") == "none" and str(c["client_config"].get("acks")) == "1"
             and c["params"].get("brokers", 1) == 1]
    if len({c["params"]["message_size"] for c in sizes}) > 1:
        made.append(_series(plt, out, "throughput-vs-message-size.png", sizes,
                            lambda c: c["params"]["message_size"], "message size (bytes)",
                            "Producer throughput vs message size (acks=1, one producer)"))
    if len(results.get("partitions", [])) > 1:
        made.append(_series(plt, out, "throughput-vs-partitions.png", results["partitions"],
                            lambda c: c["params"]["partitions"], "partitions",
                            "Producer throughput vs partitions (keyed 1 KB messages)"))
    for index, case in enumerate(results.get("latency", [])):
        made.append(_latency_cdf(plt, out, f"latency-cdf{'' if index == 0 else f'-{index + 1}'}.png", case))
    memory = results.get("memory")
    if memory and "kbroker" in memory:
        made.append(_memory(plt, out, memory))
    profile = next((c["profile"] for c in results.get("produce", []) if c.get("profile", {}).get("self")), None)
    if profile:
        made.append(_profile(plt, out, profile))
    return made


def _series(plt: Any, out: Path, name: str, cases: list[dict[str, Any]], x_of: Any, xlabel: str,
            title: str) -> str:
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(7, 6), sharex=True, gridspec_kw={"height_ratios": [3, 1]})
    cases = sorted(cases, key=x_of)
    xs = [x_of(c) for c in cases]
    for server in cases[0]["servers"]:
        runs = [[r["mb_per_s"] for r in c["servers"][server]["runs"]] for c in cases]
        medians = [c["servers"][server]["median"]["mb_per_s"] for c in cases]
        low = [m - min(r) for m, r in zip(medians, runs, strict=True)]
        high = [max(r) - m for m, r in zip(medians, runs, strict=True)]
        top.errorbar(xs, medians, yerr=[low, high], marker="o", capsize=3, label=server, color=COLORS.get(server))
    for reference in cases[0]["ratios"]:
        bottom.plot(xs, [c["ratios"][reference]["mb_per_s"] for c in cases], marker="o",
                    color=COLORS.get(reference), label=f"kbroker / {reference}")
    bottom.axhline(1.0, color="grey", linewidth=0.8)
    top.set_xscale("log")
    top.set_ylabel("MB/s (median, min–max)")
    top.set_title(title)
    top.legend()
    top.grid(True, alpha=0.3)
    bottom.set_ylabel("ratio")
    bottom.set_xlabel(xlabel)
    bottom.legend()
    bottom.grid(True, alpha=0.3)
    fig.tight_layout()
    fig.savefig(out / name, dpi=110)
    plt.close(fig)
    return name


def _latency_cdf(plt: Any, out: Path, name: str, case: dict[str, Any]) -> str:
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for server, points in case["cdf"].items():
        ax.plot([p[0] for p in points], [p[1] * 100 for p in points], label=server, color=COLORS.get(server))
    ax.set_xscale("log")
    ax.set_xlabel("end-to-end latency (ms)")
    ax.set_ylabel("percentile")
    ax.set_ylim(0, 100.5)
    ax.axvline(5, color="grey", linestyle="--", linewidth=0.8)
    ax.set_title(case["name"])
    ax.legend()
    ax.grid(True, alpha=0.3, which="both")
    fig.tight_layout()
    fig.savefig(out / name, dpi=110)
    plt.close(fig)
    return name


def _memory(plt: Any, out: Path, memory: dict[str, Any]) -> str:
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for server in ("kbroker", "mock"):
        points = memory[server]["points"]
        ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", color=COLORS[server],
                label=f"{server} ({memory[server]['mb_per_100_partitions']} MiB / 100 partitions)")
    ax.set_xlabel("idle partitions")
    ax.set_ylabel("RSS (MiB)")
    ax.set_title("Broker memory vs idle partitions")
    ax.legend()
    ax.grid(True, alpha=0.3)
    fig.tight_layout()
    fig.savefig(out / "memory-rss.png", dpi=110)
    plt.close(fig)
    return "memory-rss.png"


def _profile(plt: Any, out: Path, profile: dict[str, Any]) -> str:
    rows = profile["self"][:15][::-1]
    fig, ax = plt.subplots(figsize=(10, 5.5))
    ax.barh([r["function"][:72] for r in rows], [r["share"] * 100 for r in rows], color="tab:blue")
    ax.set_xlabel("% of busy samples (self time)")
    ax.set_title(f"kbroker during the produce benchmark\ntop self time, {profile['samples']:,} py-spy samples")
    ax.tick_params(axis="y", labelsize=7)
    fig.subplots_adjust(left=0.42, right=0.97, top=0.88, bottom=0.1)
    fig.savefig(out / "profile-produce.png", dpi=110)
    plt.close(fig)
    return "profile-produce.png"


# -- text summary --------------------------------------------------------------------------------------------


def summary_lines(results: dict[str, Any]) -> list[str]:
    """A markdown summary: every case's medians and ratios, then the targets."""
    lines = [f"# kbroker bench: {results.get('command', '')}", ""]
    for section in ("produce", "consume", "partitions", "encryption", "tls"):
        cases = results.get(section, [])
        if not cases:
            continue
        # The references the cases were measured against ("mock" is the 1- or N-broker mock,
        # as the case's name says).
        references = sorted({r for c in cases for r in c["ratios"]})
        lines += [f"## {section}", "", "| case | kbroker MB/s | " + " | ".join(f"{r} MB/s" for r in references)
                  + " | " + " | ".join(f"kbroker/{r}" for r in references) + " | kbroker CPU |",
                  "|---" * (3 + 2 * len(references)) + "|"]
        for c in cases:
            ours = c["servers"]["kbroker"]["median"]
            lines.append(
                f"| {c['name']} | {ours['mb_per_s']:.1f} | "
                + " | ".join(_fmt(c["servers"].get(r, {}).get("median", {}).get("mb_per_s"), 1) for r in references)
                + " | " + " | ".join(_fmt(c["ratios"].get(r, {}).get("mb_per_s")) for r in references)
                + f" | {_pct(ours.get('server_cpu'))} |")
        lines.append("")
    for c in results.get("latency", []):
        lines += [f"## {c['name']}", "", "| broker | p50 ms | p99 ms | p99.9 ms | max ms |", "|---|---|---|---|---|"]
        for server, summary in c["servers"].items():
            m = summary["median"]
            lines.append(f"| {server} | {m['p50_ms']} | {m['p99_ms']} | {m['p999_ms']} | {m['max_ms']} |")
        for reference, ratio in c["ratios"].items():
            lines.append(f"| kbroker/{reference} | {_fmt(ratio['p50_ms'])} | {_fmt(ratio['p99_ms'])} | "
                         f"{_fmt(ratio['p999_ms'])} | {_fmt(ratio['max_ms'])} |")
        lines.append("")
    for c in results.get("share", []):
        lines += [f"## {c['name']}", "", "| consumers | records/s | MB/s | records/s vs classic | first record ms "
                  "| kbroker CPU | client CPU |", "|---|---|---|---|---|---|---|"]
        for mode, summary in c["modes"].items():
            m = summary["median"]
            ratio = c["ratios"].get(mode, {}).get("msgs_per_s")
            lines.append(f"| {mode} | {m['msgs_per_s']:,.0f} | {m['mb_per_s']:.1f} | "
                         f"{'–' if ratio is None else f'{ratio:.2f}×'} | {_fmt(m['first_message_ms'], 1)} | "
                         f"{_pct(m.get('server_cpu'))} | {_pct(m.get('client_cpu'))} |")
        lines.append("")
    memory = results.get("memory")
    if memory and "kbroker" in memory:
        k = memory["kbroker"]
        lines += ["## memory", "",
                  f"- kbroker: {k['mb_per_100_partitions']} MiB per 100 idle partitions; start with "
                  f"{memory['params']['partitions']:,} partitions {k['start_s_median']} s (median of {k['start_s']})",
                  f"- mock: {memory['mock']['mb_per_100_partitions']} MiB per 100 partitions", ""]
    for p in results.get("profiles", []):
        lines.append(f"- profile {p['name']}: produce {p['produce']['servers']['kbroker']['median']['mb_per_s']:.1f}"
                     f" MB/s, latency p99 {p['latency']['servers']['kbroker']['median']['p99_ms']} ms")
    lines += delayed_report.summary_lines(results.get("delayed"))
    if results.get("targets"):
        lines += ["## targets", "", "| target | goal | measured | met |", "|---|---|---|---|"]
        for t in results["targets"]:
            met = {True: "yes", False: "no", None: "–"}[t["met"]]
            lines.append(f"| {t['name']} | {t['goal']} | {_fmt(t['measured'])} {t['unit']} | {met} |")
        lines.append("")
    for note in results.get("notes", []):
        lines.append(f"- note: {note}")
    return lines


def _fmt(value: float | None, digits: int = 2) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def _pct(value: float | None) -> str:
    return "–" if value is None else f"{value:.0%}"
