"""Fixtures of the archive's tests: a real S3-compatible server (moto's) and stores on it."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator

import pytest

from kbroker.archive.object_store import ObjectStore, ObjectStoreConfig
from kbroker.s3_server import ACCESS_KEY_ID, SECRET_ACCESS_KEY, S3Server


@pytest.fixture(scope="module")
def s3_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    """One server for a test module (it takes a second or two to start); the tests keep apart
    by bucket names of their own. A test that stops a server starts one of its own."""
    with S3Server(tmp_path_factory.mktemp("s3") / "moto.log") as server:
        yield server


def archiving(endpoint: str, bucket: str) -> dict[str, str]:
    """A broker's settings to archive to `bucket` on `endpoint`, in rounds every 200 ms and with
    retention checked as often, so tests wait for little."""
    return {
        "remote.log.storage.system.enable": "true",
        "remote.log.storage.s3.endpoint": endpoint,
        "remote.log.storage.s3.bucket": bucket,
        "remote.log.storage.s3.access.key.id": ACCESS_KEY_ID,
        "remote.log.storage.s3.secret.access.key": SECRET_ACCESS_KEY,
        "remote.log.manager.task.interval.ms": "200",
        "remote.log.manager.task.retry.backoff.max.ms": "1000",
        "log.retention.check.interval.ms": "200",
        "log.initial.task.delay.ms": "0",
    }


def new_bucket_name() -> str:
    return f"test-{uuid.uuid4().hex[:16]}"


def store_config(endpoint: str, bucket: str, prefix: str = "") -> ObjectStoreConfig:
    return ObjectStoreConfig(endpoint_url=endpoint, bucket=bucket, prefix=prefix,
                             access_key_id=ACCESS_KEY_ID, secret_access_key=SECRET_ACCESS_KEY)


@pytest.fixture
def make_store(s3_server: S3Server) -> Iterator[Callable[..., ObjectStore]]:
    """Stores on `s3_server` (closed afterwards): `make_store(bucket, prefix)`, the bucket created."""
    made: list[ObjectStore] = []

    def make(bucket: str, prefix: str = "") -> ObjectStore:
        store = ObjectStore(store_config(s3_server.endpoint, bucket, prefix))
        made.append(store)
        store.ensure_bucket()
        return store

    yield make
    for store in made:
        store.close()


@pytest.fixture
def store(make_store: Callable[..., ObjectStore]) -> ObjectStore:
    """A store with the prefix "archive" in a bucket of its own."""
    return make_store(new_bucket_name(), "archive")
