"""AlterUserScramCredentials: create, replace or delete users' SCRAM credentials (KIP-554).

The client sends the salt and the salted password (PBKDF2 of the password, computed client
side), never the password; the broker keeps only the stored and server keys derived from it, in
the metadata store, where every broker's credential cache picks them up. Checks and answers are
Kafka's (ZkAdminManager.alterUserScramCredentials): per user, an empty name, an unknown mechanism
or iterations outside [4096, 16384] fail that user; the same (user, mechanism) twice is
DUPLICATE_RESOURCE; deleting a credential that does not exist is RESOURCE_NOT_FOUND; a user's
changes are written together or not at all.

There is no authorization yet (ACLs are not built): any client of any listener may call it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kbroker.handlers import RequestContext
from kbroker.security.scram import BY_WIRE_TYPE, MAX_ITERATIONS, MIN_ITERATIONS, ScramCredential
from protocol.errors import ErrorCode, KafkaError

API_KEY = 51
MIN_VERSION = 0
MAX_VERSION = 0

UNKNOWN_MECHANISM = "Unknown SCRAM mechanism"
EMPTY_USER = "Username must not be empty"


def _result(user: str, code: int = ErrorCode.NO_ERROR, message: str | None = None) -> dict[str, Any]:
    return {"user": user, "error_code": code, "error_message": message}


def _illegal(upsertions: list[Any], deletions: list[Any]) -> dict[str, tuple[int, str]]:
    """user -> (error code, message) for the changes Kafka refuses before reading anything."""
    problems: dict[str, tuple[int, str]] = {}
    for deletion in deletions:
        if not deletion.name:
            problems[deletion.name] = (ErrorCode.UNACCEPTABLE_CREDENTIAL, EMPTY_USER)
        elif deletion.mechanism not in BY_WIRE_TYPE:
            problems[deletion.name] = (ErrorCode.UNSUPPORTED_SASL_MECHANISM, UNKNOWN_MECHANISM)
    for upsertion in upsertions:
        if not upsertion.name:
            problems[upsertion.name] = (ErrorCode.UNACCEPTABLE_CREDENTIAL, EMPTY_USER)
        elif upsertion.mechanism not in BY_WIRE_TYPE:
            problems[upsertion.name] = (ErrorCode.UNSUPPORTED_SASL_MECHANISM, UNKNOWN_MECHANISM)
        elif upsertion.iterations < MIN_ITERATIONS:
            problems[upsertion.name] = (ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too few iterations")
        elif upsertion.iterations > MAX_ITERATIONS:
            problems[upsertion.name] = (ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too many iterations")
    return problems


def _edit(deletions: list[Any], upsertions: list[Any]) -> Callable[[dict[str, str]], dict[str, str]]:
    """One user's changes, applied to its stored configs: all of them, or none."""
    def edit(configs: dict[str, str]) -> dict[str, str]:
        if any(BY_WIRE_TYPE[d.mechanism].name not in configs for d in deletions):
            raise KafkaError(ErrorCode.RESOURCE_NOT_FOUND, "Attempt to delete a user credential that does not exist")
        for deletion in deletions:
            del configs[BY_WIRE_TYPE[deletion.mechanism].name]
        for upsertion in upsertions:
            mechanism = BY_WIRE_TYPE[upsertion.mechanism]
            credential = ScramCredential.from_salted_password(mechanism, bytes(upsertion.salt),
                                                              bytes(upsertion.salted_password), upsertion.iterations)
            configs[mechanism.name] = credential.to_text()
        return configs
    return edit


async def handle(ctx: RequestContext, request: Any) -> dict[str, Any]:
    broker = ctx.broker
    upsertions, deletions = list(request.upsertions), list(request.deletions)
    illegal = _illegal(upsertions, deletions)
    results = [_result(user, code, message) for user, (code, message) in illegal.items()]
    pairs = [(c.name, c.mechanism) for c in (*upsertions, *deletions) if c.name not in illegal]
    duplicated = {user for user, mechanism in pairs if pairs.count((user, mechanism)) > 1}
    results += [_result(user, ErrorCode.DUPLICATE_RESOURCE, "A user credential cannot be altered twice in the same "
                        "request") for user in sorted(duplicated)]
    users = list(dict.fromkeys(user for user, _ in pairs if user not in duplicated))
    for user in users:
        try:
            await broker.credentials.alter(user, _edit([d for d in deletions if d.name == user],
                                                       [u for u in upsertions if u.name == user]))
        except KafkaError as e:
            results.append(_result(user, e.code, e.message))
            continue
        results.append(_result(user))
    return {"throttle_time_ms": 0, "results": results}
