"""The principal of a connection, as Kafka's DefaultKafkaPrincipalBuilder names it.

A plaintext connection, or a TLS one whose client sent no certificate, is `User:ANONYMOUS`. A
TLS client's certificate subject is written as Java's `X500Principal.getName()` writes it
(RFC 2253: most specific attribute first, `CN=client,OU=eng,O=Example`; attribute types outside
RFC 2253's keywords as a dotted OID with the value's DER bytes in hex, `1.2.840.113549.1.9.1=#16...`),
then mapped by `ssl.principal.mapping.rules` (Kafka's SslPrincipalMapper syntax:
`RULE:pattern/replacement/[LU]` and `DEFAULT`, first rule that matches wins).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

ANONYMOUS = "User:ANONYMOUS"
USER_TYPE = "User"
DEFAULT_RULES = "DEFAULT"


class NoMatchingRule(ValueError):
    """No mapping rule applies to a certificate's name: the connection is refused, as in Kafka."""


# -- mapping rules --------------------------------------------------------------------------------

# Kafka's grammar (SslPrincipalMapper.RULE_PATTERN), in Python's regex syntax.
_RULE = r"(DEFAULT)|RULE:((?:\\.|[^\\/])*)/((?:\\.|[^\\/])*)/([LU]?).*?|(.*?)"
_RULE_SPLITTER = re.compile(r"\s*(" + _RULE + r")\s*(?:,\s*|$)")
_RULE_PARSER = re.compile(_RULE)
_BACK_REFERENCE = re.compile(r"\$(\d+)")


@dataclass(frozen=True, slots=True)
class _Rule:
    pattern: re.Pattern[str] | None  # None: DEFAULT, the name unchanged
    replacement: str = ""
    lower: bool = False
    upper: bool = False

    def apply(self, name: str) -> str | None:
        if self.pattern is None:
            return name
        match = self.pattern.fullmatch(name)
        if match is None:
            return None
        # Java's String.replaceAll over the whole name, as Kafka does (after matching it whole).
        result = self.pattern.sub(lambda m: _java_replacement(self.replacement, m), name)
        if self.lower:
            return result.lower()
        if self.upper:
            return result.upper()
        return result


def _java_replacement(replacement: str, match: re.Match[str]) -> str:
    """Java's Matcher replacement syntax: `\\x` is x; `$n` is group n, digits taken while the
    number stays a group (`$12` with one group is group 1, then "2"). A reference to no group
    stays literal, as Kafka's escapeLiteralBackReferences arranges (Java would throw)."""
    groups = match.re.groups
    out: list[str] = []
    i = 0
    while i < len(replacement):
        char = replacement[i]
        if char == "\\" and i + 1 < len(replacement):
            out.append(replacement[i + 1])
            i += 2
            continue
        if char != "$" or i + 1 >= len(replacement) or not replacement[i + 1].isdigit() \
                or int(replacement[i + 1]) > groups:
            out.append(char)
            i += 1
            continue
        number, i = int(replacement[i + 1]), i + 2
        while i < len(replacement) and replacement[i].isdigit() and number * 10 + int(replacement[i]) <= groups:
            number, i = number * 10 + int(replacement[i]), i + 1
        out.append(match.group(number) or "")
    return "".join(out)


class SslPrincipalMapper:
    """`ssl.principal.mapping.rules` (Kafka's SslPrincipalMapper)."""

    def __init__(self, rules: str | None = None) -> None:
        self.text = DEFAULT_RULES if rules is None else rules
        self.rules = [_parse_rule(rule) for rule in _split_rules(self.text)]
        self.rules = [rule for rule in self.rules if rule is not None]

    def name(self, distinguished_name: str) -> str:
        for rule in self.rules:
            mapped = rule.apply(distinguished_name)
            if mapped is not None:
                return mapped
        raise NoMatchingRule(f"No rules apply to {distinguished_name}, rules {self.text}")


def _split_rules(text: str) -> list[str]:
    return [match.group(1) for match in _RULE_SPLITTER.finditer(text.strip())]


