"""SCRAM (RFC 5802, RFC 7677) as Kafka speaks it: SCRAM-SHA-256 and SCRAM-SHA-512.

Credentials are kept salted and hashed, never as passwords: Kafka's `ScramFormatter` turns a
password into `SaltedPassword = PBKDF2(password, salt, iterations)`, and only
`StoredKey = H(HMAC(SaltedPassword, "Client Key"))` and `ServerKey = HMAC(SaltedPassword,
"Server Key")` are stored, written as Kafka's `ScramCredentialUtils` does:
`salt=<base64>,stored_key=<base64>,server_key=<base64>,iterations=<n>`.

`ScramServer` and `ScramClient` are sans-io: each step takes the other side's message and
returns the next one. The server needs no password: it checks the client's proof against the
stored key. Messages and their checks follow Kafka's `ScramMessages` / `ScramSaslServer`: only
the gs2 header `n` (no channel binding), extensions are accepted and ignored, the final nonce
must equal the one the server sent.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import logging
import re
import secrets
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from kbroker.security.sasl_error import SaslError

log = logging.getLogger("kbroker.sasl")

MIN_ITERATIONS = 4096  # Kafka's ScramMechanism.minIterations, for both hashes
MAX_ITERATIONS = 16384  # what AlterUserScramCredentials accepts
DEFAULT_ITERATIONS = 4096  # kafka-configs.sh's default when a password comes without iterations


@dataclass(frozen=True, slots=True)
class ScramMechanism:
    name: str  # SCRAM-SHA-256
    hash_name: str  # hashlib's name
    wire_type: int  # the mechanism byte of AlterUserScramCredentials / DescribeUserScramCredentials

    def hmac(self, key: bytes, message: bytes) -> bytes:
        return hmac.new(key, message, self.hash_name).digest()

    def hash(self, data: bytes) -> bytes:
        return hashlib.new(self.hash_name, data).digest()

    def salted_password(self, password: str, salt: bytes, iterations: int) -> bytes:
        """RFC 5802's Hi(): PBKDF2 with this hash (about 10 ms at 4096 iterations)."""
        return hashlib.pbkdf2_hmac(self.hash_name, _normalize(password).encode(), salt, iterations)


SCRAM_SHA_256 = ScramMechanism("SCRAM-SHA-256", "sha256", 1)
SCRAM_SHA_512 = ScramMechanism("SCRAM-SHA-512", "sha512", 2)
MECHANISMS: dict[str, ScramMechanism] = {m.name: m for m in (SCRAM_SHA_256, SCRAM_SHA_512)}
BY_WIRE_TYPE: dict[int, ScramMechanism] = {m.wire_type: m for m in MECHANISMS.values()}


@dataclass(frozen=True, slots=True)
class ScramCredential:
    """What the broker keeps of a user's password for one mechanism."""

    salt: bytes = field(repr=False)
    stored_key: bytes = field(repr=False)
    server_key: bytes = field(repr=False)
    iterations: int

    @classmethod
    def from_salted_password(cls, mechanism: ScramMechanism, salt: bytes, salted: bytes,
                             iterations: int) -> ScramCredential:
        client_key = mechanism.hmac(salted, b"Client Key")
        return cls(salt, mechanism.hash(client_key), mechanism.hmac(salted, b"Server Key"), iterations)

    @classmethod
    def from_password(cls, mechanism: ScramMechanism, password: str, iterations: int,
                      salt: bytes | None = None) -> ScramCredential:
        salt = salt if salt is not None else new_salt()
        return cls.from_salted_password(mechanism, salt, mechanism.salted_password(password, salt, iterations),
                                        iterations)

    def to_text(self) -> str:
        """Kafka's ScramCredentialUtils.credentialToString."""
        return (f"salt={_b64(self.salt)},stored_key={_b64(self.stored_key)},"
                f"server_key={_b64(self.server_key)},iterations={self.iterations}")

    @classmethod
    def from_text(cls, text: str) -> ScramCredential:
        """Kafka's ScramCredentialUtils.credentialFromString; ValueError when it is not one."""
        fields = dict(item.split("=", 1) for item in text.split(",") if "=" in item)
        try:
            return cls(base64.b64decode(fields["salt"], validate=True),
                       base64.b64decode(fields["stored_key"], validate=True),
                       base64.b64decode(fields["server_key"], validate=True), int(fields["iterations"]))
        except (KeyError, ValueError) as e:
            raise ValueError(f"not a SCRAM credential: {e}") from None


def scram_credentials(configs: Mapping[str, str], user: str = "") -> dict[str, ScramCredential]:
    """The SCRAM credentials among a user's stored configs (`SCRAM-SHA-256` -> credential text),
    by mechanism name; a value that is not a credential is logged (not its content) and left out."""
    found = {}
    for mechanism in MECHANISMS:
        text = configs.get(mechanism)
        if text is None:
            continue
        try:
            found[mechanism] = ScramCredential.from_text(text)
        except ValueError:
            log.error("the stored %s credential of user %r is not a SCRAM credential; ignoring it", mechanism, user)
    return found


