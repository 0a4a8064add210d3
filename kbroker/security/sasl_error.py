"""The failure of a SASL exchange, shared by the mechanisms."""

from __future__ import annotations


class SaslError(Exception):
    """The exchange failed. `client_message` is what the client may be told (Kafka's
    SaslAuthenticationException); None means the generic "invalid credentials" answer, because
    the reason (it may tell whether a user exists) only goes to the broker's debug log."""

    def __init__(self, reason: str, client_message: str | None = None) -> None:
        super().__init__(reason)
        self.client_message = client_message
