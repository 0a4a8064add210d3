"""The filter language of view topics: what each construct keeps, what each mistake reports and
where, the limits, and the compiled filter against a plain interpreter on random filters."""

from __future__ import annotations

import pickle
from collections.abc import Sequence
from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kbroker.views.filter import (
    MAX_DEPTH,
    MAX_IN_VALUES,
    MAX_TEXT_CHARS,
    FilterError,
    RecordFilter,
    parse_filter,
)

Headers = Sequence[tuple[str, bytes | None]]


def keeps(text: str, key: bytes | None = None, headers: Headers = (), tag_header: str = "tag") -> bool:
    return parse_filter(text, tag_header).matches(key, headers)


def error(text: str) -> FilterError:
    with pytest.raises(FilterError) as caught:
        parse_filter(text)
    return caught.value


# --- subjects and comparisons


def test_tag_equals_reads_the_tag_header() -> None:
    assert keeps("tag = 'orders'", headers=[("tag", b"orders")])
    assert not keeps("tag = 'orders'", headers=[("tag", b"order")])
    assert not keeps("tag = 'orders'", headers=[("other", b"orders")])


def test_tag_is_the_header_the_parser_is_given() -> None:
    f = parse_filter("tag = 'orders'", tag_header="kind")
    assert f.header_names == frozenset({"kind"})
    assert f.matches(None, [("kind", b"orders")])
    assert not f.matches(None, [("tag", b"orders")])


def test_header_reads_any_header_by_exact_name() -> None:
    assert keeps("header('region') = 'eu'", headers=[("tag", b"x"), ("region", b"eu")])
    # Header names are case-sensitive; only keywords are not.
    assert not keeps("header('Region') = 'eu'", headers=[("region", b"eu")])


def test_not_equals() -> None:
    assert keeps("tag != 'a'", headers=[("tag", b"b")])
    assert not keeps("tag != 'a'", headers=[("tag", b"a")])


def test_in_and_not_in() -> None:
    assert keeps("tag in ('a', 'b', 'c')", headers=[("tag", b"b")])
    assert not keeps("tag in ('a', 'b', 'c')", headers=[("tag", b"d")])
    assert keeps("tag in ('a')", headers=[("tag", b"a")])
    assert keeps("tag not in ('a', 'b')", headers=[("tag", b"c")])
    assert not keeps("tag not in ('a', 'b')", headers=[("tag", b"a")])


def test_exists() -> None:
    assert keeps("header('trace') exists", headers=[("trace", b"")])
    assert not keeps("header('trace') exists", headers=[("tag", b"x")])
    assert keeps("key exists", key=b"")
    assert not keeps("key exists", key=None)


def test_startswith_on_every_subject() -> None:
    assert keeps("key startswith 'user-'", key=b"user-42")
    assert not keeps("key startswith 'user-'", key=b"admin-user-42")
    assert keeps("tag startswith 'ord'", headers=[("tag", b"orders")])
    assert keeps("header('h') startswith 'ab'", headers=[("h", b"abc")])
    assert not keeps("header('h') startswith 'abcd'", headers=[("h", b"abc")])


def test_startswith_empty_prefix_needs_a_value() -> None:
    assert keeps("key startswith ''", key=b"")
    assert not keeps("key startswith ''", key=None)
    assert keeps("tag startswith ''", headers=[("tag", b"")])
    assert not keeps("tag startswith ''", headers=[("tag", None)])
    assert not keeps("tag startswith ''", headers=[])


def test_key_comparisons() -> None:
    assert keeps("key = 'k1'", key=b"k1")
    assert not keeps("key = 'k1'", key=b"k2")
    assert keeps("key in ('k1', 'k2')", key=b"k2")
    assert keeps("key != 'k1'", key=b"k2")
    assert keeps("key = ''", key=b"")


def test_null_key_matches_no_value() -> None:
    assert not keeps("key = ''", key=None)
    assert not keeps("key in ('', 'a')", key=None)
    assert not keeps("key startswith 'a'", key=None)
    assert keeps("key != 'a'", key=None)
    assert keeps("key not in ('a')", key=None)
    assert keeps("not key exists", key=None)


