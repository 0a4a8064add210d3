"""A client's side of SASL (kbroker's tools, and this broker connecting to another): SaslHandshake
v1, then the mechanism's tokens in SaslAuthenticate requests (KIP-152), as the Java client does.

`ClientExchange` is sans-io: `authenticate_sync` and `authenticate_async` drive it over a
connection's request function. The SCRAM key derivation (PBKDF2, thousands of iterations) is
computed once per password and salt and kept, so re-authenticating costs no second derivation.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable
from typing import Any

from kbroker.security import plain, scram
from kbroker.security.sasl_config import PLAIN, SaslCredentials
from kbroker.security.sasl_error import SaslError
from protocol.errors import ErrorCode, KafkaError

SASL_HANDSHAKE = 17
SASL_AUTHENTICATE = 36
HANDSHAKE_VERSION = 1
AUTHENTICATE_VERSION = 2


@functools.lru_cache(maxsize=32)
def _salted_password(mechanism: str, password: str, salt: bytes, iterations: int) -> bytes:
    return scram.MECHANISMS[mechanism].salted_password(password, salt, iterations)


class ClientExchange:
    """The tokens one client sends: `first()`, then `next(server token)` until it returns None."""

    def __init__(self, credentials: SaslCredentials) -> None:
        self.credentials = credentials
        self._scram: scram.ScramClient | None = None
        self._step = 0
        if credentials.mechanism != PLAIN:
            mechanism = scram.MECHANISMS.get(credentials.mechanism)
            if mechanism is None:
                raise SaslError(f"SASL mechanism {credentials.mechanism} is not implemented by kbroker")
            self._scram = scram.ScramClient(
                mechanism, credentials.username, credentials.password,
                lambda salt, i: _salted_password(mechanism.name, credentials.password, salt, i))

    def first(self) -> bytes:
        if self._scram is None:
            return plain.client_message(self.credentials.username, self.credentials.password)
        return self._scram.first()

    def next(self, server_token: bytes) -> bytes | None:
        self._step += 1
        if self._scram is None:
            return None
        if self._step == 1:
            return self._scram.final(server_token)
        self._scram.verify(server_token)
        return None


def _check_handshake(response: Any, mechanism: str) -> None:
    if response.error_code == ErrorCode.UNSUPPORTED_SASL_MECHANISM:
        raise KafkaError(ErrorCode.UNSUPPORTED_SASL_MECHANISM,
                         f"Client SASL mechanism '{mechanism}' not enabled in the server, enabled mechanisms are "
                         f"{list(response.mechanisms)}")
    if response.error_code != ErrorCode.NO_ERROR:
        raise KafkaError(ErrorCode(response.error_code), f"SaslHandshake failed: {ErrorCode(response.error_code).name}")


def _check_token(response: Any) -> bytes:
    if response.error_code != ErrorCode.NO_ERROR:
        raise KafkaError(ErrorCode(response.error_code), response.error_message or ErrorCode(response.error_code).name)
    return bytes(response.auth_bytes)


def authenticate_sync(request: Callable[[int, int, dict[str, Any]], Any], credentials: SaslCredentials) -> int:
    """Authenticate over a blocking connection; returns the session lifetime in ms (0: none).
    A refusal raises KafkaError (SASL_AUTHENTICATION_FAILED, UNSUPPORTED_SASL_MECHANISM, ...)."""
    _check_handshake(request(SASL_HANDSHAKE, HANDSHAKE_VERSION, {"mechanism": credentials.mechanism}),
                     credentials.mechanism)
    exchange = ClientExchange(credentials)
    token: bytes | None = exchange.first()
    while True:
        response = request(SASL_AUTHENTICATE, AUTHENTICATE_VERSION, {"auth_bytes": token})
        token = _next(exchange, _check_token(response))
        if token is None:
            return int(response.session_lifetime_ms)


async def authenticate_async(request: Callable[[int, int, dict[str, Any]], Awaitable[Any]],
                             credentials: SaslCredentials) -> int:
    """`authenticate_sync` for an asyncio connection; the key derivation runs in a thread."""
    _check_handshake(await request(SASL_HANDSHAKE, HANDSHAKE_VERSION, {"mechanism": credentials.mechanism}),
                     credentials.mechanism)
    exchange = ClientExchange(credentials)
    token: bytes | None = exchange.first()
    while True:
        response = await request(SASL_AUTHENTICATE, AUTHENTICATE_VERSION, {"auth_bytes": token})
        server_token = _check_token(response)
        token = await asyncio.to_thread(_next, exchange, server_token)
        if token is None:
            return int(response.session_lifetime_ms)


def _next(exchange: ClientExchange, server_token: bytes) -> bytes | None:
    try:
        return exchange.next(server_token)
    except SaslError as e:
        raise KafkaError(ErrorCode.SASL_AUTHENTICATION_FAILED, str(e)) from None
