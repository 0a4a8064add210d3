"""Java `.properties` text: what server.properties, meta.properties and client configs are written in."""

from __future__ import annotations

import re

_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def parse_properties(text: str) -> dict[str, str]:
    """Java `.properties` syntax: `key=value`, `key:value` or `key value`; `#`/`!` comments;
    a trailing backslash continues the line."""
    result: dict[str, str] = {}
    logical = ""
    for raw in text.splitlines():
        line = raw.lstrip()
        if not logical and (not line or line[0] in "#!"):
            continue
        if _continues(line):
            logical += line[:-1]
            continue
        logical += line
        key, value = _split_property(logical)
        result[key] = value
        logical = ""
    if logical:
        key, value = _split_property(logical)
        result[key] = value
    return result


def _continues(line: str) -> bool:
    trailing = len(line) - len(line.rstrip("\\"))
    return trailing % 2 == 1


def _split_property(line: str) -> tuple[str, str]:
    match = re.match(r"((?:\\.|[^=:\s\\])*)\s*[=:]?\s*(.*)$", line, re.DOTALL)
    assert match is not None  # the pattern matches any string
    return _unescape(match.group(1)), _unescape(match.group(2).rstrip())


def _unescape(text: str) -> str:
    return re.sub(r"\\(.)", lambda m: _ESCAPES.get(m.group(1), m.group(1)), text)
