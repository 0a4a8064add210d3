"""The report of `kbroker bench delayed` (kbroker/bench/delayed.py): its targets with pass/fail,
and its part of summary.md. The numbers of docs/delayed-and-retry.md's acceptance points."""

from __future__ import annotations

from typing import Any

LATENESS_P99_TARGET_MS = 200.0
BYTES_PER_PENDING_TARGET = 100.0
RESTART_TARGET_S = 10.0
THROUGHPUT_TARGET = 0.95  # "within 5 %"
FULL_PENDING = 1_000_000


def targets(delayed: dict[str, Any] | None) -> list[dict[str, Any]]:
    """Each acceptance point with what this run measured (only the parts that ran)."""
    if not delayed:
        return []
    found = []
    if "lateness" in delayed:
        found += _lateness_targets(delayed["lateness"])
    if "memory" in delayed:
        found += _memory_targets(delayed["memory"])
    if "throughput" in delayed:
        found.append(_throughput_target("plain produce to a topic with delayed delivery",
                                        delayed["throughput"]))
    pending = delayed.get("memory", {}).get("throughput_with_pending")
    if pending:
        records = delayed["memory"]["records"]
        found.append(_throughput_target(f"plain produce to the topic holding {records:,} pending", pending))
    return found


def _target(name: str, goal: str, measured: float | None, unit: str, met: bool | None,
            note: str = "") -> dict[str, Any]:
    return {"name": name, "goal": goal, "measured": measured, "unit": unit,
            "met": met if measured is not None else None, "note": note}


def _worst(runs: list[dict[str, Any]], key: str) -> float:
    return max(run[key] for run in runs)


def _lateness_targets(lateness: dict[str, Any]) -> list[dict[str, Any]]:
    runs = lateness["runs"]["delayed"]
    produced = sum(r["produced"] for r in runs)
    delivered = sum(r["delivered"] for r in runs)
    problems = sum(r["missing"] + r["duplicates"] for r in runs)
    p99 = _worst_value([r["lateness_ms"]["p99"] for r in runs])
    found = [
        _target("delayed records delivered exactly once", "0 missing, 0 duplicates", problems, "records",
                problems == 0 and delivered == produced,
                f"{delivered:,} of {produced:,} delivered, {sum(r['missing'] for r in runs)} missing, "
                f"{sum(r['duplicates'] for r in runs)} duplicates"),
        _target("delayed records on the partition produced to", "0 elsewhere",
                _worst(runs, "wrong_partition"), "records", _worst(runs, "wrong_partition") == 0),
        _target("delayed records received before their due time", "0", _worst(runs, "early"), "records",
                _worst(runs, "early") == 0),
        _target("delayed delivery lateness p99 (receive − due)", f"≤ {LATENESS_P99_TARGET_MS:g} ms", p99,
                "ms", p99 is not None and p99 <= LATENESS_P99_TARGET_MS,
                "worst run; max " + ", ".join(str(r["lateness_ms"]["max"]) for r in runs) + " ms"),
        _target("deliveries in due-time order per partition", "0 violations",
                _worst(runs, "order_violations"), "records", _worst(runs, "order_violations") == 0,
                f"{sum(r['order_checked'] for r in runs):,} deliveries checked"),
    ]
    found += _outage_targets(runs)
    if not lateness["runs"]["control"]:
        return found  # --kill: no control run to compare the plain producer with
    ratios = lateness["plain_vs_control"]["ratios"]
    throughput = ratios.get("msgs_per_s")
    found.append(_target("plain producer on the same topic: throughput during the delayed load",
                         f"≥ {THROUGHPUT_TARGET:g}× without", throughput, "× without",
                         throughput is not None and throughput >= THROUGHPUT_TARGET))
    found.append(_target("plain producer on the same topic: produce latency p99 during the delayed load",
                         "report (no goal)", ratios.get("p99_ms"), "× without", None,
                         f"p50 {_fmt(ratios.get('p50_ms'))}× without"))
    return found


