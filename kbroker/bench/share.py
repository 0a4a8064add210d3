"""Share groups (KIP-932) against the classic consumer: the same preloaded topic read by one
classic consumer and by share groups of 1..N ShareConsumers, in the same run, as ratios.

Each round makes a topic and, while it is still empty, starts one share group per measured
consumer count on it: a share group starts a partition at the log's end when the partition is
first assigned to it (Kafka's default `share.auto.offset.reset=latest`), so a group that exists
before the records does read them all. The topic is then preloaded, and read in turn by the
classic consumer (`assign` from the start, the consume benchmark's worker) and by each share
group's consumers, each in its own process. The share consumers subscribe before the timed
part and it starts only once the group coordinator has assigned every one of them a partition
(ShareGroupDescribe): a ShareConsumer fetches only when polled, so nothing is acquired before.
Every record must come exactly once: the offsets received are checked against the preload.
"""

from __future__ import annotations

import base64
import time
import uuid
from array import array
from typing import Any

from kbroker.bench.benchmarks import MB, BenchError, Env, _cpu_share, _median, topic_name
from kbroker.bench.servers import Server
from kbroker.bench.ui import Step
from kbroker.bench.workers import run_workers
from kbroker.client import Client
from protocol.errors import ErrorCode

SHARE_GROUP_HEARTBEAT = 76
SHARE_GROUP_DESCRIBE = 77
CLASSIC = "classic"
METRICS = ["msgs_per_s", "mb_per_s", "first_message_ms", "server_cpu", "client_cpu"]
ASSIGNMENT_TIMEOUT_S = 60.0


def share_mode(consumers: int) -> str:
    return f"share x{consumers}"


