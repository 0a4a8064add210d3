"""SASL/PLAIN (RFC 4616) as Kafka's PlainSaslServer checks it.

The users are those of the listener's JAAS configuration (`user_<name>="<password>"` options
of PlainLoginModule), as with Kafka's default PlainServerCallbackHandler. The client sends
`[authzid] NUL username NUL password` in one message; the answer is empty.
"""

from __future__ import annotations

import hmac
from collections.abc import Mapping

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
            raise SaslError(f"Invalid SASL/PLAIN response: expected 3 tokens, got {len(tokens)}")
        authzid, username, password = tokens
        if not username:
            raise SaslError("Authentication failed: username not specified")
        if not password:
            raise SaslError("Authentication failed: password not specified")
        expected = self._users.get(username)
        # Compared in constant time, and a missing user costs the same comparison.
        matches = hmac.compare_digest(password.encode(), (expected if expected is not None else "\0" + password).encode())
        if expected is None or not matches:
            message_text = "Authentication failed: Invalid username or password"
            raise SaslError(message_text, message_text)
        if authzid and authzid != username:
            message_text = "Authentication failed: Client requested an authorization id that is different from username"
            raise SaslError(message_text, message_text)
        self.username = username
        self.complete = True
        return b""


def _split(text: str) -> list[str]:
    """At most four NUL-separated tokens, as Kafka's extractTokens reads them (a fourth means too many)."""
    return text.split("\0", 3)


def client_message(username: str, password: str) -> bytes:
    return f"\0{username}\0{password}".encode()
