"""The broker settings of the archive, checked before the broker starts: archiving asked for
but impossible stops the start rather than leaving local retention to delete what it was asked
to keep elsewhere."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from kbroker.archive.archiver import ArchiveSettings
from kbroker.archive.object_store import BUCKET, PROPERTY_NAMES, ObjectStoreConfig

SYSTEM_ENABLE = "remote.log.storage.system.enable"
# As Kafka 3.9: the copier pool's size, -1 for the deprecated all-purpose pool's.
COPIER_THREADS = "remote.log.manager.copier.thread.pool.size"
MANAGER_THREADS = "remote.log.manager.thread.pool.size"


def archive_settings(get: Callable[[str], Any], encrypting: bool) -> tuple[ObjectStoreConfig, ArchiveSettings]:
    """The object store and the archiver's timings of a broker that archives; ValueError with
    the reason when it cannot."""
    if encrypting:
        # Archived segments are the local files; reads of them do not decrypt (yet).
        raise ValueError(f"{SYSTEM_ENABLE}=true with log.encryption.key.file is not supported")
    props: Mapping[str, str] = {name: get(name) for name in PROPERTY_NAMES if get(name) is not None}
    store = ObjectStoreConfig.from_properties(props)
    if store is None:
        raise ValueError(f"{SYSTEM_ENABLE}=true needs {BUCKET}")
    settings = ArchiveSettings(
        task_interval_ms=_positive(get, "remote.log.manager.task.interval.ms"),
        retry_backoff_ms=_positive(get, "remote.log.manager.task.retry.backoff.ms"),
        retry_backoff_max_ms=_positive(get, "remote.log.manager.task.retry.backoff.max.ms"),
        cache_bytes=_positive(get, "remote.log.index.file.cache.total.size.bytes"),
        copier_threads=_positive(get, COPIER_THREADS if int(get(COPIER_THREADS)) != -1 else MANAGER_THREADS),
        reader_threads=_positive(get, "remote.log.reader.threads"),
    )
    return store, settings


def _positive(get: Callable[[str], Any], name: str) -> int:
    value = int(get(name))
    if value < 1:
        raise ValueError(f"{name} must be at least 1")
    return value