def share_case(env: Env, partitions: int, message_size: int, records: int, consumer_counts: list[int],
               classic_config: dict[str, Any], share_config: dict[str, Any],
               preload_config: dict[str, Any]) -> dict[str, Any]:
    """Throughput of the classic consumer and of each share group size over the same records;
    medians per mode and each share mode's ratios to the classic consumer."""
    server = env.kbroker
    per_partition = max(1, records // partitions)
    total = per_partition * partitions
    label = f"share vs classic {message_size} B p={partitions} {total:,} records"
    modes = [CLASSIC, *(share_mode(n) for n in consumer_counts)]
    runs: dict[str, list[dict[str, Any]]] = {mode: [] for mode in modes}
    for index in range(env.runs):
        topic = topic_name("share")
        server.create_topic(topic, partitions)
        groups = {n: f"{topic}-x{n}" for n in consumer_counts}
        with env.ui.step(f"{label} · starting {len(groups)} share group(s) on the empty topic"):
            for group in groups.values():
                start_share_group(server, topic, group, partitions)
        preload = {"bootstrap": server.bootstrap, "topic": topic, "message_size": message_size, "duration_s": 0,
                   "config": preload_config, "max_messages": per_partition, "partitions": partitions}
        with env.ui.step(f"{label} · preloading"):
            run_workers([("produce", preload)])
        for mode in modes:
            description = f"{label} · {mode} · run {index + 1}/{env.runs}"
            with env.ui.step(description) as step:
                if mode == CLASSIC:
                    result = _classic_run(server, topic, partitions, message_size, classic_config, step)
                else:
                    consumers = int(mode.removeprefix("share x"))
                    result = _share_run(server, topic, groups[consumers], consumers, partitions, per_partition,
                                        message_size, share_config, step)
            runs[mode].append(result)
            env.ui.log(f"  {description}: {describe(result)}")
        server.delete_topic(topic)
    summary = {mode: {"runs": results, "median": {m: _median([r.get(m) for r in results]) for m in METRICS}}
               for mode, results in runs.items()}
    classic = summary[CLASSIC]["median"]
    ratios = {mode: {m: _ratio(summary[mode]["median"][m], classic[m]) for m in ("msgs_per_s", "mb_per_s")}
              for mode in modes if mode != CLASSIC}
    return {
        "name": label,
        "params": {"partitions": partitions, "message_size": message_size, "records": total,
                   "share_consumers": consumer_counts},
        "classic_config": classic_config, "share_config": share_config, "preload_config": preload_config,
        "modes": summary, "ratios": ratios,
    }


def _ratio(ours: float | None, reference: float | None) -> float | None:
    return round(ours / reference, 4) if ours is not None and reference else None


def describe(result: dict[str, Any]) -> str:
    cpu = f", broker CPU {result['server_cpu']:.0%}" if result.get("server_cpu") is not None else ""
    return (f"{result['msgs_per_s']:,.0f} records/s, {result['mb_per_s']:.1f} MB/s{cpu}, "
            f"client CPU {result['client_cpu']:.0%}")


def _classic_run(server: Server, topic: str, partitions: int, message_size: int, config: dict[str, Any],
                 step: Step) -> dict[str, Any]:
    spec = {"bootstrap": server.client_bootstrap, "topic": topic, "partitions": partitions, "passes": 1,
            "message_size": message_size, "config": {**config, **server.client_settings}}
    cpu_before = server.cpu_seconds()
    result = run_workers([("consume", spec)], step.update)[0]
    return _throughput(server, [result], cpu_before, message_size)


def _share_run(server: Server, topic: str, group: str, consumers: int, partitions: int, per_partition: int,
               message_size: int, config: dict[str, Any], step: Step) -> dict[str, Any]:
    expected = per_partition * partitions
    spec = {"bootstrap": server.client_bootstrap, "topic": topic, "group": group, "expected": expected,
            "message_size": message_size, "config": {**config, **server.client_settings}}
    cpu_before: list[float | None] = []

    def when_assigned() -> None:
        wait_for_share_assignment(server, group, topic, consumers, partitions)
        cpu_before.append(server.cpu_seconds())

    results = run_workers([("share_consume", spec)] * consumers, step.update, before_start=when_assigned)
    check_each_once(results, partitions, per_partition)
    measured = _throughput(server, results, cpu_before[0], message_size)
    measured["per_consumer"] = [r["messages"] for r in results]
    measured["redelivered"] = sum(r["redelivered"] for r in results)
    return measured


def _throughput(server: Server, results: list[dict[str, Any]], cpu_before: float | None,
                message_size: int) -> dict[str, Any]:
    """From the first consumer's start to the last record received by any of them."""
    messages = sum(r["messages"] for r in results)
    start = min(r["start"] for r in results)
    elapsed = max(r["end"] for r in results) - start
    firsts = [r["first_message"] for r in results if r["first_message"] is not None]
    if messages <= 0 or elapsed <= 0 or not firsts:
        raise BenchError(f"{server.name}: nothing consumed")
    return {
        "messages": messages, "elapsed_s": round(elapsed, 3),
        "msgs_per_s": round(messages / elapsed, 1), "mb_per_s": round(messages * message_size / elapsed / MB, 3),
        "first_message_ms": round((min(firsts) - start) * 1000, 2),
        "server_cpu": _cpu_share(server, cpu_before, elapsed),
        "client_cpu": round(sum(r["cpu_s"] for r in results) / elapsed, 3),
    }


def check_each_once(results: list[dict[str, Any]], partitions: int, per_partition: int) -> None:
    """Every preloaded record (offsets 0..per_partition-1 of each partition of a fresh topic)
    received exactly once over all the consumers; BenchError naming what is missing or doubled."""
    received: dict[int, array] = {p: array("q") for p in range(partitions)}
    for result in results:
        for partition, data in result["offsets"].items():
            received.setdefault(int(partition), array("q")).frombytes(data)
    problems = []
    for partition, offsets in sorted(received.items()):
        distinct = set(offsets)
        duplicates = len(offsets) - len(distinct)
        missing = per_partition - len(distinct & set(range(per_partition)))
        stray = len(distinct - set(range(per_partition)))
        if duplicates or missing or stray:
            problems.append(f"partition {partition}: {missing} missing, {duplicates} received twice or more, "
                            f"{stray} not preloaded")
    if problems:
        raise BenchError("share consumers did not receive each record once: " + "; ".join(problems))


# -- share group setup -------------------------------------------------------------------------------------


def start_share_group(server: Server, topic: str, group: str, partitions: int,
                      timeout_s: float = ASSIGNMENT_TIMEOUT_S) -> None:
    """Make `group` start reading every partition of `topic` now: a member joins (bare
    ShareGroupHeartbeats), heartbeats until it is assigned them all (which starts the share
    partitions at the log's end) and leaves. Not a ShareConsumer: librdkafka's close() can hang
    when it comes while the client is taking in its first assignment."""
    member_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()  # as clients make them
    deadline = time.monotonic() + timeout_s
    with Client(server.bootstrap) as client:
        node = client.find_coordinator(group).node_id
        epoch = 0
        assigned = 0
        while time.monotonic() < deadline:
            answer = client.request(SHARE_GROUP_HEARTBEAT, {
                "group_id": group, "member_id": member_id, "member_epoch": epoch, "rack_id": None,
                "subscribed_topic_names": [topic] if epoch == 0 else None}, 1, node)
            if answer.error_code != ErrorCode.NO_ERROR:
                raise BenchError(f"ShareGroupHeartbeat {group}: error {answer.error_code} {answer.error_message}")
            epoch = answer.member_epoch
            if answer.assignment is not None:
                assigned = sum(len(t.partitions) for t in answer.assignment.topic_partitions)
            if assigned == partitions:
                client.request(SHARE_GROUP_HEARTBEAT, {"group_id": group, "member_id": member_id, "member_epoch": -1,
                                                       "rack_id": None, "subscribed_topic_names": None}, 1, node)
                return
            time.sleep(0.05)  # the assignment comes in a later heartbeat's answer: ask again
    raise BenchError(f"share group {group}: not assigned the {partitions} partition(s) of {topic} "
                     f"within {timeout_s:.0f}s")


def wait_for_share_assignment(server: Server, group: str, topic: str, members: int, partitions: int,
                              timeout_s: float = ASSIGNMENT_TIMEOUT_S) -> None:
    """Poll ShareGroupDescribe until `group` has `members` members, each assigned a partition of
    `topic` and all of them together every partition."""
    deadline = time.monotonic() + timeout_s
    seen: list[set[int]] = []
    with Client(server.bootstrap) as client:
        while time.monotonic() < deadline:
            seen = share_assignments(client, group, topic)
            covered = set().union(*seen) if seen else set()
            if len(seen) == members and all(seen) and covered == set(range(partitions)):
                return
            time.sleep(0.05)  # the coordinator announces nothing: ask again
    raise BenchError(f"share group {group}: {members} member(s) with all {partitions} partition(s) of {topic} "
                     f"expected within {timeout_s:.0f}s, last seen {[sorted(s) for s in seen]}")


def share_assignments(client: Client, group: str, topic: str) -> list[set[int]]:
    """The partitions of `topic` assigned to each member of share group `group` ([] while the
    group does not exist)."""
    node = client.find_coordinator(group).node_id
    answer = client.request(SHARE_GROUP_DESCRIBE, {"group_ids": [group], "include_authorized_operations": False},
                            1, node)
    described = answer.groups[0]
    if described.error_code == ErrorCode.GROUP_ID_NOT_FOUND:
        return []
    if described.error_code != ErrorCode.NO_ERROR:
        raise BenchError(f"ShareGroupDescribe {group}: error {described.error_code}")
    return [{p for assigned in m.assignment.topic_partitions if assigned.topic_name == topic
             for p in assigned.partitions} for m in described.members]
