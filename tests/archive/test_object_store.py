"""The archive's object store against a real S3-compatible server process (moto's)."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import boto3
import botocore.exceptions
import pytest
from boto3.exceptions import RetriesExceededError

from kbroker.archive import object_store
from kbroker.archive.object_store import (
    PROPERTY_NAMES,
    ObjectNotFound,
    ObjectStore,
    ObjectStoreConfig,
    ObjectStoreError,
)
from kbroker.ports import free_port
from kbroker.s3_server import ACCESS_KEY_ID, SECRET_ACCESS_KEY, S3Server
from tests.archive.conftest import new_bucket_name, store_config

MakeStore = Callable[..., ObjectStore]

# Bounds on calls that must fail fast, not hang (the store's timeouts are 5 s and 30 s).
FAIL_FAST_TIMEOUT_S = 30

PROPS = {
    "remote.log.storage.s3.endpoint": "http://127.0.0.1:9000",
    "remote.log.storage.s3.bucket": "kafka-archive",
    "remote.log.storage.s3.prefix": "cluster-a/",
    "remote.log.storage.s3.region": "eu-west-1",
    "remote.log.storage.s3.access.key.id": "AKIDEXAMPLE",
    "remote.log.storage.s3.secret.access.key": "s3cr3t",
}


def raw_client(endpoint: str) -> Any:
    """A plain boto3 client, to see the bucket as it is, prefixes and all."""
    return boto3.session.Session().client(
        "s3", endpoint_url=endpoint, region_name="us-east-1",
        aws_access_key_id=ACCESS_KEY_ID, aws_secret_access_key=SECRET_ACCESS_KEY)


# The config.


def test_config_from_properties() -> None:
    config = ObjectStoreConfig.from_properties(PROPS)
    assert config == ObjectStoreConfig(endpoint_url="http://127.0.0.1:9000", bucket="kafka-archive",
                                       prefix="cluster-a", region="eu-west-1",
                                       access_key_id="AKIDEXAMPLE", secret_access_key="s3cr3t")
    assert set(PROPERTY_NAMES) == set(PROPS)
    assert "s3cr3t" not in repr(config)


def test_config_defaults_and_no_bucket() -> None:
    assert ObjectStoreConfig.from_properties({"remote.log.storage.s3.endpoint": "http://x:1"}) is None
    assert ObjectStoreConfig.from_properties({"remote.log.storage.s3.bucket": "  "}) is None
    config = ObjectStoreConfig.from_properties({"remote.log.storage.s3.bucket": "b1", "remote.log.storage.s3.prefix": ""})
    assert config == ObjectStoreConfig(bucket="b1")
    assert (config.endpoint_url, config.prefix, config.region, config.access_key_id, config.secret_access_key) == (
        None, "", "us-east-1", None, None)


def test_config_wants_both_credentials_or_neither() -> None:
    with pytest.raises(ValueError, match="set both or neither"):
        ObjectStoreConfig.from_properties({"remote.log.storage.s3.bucket": "b1",
                                           "remote.log.storage.s3.access.key.id": "AKID"})


# Objects.


def test_put_and_get_bytes(store: ObjectStore, s3_server: S3Server) -> None:
    store.put_bytes("topic-0/00000000000000000000.log", b"segment")
    assert store.get_bytes("topic-0/00000000000000000000.log") == b"segment"
    store.put_bytes("topic-0/00000000000000000000.log", b"replaced")
    assert store.get_bytes("topic-0/00000000000000000000.log") == b"replaced"
    # Under the store's prefix in the bucket.
    raw = raw_client(s3_server.endpoint).get_object(Bucket=store.config.bucket,
                                                    Key="archive/topic-0/00000000000000000000.log")
    assert raw["Body"].read() == b"replaced"


def test_put_file_and_get_to_file(store: ObjectStore, tmp_path: Path) -> None:
    source = tmp_path / "segment.log"
    source.write_bytes(os.urandom(100_000))
    store.put_file("s.log", source)
    target = tmp_path / "back.log"
    store.get_to_file("s.log", target)
    assert target.read_bytes() == source.read_bytes()


def test_put_file_in_parts(make_store: MakeStore, s3_server: S3Server, tmp_path: Path) -> None:
    # S3's smallest part is 5 MiB (moto checks it too): a 5 MiB threshold, an 11 MiB file.
    bucket = new_bucket_name()
    make_store(bucket)
    store = ObjectStore(store_config(s3_server.endpoint, bucket, "p"), multipart_threshold=5 * 1024 * 1024)
    try:
        source = tmp_path / "big.log"
        source.write_bytes(os.urandom(11 * 1024 * 1024))
        store.put_file("big.log", source)
        etag = raw_client(s3_server.endpoint).head_object(Bucket=bucket, Key="p/big.log")["ETag"]
        assert etag.strip('"').rsplit("-", 1)[-1] == "2", f"not a two-part upload: ETag {etag}"
        target = tmp_path / "back.log"
        store.get_to_file("big.log", target)  # ranged GETs in parts, above the threshold
        assert target.read_bytes() == source.read_bytes()
    finally:
        store.close()


def test_get_range(store: ObjectStore) -> None:
    store.put_bytes("k", b"0123456789")
    assert store.get_range("k", 0, 4) == b"0123"
    assert store.get_range("k", 3, 2) == b"34"
    assert store.get_range("k", 9, 1) == b"9"
    assert store.get_range("k", 8, 100) == b"89"  # runs past the end: what there is
    assert store.get_range("k", 10, 5) == b""  # starts at the end
    assert store.get_range("k", 50, 5) == b""  # starts beyond it
    assert store.get_range("k", 4, 0) == b""
    with pytest.raises(ValueError):
        store.get_range("k", -1, 4)


def test_get_range_of_an_empty_object(store: ObjectStore) -> None:
    store.put_bytes("empty", b"")
    assert store.get_bytes("empty") == b""
    assert store.get_range("empty", 0, 10) == b""


def test_missing_key_is_object_not_found(store: ObjectStore, tmp_path: Path) -> None:
    with pytest.raises(ObjectNotFound, match="archive/nope") as caught:
        store.get_bytes("nope")
    assert not caught.value.unreachable
    with pytest.raises(ObjectNotFound):
        store.get_range("nope", 0, 10)
    with pytest.raises(ObjectNotFound):
        store.get_range("nope", 50, 10)  # not mistaken for a range past the end
    target = tmp_path / "nope.log"
    with pytest.raises(ObjectNotFound):
        store.get_to_file("nope", target)
    assert list(tmp_path.iterdir()) == []  # no partial file left


def test_missing_bucket_is_no_object_not_found(s3_server: S3Server, tmp_path: Path) -> None:
    """Keys of a bucket that is gone are a broken store, not missing objects."""
    ghost = ObjectStore(store_config(s3_server.endpoint, new_bucket_name()))
    source = tmp_path / "s.log"
    source.write_bytes(b"segment")
    try:
        # put_file: boto3's S3UploadFailedError around the ClientError, which gives the code.
        for call in (lambda: ghost.get_bytes("k"), lambda: ghost.put_bytes("k", b"v"),
                     lambda: ghost.put_file("k", source)):
            with pytest.raises(ObjectStoreError) as caught:
                call()
            assert type(caught.value) is ObjectStoreError
            assert (caught.value.code, caught.value.unreachable) == ("NoSuchBucket", False)
    finally:
        ghost.close()


# Listing and deleting.


def count_calls(store: ObjectStore, operation: str) -> list[str]:
    """A list that grows by one entry per `operation` request the store's client makes."""
    calls: list[str] = []
    store._client.meta.events.register(f"before-call.s3.{operation}", lambda **_: calls.append(operation))
    return calls


