"""The archive's object store: a bucket (and a key prefix in it) of any S3-compatible service.

`ObjectStore` is blocking: the archive runs its calls in worker threads, never on the event
loop. One boto3 client serves every thread (boto3 clients are thread-safe; sessions are not,
so the client comes from a session of its own, made once). Its timeouts are short and it
retries once, so an unreachable store shows as an `ObjectStoreError` within seconds instead of
a worker stuck for minutes. Every botocore or boto3 exception leaves this module translated
into `ObjectStoreError` or `ObjectNotFound`; `unreachable` tells a store that did not answer
from one that answered with an error.
"""

from __future__ import annotations

import io
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import boto3
import boto3.exceptions
import botocore.exceptions
from boto3.s3.transfer import TransferConfig
from botocore.config import Config

ENDPOINT = "remote.log.storage.s3.endpoint"
BUCKET = "remote.log.storage.s3.bucket"
PREFIX = "remote.log.storage.s3.prefix"
REGION = "remote.log.storage.s3.region"
ACCESS_KEY_ID = "remote.log.storage.s3.access.key.id"
SECRET_ACCESS_KEY = "remote.log.storage.s3.secret.access.key"
PROPERTY_NAMES = (ENDPOINT, BUCKET, PREFIX, REGION, ACCESS_KEY_ID, SECRET_ACCESS_KEY)

DEFAULT_REGION = "us-east-1"
# Files above this go up in parts (and come down in ranged parts); below, in one request.
MULTIPART_THRESHOLD = 64 * 1024 * 1024
# Threads of one multipart transfer: the archive already runs transfers side by side, and
# the broker's host has few cores to spare.
TRANSFER_CONCURRENCY = 4
# S3's own limits: keys per ListObjectsV2 page and per DeleteObjects request.
MAX_PAGE_SIZE = 1000
DELETE_BATCH = 1000

CONNECT_TIMEOUT_S = 5
READ_TIMEOUT_S = 30
# Two attempts in all: a dropped connection is retried once, a store that is down fails fast.
RETRIES = {"max_attempts": 2, "mode": "standard"}

# S3 error codes (or bare HTTP statuses, which is all a HEAD's error has) of an absent object.
_NOT_FOUND_CODES = frozenset({"NoSuchKey", "404", "NotFound"})


class ObjectStoreError(Exception):
    """A failed object store call. `unreachable`: no answer at all (connection refused or
    reset, a timeout, a TLS failure), as opposed to an error the store answered with.
    `code`: the store's error code (`AccessDenied`, `NoSuchBucket`, `403`...), if it answered."""

    def __init__(self, message: str, *, unreachable: bool = False, code: str | None = None) -> None:
        super().__init__(message)
        self.unreachable = unreachable
        self.code = code


class ObjectNotFound(ObjectStoreError):
    """The key has no object (the bucket itself exists, as far as the store said)."""


def _optional(props: Mapping[str, str], name: str) -> str | None:
    """A property's value, None when absent or blank (a blank line in a properties file)."""
    value = props.get(name, "").strip()
    return value or None


@dataclass(frozen=True, kw_only=True)
class ObjectStoreConfig:
    """Where the archive's objects live. `endpoint_url` None: AWS S3 itself (its regional
    endpoint); credentials None: boto3's default chain (environment, ~/.aws, instance role)."""

    endpoint_url: str | None = None
    bucket: str
    prefix: str = ""
    region: str = DEFAULT_REGION
    access_key_id: str | None = None
    # Kept out of repr: configs end up in logs and error messages.
    secret_access_key: str | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if not self.bucket:
            raise ValueError("the object store needs a bucket")
        if (self.access_key_id is None) != (self.secret_access_key is None):
            # boto3 would only fail at the first call, with PartialCredentialsError.
            raise ValueError(f"{ACCESS_KEY_ID} and {SECRET_ACCESS_KEY} go together: set both or neither")
        # "a/" and "/a" mean the prefix "a": keys are joined with one "/".
        object.__setattr__(self, "prefix", self.prefix.strip("/"))

    @classmethod
    def from_properties(cls, props: Mapping[str, str]) -> ObjectStoreConfig | None:
        """The config of the broker properties `PROPERTY_NAMES`; None without a bucket (no archive)."""
        bucket = _optional(props, BUCKET)
        if bucket is None:
            return None
        return cls(
            bucket=bucket,
            prefix=_optional(props, PREFIX) or "",
            endpoint_url=_optional(props, ENDPOINT),
            region=_optional(props, REGION) or DEFAULT_REGION,
            access_key_id=_optional(props, ACCESS_KEY_ID),
            secret_access_key=_optional(props, SECRET_ACCESS_KEY),
        )

    @property
    def where(self) -> str:
        """The store and bucket, for error messages."""
        endpoint = self.endpoint_url or f"AWS S3 ({self.region})"
        return f"{endpoint}, bucket {self.bucket!r}"