# --- header semantics: last header wins, missing and null headers


# One header name read compiles to a loop over the headers, several to a dict: test both.
ONE_HEADER = ""
TWO_HEADERS = " and (header('zz') exists or not header('zz') exists)"


@pytest.mark.parametrize("extra", [ONE_HEADER, TWO_HEADERS], ids=["one-header", "two-headers"])
def test_duplicate_headers_the_last_one_counts(extra: str) -> None:
    both = [("tag", b"a"), ("other", b"x"), ("tag", b"b")]
    assert keeps("tag = 'b'" + extra, headers=both)
    assert not keeps("tag = 'a'" + extra, headers=both)
    assert keeps("tag != 'a'" + extra, headers=both)
    assert not keeps("tag in ('a')" + extra, headers=both)


@pytest.mark.parametrize("extra", [ONE_HEADER, TWO_HEADERS], ids=["one-header", "two-headers"])
def test_a_last_null_header_hides_an_earlier_value(extra: str) -> None:
    headers = [("tag", b"a"), ("tag", None)]
    assert not keeps("tag = 'a'" + extra, headers=headers)
    assert keeps("tag exists" + extra, headers=headers)


@pytest.mark.parametrize("extra", [ONE_HEADER, TWO_HEADERS], ids=["one-header", "two-headers"])
def test_missing_header(extra: str) -> None:
    headers = [("other", b"a")]
    assert not keeps("tag = 'a'" + extra, headers=headers)
    assert not keeps("tag in ('a', '')" + extra, headers=headers)
    assert not keeps("tag startswith ''" + extra, headers=headers)
    assert not keeps("tag exists" + extra, headers=headers)
    # != and not in are the negation of = and in: a record without the header passes them.
    assert keeps("tag != 'a'" + extra, headers=headers)
    assert keeps("tag not in ('a', 'b')" + extra, headers=headers)
    assert keeps("tag != 'a'" + extra, headers=[])


@pytest.mark.parametrize("extra", [ONE_HEADER, TWO_HEADERS], ids=["one-header", "two-headers"])
def test_null_header_value(extra: str) -> None:
    headers = [("tag", None)]
    assert keeps("tag exists" + extra, headers=headers)
    assert not keeps("tag = ''" + extra, headers=headers)
    assert not keeps("tag in ('', 'a')" + extra, headers=headers)
    assert not keeps("tag startswith 'a'" + extra, headers=headers)
    assert keeps("tag != ''" + extra, headers=headers)
    assert keeps("tag not in ('')" + extra, headers=headers)


# --- and, or, not, parentheses


def test_and_or() -> None:
    headers = [("a", b"1"), ("b", b"2")]
    assert keeps("header('a') = '1' and header('b') = '2'", headers=headers)
    assert not keeps("header('a') = '1' and header('b') = '3'", headers=headers)
    assert keeps("header('a') = '9' or header('b') = '2'", headers=headers)
    assert not keeps("header('a') = '9' or header('b') = '9'", headers=headers)


def test_and_binds_tighter_than_or() -> None:
    # a or b and c: with a true and c false, only `a or (b and c)` is true.
    assert keeps("key = 'a' or key = 'x' and tag exists", key=b"a")
    assert not keeps("(key = 'a' or key = 'x') and tag exists", key=b"a")
    # a and b or c: with a false and c true, only `(a and b) or c` is true.
    assert keeps("key = 'x' and key = 'x' or tag exists", key=b"a", headers=[("tag", b"")])
    assert not keeps("key = 'x' and (key = 'x' or tag exists)", key=b"a", headers=[("tag", b"")])


def test_not_binds_tighter_than_and() -> None:
    # not a and b is (not a) and b: false when b is false, whatever a.
    assert not keeps("not key = 'a' and tag exists", key=b"b")
    assert keeps("not (key = 'a' and tag exists)", key=b"b")
    assert keeps("not key = 'a'", key=b"b")
    assert not keeps("not key = 'a'", key=b"a")


