"""What the console shows of a cluster, read through the admin client as plain JSON-ready
dicts: brokers, topics with their partitions (leader, replicas, ISR, offsets, size on disk),
and consumer groups with members and committed lag per partition.

One snapshot costs a fixed number of requests per broker and per group (metadata, one
ListOffsets per leader for the log starts and one for the ends, one DescribeLogDirs per
broker, and per group a describe and an offset fetch), whatever the number of partitions.
"""

from __future__ import annotations

import time
from typing import Any

from kbroker.client import Client
from kbroker.client.data import EARLIEST, LATEST
from kbroker.client.groups import GroupDescription, GroupListing
from protocol.errors import KafkaError

CONSUMER_PROTOCOL_TYPE = "consumer"


def take_snapshot(client: Client) -> dict[str, Any]:
    """The cluster as the console shows it, at one moment."""
    meta = client.metadata(refresh=True)
    partitions = [(t.name, p) for t in meta.topics.values() if t.error_code == 0 for p in t.partitions]
    starts = client.log_offsets(partitions, EARLIEST)
    ends = client.log_offsets(partitions, LATEST)
    sizes = _leader_sizes(client, meta.brokers, meta.topics)
    topics = []
    for topic in sorted(meta.topics.values(), key=lambda t: (t.is_internal, t.name)):
        rows = [{
            "partition": p.partition, "leader": p.leader, "replicas": p.replicas, "isr": p.isr,
            "log_start": starts.get((topic.name, p.partition)), "log_end": ends.get((topic.name, p.partition)),
            "size": sizes.get((topic.name, p.partition)),
            "under_replicated": len(p.isr) < len(p.replicas),
        } for p in sorted(topic.partitions.values(), key=lambda p: p.partition)]
        topics.append({
            "name": topic.name, "internal": topic.is_internal, "partitions": rows,
            "size": sum(r["size"] or 0 for r in rows),
            "messages": sum((r["log_end"] or 0) - (r["log_start"] or 0) for r in rows),
        })
    return {
        "updated_ms": int(time.time() * 1000),
        "cluster": {"cluster_id": meta.cluster_id, "controller": meta.controller_id,
                    "brokers": [{"id": node, "host": host, "port": port}
                                for node, (host, port) in sorted(meta.brokers.items())]},
        "topics": topics,
        "groups": [_group(client, listing, ends) for listing in _consumer_groups(client)],
    }


def _leader_sizes(client: Client, brokers: dict[int, tuple[str, int]],
                  topics: dict[str, Any]) -> dict[tuple[str, int], int]:
    """Each partition's size on its leader (the replica clients read)."""
    leaders = {(t.name, p.partition): p.leader for t in topics.values() for p in t.partitions.values()}
    sizes: dict[tuple[str, int], int] = {}
    for node in brokers:
        try:
            on_node = client.replica_sizes(node)
        except (KafkaError, OSError):
            continue  # a broker down or refusing: its partitions show no size this time
        sizes.update((tp, size) for tp, size in on_node.items() if leaders.get(tp) == node)
    return sizes


def _consumer_groups(client: Client) -> list[GroupListing]:
    return [g for g in client.list_groups() if g.protocol_type in (CONSUMER_PROTOCOL_TYPE, "")]


def _group(client: Client, listing: GroupListing, ends: dict[tuple[str, int], int]) -> dict[str, Any]:
    """A group's members and, per partition it has committed or is assigned, the committed lag."""
    try:
        group: GroupDescription | None = client.describe_group(listing.group_id)
        committed = client.fetch_offsets(listing.group_id)
    except KafkaError as e:
        return {"group_id": listing.group_id, "state": listing.state, "error": str(e), "members": [],
                "partitions": [], "lag": None}
    assert group is not None
    owners = {tp: m.client_id for m in group.members for tp in m.assignment}
    rows = []
    for tp in sorted(set(committed) | set(owners)):
        offset, end = committed.get(tp), ends.get(tp)
        rows.append({"topic": tp[0], "partition": tp[1], "committed": offset, "log_end": end,
                     "lag": end - offset if offset is not None and end is not None else None,
                     "owner": owners.get(tp)})
    return {
        "group_id": group.group_id, "state": group.state, "type": group.group_type,
        "protocol": group.protocol, "error": None,
        "members": [{"member_id": m.member_id, "client_id": m.client_id, "host": m.client_host,
                     "assignment": [f"{t}-{p}" for t, p in sorted(m.assignment)]} for m in group.members],
        "partitions": rows,
        "lag": sum(r["lag"] for r in rows if r["lag"] is not None),
    }