def _outage_targets(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """With --kill: every record acknowledged, and lateness out of the outage windows against the
    target (in them: reported, no goal)."""
    outages = [r["outage"] for r in runs if "outage" in r]
    if not outages:
        return []
    failed = sum(r["failed_to_produce"] for r in runs)
    outside = _worst_value([o["lateness_outside_ms"]["p99"] for o in outages])
    inside = _worst_value([o["lateness_inside_ms"]["p99"] for o in outages])
    return [
        _target("delayed records acknowledged through the kill", "0 failed", failed, "records", failed == 0,
                "acknowledgements after the kill: "
                + ", ".join(f"{o['acked_after_kill']:,}" for o in outages)),
        _target("lateness p99 of records due outside the outage window", f"≤ {LATENESS_P99_TARGET_MS:g} ms",
                outside, "ms", outside is not None and outside <= LATENESS_P99_TARGET_MS,
                "worst run; " + "; ".join(_window_note(o) for o in outages)),
        _target("lateness p99 of records due in the outage window", "report (no goal)", inside, "ms", None,
                "worst run; max " + ", ".join(str(o["lateness_inside_ms"]["max"]) for o in outages) + " ms"),
    ]


def _window_note(outage: dict[str, Any]) -> str:
    serving = outage["serving_after_kill_s"].values()
    before, after = outage["lateness_before_kill_ms"]["p99"], outage["lateness_after_window_ms"]["p99"]
    return (f"{outage['outside']:,} records outside (p99 {before} ms of those received before the kill, "
            f"{after} ms of those due after the window), {outage['inside']:,} in; partitions serving "
            f"again {min(serving):g}–{max(serving):g} s after the kill, the windows "
            f"{outage['margin_s']:g} s later")


def _worst_value(values: list[float | None]) -> float | None:
    numbers = [v for v in values if v is not None]
    return max(numbers) if numbers else None


def _memory_targets(memory: dict[str, Any]) -> list[dict[str, Any]]:
    records = memory["records"]
    size_note = "" if records >= FULL_PENDING else f"measured with {records:,} records, not {FULL_PENDING:,}"
    per_record = memory["bytes_per_record"]["rss"]
    growths = (f"growth {memory['delayed']['growth_per_record']['rss']} B vs "
               f"{memory['control']['growth_per_record']['rss']} B a record; after a restart "
               f"{memory['bytes_per_record_after_restart']['rss']} B")
    found = [_target("broker memory per pending record (RSS growth − control's)",
                     f"≤ {BYTES_PER_PENDING_TARGET:g} B", per_record, "B",
                     per_record <= BYTES_PER_PENDING_TARGET, "; ".join(filter(None, [growths, size_note])))]
    for restart in memory["delayed"]["restarts"]:
        seconds = restart["answer_s"]
        found.append(_target(f"restart with {records:,} pending, after {restart['how']}",
                             f"< {RESTART_TARGET_S:g} s", seconds, "s",
                             seconds < RESTART_TARGET_S and restart["extras"]["ok"],
                             f"to the first acknowledged produce; ready line after {restart['ready_s']} s; "
                             + restart["extras"]["verdict"]))
    checks = [r for r in memory["delayed"]["restarts"] if "pending_at_stop" in r]
    checks.append(memory["delayed"]["final_check"])
    counts = [c["pending_at_stop"] for c in checks]
    found.append(_target("records still pending after the restarts", f"= {records:,}",
                         min((c for c in counts if c is not None), default=None), "records",
                         all(c["count_ok"] for c in checks),
                         "counted in the snapshot of each clean stop after a restart: "
                         + ", ".join(map(str, counts))))
    return found


def _throughput_target(name: str, case: dict[str, Any]) -> dict[str, Any]:
    ratio = case["ratios"]["disabled"]["msgs_per_s"]
    medians = case["servers"]
    return _target(name, f"≥ {THROUGHPUT_TARGET:g}× delayed.delivery.enable=false", ratio, "×",
                   ratio is not None and ratio >= THROUGHPUT_TARGET,
                   f"{medians['kbroker']['median']['mb_per_s']:.1f} vs "
                   f"{medians['disabled']['median']['mb_per_s']:.1f} MB/s, medians of "
                   f"{len(medians['kbroker']['runs'])} alternated runs; broker CPU per MB "
                   f"{_fmt(case['ratios']['disabled'].get('cpu_ms_per_mb'))}×")


# -- summary.md ----------------------------------------------------------------------------------


def summary_lines(delayed: dict[str, Any] | None) -> list[str]:
    if not delayed:
        return []
    lines: list[str] = []
    if "lateness" in delayed:
        lines += _lateness_lines(delayed["params"], delayed["lateness"])
    if "memory" in delayed:
        lines += _memory_lines(delayed["memory"])
    for case in (delayed.get("throughput"), delayed.get("memory", {}).get("throughput_with_pending")):
        if case:
            lines += _throughput_lines(case)
    return lines


def _lateness_lines(params: dict[str, Any], lateness: dict[str, Any]) -> list[str]:
    lines = [f"## delayed: {params['records']:,} records, delays 0–{params['max_delay_s']:g} s, "
             f"{params['producers']} producers, {params['partitions']} partitions", "",
             "| run | delivered / produced | missing | duplicates | wrong partition | early | out of order "
             "| lateness p50 / p99 / max ms | of records due after their ack | plain records end to end "
             "| broker CPU | load |", "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for index, run in enumerate(lateness["runs"]["delayed"]):
        lines.append(f"| {index + 1} | {run['delivered']:,} / {run['produced']:,} | {run['missing']} | "
                     f"{run['duplicates']} | {run['wrong_partition']} | {run['early']} | "
                     f"{run['order_violations']} | {_spread(run['lateness_ms'])} | "
                     f"{_spread(run['lateness_held_ms'])} | {_spread(run['plain_end_to_end_ms'])} | "
                     f"{_pct(run['server_cpu'])} | {run['load_average']} |")
    lines += _outage_lines(lateness["runs"]["delayed"])
    if not lateness["runs"]["control"]:
        return [*lines, ""]
    medians = lateness["plain_vs_control"]["medians"]
    ratios = lateness["plain_vs_control"]["ratios"]
    lines += ["", "| plain producer | msg/s | produce p50 ms | p99 ms | max ms |", "|---|---|---|---|---|"]
    for mode in ("delayed", "control"):
        m = medians[mode]
        name = "during the delayed load" if mode == "delayed" else "without delayed records"
        lines.append(f"| {name} | {_fmt(m['msgs_per_s'], 0)} | {m['p50_ms']} | {m['p99_ms']} | "
                     f"{m['max_ms']} |")
    lines.append(f"| ratio | {_fmt(ratios['msgs_per_s'])} | {_fmt(ratios['p50_ms'])} | "
                 f"{_fmt(ratios['p99_ms'])} | {_fmt(ratios['max_ms'])} |")
    return [*lines, ""]


def _outage_lines(runs: list[dict[str, Any]]) -> list[str]:
    """With --kill: what died when, when its partitions served again, lateness (records: p50 / p99 /
    max ms) of the records received before the kill, due in the window, and due after it."""
    if not any("outage" in run for run in runs):
        return []
    lines = ["", "| run | killed | at s | leading | serving again after s | window ends after s "
             "| acks after the kill | received before the kill | due in the window | due after the window "
             "| load min–max |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for index, run in enumerate(runs):
        o = run.get("outage")
        if o is None:
            continue
        serving = o["serving_after_kill_s"].values()
        load = o.get("load_average", {})
        lines.append(f"| {index + 1} | broker {o['victim']} | {o['kill_at_s']:g} | {o['led']} | "
                     f"{min(serving):g}–{max(serving):g} | {max(o['window_after_kill_s'].values()):g} | "
                     f"{o['acked_after_kill']:,} | "
                     f"{o['before_kill']:,}: {_spread(o['lateness_before_kill_ms'])} | "
                     f"{o['inside']:,}: {_spread(o['lateness_inside_ms'])} | "
                     f"{o['after_window']:,}: {_spread(o['lateness_after_window_ms'])} | "
                     f"{load.get('min', '–')}–{load.get('max', '–')} |")
    return lines


def _memory_lines(memory: dict[str, Any]) -> list[str]:
    delayed, control = memory["delayed"], memory["control"]
    lines = [f"## delayed: {memory['records']:,} pending records", "",
             "| broker | fill s | RSS growth B/record | RssAnon growth B/record |", "|---|---|---|---|"]
    brokers = (("pending (feature on)", delayed), ("control (delayed.delivery.enable=false)", control))
    for name, broker in brokers:
        per = broker["growth_per_record"]
        lines.append(f"| {name} | {broker['fill_s']} | {per['rss']} | {per['anon']} |")
    growth = memory["bytes_per_record"]
    lines.append(f"| difference | | {growth['rss']} | {growth['anon']} |")
    after = memory["bytes_per_record_after_restart"]
    lines.append(f"| difference after a restart (the index loaded, no produce traffic) | | {after['rss']} | "
                 f"{after['anon']} |")
    lines += ["", "| restart | broker | stop s | ready s | first produce answered s | check |",
              "|---|---|---|---|---|---|"]
    for name, broker in (("pending", delayed), ("control", control)):
        for r in broker["restarts"]:
            lines.append(f"| {r['how']} | {name} | {_fmt(r['stop_s'])} | {r['ready_s']} | {r['answer_s']} | "
                         f"{r['extras']['verdict']} |")
    return [*lines, ""]


def _throughput_lines(case: dict[str, Any]) -> list[str]:
    servers = case["servers"]
    lines = [f"## {case['name']}", "", "| topic | MB/s | msg/s | broker CPU | broker CPU ms per MB |",
             "|---|---|---|---|---|"]
    for name in ("kbroker", "disabled"):
        m = servers[name]["median"]
        lines.append(f"| {case['topics'][name]} | {m['mb_per_s']:.1f} | {m['msgs_per_s']:,.0f} | "
                     f"{_pct(m['server_cpu'])} | {_fmt(m.get('cpu_ms_per_mb'))} |")
    ratios = case["ratios"]["disabled"]
    lines.append(f"| ratio | {_fmt(ratios['mb_per_s'])} | | | {_fmt(ratios.get('cpu_ms_per_mb'))} |")
    return [*lines, ""]


def _spread(percentiles: dict[str, float | None]) -> str:
    return f"{percentiles['p50']} / {percentiles['p99']} / {percentiles['max']}"


def _fmt(value: float | None, digits: int = 2) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def _pct(value: float | None) -> str:
    return "–" if value is None else f"{value:.0%}"
