"""The client's errors: an unreachable broker, and a response's error code as a KafkaError."""

from __future__ import annotations

from protocol.errors import ErrorCode, KafkaError


class BrokerUnreachable(ConnectionError):
    """No connection to a broker; the message is one line for a tool to print."""


def error_for(code: int, message: str | None = None, context: str = "") -> KafkaError:
    """A KafkaError for a response's error code, with a readable message."""
    try:
        error = ErrorCode(code)
    except ValueError:
        error = ErrorCode.UNKNOWN_SERVER_ERROR
    text = message or error.name
    return KafkaError(error, f"{context}: {text}" if context else text)


def check(code: int, message: str | None = None, context: str = "") -> None:
    if code != ErrorCode.NO_ERROR:
        raise error_for(code, message, context)