def test_repeated_not() -> None:
    assert keeps("not not key = 'a'", key=b"a")
    assert not keeps("not not not key = 'a'", key=b"a")
    assert keeps("not (not (key = 'a'))", key=b"a")


def test_nested_parentheses() -> None:
    text = "((key = 'a' or (tag = 'x' and not (header('h') exists))) and (key != 'b'))"
    assert keeps(text, key=b"a")
    assert keeps(text, key=b"c", headers=[("tag", b"x")])
    assert not keeps(text, key=b"c", headers=[("tag", b"x"), ("h", None)])


def test_keywords_are_case_insensitive_values_are_not() -> None:
    text = "TAG In ('a') AND NOT Header('h') EXISTS Or KEY StartsWith 'u' oR key NOT IN ('x')"
    assert keeps(text, key=b"x", headers=[("tag", b"a")])
    assert keeps(text, key=b"u1", headers=[("h", b"")])
    assert not keeps(text, key=b"x", headers=[("tag", b"a"), ("h", b"")])
    assert not keeps("tag = 'A'", headers=[("tag", b"a")])


def test_whitespace_is_free() -> None:
    text = "(tag='a'and\n\tkey!='b')or(key\tin('c','d'))"
    assert keeps(text, key=b"x", headers=[("tag", b"a")])
    assert keeps(text, key=b"c")
    assert not keeps(text, key=b"b", headers=[("tag", b"a")])
    assert keeps("   tag exists   \n", headers=[("tag", None)])


# --- strings


def test_a_doubled_quote_is_one_quote() -> None:
    assert keeps("key = 'o''neil'", key=b"o'neil")
    assert keeps("key = ''''", key=b"'")
    assert keeps("key = ''''''", key=b"''")
    assert keeps("key in ('', 'a''')", key=b"a'")
    assert keeps("header('it''s') exists", headers=[("it's", b"")])


def test_strings_compare_as_utf8_bytes() -> None:
    assert keeps("tag = 'café'", headers=[("tag", "café".encode())])
    assert not keeps("tag = 'café'", headers=[("tag", "café".encode("latin-1"))])
    assert keeps(
        "header('ключ') = '日本' and key startswith '😀'",
        key="😀!".encode(),
        headers=[("ключ", "日本".encode())],
    )


def test_a_string_is_data_not_code() -> None:
    sneaky = "x') or True or ('"
    text = "header('" + sneaky.replace("'", "''") + "') = '__import__(''os'')'"
    assert keeps(text, headers=[(sneaky, b"__import__('os')")])
    assert not keeps(text, headers=[(sneaky, b"x")])
    assert not keeps(text, headers=[])


# --- what a filter reads


def test_record_filter_fields() -> None:
    f = parse_filter("tag = 'a' or header('h') exists or key = 'k'", tag_header="kind")
    assert isinstance(f, RecordFilter)
    assert f.text == "tag = 'a' or header('h') exists or key = 'k'"
    assert f.header_names == frozenset({"kind", "h"})
    assert f.reads_key
    assert parse_filter("tag = 'a'").reads_key is False
    assert parse_filter("key exists").header_names == frozenset()


def test_two_parses_of_one_text_are_equal() -> None:
    assert parse_filter("tag = 'a'") == parse_filter("tag = 'a'")
    assert parse_filter("tag = 'a'") != parse_filter("tag = 'a'", tag_header="kind")


def test_matches_returns_a_bool() -> None:
    for text in ["tag = 'a'", "key startswith 'a'", "tag exists or key = 'a'", "header('h') exists"]:
        assert parse_filter(text).matches(b"a", [("tag", b"a"), ("h", None)]) is True
        assert parse_filter(text).matches(b"b", []) is False
        assert parse_filter("not " + text).matches(b"b", []) is True


# --- errors: message, position


