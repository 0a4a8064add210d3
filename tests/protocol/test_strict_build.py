"""Building a message refuses a key that is no field of its struct in any version.

Building fills every field a dict lacks with its default, so a misspelt key used to go out as
that default without a word. A key of a field that only other versions have stays allowed: one
dict may serve every version of an answer.
"""

from __future__ import annotations

import io
import typing
import uuid
from types import ModuleType

import pytest
from construct import ConstructError

from kbroker.cluster.replica_manager import AppendResult
from kbroker.handlers import produce as produce_handler
from protocol.connection import ClientProtocol, RequestHeader, UnknownFieldError, encode_response
from protocol.errors import ErrorCode, KafkaError
from protocol.messages import (
    BY_KEY,
    consumer_protocol_assignment,
    consumer_protocol_subscription,
    fetch,
    produce,
)
from protocol.primitives import Field, Int16, Int32, KArray, KStruct, build_into
from tests.protocol.test_connection import joined

PRODUCE, FETCH, METADATA = 0, 1, 3


def built(con: KStruct, obj: object) -> bytes:
    out = io.BytesIO()
    build_into(con, obj, out)
    return out.getvalue()


def answer(api_key: int, version: int, body: object) -> bytes:
    return joined(encode_response(RequestHeader(api_key, version, 7, None), body))


def test_an_unknown_key_is_refused_naming_the_struct_and_the_key() -> None:
    entry = KStruct(Field("index", Int32, 0), Field("error_code", Int16, 0), name="Entry")
    message = KStruct(Field("entries", KArray(entry), []), name="Answer")
    assert built(message, {"entries": [{"index": 1, "error_code": 3}]}) == bytes.fromhex("00000001" "00000001" "0003")
    with pytest.raises(UnknownFieldError) as caught:
        built(message, {"entries": [{"index": 1, "eror_code": 3, "extra": 0}]})
    error = caught.value
    assert (error.struct, error.keys, error.path) == ("Entry", ["eror_code", "extra"], ["entries"])
    assert "'eror_code', 'extra'" in str(error) and "Entry at entries" in str(error)
    assert isinstance(error, ConstructError)  # "cannot be built", as every build failure


def test_a_key_of_another_version_is_accepted_and_leaves_the_bytes_alone() -> None:
    """Produce v3's partition answer has no log_start_offset (v5+) nor record_errors (v8+):
    one dict built for every version goes out at v3 as if they were not there."""
    partition = {"index": 0, "error_code": 0, "base_offset": 42, "log_append_time_ms": -1}
    everything = {**partition, "log_start_offset": 0, "record_errors": [], "error_message": None}
    body = {"responses": [{"name": "t", "partition_responses": [partition]}], "throttle_time_ms": 0}
    wide = {"responses": [{"name": "t", "partition_responses": [everything]}], "throttle_time_ms": 0,
            "node_endpoints": []}
    assert answer(PRODUCE, 3, wide) == answer(PRODUCE, 3, body)


def test_a_misspelt_response_key_names_message_version_struct_and_path() -> None:
    partition = {"index": 0, "error_code": 0, "base_offset": 42, "log_start_ofset": 0}
    body = {"responses": [{"name": "t", "partition_responses": [partition]}], "throttle_time_ms": 0}
    with pytest.raises(UnknownFieldError) as caught:
        answer(PRODUCE, 9, body)
    text = str(caught.value)
    assert text.startswith("ProduceResponse v9: unknown key(s) 'log_start_ofset' in PartitionProduceResponse")
    assert "at responses.partition_responses" in text


def test_a_misspelt_key_in_a_tagged_struct_is_refused() -> None:
    """Fetch v12+ sends current_leader as a tagged field: its keys are checked too."""
    partition = {"partition_index": 0, "records": b"", "current_leader": {"leader_id": 1, "leader_epok": 2}}
    body = {"responses": [{"topic": "t", "partitions": [partition]}]}
    with pytest.raises(UnknownFieldError) as caught:
        answer(FETCH, 12, body)
    assert caught.value.struct == "LeaderIdAndEpoch"
    assert caught.value.path == ["responses", "partitions", "current_leader"]
    assert str(caught.value).startswith("FetchResponse v12:")
    partition["current_leader"] = {"leader_id": 1, "leader_epoch": 2}
    assert answer(FETCH, 12, body)


