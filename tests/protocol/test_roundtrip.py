"""parse(build(x)) == x and build(parse(build(x))) == build(x) for every declaration.

Values come from strategies derived from the KStruct declarations themselves, so every
request and response version of every API is covered, plus the headers and the
consumer-protocol data schemas.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings

from protocol.primitives import KStruct
from tests.protocol.strategies import (
    api_structs,
    build,
    data_structs,
    expected_parse,
    normalise,
    parse_exact,
    value_strategy,
)

CASES = [*api_structs(), *data_structs()]
ROUNDTRIP_SETTINGS = settings(
    max_examples=15,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def check_roundtrip(con: KStruct, value: Any) -> None:
    data = build(con, value)
    parsed = parse_exact(con, data)
    assert normalise(parsed) == expected_parse(con, value)
    assert build(con, parsed) == data


@pytest.mark.parametrize("con", [c for _, c in CASES], ids=[i for i, _ in CASES])
def test_roundtrip(con: KStruct) -> None:
    @ROUNDTRIP_SETTINGS
    @given(value_strategy(con))
    def run(value: Any) -> None:
        check_roundtrip(con, value)

    run()


@pytest.mark.parametrize("con", [c for _, c in CASES], ids=[i for i, _ in CASES])
def test_empty_dict_builds_defaults(con: KStruct) -> None:
    """Missing keys build as the fields' defaults and parse back as `defaults()`."""
    data = build(con, {})
    assert normalise(parse_exact(con, data)) == normalise(con.defaults())
    assert build(con, con.defaults()) == data


def test_cases_cover_every_api_version() -> None:
    from protocol.messages import BY_KEY

    expected = sum(len(api.REQUEST) + len(api.RESPONSE) for api in BY_KEY.values())
    assert len(list(api_structs())) == expected > 300
    assert {i.rsplit("-", 1)[0] for i, _ in data_structs()} == {
        "request_header",
        "response_header",
        "consumer_protocol_subscription",
        "consumer_protocol_assignment",
    }