@pytest.mark.parametrize(
    ("text", "position", "message"),
    [
        ("", 0, "expected tag, key, header('name'), not or '(' at position 0, found end of filter"),
        ("  \n ", 4, "expected tag, key, header('name'), not or '(' at position 4, found end of filter"),
        ("tga = 'x'", 0, "expected tag, key, header('name'), not or '(' at position 0, found 'tga'"),
        ("tag = 'a' and bogus = 'b'", 14, "found 'bogus'"),
        ("tàg = 'x'", 0, "found 'tàg'"),
        (
            "tag equals 'x'",
            4,
            "expected =, !=, in, not in, exists or startswith at position 4, found 'equals'",
        ),
        ("tag", 3, "expected =, !=, in, not in, exists or startswith at position 3, found end of filter"),
        ("tag == 'x'", 5, "expected a string at position 5, found '='"),
        ('tag = "x"', 6, "expected a string at position 6, found '\"' (strings take single quotes)"),
        ("tag = 5", 6, "expected a string at position 6, found '5'"),
        ("tag =", 5, "expected a string at position 5, found end of filter"),
        ("tag = and key exists", 6, "expected a string at position 6, found 'and'"),
        ("key startswith", 14, "expected a string at position 14, found end of filter"),
        ("tag = 'abc", 6, "expected a closing quote for the string starting at position 6"),
        ("tag = 'it''s", 6, "expected a closing quote for the string starting at position 6"),
        ("tag 'abc", 4, "expected a closing quote for the string starting at position 4"),
        ("(tag = 'a'", 10, "expected and, or or ')' at position 10, found end of filter"),
        ("((tag = 'a') or key exists", 26, "expected and, or or ')' at position 26"),
        ("(tag = 'a' key exists)", 11, "expected and, or or ')' at position 11, found 'key'"),
        ("tag = 'a' 'b'", 10, "expected and, or or end of filter at position 10, found a string"),
        ("tag = 'a')", 9, "expected and, or or end of filter at position 9, found ')'"),
        ("tag exists and", 14, "expected tag, key, header('name'), not or '(' at position 14"),
        ("and tag exists", 0, "found 'and'"),
        ("()", 1, "expected tag, key, header('name'), not or '(' at position 1, found ')'"),
        ("tag in ()", 8, "expected a string (a list holds at least one) at position 8, found ')'"),
        ("tag in", 6, "expected '(' to open the list of in at position 6, found end of filter"),
        ("tag in 'a'", 7, "expected '(' to open the list of in at position 7, found a string"),
        ("tag in ('a',)", 12, "expected a string at position 12, found ')'"),
        ("tag in ('a' 'b')", 12, "expected ',' or ')' at position 12, found a string"),
        ("tag in ('a', 'b'", 16, "expected ',' or ')' at position 16, found end of filter"),
        ("tag not = 'a'", 8, "expected in after not at position 8, found '='"),
        ("tag not", 7, "expected in after not at position 7, found end of filter"),
        ("header = 'x'", 7, "expected '(' after header at position 7, found '='"),
        ("header(tag) = 'x'", 7, "expected the header's name as a string at position 7, found 'tag'"),
        ("header() = 'x'", 7, "expected the header's name as a string at position 7, found ')'"),
        ("header('a' = 'x'", 11, "expected ')' at position 11, found '='"),
        ("tag = '\ud800'", 6, "expected a string of valid Unicode at position 6"),
        ("tag = 'a' or <", 13, "found '<'"),
        ("tag = 'a' or \x00", 13, "found '\\x00'"),
    ],
)
def test_error_position_and_message(text: str, position: int, message: str) -> None:
    e = error(text)
    assert e.position == position
    assert message in str(e)
    assert f"at position {position}" in str(e)
    assert "\n" not in str(e)
    assert isinstance(e, ValueError)


def test_the_first_mistake_is_reported() -> None:
    # A bad character and an unterminated string later on do not hide an earlier mistake.
    assert error("tga = 'x' and < 'abc").position == 0


def test_detail_puts_a_caret_under_the_position() -> None:
    e = error("tag = 'a' and (key = 'b'")
    assert e.detail() == (
        "expected and, or or ')' at position 24, found end of filter\n"
        "tag = 'a' and (key = 'b'\n"
        "                        ^"
    )