def test_a_misspelt_request_key_is_refused_by_the_client_encoder() -> None:
    with pytest.raises(UnknownFieldError, match=r"MetadataRequest v12: unknown key\(s\) 'allow_auto_topic_creaton'"):
        ClientProtocol().encode_request(METADATA, 12, {"topics": None, "allow_auto_topic_creaton": False})


@pytest.mark.parametrize("version", range(produce_handler.MIN_VERSION, produce_handler.MAX_VERSION + 1))
def test_a_handler_built_answer_encodes_and_a_misspelt_copy_does_not(version: int) -> None:
    """The Produce handler's partition error answer is one dict for every version; with one key
    misspelt, every version refuses it instead of sending that field as its default."""
    error = KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER, "not the leader")
    result = produce_handler._answer(3, AppendResult.failed(error))
    body: produce.ProduceResponse = {"responses": [{"name": "t", "partition_responses": [result]}],
                                     "throttle_time_ms": 0}
    parsed = parse_answer(PRODUCE, version, answer(PRODUCE, version, body))
    assert parsed.responses[0].partition_responses[0].error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
    misspelt = {("error_mesage" if k == "error_message" else k): v for k, v in result.items()}
    body["responses"][0]["partition_responses"] = [misspelt]  # type: ignore[index]
    with pytest.raises(UnknownFieldError, match=f"ProduceResponse v{version}: unknown key.*'error_mesage'"):
        answer(PRODUCE, version, body)


def parse_answer(api_key: int, version: int, data: bytes):
    client = ClientProtocol()
    client._pending[7] = (BY_KEY[api_key], version)
    client.receive_data(data)
    response = client.next_response()
    assert response is not None
    return response[1]


# --- the generated TypedDicts describe exactly what building accepts ---------------------------


def _typed_dict_in(annotation: object) -> type | None:
    if typing.is_typeddict(annotation):
        return annotation  # type: ignore[return-value]
    for arg in typing.get_args(annotation):
        found = _typed_dict_in(arg)
        if found is not None:
            return found
    return None


def _struct_in(con: object) -> KStruct | None:
    if isinstance(con, KArray):
        con = con.element
    return con if isinstance(con, KStruct) else None


def _check(struct: KStruct, shape: type, where: str) -> int:
    hints = typing.get_type_hints(shape)
    assert set(hints) == struct.known, where
    checked = 1
    for field in (*struct.fields, *struct.tagged.values()):
        nested = _struct_in(field.con)
        if nested is not None:
            inner = _typed_dict_in(hints[field.name])
            assert inner is not None, f"{where}.{field.name}"
            checked += _check(nested, inner, f"{where}.{field.name}")
    return checked


def _tables(module: ModuleType) -> list[tuple[str, dict[int, KStruct]]]:
    if hasattr(module, "SCHEMA"):
        name = {consumer_protocol_subscription: "ConsumerProtocolSubscription",
                consumer_protocol_assignment: "ConsumerProtocolAssignment"}[module]
        return [(name, module.SCHEMA)]
    return [(f"{module.NAME}Request", module.REQUEST), (f"{module.NAME}Response", module.RESPONSE)]


@pytest.mark.parametrize("module", [*BY_KEY.values(), consumer_protocol_subscription, consumer_protocol_assignment],
                         ids=lambda m: m.__name__.rsplit(".", 1)[-1])
def test_typed_dicts_name_every_field_building_accepts(module: ModuleType) -> None:
    tables = _tables(module)
    if not any(table for _, table in tables):
        pytest.skip("no stable version of this API yet")
    for name, table in tables:
        for version, struct in table.items():
            assert _check(struct, getattr(module, name), f"{name} v{version}")


def test_typed_dicts_carry_python_types() -> None:
    hints = typing.get_type_hints(fetch.FetchableTopicResponse)
    assert hints["topic_id"] is uuid.UUID
    assert typing.get_type_hints(produce.PartitionProduceResponse)["error_message"] == str | None
