"""Principals from TLS certificates: Kafka's SslPrincipalMapper rules and Java's RFC 2253 names."""

from __future__ import annotations

from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.x509.oid import NameOID

from kbroker.security.principal import (
    ANONYMOUS,
    NoMatchingRule,
    SslPrincipalMapper,
    certificate_principal,
    rfc2253_name,
)
from tests.tls_material import TlsMaterial


# Cases from Kafka's SslPrincipalMapperTest.
@pytest.mark.parametrize(("rules", "name", "expected"), [
    ("DEFAULT", "CN=Duke,OU=ServiceUsers,O=Org,C=US", "CN=Duke,OU=ServiceUsers,O=Org,C=US"),
    ("RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/,DEFAULT", "CN=Duke,OU=ServiceUsers,O=Org,C=US", "Duke"),
    ("RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/,DEFAULT", "CN=Duke,OU=JavaSoft,O=Sun Microsystems",
     "CN=Duke,OU=JavaSoft,O=Sun Microsystems"),
    ("RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L,DEFAULT", "CN=Duke,OU=ServiceUsers,O=Org,C=US", "duke"),
    ("RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/U,DEFAULT", "CN=Duke,OU=ServiceUsers,O=Org,C=US", "DUKE"),
    ("RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L,DEFAULT",
     "CN=Duke,OU=ServiceUsers,O=Org,L=Santa Clara,ST=CA,C=US", "duke@serviceusers"),
    ("RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/L,DEFAULT", "CN=Duke,OU=ServiceUsers,O=Org", "duke"),
    ("RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/U, RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/L",
     "cn=duke,OU=JavaSoft,O=Sun Microsystems", "duke"),
    # A reference to no group stays literal; $12 with two groups is group 1 then "2".
    ("RULE:^CN=(.*?),OU=(.*?)$/$1@$3/,DEFAULT", "CN=Duke,OU=Eng", "Duke@$3"),
    ("RULE:^CN=(.*?),OU=(.*?)$/$12/,DEFAULT", "CN=Duke,OU=Eng", "Duke2"),
    ("RULE:^CN=(.*?),OU=(.*?)$/\\$1/,DEFAULT", "CN=Duke,OU=Eng", "$1"),
    # Slashes in patterns and replacements are escaped with a backslash.
    ("RULE:^CN=(.*?)\\/(.*?),.*$/$1\\/$2/", "CN=a/b,OU=x", "a/b"),
])
def test_rules_map_names_as_kafka_does(rules: str, name: str, expected: str) -> None:
    assert SslPrincipalMapper(rules).name(name) == expected


@pytest.mark.parametrize("rules", ["RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/LU", "RULE:^CN=(.*?),OU=ServiceUsers.*$/L",
                                   "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L,garbage", "DEFAULT garbage"])
def test_invalid_rules_are_refused(rules: str) -> None:
    with pytest.raises(ValueError):
        SslPrincipalMapper(rules)


def test_a_name_no_rule_applies_to_fails() -> None:
    with pytest.raises(NoMatchingRule):
        SslPrincipalMapper("RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/").name("CN=Duke,OU=Eng")


def _name_der(*attributes: tuple[x509.ObjectIdentifier, str]) -> bytes:
    return x509.Name([x509.NameAttribute(oid, value) for oid, value in attributes]).public_bytes()


def test_names_are_written_as_javas_x500principal_does() -> None:
    # Most specific first; specials escaped; an attribute outside RFC 2253's keywords as OID=#DER-hex.
    der = _name_der((NameOID.COUNTRY_NAME, "US"), (NameOID.ORGANIZATION_NAME, "Acme, Inc."),
                    (NameOID.ORGANIZATIONAL_UNIT_NAME, "eng+ops"), (NameOID.COMMON_NAME, "client"),
                    (NameOID.EMAIL_ADDRESS, "a@b.c"))
    assert rfc2253_name(der) == ("1.2.840.113549.1.9.1=#1605614062" + "2e63"
                                 ",CN=client,OU=eng\\+ops,O=Acme\\, Inc.,C=US")


def test_multi_valued_rdns_are_joined_with_plus() -> None:
    name = x509.Name([x509.RelativeDistinguishedName([
        x509.NameAttribute(NameOID.COMMON_NAME, "a"), x509.NameAttribute(NameOID.USER_ID, "u1")])])
    assert rfc2253_name(name.public_bytes()) in ("CN=a+UID=u1", "UID=u1+CN=a")


def test_a_certificate_gives_a_user_principal(tmp_path: Path) -> None:
    material = TlsMaterial.create(tmp_path)
    client = material.client("alice", organizational_unit="eng")
    der = x509.load_pem_x509_certificate(client.chain.read_bytes()).public_bytes(serialization.Encoding.DER)
    assert certificate_principal(der, SslPrincipalMapper()) == "User:CN=alice,OU=eng,O=kbroker tests"
    assert certificate_principal(der, SslPrincipalMapper("RULE:^CN=([^,]*),.*$/$1/U")) == "User:ALICE"
    assert certificate_principal(None, SslPrincipalMapper()) == ANONYMOUS
