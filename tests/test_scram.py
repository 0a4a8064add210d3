"""SCRAM and PLAIN as kbroker's SASL servers and clients compute them: RFC 7677's example
exchange, Kafka's credential format, and the refusals of Kafka's ScramSaslServer / PlainSaslServer."""

from __future__ import annotations

import base64

import pytest

from kbroker.security import plain, scram
from kbroker.security.sasl_error import SaslError
from kbroker.security.scram import SCRAM_SHA_256, SCRAM_SHA_512, ScramClient, ScramCredential, ScramServer

# RFC 7677, section 3: user "user", password "pencil".
RFC_CLIENT_FIRST = b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
RFC_SERVER_NONCE = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
RFC_SALT = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
RFC_CLIENT_FINAL = (b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                    b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
RFC_SERVER_FINAL = b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="


def _rfc_server(monkeypatch: pytest.MonkeyPatch) -> ScramServer:
    credential = ScramCredential.from_password(SCRAM_SHA_256, "pencil", 4096, RFC_SALT)
    monkeypatch.setattr(scram, "_nonce", lambda: RFC_SERVER_NONCE)
    return ScramServer(SCRAM_SHA_256, {"user": credential}.get)


def test_the_server_follows_rfc_7677s_exchange(monkeypatch: pytest.MonkeyPatch) -> None:
    server = _rfc_server(monkeypatch)
    first = server.evaluate(RFC_CLIENT_FIRST)
    assert first == f"r=rOprNGfwEbeRWgbNEkqO{RFC_SERVER_NONCE},s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096".encode()
    assert server.evaluate(RFC_CLIENT_FINAL) == RFC_SERVER_FINAL
    assert server.complete and server.username == "user"


def test_the_client_follows_rfc_7677s_exchange(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(scram, "_nonce", lambda: "rOprNGfwEbeRWgbNEkqO")
    client = ScramClient(SCRAM_SHA_256, "user", "pencil")
    assert client.first() == RFC_CLIENT_FIRST
    server_first = f"r=rOprNGfwEbeRWgbNEkqO{RFC_SERVER_NONCE},s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096".encode()
    assert client.final(server_first) == RFC_CLIENT_FINAL
    client.verify(RFC_SERVER_FINAL)
    with pytest.raises(SaslError, match="server signature"):
        client.verify(b"v=" + base64.b64encode(b"x" * 32))


@pytest.mark.parametrize("mechanism", [SCRAM_SHA_256, SCRAM_SHA_512])
def test_client_and_server_agree_and_a_wrong_password_fails(mechanism: scram.ScramMechanism) -> None:
    credential = ScramCredential.from_password(mechanism, "alice-secret", 4096)
    for password, succeeds in (("alice-secret", True), ("wrong", False)):
        server = ScramServer(mechanism, {"alice": credential}.get)
        client = ScramClient(mechanism, "alice", password)
        final = client.final(server.evaluate(client.first()))
        if succeeds:
            client.verify(server.evaluate(final))
            assert server.username == "alice"
        else:
            with pytest.raises(SaslError, match="Invalid client credentials") as refused:
                server.evaluate(final)
            assert refused.value.client_message is None  # the client gets the generic message


def test_the_credential_text_is_kafkas_and_holds_no_password() -> None:
    credential = ScramCredential.from_password(SCRAM_SHA_512, "alice-secret", 8192, b"salt")
    text = credential.to_text()
    assert text.startswith("salt=c2FsdA==,stored_key=") and ",server_key=" in text and text.endswith(",iterations=8192")
    assert "alice-secret" not in text
    assert ScramCredential.from_text(text) == credential
    with pytest.raises(ValueError):
        ScramCredential.from_text("salt=x")


def test_scram_refusals(monkeypatch: pytest.MonkeyPatch) -> None:
    credential = ScramCredential.from_password(SCRAM_SHA_256, "pencil", 4096)
    weak = ScramCredential.from_password(SCRAM_SHA_256, "pencil", 1024)
    lookup = {"user": credential, "weak": weak}.get
    cases = [
        (b"n,,n=nobody,r=abc", "Invalid user credentials", None),
        (b"y,,n=user,r=abc", "Invalid SCRAM client first message format", None),  # channel binding: not offered
        (b"n,a=admin,n=user,r=abc", "authorization id", "Authentication failed: Client requested an authorization "
                                                        "id that is different from username"),
        (b"n,,n=weak,r=abc", "less than the minimum 4096", None),
        (b"\xff\xfe", "not UTF-8", None),
    ]
    for message, reason, client_message in cases:
        with pytest.raises(SaslError, match=reason) as refused:
            ScramServer(SCRAM_SHA_256, lookup).evaluate(message)
        assert refused.value.client_message == client_message
    server = ScramServer(SCRAM_SHA_256, lookup)
    server.evaluate(b"n,,n=user,r=abc")
    with pytest.raises(SaslError, match="Invalid client nonce"):
        server.evaluate(b"c=biws,r=abc,p=" + base64.b64encode(b"x" * 32))  # the server's part is missing
    with pytest.raises(SaslError, match="Unexpected challenge"):
        server.evaluate(b"anything")  # a failed exchange stays failed


def test_escaped_user_names() -> None:
    assert scram.sasl_name("a=b,c") == "a=3Db=2Cc"
    assert scram.username_of("a=3Db=2Cc") == "a=b,c"
    credential = ScramCredential.from_password(SCRAM_SHA_256, "pw", 4096)
    server = ScramServer(SCRAM_SHA_256, {"a=b,c": credential}.get)
    client = ScramClient(SCRAM_SHA_256, "a=b,c", "pw")
    client.verify(server.evaluate(client.final(server.evaluate(client.first()))))


def test_plain_checks_users_as_kafka() -> None:
    """Messages as Kafka 3.9's broker answers them (checked against the reference)."""
    users = {"alice": "alice-secret"}
    assert plain.PlainServer(users).evaluate(b"\0alice\0alice-secret") == b""
    assert plain.PlainServer(users).evaluate(b"alice\0alice\0alice-secret") == b""
    cases = [
        (b"\0alice\0wrong", "Authentication failed: Invalid username or password"),
        (b"\0bob\0alice-secret", "Authentication failed: Invalid username or password"),
        (b"\0alice", "expected 3 tokens, got 2"),
        (b"\0\0pw", "username not specified"),
        (b"\0alice\0", "password not specified"),
        (b"bob\0alice\0alice-secret", "authorization id that is different"),
        (b"\0alice\0alice-secret\0more", "expected 3 tokens, got 4"),
    ]
    for message, reason in cases:
        with pytest.raises(SaslError, match=reason) as refused:
            plain.PlainServer(users).evaluate(message)
        assert reason in (refused.value.client_message or "")  # Kafka 3.9 tells the client each reason


def test_a_final_nonce_with_a_prefix_is_accepted_as_kafka_3_9_does() -> None:
    """librdkafka before 2.1 (Debian's kcat) sends its own nonce twice in the final message,
    and signs that message: Kafka 3.9 accepts it, and so does kbroker."""
    mechanism = SCRAM_SHA_512
    credential = ScramCredential.from_password(mechanism, "pw", 4096, b"salt")
    server = ScramServer(mechanism, {"u": credential}.get)
    server_first = server.evaluate(b"n,,n=u,r=CLIENT").decode()
    nonce = server_first.split(",")[0][2:]
    without_proof = f"c=biws,r=CLIENT{nonce}"
    auth_message = f"n=u,r=CLIENT,{server_first},{without_proof}".encode()
    salted = mechanism.salted_password("pw", b"salt", 4096)
    client_key = mechanism.hmac(salted, b"Client Key")
    signature = mechanism.hmac(mechanism.hash(client_key), auth_message)
    proof = base64.b64encode(bytes(a ^ b for a, b in zip(client_key, signature, strict=True)))
    assert server.evaluate(f"{without_proof},p=".encode() + proof).startswith(b"v=")
    assert server.complete
