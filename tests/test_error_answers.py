"""Error answers for every API the broker serves, at every version it serves.

Requests come from strategies derived from the request declarations (any shape a client can
send, nulls included); the error answer built for each must encode with the response schema
and carry the error where Kafka's getErrorResponse puts it.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings

from kbroker.handlers import handlers
from kbroker.handlers.error_answers import error_answer
from protocol.errors import ErrorCode
from protocol.messages import BY_KEY
from protocol.primitives import KArray, KStruct
from tests.protocol.strategies import build, parse_exact, value_strategy

SERVED = [(key, version) for key, module in sorted(handlers().items())
          for version in range(module.MIN_VERSION, module.MAX_VERSION + 1)]
CODE = ErrorCode.INVALID_REQUEST


def error_codes(con: KStruct, value: Any) -> list[int]:
    """Every error_code in a parsed answer, depth first."""
    found = []
    for field in (*con.fields, *con.tagged.values()):
        item = value.get(field.name)
        if field.name == "error_code":
            found.append(item)
        elif isinstance(field.con, KArray) and isinstance(field.con.element, KStruct) and item:
            for entry in item:
                found.extend(error_codes(field.con.element, entry))
    return found


@pytest.mark.parametrize(("api_key", "version"), SERVED)
@settings(max_examples=8, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=__import__("hypothesis").strategies.data())
def test_every_error_answer_encodes_and_carries_the_error(api_key: int, version: int, data) -> None:
    api = BY_KEY[api_key]
    request_schema = api.REQUEST[version]
    # Through the wire and back, so the handler-side view (defaults filled in) is what is tested.
    request = parse_exact(request_schema, build(request_schema, data.draw(value_strategy(request_schema))))
    body = error_answer(api, handlers()[api_key], version, request, CODE, "refused")
    answer = parse_exact(api.RESPONSE[version], build(api.RESPONSE[version], body))
    codes = error_codes(api.RESPONSE[version], answer)
    has_top_level = any(f.name == "error_code" for f in api.RESPONSE[version].fields)
    if has_top_level:
        assert codes[0] == CODE
    # Every entry the answer carries says the same; an answer with no entries and no top-level
    # code can only be one whose request named nothing.
    assert all(code == CODE for code in codes)


def test_produce_entries_mirror_the_request() -> None:
    api = BY_KEY[0]
    request = {"acks": 1, "timeout_ms": 100, "transactional_id": None,
               "topic_data": [{"name": "a", "partition_data": [{"index": 3, "records": b""},
                                                                {"index": 5, "records": b""}]}]}
    body = error_answer(api, handlers()[0], 9, request, CODE, None)
    assert body["responses"] == [{"name": "a", "partition_responses": [
        {"index": 3, "error_code": CODE, "error_message": None},
        {"index": 5, "error_code": CODE, "error_message": None}]}]


def test_describe_groups_names_each_group_of_the_request() -> None:
    api = BY_KEY[15]
    body = error_answer(api, handlers()[15], 5, {"groups": ["g1", "g2"], "include_authorized_operations": False},
                        CODE, None)
    assert [(g["group_id"], g["error_code"]) for g in body["groups"]] == [("g1", CODE), ("g2", CODE)]
