"""DescribeUserScramCredentials: which SCRAM mechanisms each user has, and their iterations
(never the credentials themselves), with Kafka's answers for empty, repeated and unknown users."""

from __future__ import annotations

from typing import Any

from kbroker.handlers import RequestContext
from kbroker.security.scram import MECHANISMS, ScramCredential
from protocol.errors import ErrorCode

API_KEY = 50
MIN_VERSION = 0
MAX_VERSION = 0


def _described(user: str, credentials: dict[str, ScramCredential]) -> dict[str, Any] | None:
    if not credentials:
        return None
    infos = [{"mechanism": MECHANISMS[name].wire_type, "iterations": credential.iterations}
             for name, credential in credentials.items()]
    return {"user": user, "error_code": ErrorCode.NO_ERROR, "error_message": None, "credential_infos": infos}


def _error(user: str, code: int, message: str) -> dict[str, Any]:
    return {"user": user, "error_code": code, "error_message": message, "credential_infos": []}


async def handle(ctx: RequestContext, request: Any) -> dict[str, Any]:
    credentials = ctx.broker.credentials  # held in memory: a describe never waits on the store
    names = [entry.name for entry in request.users] if request.users else []
    results: list[dict[str, Any]] = []
    if not names:  # null or empty: every user that has a SCRAM credential, sorted
        for user in credentials.users():
            described = _described(user, credentials.of(user))
            if described is not None:
                results.append(described)
    else:
        seen: set[str] = set()
        for user in names:  # one answer per distinct user, in the order asked
            if user in seen:
                continue
            seen.add(user)
            if not user:
                results.append(_error(user, ErrorCode.RESOURCE_NOT_FOUND, "Username must not be empty"))
            elif names.count(user) > 1:
                results.append(_error(user, ErrorCode.DUPLICATE_RESOURCE, "Cannot describe SCRAM credentials for "
                                      f"the same user twice in a single request: {user}"))
            else:
                described = _described(user, credentials.of(user))
                results.append(described or _error(user, ErrorCode.RESOURCE_NOT_FOUND,
                                                   f"Attempt to describe a user credential that does not exist: {user}"))
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NO_ERROR, "error_message": None, "results": results}