def new_salt() -> bytes:
    """A random salt, as Kafka's ScramFormatter.secureRandomBytes makes one (a base-36 string
    of 130 random bits)."""
    return _base36(secrets.randbits(130)).encode()


def _nonce() -> str:
    return _base36(secrets.randbits(130))


def _base36(number: int) -> str:
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"
    text = ""
    while True:
        number, remainder = divmod(number, 36)
        text = digits[remainder] + text
        if number == 0:
            return text


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _normalize(password: str) -> str:
    # Kafka's ScramFormatter uses the password's UTF-8 bytes as they are (no SASLprep), so
    # kbroker does the same: both must derive the same key from the same text.
    return password


def _xor(a: bytes, b: bytes) -> bytes:
    return bytes(x ^ y for x, y in zip(a, b, strict=True))


def sasl_name(username: str) -> str:
    """A user name as it travels in SCRAM messages: ',' and '=' escaped as =2C and =3D."""
    return username.replace("=", "=3D").replace(",", "=2C")


def username_of(name: str) -> str:
    """The user name a SCRAM `saslname` stands for (Kafka's ScramFormatter.username)."""
    return name.replace("=2C", ",").replace("=3D", "=")


# -- message formats (Kafka's ScramMessages) --------------------------------------------------------

_SASLNAME = r"(?:[\x01-\x2b\x2d-\x3c\x3e-\x7f]|=2C|=3D)+"
_PRINTABLE = r"[\x21-\x2b\x2d-\x7e]+"
_VALUE = r"[\x01-\x2b\x2d-\x7f]+"
_BASE64 = r"(?:[a-zA-Z0-9/+]{4})*(?:[a-zA-Z0-9/+]{3}=|[a-zA-Z0-9/+]{2}==)?"
_EXTENSIONS = rf"(?:,[A-Za-z]+={_VALUE})*"
_CLIENT_FIRST = re.compile(
    rf"n,(?:a=(?P<authzid>{_SASLNAME}))?,(?P<bare>(?:m={_VALUE},)?n=(?P<saslname>{_SASLNAME}),"
    rf"r=(?P<nonce>{_PRINTABLE})(?P<extensions>{_EXTENSIONS}))")
_SERVER_FIRST = re.compile(
    rf"(?:m={_VALUE},)?r=(?P<nonce>{_PRINTABLE}),s=(?P<salt>{_BASE64}),i=(?P<iterations>[0-9]+){_EXTENSIONS}")
_CLIENT_FINAL = re.compile(
    rf"(?P<without_proof>c=(?P<channel>{_BASE64}),r=(?P<nonce>{_PRINTABLE}){_EXTENSIONS}),p=(?P<proof>{_BASE64})")
_SERVER_FINAL = re.compile(rf"(?:e=(?P<error>[\x01-\x2b\x2d-\x3c\x3e-\x7f]+))|(?:v=(?P<signature>{_BASE64})){_EXTENSIONS}")
# Base64 of the gs2 header "n,," without an authorization id, the only channel binding here.
_GS2_NO_BINDING = "biws"


def _text(message: bytes, what: str) -> str:
    try:
        return message.decode()
    except UnicodeDecodeError:
        raise SaslError(f"Invalid SCRAM {what} format: not UTF-8") from None


# -- server -------------------------------------------------------------------------------------------

# What Kafka tells a client whose credentials did not check out (SaslServerAuthenticator hides
# the reason, which might tell whether the user exists).
def invalid_credentials_message(mechanism: str, reauthenticating: bool = False) -> str:
    stage = "re-authentication" if reauthenticating else "authentication"
    return f"Authentication failed during {stage} due to invalid credentials with SASL mechanism {mechanism}"


