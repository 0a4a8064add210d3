"""The filter language of view topics (`view.filter`): a parser, and a compiler that turns a
filter into one Python function deciding, from a record's key and headers, whether the view keeps
the record.

    tag in ('eu', 'us') and not header('retry') exists or key startswith 'admin-'

The grammar, the semantics and the error format are documented in docs/views.md, "The filter
language".

`matches` runs once per record on the fetch path, so a filter is compiled once, when parsed: the
parser builds a small tree, and the tree is rendered as the source of one Python function, which
makes one pass over the headers and then evaluates one expression. The source holds only fixed
templates and generated names (`_c0`, `_c1`, ...); every string from the user is a value bound to
such a name, never text of the source, so no filter can become code. One expression also means
that evaluating a filter nested 64 deep takes one Python frame, not 64.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

__all__ = ["FilterError", "RecordFilter", "parse_filter"]

# Bounds on what a topic config can ask of the broker: parsing and compiling cost is linear in the
# text, the parser recurses at most a few frames per level of nesting, and the compiled
# expression stays far below the Python parser's own nesting limit.
MAX_TEXT_CHARS = 8192
MAX_DEPTH = 64  # levels of '(' and 'not' open at once
MAX_IN_VALUES = 1000

# (key, headers) -> keep the record?
Matcher = Callable[[bytes | None, Sequence[tuple[str, bytes | None]]], bool]


class FilterError(ValueError):
    """A filter that does not parse. str(e) is one line naming what was expected and where;
    `detail()` adds the offending line of the text with a caret under the position."""

    def __init__(self, message: str, position: int, text: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.position = position  # 0-based character offset in `text`
        self.text = text

    def __reduce__(self) -> tuple[type[FilterError], tuple[str, int, str]]:
        # The default would rebuild the exception from `args` alone, losing the position.
        return (FilterError, (self.message, self.position, self.text))

    def detail(self) -> str:
        """The message, then the line of the text holding the position, then a caret under it."""
        line, column = _line_around(self.text, self.position)
        # Copy tabs so the caret lines up under a tab-indented filter too.
        pad = "".join(c if c == "\t" else " " for c in line[:column])
        return f"{self.message}\n{line}\n{pad}^"


def _line_around(text: str, position: int, width: int = 80) -> tuple[str, int]:
    """The line of `text` holding `position` (at most `width` characters of it around the
    position, for an 8 KiB one-line filter) and the position's column in what is returned."""
    start = text.rfind("\n", 0, position) + 1
    end = text.find("\n", position)
    line = text[start : len(text) if end < 0 else end]
    column = position - start
    if len(line) > width:
        cut = max(0, min(column - width // 2, len(line) - width))
        line, column = line[cut : cut + width], column - cut
    return line, column


@dataclass(frozen=True)
class RecordFilter:
    """A parsed and compiled filter. `matches(key, headers)` says whether a record belongs to the
    view; `header_names` and `reads_key` say what it looks at (a caller may skip decoding what no
    filter reads)."""

    text: str
    # A function, not a method: called as `f.matches(key, headers)`. Two parses of one text are
    # equal though their compiled functions are distinct objects.
    matches: Matcher = field(repr=False, compare=False)
    header_names: frozenset[str]
    reads_key: bool


def parse_filter(text: str, tag_header: str = "tag") -> RecordFilter:
    """Parse and compile `text`; `tag` in it means the header named `tag_header`.
    Raises FilterError (a ValueError) for text that is not a filter."""
    if len(text) > MAX_TEXT_CHARS:
        raise FilterError(
            f"filter too long: expected at most {MAX_TEXT_CHARS} characters at position "
            f"{MAX_TEXT_CHARS}, found {len(text)}",
            MAX_TEXT_CHARS,
            text,
        )
    tree = _Parser(text, tag_header).parse()
    return RecordFilter(
        text=text,
        matches=_compile(tree),
        header_names=frozenset(_header_names(tree)),
        reads_key=_reads_key(tree),
    )


# ---------------------------------------------------------------------------------------------
# Tokens


class _Token(NamedTuple):
    kind: str  # "word", "string", "unterminated", "bad", "end", or the punctuation itself
    text: str  # as written; for a word, lower case if it is ASCII (keywords are case-insensitive)
    position: int


_TOKEN_RE = re.compile(
    r"""
      (?P<space>\s+)
    | (?P<string>'(?:[^']|'')*+')   # possessive: "'a''b" is unterminated, not 'a' then "'b"
    | (?P<unterminated>'.*)
    | (?P<punct>!=|[=(),])
    | (?P<word>\w+)
    | (?P<bad>.)
    """,
    re.VERBOSE | re.DOTALL,
)


def _tokenize(text: str) -> list[_Token]:
    """All tokens of `text`, ending with an "end" token. Never fails: a character or string that
    is not valid becomes a token the parser reports if and when it reaches it, so the error is
    always at the first offending token, whatever follows it."""
    tokens = []
    for m in _TOKEN_RE.finditer(text):
        kind, value = m.lastgroup, m.group()
        assert kind is not None
        if kind == "space":
            continue
        if kind == "punct":
            kind = value
        elif kind == "word" and value.isascii():
            # Only ASCII: str.lower() maps some non-ASCII letters onto ASCII ones (KELVIN SIGN
            # to 'k'), which would make a keyword of a word nobody typed as one.
            value = value.lower()
        tokens.append(_Token(kind, value, m.start()))
    tokens.append(_Token("end", "", len(text)))
    return tokens


def _describe(token: _Token) -> str:
    """How an error message names what it found."""
    if token.kind == "end":
        return "end of filter"
    if token.kind == "string":
        return "a string"
    if token.text == '"':
        return "'\"' (strings take single quotes)"
    shown = token.text if len(token.text) <= 30 else token.text[:27] + "..."
    if not shown.isprintable():
        # A control character would garble, or split, the one-line message.
        shown = shown.encode("unicode_escape").decode("ascii")
    return f"'{shown}'"


# ---------------------------------------------------------------------------------------------
# The tree


@dataclass(frozen=True, slots=True)
class _Compare:
    header: str | None  # the header's name; None for the key
    op: str  # "=", "!=", "in", "not in", "exists", "startswith"
    value: bytes | frozenset[bytes] | None  # a string; the list of `in`; None for `exists`


@dataclass(frozen=True, slots=True)
class _Not:
    item: _Node


@dataclass(frozen=True, slots=True)
class _And:
    items: tuple[_Node, ...]


@dataclass(frozen=True, slots=True)
class _Or:
    items: tuple[_Node, ...]


_Node = _Compare | _Not | _And | _Or

_SUBJECTS = "tag, key, header('name'), not or '('"
_OPERATORS = "=, !=, in, not in, exists or startswith"


# ---------------------------------------------------------------------------------------------
# The parser: recursive descent, one method per rule of the grammar in docs/views.md.


class _Parser:
    def __init__(self, text: str, tag_header: str) -> None:
        self.text = text
        self.tag_header = tag_header
        self.tokens = _tokenize(text)
        self.index = 0
        self.depth = 0

    def parse(self) -> _Node:
        node = self._or()
        self._expect("end", "and, or or end of filter")
        return node

    # -- helpers

    def _peek(self) -> _Token:
        token = self.tokens[self.index]
        if token.kind == "unterminated":
            # Whatever was expected here, the string with no end is the mistake.
            raise self._error_at(
                f"expected a closing quote for the string starting at position {token.position}",
                token.position,
            )
        return token

    def _next(self) -> _Token:
        token = self._peek()
        self.index += 1
        return token

    def _is_word(self, word: str) -> bool:
        token = self._peek()
        return token.kind == "word" and token.text == word

    def _expect(self, kind: str, expected: str) -> _Token:
        if self._peek().kind != kind:
            raise self._unexpected(expected)
        return self._next()

    def _unexpected(self, expected: str) -> FilterError:
        token = self._peek()
        return self._error_at(
            f"expected {expected} at position {token.position}, found {_describe(token)}", token.position
        )

    def _error_at(self, message: str, position: int) -> FilterError:
        return FilterError(message, position, self.text)

    def _enter(self) -> None:
        """One more level of nesting, at the current token ('(' or 'not')."""
        if self.depth >= MAX_DEPTH:
            position = self._peek().position
            raise self._error_at(
                f"filter nested too deeply: expected at most {MAX_DEPTH} levels of '(' and not "
                f"at position {position}",
                position,
            )
        self.depth += 1

    # -- rules

    def _or(self) -> _Node:
        items = [self._and()]
        while self._is_word("or"):
            self._next()
            items.append(self._and())
        return _join(_Or, items)

    def _and(self) -> _Node:
        items = [self._unary()]
        while self._is_word("and"):
            self._next()
            items.append(self._unary())
        return _join(_And, items)

    def _unary(self) -> _Node:
        # A loop, not recursion, for a run of `not`s; an even number of them cancels out.
        nots = 0
        while self._is_word("not"):
            self._enter()
            self._next()
            nots += 1
        node = self._primary()
        self.depth -= nots
        return _Not(node) if nots % 2 else node

    def _primary(self) -> _Node:
        if self._peek().kind == "(":
            self._enter()
            self._next()
            node = self._or()
            self._expect(")", "and, or or ')'")
            self.depth -= 1
            return node
        return self._comparison()

    def _comparison(self) -> _Compare:
        header = self._subject()
        token = self._peek()
        op = token.text if token.kind in ("=", "!=", "word") else ""
        if op in ("=", "!=", "startswith"):
            self._next()
            return _Compare(header, op, self._string("a string"))
        if op == "in":
            self._next()
            return _Compare(header, "in", self._list())
        if op == "not":
            self._next()
            if not self._is_word("in"):
                raise self._unexpected("in after not")
            self._next()
            return _Compare(header, "not in", self._list())
        if op == "exists":
            self._next()
            return _Compare(header, "exists", None)
        raise self._unexpected(_OPERATORS)

    def _subject(self) -> str | None:
        """The header a comparison reads, or None for the key."""
        token = self._peek()
        word = token.text if token.kind == "word" else ""
        if word == "key":
            self._next()
            return None
        if word == "tag":
            self._next()
            return self.tag_header
        if word == "header":
            self._next()
            self._expect("(", "'(' after header")
            name = self._expect("string", "the header's name as a string")
            self._expect(")", "')'")
            return _unquote(name.text)
        raise self._unexpected(_SUBJECTS)

    def _list(self) -> frozenset[bytes]:
        self._expect("(", "'(' to open the list of in")
        values = [self._string("a string (a list holds at least one)")]
        while self._peek().kind == ",":
            self._next()
            if len(values) == MAX_IN_VALUES:
                position = self._peek().position
                raise self._error_at(
                    f"list too long: expected at most {MAX_IN_VALUES} values at position {position}",
                    position,
                )
            values.append(self._string("a string"))
        self._expect(")", "',' or ')'")
        return frozenset(values)

    def _string(self, expected: str) -> bytes:
        token = self._expect("string", expected)
        try:
            return _unquote(token.text).encode("utf-8")
        except UnicodeEncodeError:
            # A lone surrogate (text decoded with surrogateescape) has no UTF-8 form to compare.
            raise self._error_at(
                f"expected a string of valid Unicode at position {token.position}", token.position
            ) from None


def _unquote(literal: str) -> str:
    """The value of a string literal: without its quotes, '' read as one quote."""
    return literal[1:-1].replace("''", "'")


def _join(kind: type[_And] | type[_Or], items: list[_Node]) -> _Node:
    """`items` joined by and/or; nested joins of the same kind, as in `(a or b) or c`, are
    flattened, which keeps the compiled expression shallow."""
    if len(items) == 1:
        return items[0]
    flat: list[_Node] = []
    for item in items:
        flat.extend(item.items if isinstance(item, kind) else (item,))
    return kind(tuple(flat))


# ---------------------------------------------------------------------------------------------
# What a tree reads


def _walk(node: _Node) -> list[_Compare]:
    """The comparisons of the tree (iterative, though the tree is bounded by MAX_DEPTH anyway)."""
    found, stack = [], [node]
    while stack:
        item = stack.pop()
        if isinstance(item, _Compare):
            found.append(item)
        elif isinstance(item, _Not):
            stack.append(item.item)
        else:
            stack.extend(item.items)
    return found


def _header_names(node: _Node) -> set[str]:
    return {c.header for c in _walk(node) if c.header is not None}


def _reads_key(node: _Node) -> bool:
    return any(c.header is None for c in _walk(node))


# ---------------------------------------------------------------------------------------------
# The compiler: a tree -> the source of one Python function -> the function.
#
# The function first finds the values of the headers the filter reads, then returns one
# expression. A filter reading one header name (the common `tag = 'x'`, `tag in (...)`) finds its
# value in a plain loop over the headers, which for a few headers costs less than building a
# dict; any other filter builds `h = dict(headers)`, one pass in C. Both keep the last value of a
# repeated name, as the language says.
#
# A header's value is None both when it is missing and when it is null, and None equals no bytes
# and is in no set of bytes: `=` and `in` need no extra test, and `!=` and `not in` are exactly
# their negation. Only `exists` tells the two apart.

# Python's precedence of `or`, `and`, `not` and comparisons, which is the language's too.
_OR, _AND, _NOT = range(3)

_LOOP_ONE_HEADER = [
    "v = None",
    "found = False",
    "for name, value in headers:",
    "    if name == _c0:",
    "        v = value",
    "        found = True",
]


class _Emitter:
    """Renders a tree as a Python expression over `key` and the header values."""

    def __init__(self, header_names: set[str]) -> None:
        self.constants: list[object] = []
        self.reads_headers = bool(header_names)
        self.one_header = len(header_names) == 1
        if self.one_header:
            self.name(next(iter(header_names)))  # _c0, the name _LOOP_ONE_HEADER looks for

    def name(self, value: object) -> str:
        """A generated name the expression uses for `value` (a user string or list): user text
        goes into the function as a bound value, never into its source."""
        self.constants.append(value)
        return f"_c{len(self.constants) - 1}"

    def prologue(self) -> list[str]:
        """The statements that find the header values before the expression."""
        if self.one_header:
            return _LOOP_ONE_HEADER
        return ["h = _dict(headers)"] if self.reads_headers else []

    def emit(self, node: _Node, tighter_than: int = _OR) -> str:
        """The expression for `node`, parenthesized if it binds looser than its context needs."""
        if isinstance(node, _Compare):
            return self.compare(node)
        if isinstance(node, _Not):
            source, level = "not " + self.emit(node.item, _NOT), _NOT
        elif isinstance(node, _And):
            source, level = " and ".join(self.emit(i, _NOT) for i in node.items), _AND
        else:
            source, level = " or ".join(self.emit(i, _AND) for i in node.items), _OR
        return f"({source})" if level < tighter_than else source

    def compare(self, node: _Compare) -> str:
        """One comparison: a Python comparison or method call, binding tighter than `not`."""
        if node.op == "exists":
            return self.exists(node.header)
        subject = self.value(node.header)
        if node.op == "startswith":
            if node.value == b"":
                # Every value starts with '', but a null key or value, like a missing header,
                # has no value at all.
                return f"{subject} is not None"
            # `or b''` turns None into a value no non-empty prefix starts.
            return f"({subject} or b'').startswith({self.name(node.value)})"
        operator = {"=": "==", "!=": "!=", "in": "in", "not in": "not in"}[node.op]
        return f"{subject} {operator} {self.name(node.value)}"

    def value(self, header: str | None) -> str:
        """The key, or a header's value: None if missing or null."""
        if header is None:
            return "key"
        return "v" if self.one_header else f"h.get({self.name(header)})"

    def exists(self, header: str | None) -> str:
        if header is None:
            return "key is not None"
        return "found" if self.one_header else f"{self.name(header)} in h"


def _compile(tree: _Node) -> Matcher:
    emitter = _Emitter(_header_names(tree))
    expression = emitter.emit(tree)  # first: it names the constants the source refers to
    params = ", ".join(["_dict"] + [f"_c{i}" for i in range(len(emitter.constants))])
    # A factory, so the constants are closure cells of `matches` (fast to load) rather than
    # globals, or default arguments a caller could override.
    source = "\n".join(
        [
            f"def _factory({params}):",
            "    def matches(key, headers):",
            *(f"        {line}" for line in emitter.prologue()),
            f"        return {expression}",
            "    return matches",
        ]
    )
    namespace: dict[str, object] = {"__builtins__": {}}
    exec(compile(source, "<view.filter>", "exec"), namespace)
    factory = namespace["_factory"]
    assert callable(factory)
    return factory(dict, *emitter.constants)
