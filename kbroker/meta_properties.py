"""`meta.properties` in every log dir: which broker and cluster the data belongs to, as Kafka
checks at start, so a disk moved to another broker or cluster is refused instead of served."""

from __future__ import annotations

import base64
import uuid
from collections.abc import Iterable
from pathlib import Path

from kbroker.config import ConfigError
from kbroker.fsutil import write_atomically
from kbroker.properties import parse_properties

META_FILE = "meta.properties"


def new_cluster_id() -> str:
    """Kafka's form: a random UUID in URL-safe base64 without padding."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


def load_or_create_meta(log_dirs: Iterable[Path], broker_id: int, cluster_id: str | None) -> str:
    """Check every log dir's meta.properties against this broker; write it where missing.

    Returns the cluster id, which is fixed by the first log dir that has one.
    """
    dirs = list(log_dirs)
    found: dict[Path, dict[str, str]] = {}
    for directory in dirs:
        meta = directory / META_FILE
        if meta.exists():
            found[directory] = parse_properties(meta.read_text())
    for directory, props in found.items():
        stored_id = int(props.get("broker.id", props.get("node.id", "-1")))
        if stored_id != broker_id:
            raise ConfigError(
                f"{directory / META_FILE} belongs to broker {stored_id}, but this is broker.id {broker_id}"
            )
        stored_cluster = props.get("cluster.id")
        if stored_cluster:
            if cluster_id and cluster_id != stored_cluster:
                raise ConfigError(f"{directory / META_FILE} has cluster.id {stored_cluster}, not {cluster_id}")
            cluster_id = stored_cluster
    cluster_id = cluster_id or new_cluster_id()
    for directory in dirs:
        if directory not in found:
            write_atomically(directory / META_FILE, f"version=0\nbroker.id={broker_id}\ncluster.id={cluster_id}\n")
    return cluster_id
