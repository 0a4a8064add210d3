"""Regular-expression subscriptions (`subscribed_topic_regex`) as Kafka resolves them: RE2 syntax
(Kafka compiles them with RE2/J), matched against the whole topic name.

Python's `re` runs them, limited to what RE2 accepts: RE2 has no backreferences, lookaround,
conditionals, atomic groups or possessive quantifiers, so a pattern using one is refused here
as Kafka refuses it, rather than matched with a meaning Kafka would never give it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

# Topics of the brokers' own, never matched by a subscription pattern.
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})


class InvalidRegex(ValueError):
    pass


def compile_topic_regex(pattern: str) -> re.Pattern[str]:
    """The compiled pattern, or InvalidRegex with the reason."""
    reason = _unsupported_by_re2(pattern)
    if reason is not None:
        raise InvalidRegex(reason)
    try:
        # RE2 writes the end of text as \z, which Python spells \Z.
        return re.compile(_translate(pattern))
    except re.error as e:
        raise InvalidRegex(str(e)) from None


def matching_topics(pattern: re.Pattern[str], names: Iterable[str]) -> frozenset[str]:
    return frozenset(n for n in names if n not in INTERNAL_TOPICS and pattern.fullmatch(n))


def _translate(pattern: str) -> str:
    out, i = [], 0
    while i < len(pattern):
        if pattern[i] == "\\" and i + 1 < len(pattern):
            out.append("\\Z" if pattern[i + 1] == "z" else pattern[i : i + 2])
            i += 2
        else:
            out.append(pattern[i])
            i += 1
    return "".join(out)


def _unsupported_by_re2(pattern: str) -> str | None:
    """Why RE2 would refuse `pattern`, for the constructs Python accepts and RE2 does not."""
    i, in_class = 0, False
    while i < len(pattern):
        c = pattern[i]
        if c == "\\":
            nxt = pattern[i + 1 : i + 2]
            if not in_class and nxt.isdigit() and nxt != "0":
                return f"backreference \\{nxt} at position {i}"
            if nxt == "Z":
                return "\\Z is not RE2 syntax (RE2 writes \\z)"
            i += 2
            continue
        if in_class:
            in_class = c != "]"
        elif c == "[":
            in_class = True
            if pattern[i + 1 : i + 2] == "^":
                i += 1
            if pattern[i + 1 : i + 2] == "]":
                i += 1  # a leading ] is a member of the class
        elif c == "(" and pattern[i + 1 : i + 2] == "?":
            construct = pattern[i + 2 : i + 4]
            if construct[:1] in ("=", "!", ">", "(") or construct in ("<=", "<!") or construct[:2] == "P=":
                return f"unsupported group construct (?{construct[:2]} at position {i}"
        elif c in "*+?}" and pattern[i + 1 : i + 2] == "+":
            return f"possessive quantifier {c}+ at position {i}"
        i += 1
    return None