def _parse_rule(rule: str) -> _Rule | None:
    match = _RULE_PARSER.match(rule)
    if match is None:
        raise ValueError(f"Invalid rule: {rule}")
    if match.end() != len(rule):
        raise ValueError(f"Invalid rule: `{rule}`, unmatched substring: `{rule[match.end():]}`")
    if match.group(1) is not None:
        return _Rule(None)
    if match.group(2) is not None:
        try:
            pattern = re.compile(match.group(2))
        except re.error as e:
            raise ValueError(f"Invalid rule: {rule}: {e}") from None
        return _Rule(pattern, match.group(3), match.group(4) == "L", match.group(4) == "U")
    return None  # an empty rule is ignored


# -- certificate names ----------------------------------------------------------------------------

# RFC 2253's attribute keywords, the ones Java writes by name in getName().
_KEYWORDS = {
    "2.5.4.3": "CN", "2.5.4.6": "C", "2.5.4.7": "L", "2.5.4.8": "ST", "2.5.4.10": "O", "2.5.4.11": "OU",
    "2.5.4.9": "STREET", "0.9.2342.19200300.100.1.25": "DC", "0.9.2342.19200300.100.1.1": "UID",
}
# DER string types whose value Java writes as text (others go out as #hex).
_STRING_TAGS = {0x0C: "utf-8", 0x13: "ascii", 0x16: "ascii", 0x14: "latin-1", 0x1E: "utf-16-be", 0x1C: "utf-32-be"}
_SPECIAL = set(',+"\\<>;')


def _der_items(data: bytes) -> list[tuple[int, bytes, bytes]]:
    """The (tag, content, whole encoding) of each DER item in `data`, in order."""
    items = []
    position = 0
    while position < len(data):
        tag = data[position]
        length = data[position + 1]
        header = 2
        if length & 0x80:
            count = length & 0x7F
            length = int.from_bytes(data[position + 2 : position + 2 + count], "big")
            header += count
        end = position + header + length
        if end > len(data):
            raise ValueError("truncated DER")
        items.append((tag, data[position + header : end], data[position:end]))
        position = end
    return items


def _oid(content: bytes) -> str:
    first, parts, value = content[0], [], 0
    parts.extend([str(min(first // 40, 2)), str(first - 40 * min(first // 40, 2))])
    for byte in content[1:]:
        value = (value << 7) | (byte & 0x7F)
        if not byte & 0x80:
            parts.append(str(value))
            value = 0
    return ".".join(parts)


def _escape(text: str) -> str:
    out = []
    for i, char in enumerate(text):
        if char in _SPECIAL or (i == 0 and char in "# ") or (i == len(text) - 1 and char == " "):
            out.append("\\" + char)
        else:
            out.append(char)
    return "".join(out)


def rfc2253_name(der_name: bytes) -> str:
    """An X.501 Name (DER) as Java's X500Principal.getName() writes it."""
    (tag, sequence, _), = _der_items(der_name)
    if tag != 0x30:
        raise ValueError("not a DER Name")
    rdns = []
    for _, rdn, _ in _der_items(sequence):  # each a SET of AttributeTypeAndValue
        attributes = []
        for _, pair, _ in _der_items(rdn):
            (_, oid_bytes, _), (value_tag, value, value_der) = _der_items(pair)
            oid = _oid(oid_bytes)
            keyword = _KEYWORDS.get(oid)
            encoding = _STRING_TAGS.get(value_tag)
            if keyword is not None and encoding is not None:
                attributes.append(f"{keyword}={_escape(value.decode(encoding, errors='replace'))}")
            else:
                attributes.append(f"{keyword or oid}=#{value_der.hex()}")
        rdns.append("+".join(attributes))
    return ",".join(reversed(rdns))


def certificate_principal(der_certificate: bytes | None, mapper: SslPrincipalMapper) -> str:
    """`User:<mapped subject>` of a peer's certificate, or User:ANONYMOUS without one."""
    if not der_certificate:
        return ANONYMOUS
    from cryptography import x509

    subject = x509.load_der_x509_certificate(der_certificate).subject.public_bytes()
    return f"{USER_TYPE}:{mapper.name(rfc2253_name(subject))}"