class ScramServer:
    """The broker's side of one exchange: client-first → server-first, client-final → server-final."""

    def __init__(self, mechanism: ScramMechanism, credentials: Callable[[str], ScramCredential | None]) -> None:
        self.mechanism = mechanism
        self._credentials = credentials
        self._state = "first"
        self._client_first_bare = ""
        self._server_first = ""
        self._nonce = ""
        self._credential: ScramCredential | None = None
        self.username: str | None = None  # set once complete

    @property
    def complete(self) -> bool:
        return self._state == "complete"

    def evaluate(self, message: bytes) -> bytes:
        if self._state == "first":
            return self._first(message)
        if self._state == "final":
            return self._final(message)
        raise SaslError(f"Unexpected challenge in Sasl server state {self._state}")

    def _first(self, message: bytes) -> bytes:
        self._state = "failed"
        text = _text(message, "client first message")
        match = _CLIENT_FIRST.fullmatch(text)
        if match is None:
            raise SaslError("Invalid SCRAM client first message format")
        username = username_of(match["saslname"])
        credential = self._credentials(username)
        if credential is None:
            raise SaslError(f"Authentication failed: Invalid user credentials (no {self.mechanism.name} "
                             f"credential for user {username!r})")
        authzid = match["authzid"]
        if authzid and username_of(authzid) != username:
            # Kafka sends this one to the client as it is.
            message_text = "Authentication failed: Client requested an authorization id that is different from username"
            raise SaslError(message_text, message_text)
        if credential.iterations < MIN_ITERATIONS:
            raise SaslError(f"Iterations {credential.iterations} is less than the minimum {MIN_ITERATIONS} "
                             f"for {self.mechanism.name}")
        self._nonce = match["nonce"] + _nonce()
        self._client_first_bare = match["bare"]
        self._server_first = f"r={self._nonce},s={_b64(credential.salt)},i={credential.iterations}"
        self._credential = credential
        self.username = username
        self._state = "final"
        return self._server_first.encode()

    def _final(self, message: bytes) -> bytes:
        self._state = "failed"
        credential, self._credential = self._credential, None
        assert credential is not None
        match = _CLIENT_FINAL.fullmatch(_text(message, "client final message"))
        if match is None:
            raise SaslError("Invalid SCRAM client final message format")
        # The combined nonce must end with the one the server sent (its fresh part included):
        # Kafka 3.9 accepts a prefix before it, which librdkafka before 2.1 sends (its own nonce
        # twice), so kcat and older confluent-kafka clients log in. The proof covers the message
        # as sent, so the check of the client's key is unchanged.
        if not match["nonce"].endswith(self._nonce):
            raise SaslError("Invalid client nonce in the final client message.")
        auth_message = f"{self._client_first_bare},{self._server_first},{match['without_proof']}".encode()
        client_signature = self.mechanism.hmac(credential.stored_key, auth_message)
        proof = base64.b64decode(match["proof"])
        if len(proof) != len(client_signature):
            raise SaslError("Invalid client credentials")
        client_key = _xor(proof, client_signature)
        if not hmac.compare_digest(self.mechanism.hash(client_key), credential.stored_key):
            raise SaslError("Invalid client credentials")
        server_signature = self.mechanism.hmac(credential.server_key, auth_message)
        self._state = "complete"
        return f"v={_b64(server_signature)}".encode()


# -- client -------------------------------------------------------------------------------------------


class ScramClient:
    """A client's side (kbroker's tools and inter-broker connections): `first()`, then
    `final(server_first)`, then `verify(server_final)`, which checks the broker knew the key."""

    def __init__(self, mechanism: ScramMechanism, username: str, password: str,
                 salted_passwords: Callable[[bytes, int], bytes] | None = None) -> None:
        self.mechanism = mechanism
        self.username = username
        self._password = password
        self._nonce = _nonce()
        self._client_first_bare = f"n={sasl_name(username)},r={self._nonce}"
        self._server_signature = b""
        self._salted = salted_passwords or (lambda salt, i: mechanism.salted_password(password, salt, i))

    def first(self) -> bytes:
        return f"n,,{self._client_first_bare}".encode()

    def final(self, server_first: bytes) -> bytes:
        text = _text(server_first, "server first message")
        match = _SERVER_FIRST.fullmatch(text)
        if match is None:
            raise SaslError(f"Invalid SCRAM server first message format: {text}")
        if not match["nonce"].startswith(self._nonce) or match["nonce"] == self._nonce:
            raise SaslError("Invalid server nonce: does not start with client nonce")
        iterations = int(match["iterations"])
        if iterations < MIN_ITERATIONS:
            raise SaslError(f"Requested iterations {iterations} is less than the minimum {MIN_ITERATIONS} "
                             f"for {self.mechanism.name}")
        salted = self._salted(base64.b64decode(match["salt"]), iterations)
        without_proof = f"c={_GS2_NO_BINDING},r={match['nonce']}"
        auth_message = f"{self._client_first_bare},{text},{without_proof}".encode()
        client_key = self.mechanism.hmac(salted, b"Client Key")
        client_signature = self.mechanism.hmac(self.mechanism.hash(client_key), auth_message)
        server_key = self.mechanism.hmac(salted, b"Server Key")
        self._server_signature = self.mechanism.hmac(server_key, auth_message)
        return f"{without_proof},p={_b64(_xor(client_key, client_signature))}".encode()

    def verify(self, server_final: bytes) -> None:
        match = _SERVER_FINAL.fullmatch(_text(server_final, "server final message"))
        if match is None:
            raise SaslError("Invalid SCRAM server final message format")
        if match["error"]:
            raise SaslError(f"Sasl authentication using {self.mechanism.name} failed with error: {match['error']}")
        if not hmac.compare_digest(base64.b64decode(match["signature"]), self._server_signature):
            raise SaslError("Invalid server signature in server final message")