def test_detail_shows_the_line_of_a_multiline_filter() -> None:
    e = error("tag = 'a'\n\tand kye = 'b'\nor key exists")
    assert e.position == 15
    assert e.detail().splitlines()[1:] == ["\tand kye = 'b'", "\t    ^"]


def test_detail_of_a_long_line_shows_the_part_around_the_position() -> None:
    text = "tag in (" + ", ".join(f"'{i:04}'" for i in range(900)) + " 'x')"
    e = error(text)
    message, line, caret = e.detail().splitlines()
    assert len(line) <= 80
    assert line[caret.index("^")] == "'"
    assert text.index(" 'x')") + 1 == e.position


def test_error_survives_pickling() -> None:
    e = pickle.loads(pickle.dumps(error("tag = ")))
    assert (e.position, str(e)) == (6, "expected a string at position 6, found end of filter")
    assert e.detail().endswith("      ^")


# --- limits


def test_text_length_limit() -> None:
    base = "tag = 'a'"
    assert keeps(base + " " * (MAX_TEXT_CHARS - len(base)), headers=[("tag", b"a")])
    e = error(base + " " * (MAX_TEXT_CHARS + 1 - len(base)))
    assert e.position == MAX_TEXT_CHARS
    assert str(e) == "filter too long: expected at most 8192 characters at position 8192, found 8193"


def test_parenthesis_depth_limit() -> None:
    assert MAX_DEPTH == 64
    deepest = "(" * MAX_DEPTH + "key = 'a'" + ")" * MAX_DEPTH
    assert keeps(deepest, key=b"a")
    assert not keeps(deepest, key=b"b")
    e = error("(" * (MAX_DEPTH + 1) + "key = 'a'" + ")" * (MAX_DEPTH + 1))
    assert e.position == MAX_DEPTH
    assert "nested too deeply" in str(e)


def test_thousands_of_parentheses_are_an_error_not_a_crash() -> None:
    assert error("(" * 8000).position == MAX_DEPTH
    assert error("(" * 8000 + "key exists" + ")" * 100).position == MAX_DEPTH


def test_not_depth_limit() -> None:
    assert keeps("not " * MAX_DEPTH + "key exists", key=b"k")  # an even number of nots
    assert not keeps("not " * (MAX_DEPTH - 1) + "key exists", key=b"k")
    e = error("not " * (MAX_DEPTH + 1) + "key exists")
    assert e.position == 4 * MAX_DEPTH


def test_thousands_of_nots_are_an_error_not_a_crash() -> None:
    assert error("not " * 2000 + "key exists").position == 4 * MAX_DEPTH
    assert error("NOT(" * 2000).position == 4 * MAX_DEPTH // 2