def test_list_keys_in_pages(store: ObjectStore) -> None:
    # 1100 objects put one by one take seconds: small pages instead of S3's 1000 keys a page.
    keys = [f"t-0/{i:05d}.log" for i in range(120)]
    for key in keys:
        store.put_bytes(key, b"x")
    store.put_bytes("t-1/00000.log", b"y")
    lists = count_calls(store, "ListObjectsV2")
    assert store.list_keys("t-0/", page_size=50) == keys
    assert len(lists) == 3
    assert store.list_keys("t-0/0001") == keys[10:20]
    assert store.list_keys("") == [*keys, "t-1/00000.log"]
    assert store.list_keys("t-2/") == []


def test_delete_more_than_a_request_takes(store: ObjectStore) -> None:
    """S3 deletes at most 1000 keys a request (moto takes more, so the requests are counted)."""
    keys = [f"k{i:04d}" for i in range(1100)]  # mostly missing: nothing to put for them
    there = [keys[0], keys[999], keys[1000], keys[1099]]
    for key in [*there, "kept"]:
        store.put_bytes(key, b"x")
    deletes = count_calls(store, "DeleteObjects")
    store.delete_keys(keys)
    assert len(deletes) == 2
    assert store.list_keys("") == ["kept"]


def test_delete_missing_keys_is_no_error(store: ObjectStore) -> None:
    store.put_bytes("a", b"1")
    store.put_bytes("b", b"2")
    store.delete_keys(["a", "never-there"])
    store.delete_keys(["a"])
    store.delete_keys([])
    assert store.list_keys("") == ["b"]
    with pytest.raises(ObjectNotFound):
        store.get_bytes("a")


