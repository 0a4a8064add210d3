"""SASL/PLAIN (RFC 4616) as Kafka's PlainSaslServer checks it.

The users are those of the listener's JAAS configuration (`user_<name>="<password>"` options
of PlainLoginModule), as with Kafka's default PlainServerCallbackHandler. The client sends
`[authzid] NUL username NUL password` in one message; the answer is empty.
"""

from __future__ import annotations

import hmac
from collections.abc import Mapping
from typing import NoReturn

from kbroker.security.sasl_error import SaslError

MECHANISM = "PLAIN"


class PlainServer:
    def __init__(self, users: Mapping[str, str]) -> None:
        self._users = users
        self.username: str | None = None
        self.complete = False

    def evaluate(self, message: bytes) -> bytes:
        tokens = _split(message.decode("utf-8", errors="replace"))
        if len(tokens) != 3:
            _fail(f"Invalid SASL/PLAIN response: expected 3 tokens, got {len(tokens)}")
        authzid, username, password = tokens
        if not username:
            _fail("Authentication failed: username not specified")
        if not password:
            _fail("Authentication failed: password not specified")
        expected = self._users.get(username)
        # Compared in constant time, and a missing user costs the same comparison.
        matches = hmac.compare_digest(password.encode(), (expected if expected is not None else "\0" + password).encode())
        if expected is None or not matches:
            _fail("Authentication failed: Invalid username or password")
        if authzid and authzid != username:
            _fail("Authentication failed: Client requested an authorization id that is different from username")
        self.username = username
        self.complete = True
        return b""


def _fail(message: str) -> NoReturn:
    # Kafka 3.9 tells the client each of these reasons (SaslAuthenticationException).
    raise SaslError(message, message)


def _split(text: str) -> list[str]:
    """At most four NUL-separated tokens, as Kafka's extractTokens reads them (a fourth means too many)."""
    return text.split("\0", 3)


def client_message(username: str, password: str) -> bytes:
    return f"\0{username}\0{password}".encode()
