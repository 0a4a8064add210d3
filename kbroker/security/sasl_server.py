"""The SASL state of one connection on a SASL listener, as Kafka's SaslServerAuthenticator keeps it.

Sans-io: the connection decodes each request and asks `admit()` what to do with it; SaslHandshake
and SaslAuthenticate are then answered here (`handshake()`, `authenticate()`), raw tokens after
a v0 handshake by `raw_token()`. Kafka's rules:

- Before authentication only ApiVersions (once) and SaslHandshake are served; any other request
  closes the connection without an answer.
- SaslHandshake with a mechanism the listener does not enable: UNSUPPORTED_SASL_MECHANISM with
  the enabled ones, then the connection closes.
- After a v1 handshake the tokens come in SaslAuthenticate requests (KIP-152); any other request
  gets its error answer with ILLEGAL_SASL_STATE and the connection closes. After a v0 handshake
  each token is a bare size-prefixed frame.
- A failed exchange answers SASL_AUTHENTICATION_FAILED (with the generic "invalid credentials"
  message unless the mechanism has a message for the client) and closes; after a v0 handshake
  it just closes.
- Re-authentication (KIP-368): with `connections.max.reauth.ms` the session lasts that long; its
  length goes to the client (SaslAuthenticate v1+ `session_lifetime_ms`). A SaslHandshake on an
  authenticated connection starts a new exchange, at most once a second, with the same
  mechanism and ending in the same principal. A request after the session expired closes the
  connection.
"""

from __future__ import annotations

import enum
import logging
import re
from collections.abc import Callable
from typing import Any

from kbroker.security import plain, scram
from kbroker.security.sasl_config import PLAIN, SaslListenerSettings
from kbroker.security.sasl_error import SaslError
from protocol.errors import ErrorCode
from protocol.messages import BY_KEY

log = logging.getLogger("kbroker.sasl")

API_VERSIONS = 18
SASL_HANDSHAKE = 17
SASL_AUTHENTICATE = 36
MIN_REAUTH_INTERVAL_S = 1.0  # Kafka's KafkaChannel.MIN_REAUTH_INTERVAL_ONE_SECOND_NANOS

ScramLookup = Callable[[str, str], "scram.ScramCredential | None"]  # (mechanism, user) -> credential


class Admission(enum.Enum):
    SERVE = "serve"  # dispatch the request as usual
    SASL = "sasl"  # a handshake or token for this session: answer with handshake() / authenticate()
    CLOSE = "close"  # close without an answer
    ILLEGAL_STATE = "illegal"  # answer the request's error with ILLEGAL_SASL_STATE, then close


class _State(enum.Enum):
    INITIAL = "initial"  # SaslHandshake or ApiVersions
    HANDSHAKE = "handshake"  # ApiVersions answered: SaslHandshake next
    AUTHENTICATE = "authenticate"  # tokens
    BAD_MECHANISM = "bad mechanism"  # re-authentication asked for another mechanism: the next token fails
    COMPLETE = "complete"
    FAILED = "failed"


def _api_name(api_key: int) -> str:
    """Kafka's ApiKeys name of an API (METADATA, LIST_OFFSETS, ...)."""
    api = BY_KEY.get(api_key)
    return re.sub(r"(?<!^)(?=[A-Z])", "_", api.NAME).upper() if api is not None else f"api key {api_key}"