def test_deep_mixed_nesting_at_the_limit_evaluates() -> None:
    # 32 levels of `not (key = 'x' or (... and ...))`: 64 levels of nesting, alternating and/or.
    text = "key = 'a'"
    for level in range(MAX_DEPTH // 2):
        joiner = "or" if level % 2 else "and"
        text = f"not (key = 'x' {joiner} {text})"
    # The expected value worked out in Python, innermost first.
    expected = {}
    for key in (b"a", b"x", b"z"):
        value = key == b"a"
        for level in range(MAX_DEPTH // 2):
            value = not ((key == b"x") or value) if level % 2 else not ((key == b"x") and value)
        expected[key] = value
    assert {key: keeps(text, key=key) for key in expected} == expected


def test_long_flat_chains_are_not_nesting() -> None:
    text = " or ".join(f"key='{i}'" for i in range(500)) + " and not key exists"
    assert len(text) <= MAX_TEXT_CHARS
    assert keeps(text, key=b"498")
    assert not keeps(text, key=b"499")  # `key='499' and not key exists`
    assert not keeps(text, key=b"500")


def test_in_list_limit() -> None:
    values = [f"'{i}'" for i in range(MAX_IN_VALUES)]
    text = "key in (" + ",".join(values) + ")"
    assert keeps(text, key=b"999")
    assert not keeps(text, key=b"1000")
    longer = "key in (" + ",".join([*values, "'1000'"]) + ")"
    e = error(longer)
    assert e.position == longer.index("'1000'")
    assert str(e) == f"list too long: expected at most 1000 values at position {e.position}"


# --- the compiled filter against a plain interpreter, on random filters


@dataclass(frozen=True)
class Cmp:
    subject: str  # "tag", "key", or a header's name
    op: str
    value: tuple[str, ...]  # the strings compared with; one for =, !=, startswith; none for exists


@dataclass(frozen=True)
class Op:
    op: str  # "and", "or", "not"
    items: tuple[Cmp | Op, ...]


Tree = Cmp | Op
STRINGS = st.sampled_from(["", "a", "b", "ab", "o'n"])
SUBJECTS = st.sampled_from(["tag", "key", "h", "it's"])


@st.composite
def comparisons(draw: st.DrawFn) -> Cmp:
    op = draw(st.sampled_from(["=", "!=", "in", "not in", "exists", "startswith"]))
    count = {"exists": 0, "in": 3, "not in": 3}.get(op, 1)
    values = tuple(draw(STRINGS) for _ in range(draw(st.integers(1, count)) if count > 1 else count))
    return Cmp(draw(SUBJECTS), op, values)


def _joins(children: st.SearchStrategy[Tree]) -> st.SearchStrategy[Tree]:
    return st.one_of(
        st.builds(Op, st.sampled_from(["and", "or"]), st.lists(children, min_size=2, max_size=3).map(tuple)),
        st.builds(Op, st.just("not"), st.tuples(children)),
    )


trees = st.recursive(comparisons(), _joins, max_leaves=12)


def quote(s: str) -> str:
    return "'" + s.replace("'", "''") + "'"


def render(tree: Tree) -> str:
    """Filter text for `tree`, fully parenthesized so the text says what the tree says."""
    if isinstance(tree, Op):
        if tree.op == "not":
            return f"not ({render(tree.items[0])})"
        return "(" + f" {tree.op} ".join(render(i) for i in tree.items) + ")"
    subject = tree.subject if tree.subject in ("tag", "key") else f"header({quote(tree.subject)})"
    if tree.op in ("in", "not in"):
        return f"{subject} {tree.op} (" + ", ".join(quote(v) for v in tree.value) + ")"
    if tree.op == "exists":
        return f"{subject} exists"
    return f"{subject} {tree.op} {quote(tree.value[0])}"


_MISSING = object()


def evaluate(tree: Tree, key: bytes | None, headers: Headers) -> bool:
    """What the language says `tree` keeps, without any of the module's tricks."""
    if isinstance(tree, Op):
        results = [evaluate(i, key, headers) for i in tree.items]
        return {"and": all, "or": any, "not": lambda r: not r[0]}[tree.op](results)
    if tree.subject == "key":
        value: object = key if key is not None else _MISSING
        exists = key is not None
    else:
        name = "tag" if tree.subject == "tag" else tree.subject
        found = [v for n, v in headers if n == name]
        exists = bool(found)
        value = _MISSING if not found or found[-1] is None else found[-1]
    strings = [s.encode() for s in tree.value]
    equal = value is not _MISSING and value == strings[0] if strings else False
    inside = value is not _MISSING and value in strings
    return {
        "=": lambda: equal,
        "!=": lambda: not equal,
        "in": lambda: inside,
        "not in": lambda: not inside,
        "exists": lambda: exists,
        "startswith": lambda: isinstance(value, bytes) and value.startswith(strings[0]),
    }[tree.op]()


VALUES = st.sampled_from([None, b"", b"a", b"b", b"ab", b"abc", b"o'n"])
records = st.tuples(
    VALUES, st.lists(st.tuples(st.sampled_from(["tag", "h", "it's", "x"]), VALUES), max_size=5)
)


@settings(max_examples=400, deadline=None)
@given(trees, st.lists(records, min_size=1, max_size=8))
def test_compiled_filter_agrees_with_the_interpreter(tree: Tree, samples: list[tuple]) -> None:
    f = parse_filter(render(tree))
    for key, headers in samples:
        assert f.matches(key, headers) is evaluate(tree, key, headers), (render(tree), key, headers)
