"""JAAS configuration text, as Kafka's `sasl.jaas.config` takes it (Kafka's JaasConfig parser).

    org.apache.kafka.common.security.plain.PlainLoginModule required
        username="admin" password="admin-secret" user_alice="alice-secret";

One login module, its control flag, then `name=value` options (values quoted with " or ', or
bare words), ended by `;`. Comments (`//`, `/* */`) are skipped. kbroker knows Kafka's PLAIN
and SCRAM login modules; any other class stops the start (it would be code kbroker cannot run).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

PLAIN_LOGIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
SCRAM_LOGIN_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"
CONTROL_FLAGS = frozenset({"required", "requisite", "sufficient", "optional"})

_TOKEN = re.compile(r"""
    \s+ | //[^\n]* | /\*.*?\*/                  # space and comments
  | (?P<quoted>"(?:\\.|[^"\\])*"|'(?:\\.|[^'\\])*')
  | (?P<word>[A-Za-z0-9_$.\-]+)
  | (?P<symbol>[=;])
""", re.VERBOSE | re.DOTALL)


class JaasError(ValueError):
    """Text that is not one login module as Kafka reads it."""


@dataclass(frozen=True, slots=True)
class LoginModule:
    class_name: str
    control_flag: str
    options: dict[str, str] = field(repr=False)  # holds passwords: never in a log line


def _tokens(text: str) -> list[tuple[str, str]]:
    tokens = []
    position = 0
    while position < len(text):
        match = _TOKEN.match(text, position)
        if match is None:
            raise JaasError(f"unexpected character {text[position]!r} in JAAS config")
        position = match.end()
        if match["quoted"] is not None:
            tokens.append(("value", re.sub(r"\\(.)", r"\1", match["quoted"][1:-1])))
        elif match["word"] is not None:
            tokens.append(("word", match["word"]))
        elif match["symbol"] is not None:
            tokens.append((match["symbol"], match["symbol"]))
    return tokens


def parse_login_modules(text: str) -> list[LoginModule]:
    tokens = _tokens(text)
    modules = []
    position = 0
    while position < len(tokens):
        kind, class_name = tokens[position]
        if kind != "word":
            raise JaasError("a JAAS config entry must start with a login module class name")
        if position + 1 >= len(tokens) or tokens[position + 1][1].lower() not in CONTROL_FLAGS:
            flag = tokens[position + 1][1] if position + 1 < len(tokens) else ""
            raise JaasError(f"Invalid login module control flag '{flag}' in JAAS config")
        flag = tokens[position + 1][1].lower()
        position += 2
        options: dict[str, str] = {}
        while True:
            if position >= len(tokens):
                raise JaasError("a JAAS config entry must end with ';'")
            kind, value = tokens[position]
            if kind == ";":
                position += 1
                break
            if kind != "word" or position + 2 >= len(tokens) or tokens[position + 1][0] != "=" \
                    or tokens[position + 2][0] not in ("word", "value"):
                raise JaasError("JAAS config options must be name=value")
            options[value] = tokens[position + 2][1]
            position += 3
        modules.append(LoginModule(class_name, flag, options))
    return modules


def parse_login_module(text: str) -> LoginModule:
    """The one login module of a `sasl.jaas.config` value (Kafka refuses none, or several)."""
    modules = parse_login_modules(text)
    if not modules:
        raise JaasError("JAAS config property does not contain any login modules")
    if len(modules) != 1:
        raise JaasError(f"JAAS config property contains {len(modules)} login modules, should be 1 module")
    return modules[0]
