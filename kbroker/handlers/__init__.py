"""Request handlers: one module per API, each a thin function from request to response.

A handler module defines `API_KEY`, the version range it serves (`MIN_VERSION`,
`MAX_VERSION`), optionally `ADVERTISED_MIN` when ApiVersions must advertise older
versions than it serves (as Kafka 3.9 does) or `ADVERTISED = False` when ApiVersions must not
list it at all (brokers' APIs at unreleased versions), and `async def handle(ctx, request)`
returning the response body (a mapping), or None for no response (acks=0).
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Awaitable
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING, Any

from kbroker.clock import wall_clock_ms
from kbroker.log_limiter import RateLimitedLog
from kbroker.pacing import ENTRIES_PER_TURN, Pacer, each  # noqa: F401 - the handlers' toolkit
from protocol.connection import Request, RequestHeader
from protocol.errors import ErrorCode, KafkaError

if TYPE_CHECKING:
    from kbroker.broker import Broker


@dataclass(slots=True)
class RequestContext:
    broker: Broker
    header: RequestHeader
    peer: str
    listener: str = "PLAINTEXT"  # the listener the request came in on: answers give its addresses
    principal: str = "User:ANONYMOUS"  # who sent it (a TLS client's certificate subject)
    host: str = ""  # the client's address, which ACLs may name
    size: int = 0  # the request's size in bytes (without its size prefix), which byte-rate quotas count
    # Set by a handler whose client exceeded its quota: the connection reads nothing more from
    # the client for this long after the answer (Kafka's channel muting, KIP-219).
    throttle_ms: int = 0
    # Requests brokers send each other (a follower's fetch) are not charged to request quotas.
    exempt_from_request_quota: bool = False

    @property
    def version(self) -> int:
        return self.header.api_version

    @staticmethod
    def now_ms() -> int:
        return wall_clock_ms()

    def fenced_code(self, code: int, known_since: int) -> int:
        """PRODUCER_FENCED as this request's version knows it: older versions of the
        transaction APIs (below `known_since`) get INVALID_PRODUCER_EPOCH, as Kafka answers."""
        if code == ErrorCode.PRODUCER_FENCED and self.version < known_since:
            return ErrorCode.INVALID_PRODUCER_EPOCH
        return code


@dataclass(slots=True)
class HandlerResult:
    body: Any = None
    version: int | None = None  # answer at another version than asked (ApiVersions fallback)
    close: bool = False
    reason: str = ""
    pending: Awaitable[Any] | None = None  # the body, once it is ready (see Deferred)


@dataclass(slots=True)
class Deferred:
    """What a handler returns when its work is done but its answer waits on others (an acks=all
    Produce appended, waiting for the ISR): the connection goes on with the next request and
    sends this answer when `body` completes, still in request order."""

    body: Awaitable[Any]


log = logging.getLogger("kbroker.handlers")
_limited = RateLimitedLog(log)
PRODUCE_KEY = 0


class CloseConnection(Exception):
    """Raised by a handler when Kafka would drop the connection instead of answering."""


# Every API this broker answers; a module per API, named after it.
HANDLER_MODULES = (
    "add_offsets_to_txn",
    "add_partitions_to_txn",
    "alter_client_quotas",
    "alter_configs",
    "alter_partition_reassignments",
    "alter_replica_log_dirs",
    "alter_share_group_offsets",
    "alter_user_scram_credentials",
    "api_versions",
    "consumer_group_describe",
    "consumer_group_heartbeat",
    "create_acls",
    "create_partitions",
    "create_topics",
    "delete_acls",
    "delete_groups",
    "delete_records",
    "delete_share_group_offsets",
    "delete_share_group_state",
    "delete_topics",
    "describe_acls",
    "describe_archive",
    "describe_client_quotas",
    "describe_cluster",
    "describe_configs",
    "describe_delayed",
    "describe_groups",
    "describe_log_dirs",
    "describe_producers",
    "describe_share_group_offsets",
    "describe_topic_partitions",
    "describe_transactions",
    "describe_user_scram_credentials",
    "elect_leaders",
    "end_txn",
    "fetch",
    "find_coordinator",
    "heartbeat",
    "incremental_alter_configs",
    "init_producer_id",
    "initialize_share_group_state",
    "join_group",
    "leave_group",
    "list_groups",
    "list_offsets",
    "list_partition_reassignments",
    "list_transactions",
    "metadata",
    "offset_commit",
    "offset_delete",
    "offset_fetch",
    "offset_for_leader_epoch",
    "produce",
    "read_share_group_state",
    "sasl_authenticate",
    "sasl_handshake",
    "share_acknowledge",
    "share_fetch",
    "share_group_describe",
    "share_group_heartbeat",
    "sync_group",
    "txn_offset_commit",
    "write_share_group_state",
    "write_txn_markers",
)


def _registry() -> dict[int, ModuleType]:
    modules = [importlib.import_module(f"kbroker.handlers.{name}") for name in HANDLER_MODULES]
    return {m.API_KEY: m for m in modules}


HANDLERS: dict[int, ModuleType] = {}


def handlers() -> dict[int, ModuleType]:
    if not HANDLERS:
        HANDLERS.update(_registry())
    return HANDLERS


def advertised_versions() -> list[tuple[int, int, int]]:
    """(api key, min, max) for ApiVersions, sorted by key. An API whose module says
    `ADVERTISED = False` is served but not listed (inter-broker APIs at unreleased versions)."""
    return sorted(
        (key, getattr(m, "ADVERTISED_MIN", m.MIN_VERSION), m.MAX_VERSION) for key, m in handlers().items()
        if getattr(m, "ADVERTISED", True)
    )


async def dispatch(ctx: RequestContext, request: Request) -> HandlerResult:
    header = request.header
    module = handlers().get(header.api_key)
    if module is None or not module.MIN_VERSION <= header.api_version <= module.MAX_VERSION:
        if header.api_key == 18:
            from kbroker.handlers import api_versions

            return api_versions.unsupported_version_response()
        return HandlerResult(close=True, reason=f"unsupported api {header.api_key} v{header.api_version}")
    if request.body is None:
        return HandlerResult(close=True, reason=f"no schema for api {header.api_key} v{header.api_version}")
    try:
        body = await module.handle(ctx, request.body)
    except CloseConnection as e:
        return HandlerResult(close=True, reason=str(e))
    except KafkaError as e:  # the request as a whole failed: Kafka's error answer says why
        return failed(request, module, e.code, e.message)
    except Exception:  # a handler bug costs this request an error answer, not the broker or the client's wait
        _limited.exception(f"handler-{header.api_key}", "handler of %s v%d failed for client %s",
                           request.api.NAME if request.api else header.api_key, header.api_version, ctx.peer)
        return failed(request, module, ErrorCode.UNKNOWN_SERVER_ERROR, None)
    if isinstance(body, Deferred):
        return HandlerResult(pending=body.body)
    return HandlerResult(body=body)


def failed(request: Request, module: ModuleType | None, code: int, message: str | None) -> HandlerResult:
    """The error answer to `request`, or a close where Kafka sends none (a Produce with acks=0)
    or where no answer can be built."""
    from kbroker.handlers.error_answers import error_answer

    header = request.header
    if request.api is None or request.body is None:
        return HandlerResult(close=True, reason=f"cannot answer api {header.api_key} v{header.api_version}")
    if header.api_key == PRODUCE_KEY and request.body.get("acks") == 0:
        return HandlerResult(close=True, reason=f"produce with acks=0 failed: {message or code}")
    try:
        body = error_answer(request.api, module, header.api_version, request.body, code, message)
    except Exception:
        _limited.exception(f"error-answer-{header.api_key}", "building the error answer of api %d v%d failed",
                           header.api_key, header.api_version)
        return HandlerResult(close=True, reason="no error answer could be built")
    return HandlerResult(body=body)