class SaslSession:
    def __init__(self, settings: SaslListenerSettings, scram_credentials: ScramLookup,
                 api_versions_range: tuple[int, int] = (0, 4)) -> None:
        self.settings = settings
        self._api_versions_range = api_versions_range  # the ApiVersions versions the broker serves
        self._scram_credentials = scram_credentials
        self._state = _State.INITIAL
        self.raw_tokens = False  # a v0 handshake: tokens without Kafka request headers
        self.mechanism: str | None = None
        self.principal: str | None = None  # User:<name> once authenticated
        self._server: scram.ScramServer | plain.PlainServer | None = None
        self.expires_at: float | None = None  # monotonic seconds; None: the session never expires
        self._reauth_started: float | None = None
        self._previous: tuple[str, str] | None = None  # (mechanism, principal) while re-authenticating
        self.client_supports_reauth = False  # it sent SaslAuthenticate v1+

    # -- what the connection asks ---------------------------------------------------------------

    @property
    def authenticated(self) -> bool:
        return self._state is _State.COMPLETE

    @property
    def expects_raw_token(self) -> bool:
        return self.raw_tokens and self._state in (_State.AUTHENTICATE, _State.BAD_MECHANISM)

    @property
    def reauthenticating(self) -> bool:
        return self._previous is not None

    def expired(self, now: float) -> bool:
        return self.expires_at is not None and now > self.expires_at

    def admit(self, api_key: int, api_version: int, now: float) -> tuple[Admission, str]:
        """What to do with a request: see Admission. The reason names why a connection closes."""
        state = self._state
        if state is _State.COMPLETE:
            if self.expired(now):
                return Admission.CLOSE, "its SASL session expired (connections.max.reauth.ms) without re-authentication"
            if api_key == SASL_HANDSHAKE and self._may_reauthenticate(now):
                self._begin_reauthentication(now)
                return Admission.SASL, ""
            return Admission.SERVE, ""
        if state in (_State.INITIAL, _State.HANDSHAKE):
            if api_key == SASL_HANDSHAKE:
                return Admission.SASL, ""
            if api_key == API_VERSIONS and state is _State.INITIAL:
                low, high = self._api_versions_range
                if low <= api_version <= high:
                    self._state = _State.HANDSHAKE  # an unsupported version may be retried with another
                return Admission.SERVE, ""
            return Admission.CLOSE, f"Unexpected Kafka request of type {_api_name(api_key)} during SASL handshake."
        if state is _State.AUTHENTICATE and api_key == SASL_AUTHENTICATE and not self.raw_tokens:
            return Admission.SASL, ""
        if state is _State.AUTHENTICATE and not self.raw_tokens:
            return Admission.ILLEGAL_STATE, \
                f"Unexpected Kafka request of type {_api_name(api_key)} during SASL authentication."
        return Admission.CLOSE, f"a request in SASL state {state.value}"

    # -- the exchange ---------------------------------------------------------------------------

    def handshake(self, version: int, mechanism: str) -> tuple[dict[str, Any], bool]:
        """The SaslHandshake answer, and whether the connection closes after it."""
        enabled = list(self.settings.mechanisms)
        if mechanism not in enabled:
            log.debug("SASL mechanism '%s' requested by client is not supported", mechanism)
            self._state = _State.FAILED
            return {"error_code": ErrorCode.UNSUPPORTED_SASL_MECHANISM, "mechanisms": enabled}, True
        self.raw_tokens = version == 0
        if self._previous is not None and self._previous[0] != mechanism:
            log.debug("SASL mechanism '%s' requested by client is not supported for re-authentication of "
                      "mechanism '%s'", mechanism, self._previous[0])
            self._state = _State.BAD_MECHANISM
        else:
            self.mechanism = mechanism
            self._server = self._new_server(mechanism)
            self._state = _State.AUTHENTICATE
        return {"error_code": ErrorCode.NO_ERROR, "mechanisms": enabled}, False

    def authenticate(self, version: int, token: bytes, now: float) -> tuple[dict[str, Any] | None, bool]:
        """The SaslAuthenticate answer to one token (None: close without one), and whether the
        connection closes after it."""
        self.client_supports_reauth = self.client_supports_reauth or version > 0
        if self._state is _State.BAD_MECHANISM:  # Kafka fails this without an answer
            self._state = _State.FAILED
            return None, True
        try:
            response, lifetime_ms = self._evaluate(token, now)
        except SaslError as e:
            self._state = _State.FAILED
            log.debug("SASL %s failed: %s", self._stage, e)
            message = e.client_message or scram.invalid_credentials_message(self.mechanism or "", self.reauthenticating)
            return {"error_code": ErrorCode.SASL_AUTHENTICATION_FAILED, "error_message": message}, True
        return {"error_code": ErrorCode.NO_ERROR, "error_message": None, "auth_bytes": response,
                "session_lifetime_ms": lifetime_ms}, False

    def raw_token(self, token: bytes, now: float) -> bytes | None:
        """The answer to a bare token (after a v0 handshake); None when the exchange failed, which
        closes the connection without an answer."""
        try:
            return self._evaluate(token, now)[0]
        except SaslError as e:
            self._state = _State.FAILED
            log.debug("SASL %s failed: %s", self._stage, e)
            return None

    # -- internals --------------------------------------------------------------------------------

    @property
    def _stage(self) -> str:
        return "re-authentication" if self.reauthenticating else "authentication"

    def _new_server(self, mechanism: str) -> scram.ScramServer | plain.PlainServer:
        if mechanism == PLAIN:
            return plain.PlainServer(self.settings.plain_users)
        return scram.ScramServer(scram.MECHANISMS[mechanism], lambda user: self._scram_credentials(mechanism, user))

    def _evaluate(self, token: bytes, now: float) -> tuple[bytes, int]:
        """The mechanism's answer, and the session's lifetime once complete (0 before)."""
        if self._state is not _State.AUTHENTICATE or self._server is None:
            raise SaslError(f"a SASL token in state {self._state.value}")
        response = self._server.evaluate(token)
        if not self._server.complete:
            return response, 0
        principal = f"User:{self._server.username}"
        if self._previous is not None and self._previous[1] != principal:
            old, new = self._previous[1].replace(":", ".", 1), principal.replace(":", ".", 1)
            message = f"Cannot change principals during re-authentication from {old}: {new}"
            raise SaslError(message, message)
        return response, self._complete(principal, now)

    def _complete(self, principal: str, now: float) -> int:
        assert self.mechanism is not None
        lifetime_ms = self.settings.reauth_ms.get(self.mechanism, 0)
        self.expires_at = now + lifetime_ms / 1000 if lifetime_ms > 0 else None
        log.debug("SASL %s authenticated %s with %s", self._stage, principal, self.mechanism)
        self.principal = principal
        self._previous = None
        self._server = None
        self._state = _State.COMPLETE
        return lifetime_ms

    def _may_reauthenticate(self, now: float) -> bool:
        """Kafka re-authenticates only sessions that expire, and at most once a second; another
        SaslHandshake is an ordinary request (answered ILLEGAL_SASL_STATE)."""
        if self.expires_at is None:
            return False
        return self._reauth_started is None or now - self._reauth_started >= MIN_REAUTH_INTERVAL_S

    def _begin_reauthentication(self, now: float) -> None:
        assert self.mechanism is not None and self.principal is not None
        self._reauth_started = now
        self._previous = (self.mechanism, self.principal)
        self._state = _State.INITIAL