def _root_cause(exc: BaseException) -> BaseException:
    """The botocore exception under boto3's transfer wrappers (S3UploadFailedError is raised
    while handling the ClientError; RetriesExceededError carries the last one)."""
    seen: set[int] = set()
    while not isinstance(exc, botocore.exceptions.BotoCoreError | botocore.exceptions.ClientError):
        seen.add(id(exc))
        inner = getattr(exc, "last_exception", None) or exc.__cause__ or exc.__context__
        if inner is None or id(inner) in seen:
            break
        exc = inner
    return exc


def _error_code(exc: BaseException) -> str | None:
    if isinstance(exc, botocore.exceptions.ClientError):
        return str(exc.response.get("Error", {}).get("Code", "")) or None
    return None


def _is_unreachable(exc: BaseException) -> bool:
    # ConnectionError: refused, DNS, connect timeout, proxy, TLS. HTTPClientError: read
    # timeout, connection closed mid-answer.
    return isinstance(exc, botocore.exceptions.ConnectionError | botocore.exceptions.HTTPClientError)


_CAUGHT = (botocore.exceptions.BotoCoreError, botocore.exceptions.ClientError, boto3.exceptions.Boto3Error)


class _FileTail(io.RawIOBase):
    """A file from `start` on, as a seekable file of its own (what boto3's uploads read)."""

    def __init__(self, path: Path, start: int) -> None:
        super().__init__()
        self._file = path.open("rb")
        self._start = start
        self._file.seek(start)

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        return self._file.readinto(buffer)

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        if whence == io.SEEK_SET:
            offset += self._start
        return self._file.seek(offset, whence) - self._start

    def tell(self) -> int:
        return self._file.tell() - self._start

    def close(self) -> None:
        self._file.close()
        super().close()