def test_prefixes_keep_stores_apart(make_store: MakeStore) -> None:
    bucket = new_bucket_name()
    one, sibling, whole = make_store(bucket, "p"), make_store(bucket, "p2/"), make_store(bucket, "")
    one.put_bytes("k", b"one")
    sibling.put_bytes("k", b"sibling")
    sibling.put_bytes("only-p2", b"x")
    # "p" lists "p/...": never the keys of "p2", though "p2/k" starts with "p".
    assert one.list_keys("") == ["k"]
    assert sibling.list_keys("") == ["k", "only-p2"]
    assert (one.get_bytes("k"), sibling.get_bytes("k")) == (b"one", b"sibling")
    with pytest.raises(ObjectNotFound):
        one.get_bytes("only-p2")
    one.delete_keys(["k", "only-p2"])
    assert whole.list_keys("") == ["p2/k", "p2/only-p2"]


# The bucket and the store's health.


def test_check_and_ensure_bucket(make_store: MakeStore, s3_server: S3Server) -> None:
    bucket = new_bucket_name()
    store = ObjectStore(store_config(s3_server.endpoint, bucket))
    try:
        with pytest.raises(ObjectStoreError, match="bucket does not exist") as caught:
            store.check()
        assert not caught.value.unreachable
        assert s3_server.endpoint in str(caught.value) and bucket in str(caught.value)
        store.ensure_bucket()
        store.ensure_bucket()  # an existing bucket is fine
        store.check()
    finally:
        store.close()


def test_ensure_bucket_outside_us_east_1(s3_server: S3Server) -> None:
    """Other regions want a location constraint, and answer BucketAlreadyOwnedByYou to a
    second create (us-east-1 answers 200)."""
    config = dataclasses.replace(store_config(s3_server.endpoint, new_bucket_name()), region="eu-west-1")
    store = ObjectStore(config)
    try:
        store.ensure_bucket()
        store.ensure_bucket()
        store.put_bytes("k", b"v")
        assert store.get_bytes("k") == b"v"
    finally:
        store.close()


@pytest.mark.parametrize("error", [
    botocore.exceptions.EndpointConnectionError(endpoint_url="http://s3:1"),
    botocore.exceptions.ConnectTimeoutError(endpoint_url="http://s3:1"),
    botocore.exceptions.ReadTimeoutError(endpoint_url="http://s3:1"),
    botocore.exceptions.ConnectionClosedError(endpoint_url="http://s3:1"),
])
def test_connection_level_errors_are_unreachable(error: Exception) -> None:
    """Timeouts, which the tests cannot wait for against a real server (the read timeout is
    30 s, retried once), are told apart as a refused connection is."""
    assert object_store._is_unreachable(object_store._root_cause(RetriesExceededError(error)))
    assert not object_store._is_unreachable(botocore.exceptions.NoCredentialsError())


@pytest.mark.timeout(FAIL_FAST_TIMEOUT_S)
def test_unreachable_store_fails_fast(tmp_path: Path) -> None:
    """Nothing listens on the port: every call fails (refused, one retry), and does not hang."""
    endpoint = f"http://127.0.0.1:{free_port()}"
    store = ObjectStore(store_config(endpoint, "archive-bucket"))
    source = tmp_path / "s.log"
    source.write_bytes(b"segment")
    calls: list[Callable[[], object]] = [
        store.check, lambda: store.get_bytes("k"), lambda: store.get_range("k", 0, 1),
        lambda: store.put_bytes("k", b"v"), lambda: store.put_file("k", source),
        lambda: store.get_to_file("k", tmp_path / "back"), lambda: store.list_keys(""),
        lambda: store.delete_keys(["k"]), store.ensure_bucket,
    ]
    try:
        for call in calls:
            with pytest.raises(ObjectStoreError) as caught:
                call()
            assert caught.value.unreachable, caught.value
            assert type(caught.value) is ObjectStoreError
            assert endpoint in str(caught.value)
    finally:
        store.close()
    with pytest.raises(ObjectStoreError, match="unreachable"):
        ObjectStore(store_config(endpoint, "archive-bucket")).check()


@pytest.mark.timeout(60)
def test_stopped_then_restarted_server(tmp_path: Path) -> None:
    """A server of its own (the module's is shared): down, every call fails as unreachable; up
    again, the same store (its client, its pooled connections) works. moto forgets its data
    when stopped, so the bucket is made again."""
    with S3Server(tmp_path / "moto.log") as server:
        store = ObjectStore(store_config(server.endpoint, new_bucket_name(), "archive"))
        try:
            store.ensure_bucket()
            store.put_bytes("k", b"before")
            server.stop()
            for call in (store.check, lambda: store.get_bytes("k"), lambda: store.put_bytes("k", b"v")):
                with pytest.raises(ObjectStoreError) as caught:
                    call()
                assert caught.value.unreachable, caught.value
            server.start()
            store.ensure_bucket()
            assert store.list_keys("") == []  # moto keeps nothing across a restart
            store.put_bytes("k", b"after")
            assert store.get_bytes("k") == b"after"
            store.check()
        finally:
            store.close()