class ObjectStore:
    """Objects under `config.prefix` in `config.bucket`. Keys given to and returned by the
    methods are relative to the prefix. Thread-safe; every call blocks."""

    def __init__(self, config: ObjectStoreConfig, *, multipart_threshold: int = MULTIPART_THRESHOLD) -> None:
        self.config = config
        self._client = self._make_client(config)
        self._transfer = TransferConfig(multipart_threshold=multipart_threshold,
                                        max_concurrency=TRANSFER_CONCURRENCY)

    @staticmethod
    def _make_client(config: ObjectStoreConfig) -> Any:
        # Path-style addressing for other services (MinIO, Ceph, moto...): bucket-named host
        # names (virtual-hosted style) rarely resolve there. AWS picks its own.
        s3 = {"addressing_style": "path"} if config.endpoint_url else None
        # Checksums only where S3 requires them: since botocore 1.36 every request carries a
        # CRC32 by default, which several S3-compatible services refuse.
        botocore_config = Config(connect_timeout=CONNECT_TIMEOUT_S, read_timeout=READ_TIMEOUT_S,
                                 retries=dict(RETRIES), s3=s3, request_checksum_calculation="when_required",
                                 response_checksum_validation="when_required")
        return boto3.session.Session().client(
            "s3", endpoint_url=config.endpoint_url, region_name=config.region,
            aws_access_key_id=config.access_key_id, aws_secret_access_key=config.secret_access_key,
            config=botocore_config)

    def close(self) -> None:
        """Close the client's pooled connections."""
        self._client.close()

    # Keys.

    def _full_key(self, key: str) -> str:
        prefix = self.config.prefix
        return f"{prefix}/{key}" if prefix else key

    def _object_key(self, key: str) -> str:
        if not key:
            raise ValueError("an object key must not be empty")
        return self._full_key(key)

    def _relative_key(self, full_key: str) -> str:
        prefix = self.config.prefix
        return full_key[len(prefix) + 1:] if prefix else full_key

    @contextmanager
    def _errors(self, action: str, key: str | None = None) -> Iterator[None]:
        """Translate what boto3 raises within into ObjectStoreError, or ObjectNotFound for an
        object call (`key` given) of a missing key."""
        try:
            yield
        except _CAUGHT as exc:
            cause = _root_cause(exc)
            code = _error_code(cause)
            what = f"{action} {self._full_key(key)!r}" if key is not None else action
            message = f"object store {self.config.where}: {what} failed: {cause}"
            if key is not None and code in _NOT_FOUND_CODES:
                raise ObjectNotFound(message, code=code) from exc
            raise ObjectStoreError(message, unreachable=_is_unreachable(cause), code=code) from exc

    # Writes.

    def put_file(self, key: str, path: Path, start: int = 0) -> None:
        """Upload a file, or its bytes from `start` on (in parts above the multipart threshold)."""
        full_key = self._object_key(key)
        with self._errors("upload to", key):
            if start == 0:
                self._client.upload_file(str(path), self.config.bucket, full_key, Config=self._transfer)
                return
            with _FileTail(path, start) as tail:
                self._client.upload_fileobj(tail, self.config.bucket, full_key, Config=self._transfer)

    def put_bytes(self, key: str, data: bytes) -> None:
        full_key = self._object_key(key)
        with self._errors("put", key):
            self._client.put_object(Bucket=self.config.bucket, Key=full_key, Body=data)

    # Reads.

    def get_range(self, key: str, start: int, length: int) -> bytes:
        """`length` bytes from `start`: fewer where the object ends first, b"" from its end on."""
        if start < 0 or length < 0:
            raise ValueError(f"a range needs start >= 0 and length >= 0, not {start}, {length}")
        full_key = self._object_key(key)
        if length == 0:
            return b""  # "bytes=s-(s-1)" is no valid range
        try:
            with self._errors("get", key):
                answer = self._client.get_object(Bucket=self.config.bucket, Key=full_key,
                                                 Range=f"bytes={start}-{start + length - 1}")
                return answer["Body"].read()
        except ObjectStoreError as exc:
            # 416: the range starts at or past the end (of an existing object: a missing one
            # answers NoSuchKey). Any start within the object is served, cut at its end.
            if exc.code == "InvalidRange":
                return b""
            raise

    def get_bytes(self, key: str) -> bytes:
        full_key = self._object_key(key)
        with self._errors("get", key):
            answer = self._client.get_object(Bucket=self.config.bucket, Key=full_key)
            return answer["Body"].read()

    def get_to_file(self, key: str, path: Path) -> None:
        """Download into `path` (boto3 writes a temporary file beside it and renames it, so a
        failed download leaves no partial `path`). It starts with a HEAD, whose 404 has no body:
        a missing bucket shows here as ObjectNotFound too."""
        full_key = self._object_key(key)
        with self._errors("download", key):
            self._client.download_file(self.config.bucket, full_key, str(path), Config=self._transfer)

    def list_keys(self, prefix: str, page_size: int = MAX_PAGE_SIZE) -> list[str]:
        """Every key starting with `prefix` (relative keys, in the store's order: UTF-8
        binary order on S3), through all pages of `page_size` keys."""
        if not 1 <= page_size <= MAX_PAGE_SIZE:
            raise ValueError(f"page_size must be within 1..{MAX_PAGE_SIZE}, not {page_size}")
        # With a store prefix "p", "" lists "p/": never the keys of a sibling prefix "p2".
        full_prefix = self._full_key(prefix)
        paginator = self._client.get_paginator("list_objects_v2")
        keys: list[str] = []
        with self._errors(f"list {full_prefix!r}"):
            pages = paginator.paginate(Bucket=self.config.bucket, Prefix=full_prefix,
                                       PaginationConfig={"PageSize": page_size})
            for page in pages:
                keys.extend(self._relative_key(item["Key"]) for item in page.get("Contents", ()))
        return keys

    # Deletes.

    def delete_keys(self, keys: Sequence[str]) -> None:
        """Delete the objects of `keys` (missing ones are no error), 1000 per request."""
        full_keys = [self._object_key(key) for key in keys]
        for i in range(0, len(full_keys), DELETE_BATCH):
            self._delete_batch(full_keys[i:i + DELETE_BATCH])

    def _delete_batch(self, full_keys: list[str]) -> None:
        with self._errors(f"delete {len(full_keys)} objects"):
            answer = self._client.delete_objects(
                Bucket=self.config.bucket,
                Delete={"Objects": [{"Key": key} for key in full_keys], "Quiet": True})
        # DeleteObjects answers 200 and lists the keys it could not delete (AccessDenied...).
        errors = answer.get("Errors") or []
        if errors:
            first = errors[0]
            raise ObjectStoreError(
                f"object store {self.config.where}: {len(errors)} of {len(full_keys)} deletes failed, "
                f"the first {first.get('Key')!r}: {first.get('Code')} {first.get('Message')}",
                code=first.get("Code"))

    # The bucket.

    def check(self) -> None:
        """Raise ObjectStoreError unless the bucket exists and the credentials may use it."""
        try:
            self._client.head_bucket(Bucket=self.config.bucket)
        except _CAUGHT as exc:
            cause = _root_cause(exc)
            code, unreachable = _error_code(cause), _is_unreachable(cause)
            raise ObjectStoreError(f"{self._check_problem(code, unreachable)}: {cause}",
                                   unreachable=unreachable, code=code) from exc

    def _check_problem(self, code: str | None, unreachable: bool) -> str:
        # A HEAD's error has no body: its code is the bare HTTP status.
        where = self.config.where
        if unreachable:
            return f"the object store {where} is unreachable"
        if code in ("404", "NoSuchBucket", "NotFound"):
            return f"the object store {where}: the bucket does not exist"
        if code in ("403", "AccessDenied", "Forbidden"):
            return f"the object store {where} refuses access to the bucket (its credentials?)"
        return f"the object store {where} answered with an error"

    def ensure_bucket(self) -> None:
        """Create the bucket unless it exists (tests and local setups; production buckets are
        made by their owners, with their policies)."""
        request: dict[str, Any] = {"Bucket": self.config.bucket}
        if self.config.region != DEFAULT_REGION:
            # us-east-1 is the one region that takes (and wants) no location constraint.
            request["CreateBucketConfiguration"] = {"LocationConstraint": self.config.region}
        try:
            with self._errors("create the bucket"):
                self._client.create_bucket(**request)
        except ObjectStoreError as exc:
            if exc.code != "BucketAlreadyOwnedByYou":
                raise
