"""Byte-for-byte agreement with kafka-python 3.0.12's encoders and decoders.

kafka-python 3.x generates its messages from Kafka's JSON specs too (a newer Kafka
release, with old versions dropped), as `ApiMessage` classes indexed by version.
Where both libraries declare the same shape for an (api, version) we check that

* the same logical message encodes to the same bytes in both (hand-written cases for
  common APIs, and generated values for every shared request and response version);
* kafka-python decodes our bytes into the same fields, and re-encodes them unchanged;
* whole frames (size, request/response header, body) agree.
"""

from __future__ import annotations

import uuid
from typing import Any

import kafka.protocol.admin
import kafka.protocol.consumer
import kafka.protocol.metadata
import kafka.protocol.producer
import kafka.protocol.sasl  # noqa: F401  (registers SaslHandshake/SaslAuthenticate)
import pytest
from construct import Construct
from hypothesis import HealthCheck, given, settings
from kafka.protocol.admin import CreateTopicsRequest, DeleteTopicsRequest, DescribeConfigsRequest
from kafka.protocol.api_message import ApiMessage
from kafka.protocol.consumer import (
    FetchRequest,
    HeartbeatRequest,
    JoinGroupRequest,
    ListOffsetsRequest,
    OffsetCommitRequest,
    OffsetFetchRequest,
    SyncGroupRequest,
)
from kafka.protocol.metadata import (
    ApiVersionsRequest,
    ApiVersionsResponse,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    MetadataRequest,
    MetadataResponse,
)
from kafka.protocol.producer import ProduceRequest, ProduceResponse
from kafka.protocol.schemas.fields.array import ArrayField
from kafka.protocol.schemas.fields.codecs import BitField
from kafka.protocol.schemas.fields.struct import StructField
from kafka.protocol.schemas.fields.struct_array import StructArrayField

from protocol.connection import ClientProtocol, ServerProtocol, decode_request
from protocol.messages import BY_KEY
from protocol.primitives import (
    ZERO_UUID,
    Bool,
    Float64,
    Int8,
    Int16,
    Int32,
    Int64,
    KArray,
    KBytes,
    KString,
    KStruct,
    UInt16,
    Uuid,
)
from tests.protocol.strategies import build, expected_parse, normalise, parse_exact, value_strategy

# --- kafka-python's classes and the shapes both libraries declare --------------------


def _kp_classes() -> dict[tuple[int, str], type[ApiMessage]]:
    found: dict[tuple[int, str], type[ApiMessage]] = {}
    pending = list(ApiMessage.__subclasses__())
    while pending:
        cls = pending.pop()
        pending.extend(cls.__subclasses__())
        if "_json" in cls.__dict__ and cls.__dict__.get("_class_version") is None:
            found[(cls.API_KEY, cls.type)] = cls
    return found


KP = _kp_classes()
_PRIMITIVE_NAMES = {
    id(Int8): "int8",
    id(Int16): "int16",
    id(Int32): "int32",
    id(Int64): "int64",
    id(UInt16): "uint16",
    id(Float64): "float64",
    id(Bool): "bool",
    id(Uuid): "uuid",
}
# kafka-python patches some authorized-operations int32 fields into a "bitfield" (a set).
_KP_TYPE_ALIASES = {"bitfield": "int32", "records": "bytes"}
BITFIELD_NULL = -(1 << 31)  # kafka-python's None: only bit 31 set


def our_shape(con: Construct) -> tuple:
    if isinstance(con, KStruct):
        tagged = tuple((tag, our_shape(f.con)) for tag, f in sorted(con.tagged.items()))
        return ("struct", tuple(our_shape(f.con) for f in con.fields), tagged)
    if isinstance(con, KArray):
        return ("array", con.nullable, our_shape(con.element))
    if isinstance(con, KString):
        return ("string", con.nullable)
    if isinstance(con, KBytes):
        return ("bytes", con.nullable)
    return (_PRIMITIVE_NAMES[id(con)],)


def kp_shape(field: Any, version: int, element: bool = False) -> tuple:
    """The shape of a kafka-python field; struct nullability is left out on purpose
    (see test_nullable_struct_field_has_presence_byte)."""
    if isinstance(field, StructArrayField):
        return ("array", field.nullable_for_version_q(version), kp_struct_shape(field.array_of, version))
    if isinstance(field, ArrayField):
        return ("array", field.nullable_for_version_q(version), kp_shape(field.array_of, version, element=True))
    if isinstance(field, StructField):
        return kp_struct_shape(field, version)
    type_str = _KP_TYPE_ALIASES.get(field.type_str, field.type_str)
    if type_str in ("string", "bytes"):
        return (type_str, not element and field.nullable_for_version_q(version))
    return (type_str,)


def kp_struct_shape(struct: StructField, version: int) -> tuple:
    tagged = sorted((f.tag, kp_shape(f, version)) for f in struct.tagged_fields(version)._fields)
    return ("struct", tuple(kp_shape(f, version) for f in struct.untagged_fields(version)), tuple(tagged))


# --- converting values between the two libraries -------------------------------------


def to_kp(struct: StructField, version: int, con: KStruct, value: dict, cls: Any = None) -> Any:
    kwargs = {
        kf.name: to_kp_value(kf, version, f.con, value[f.name])
        for kf, f in zip(struct.untagged_fields(version), con.fields, strict=True)
    }
    for kf in struct.tagged_fields(version)._fields:
        field = con.tagged[kf.tag]
        if not field.is_default(value.get(field.name)):
            kwargs[kf.name] = to_kp_value(kf, version, field.con, value[field.name])
    return (struct.data_class if cls is None else cls)(version=version, **kwargs)


def to_kp_value(kf: Any, version: int, con: Construct, value: Any) -> Any:
    if value is None:
        return None
    if isinstance(kf, StructArrayField):
        return [to_kp(kf.array_of, version, con.element, v) for v in value]
    if isinstance(kf, ArrayField):
        return [to_kp_value(kf.array_of, version, con.element, v) for v in value]
    if isinstance(kf, StructField):
        return to_kp(kf, version, con, value)
    if kf.type_str == "bitfield":
        return BitField.from_32_bit_field(value)
    return value


def from_kp(struct: StructField, version: int, con: KStruct, obj: Any) -> dict:
    out = {
        f.name: from_kp_value(kf, version, f.con, getattr(obj, kf.name))
        for kf, f in zip(struct.untagged_fields(version), con.fields, strict=True)
    }
    for kf in struct.tagged_fields(version)._fields:
        field = con.tagged[kf.tag]
        value = getattr(obj, kf.name)
        # kafka-python leaves an absent tagged struct as None; ours holds its default.
        absent = value is None and isinstance(field.con, KStruct)
        out[field.name] = normalise(field.default_value()) if absent else from_kp_value(kf, version, field.con, value)
    for f in con.absent:
        out[f.name] = normalise(f.default_value())
    return out


def from_kp_value(kf: Any, version: int, con: Construct, value: Any) -> Any:
    if con is Uuid:
        return value or ZERO_UUID  # kafka-python decodes the zero UUID as None
    if kf.type_str == "bitfield":
        bits = BitField.to_32_bit_field(value if value is not None else {31})
        return bits - (1 << 32) if bits & (1 << 31) else bits
    if value is None:
        return None
    if isinstance(kf, StructArrayField):
        return [from_kp(kf.array_of, version, con.element, v) for v in value]
    if isinstance(kf, ArrayField):
        return [from_kp_value(kf.array_of, version, con.element, v) for v in value]
    if isinstance(kf, StructField):
        return from_kp(kf, version, con, value)
    return normalise(value)


def kp_reencode(message: ApiMessage) -> bytes:
    """Encode a message kafka-python decoded (it carries its version, but no `_header`
    slot unless decoded with a header, which `encode` expects)."""
    try:
        object.__getattribute__(message, "_header")
    except AttributeError:
        message._header = None
    return message.encode()


# --- every (api, direction, version) both libraries know ----------------------------

# Nullable struct fields (KIP-893) carry an int8 presence byte that our generated
# declarations lack; see test_nullable_struct_field_has_presence_byte.


def _pairs() -> list:
    params = []
    for key in sorted(BY_KEY):
        api = BY_KEY[key]
        for direction in ("request", "response"):
            for version, con in sorted(getattr(api, direction.upper()).items()):
                pid = f"{api.NAME}-{direction}-v{version}"
                cls = KP.get((key, direction))
                reason = None
                if cls is None:
                    reason = f"kafka-python 3.0.12 has no {api.NAME} {direction}"
                elif not cls.valid_versions[0] <= version <= cls.valid_versions[1]:
                    reason = f"kafka-python supports {api.NAME} v{cls.valid_versions[0]}-{cls.valid_versions[1]} only"
                elif our_shape(con) != kp_struct_shape(cls._struct, version):
                    reason = f"kafka-python's {api.NAME} v{version} {direction} spec differs from ours"
                marks = [pytest.mark.skip(reason=reason)] if reason else []
                params.append(pytest.param(key, direction, version, id=pid, marks=marks))
    return params


PAIRS = _pairs()
AGREEMENT_SETTINGS = settings(
    max_examples=8,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@pytest.mark.parametrize(("api_key", "direction", "version"), PAIRS)
def test_generated_values_agree(api_key: int, direction: str, version: int) -> None:
    api = BY_KEY[api_key]
    con: KStruct = getattr(api, direction.upper())[version]
    cls = KP[(api_key, direction)]

    @AGREEMENT_SETTINGS
    @given(value_strategy(con))
    def run(value: dict) -> None:
        if api_key == 18 and direction == "response":
            value = {**value, "error_code": 0}  # kafka-python decodes error answers as v0
        ours = build(con, value)
        theirs = to_kp(cls._struct, version, con, value, cls=cls[version]).encode(version=version)
        assert theirs == ours
        decoded = cls[version].decode(ours)
        assert from_kp(cls._struct, version, con, decoded) == normalise(parse_exact(con, ours))
        assert kp_reencode(decoded) == ours

    run()


def test_enough_pairs_are_compared() -> None:
    compared = [p for p in PAIRS if not any(m.name == "skip" for m in p.marks)]
    apis = {p.values[0] for p in compared}
    flexible = [p for p in compared if BY_KEY[p.values[0]].FLEXIBLE_FROM is not None
                and p.values[2] >= BY_KEY[p.values[0]].FLEXIBLE_FROM]
    assert len(apis) >= 40 and len(compared) >= 200 and len(flexible) >= 80, (len(apis), len(compared))


# --- hand-written logical messages ---------------------------------------------------

TOPIC_ID = uuid.UUID("5f1e0a4e-2c3d-4b5a-9e8f-0123456789ab")
RECORDS = b"\x00" * 8 + b"\x00\x00\x00\x31" + bytes(range(0x31))  # opaque to both libraries


def _metadata(version: int) -> tuple[dict, Any]:
    topic_fields: dict[str, Any] = {"name": "orders"}
    if version >= 10:
        topic_fields["topic_id"] = TOPIC_ID
    ours: dict[str, Any] = {"topics": [dict(topic_fields)], "allow_auto_topic_creation": False}
    kwargs: dict[str, Any] = {}
    if version >= 4:
        kwargs["allow_auto_topic_creation"] = False
    if 8 <= version <= 10:
        ours["include_cluster_authorized_operations"] = True
        kwargs["include_cluster_authorized_operations"] = True
    theirs = MetadataRequest[version](topics=[MetadataRequest.MetadataRequestTopic(**topic_fields)], **kwargs)
    return ours, theirs


def _produce(version: int) -> tuple[dict, Any]:
    ours = {
        "transactional_id": None,
        "acks": -1,
        "timeout_ms": 30000,
        "topic_data": [{"name": "orders", "partition_data": [{"index": 2, "records": RECORDS}]}],
    }
    T = ProduceRequest.TopicProduceData
    theirs = ProduceRequest[version](
        transactional_id=None, acks=-1, timeout_ms=30000,
        topic_data=[T(name="orders", partition_data=[T.PartitionProduceData(index=2, records=RECORDS)])],
    )
    return ours, theirs


def _fetch(version: int) -> tuple[dict, Any]:
    partition = {"partition": 0, "fetch_offset": 42, "partition_max_bytes": 1 << 20}
    if version >= 5:
        partition["log_start_offset"] = -1
    if version >= 9:
        partition["current_leader_epoch"] = 3
    topic: dict[str, Any] = {"topic_id": TOPIC_ID} if version >= 13 else {"topic": "orders"}
    top = {"replica_id": -1, "max_wait_ms": 500, "min_bytes": 1, "max_bytes": 52428800, "isolation_level": 1}
    if version >= 7:
        top |= {"session_id": 0, "session_epoch": -1}
    if version >= 11:
        top["rack_id"] = "rack-a"
    ours = {**top, "topics": [{**topic, "partitions": [partition]}], "forgotten_topics_data": []}
    T = FetchRequest.FetchTopic
    kp_topic = T(partitions=[T.FetchPartition(**partition)], **topic)
    extra = {"forgotten_topics_data": []} if version >= 7 else {}
    return ours, FetchRequest[version](topics=[kp_topic], **top, **extra)


def _list_offsets(version: int) -> tuple[dict, Any]:
    partition: dict[str, Any] = {"partition_index": 1, "timestamp": -2}
    if version >= 4:
        partition["current_leader_epoch"] = -1
    top: dict[str, Any] = {"replica_id": -1}
    if version >= 2:
        top["isolation_level"] = 1
    ours = {**top, "topics": [{"name": "orders", "partitions": [partition]}]}
    T = ListOffsetsRequest.ListOffsetsTopic
    theirs = ListOffsetsRequest[version](topics=[T(name="orders", partitions=[T.ListOffsetsPartition(**partition)])], **top)
    return ours, theirs


def _api_versions(version: int) -> tuple[dict, Any]:
    if version < 3:
        return {}, ApiVersionsRequest[version]()
    names = {"client_software_name": "kbroker-tests", "client_software_version": "0.1.0-ünïcode"}
    return names, ApiVersionsRequest[version](**names)


def _create_topics(version: int) -> tuple[dict, Any]:
    T = CreateTopicsRequest.CreatableTopic
    topic = {"name": "orders", "num_partitions": 3, "replication_factor": 1}
    ours = {
        "topics": [{**topic, "assignments": [], "configs": [{"name": "cleanup.policy", "value": "compact"},
                                                            {"name": "retention.ms", "value": None}]}],
        "timeout_ms": 10000,
        "validate_only": True,
    }
    configs = [T.CreatableTopicConfig(name="cleanup.policy", value="compact"),
               T.CreatableTopicConfig(name="retention.ms", value=None)]
    theirs = CreateTopicsRequest[version](topics=[T(assignments=[], configs=configs, **topic)],
                                          timeout_ms=10000, validate_only=True)
    return ours, theirs


def _delete_topics(version: int) -> tuple[dict, Any]:
    if version >= 6:
        ours = {"topics": [{"name": "orders", "topic_id": ZERO_UUID}, {"name": None, "topic_id": TOPIC_ID}],
                "timeout_ms": 5000}
        S = DeleteTopicsRequest.DeleteTopicState
        return ours, DeleteTopicsRequest[version](
            topics=[S(name="orders", topic_id=None), S(name=None, topic_id=TOPIC_ID)], timeout_ms=5000)
    ours = {"topic_names": ["orders", "payments"], "timeout_ms": 5000}
    return ours, DeleteTopicsRequest[version](topic_names=["orders", "payments"], timeout_ms=5000)


def _find_coordinator(version: int) -> tuple[dict, Any]:
    if version >= 4:
        ours = {"key_type": 0, "coordinator_keys": ["group-a", "group-b"]}
    else:
        ours = {"key": "group-a"} | ({"key_type": 1} if version >= 1 else {})
    return ours, FindCoordinatorRequest[version](**ours)


def _join_group(version: int) -> tuple[dict, Any]:
    top: dict[str, Any] = {"group_id": "g", "session_timeout_ms": 10000, "member_id": "", "protocol_type": "consumer"}
    if version >= 1:
        top["rebalance_timeout_ms"] = 300000
    if version >= 5:
        top["group_instance_id"] = None
    if version >= 8:
        top["reason"] = "rejoin ✓"
    protocols = [{"name": "range", "metadata": b"\x00\x01meta"}, {"name": "roundrobin", "metadata": b""}]
    P = JoinGroupRequest.JoinGroupRequestProtocol
    theirs = JoinGroupRequest[version](protocols=[P(**p) for p in protocols], **top)
    return {**top, "protocols": protocols}, theirs


def _sync_group(version: int) -> tuple[dict, Any]:
    top: dict[str, Any] = {"group_id": "g", "generation_id": 7, "member_id": "m-1"}
    if version >= 3:
        top["group_instance_id"] = "static-1"
    if version >= 5:
        top |= {"protocol_type": "consumer", "protocol_name": "range"}
    assignments = [{"member_id": "m-1", "assignment": b"\x00\x00abc"}]
    A = SyncGroupRequest.SyncGroupRequestAssignment
    return {**top, "assignments": assignments}, SyncGroupRequest[version](
        assignments=[A(**a) for a in assignments], **top)


def _heartbeat(version: int) -> tuple[dict, Any]:
    top: dict[str, Any] = {"group_id": "g", "generation_id": 7, "member_id": "m-1"}
    if version >= 3:
        top["group_instance_id"] = None
    return top, HeartbeatRequest[version](**top)


def _offset_commit(version: int) -> tuple[dict, Any]:
    top: dict[str, Any] = {"group_id": "g", "generation_id_or_member_epoch": 7, "member_id": "m-1"}
    if 2 <= version <= 4:
        top["retention_time_ms"] = -1
    if version >= 7:
        top["group_instance_id"] = None
    partition: dict[str, Any] = {"partition_index": 0, "committed_offset": 100, "committed_metadata": ""}
    if version >= 6:
        partition["committed_leader_epoch"] = 2
    T = OffsetCommitRequest.OffsetCommitRequestTopic
    theirs = OffsetCommitRequest[version](
        topics=[T(name="orders", partitions=[T.OffsetCommitRequestPartition(**partition)])], **top)
    return {**top, "topics": [{"name": "orders", "partitions": [partition]}]}, theirs


def _offset_fetch(version: int) -> tuple[dict, Any]:
    if version >= 8:
        G = OffsetFetchRequest.OffsetFetchRequestGroup
        group = {"group_id": "g", "topics": None}
        if version >= 9:
            group |= {"member_id": None, "member_epoch": -1}
        return ({"groups": [group], "require_stable": True},
                OffsetFetchRequest[version](groups=[G(**group)], require_stable=True))
    T = OffsetFetchRequest.OffsetFetchRequestTopic
    extra = {"require_stable": False} if version >= 7 else {}
    ours = {"group_id": "g", "topics": [{"name": "orders", "partition_indexes": [0, 1, 2]}], **extra}
    theirs = OffsetFetchRequest[version](
        group_id="g", topics=[T(name="orders", partition_indexes=[0, 1, 2])], **extra)
    return ours, theirs


def _describe_configs(version: int) -> tuple[dict, Any]:
    resource = {"resource_type": 2, "resource_name": "orders", "configuration_keys": None}
    top: dict[str, Any] = {"include_synonyms": True} if version >= 1 else {}
    if version >= 3:
        top["include_documentation"] = True
    R = DescribeConfigsRequest.DescribeConfigsResource
    return {"resources": [resource], **top}, DescribeConfigsRequest[version](resources=[R(**resource)], **top)


REQUEST_CASES = {
    3: (_metadata, [0, 1, 4, 8, 9, 10, 12]),
    0: (_produce, [3, 7, 8, 9, 11]),
    1: (_fetch, [4, 7, 11, 12, 13, 17]),
    2: (_list_offsets, [1, 2, 4, 6, 10]),
    18: (_api_versions, [0, 2, 3, 4]),
    19: (_create_topics, [2, 4, 5, 7]),
    20: (_delete_topics, [1, 3, 4, 6]),
    10: (_find_coordinator, [0, 1, 3, 4, 6]),
    11: (_join_group, [0, 1, 5, 6, 8, 9]),
    14: (_sync_group, [0, 3, 4, 5]),
    12: (_heartbeat, [0, 3, 4]),
    8: (_offset_commit, [2, 5, 6, 8, 9]),
    9: (_offset_fetch, [1, 5, 6, 7, 8, 9]),
    32: (_describe_configs, [1, 3, 4]),
}
REQUEST_PARAMS = [
    pytest.param(key, version, id=f"{BY_KEY[key].NAME}-v{version}")
    for key, (_, versions) in REQUEST_CASES.items()
    for version in versions
]


@pytest.mark.parametrize(("api_key", "version"), REQUEST_PARAMS)
def test_request_encodes_like_kafka_python(api_key: int, version: int) -> None:
    ours, theirs = REQUEST_CASES[api_key][0](version)
    api = BY_KEY[api_key]
    assert build(api.REQUEST[version], ours) == theirs.encode(version=version)

    # Whole frames, header included, and the broker's decoder reads kafka-python's frame.
    correlation_id, frame = ClientProtocol(client_id="kbroker-test").encode_request(api_key, version, ours)
    theirs.with_header(correlation_id=correlation_id, client_id="kbroker-test")
    kp_frame = theirs.encode(version=version, header=True, framed=True)
    assert frame == kp_frame
    request = decode_request(memoryview(kp_frame[4:]))
    assert (request.header.api_key, request.header.api_version) == (api_key, version)
    assert request.header.client_id == "kbroker-test"
    assert build(api.REQUEST[version], request.body) == build(api.REQUEST[version], ours)


def test_request_cases_cover_flexible_and_classic_versions() -> None:
    flexible = {k for k, v in REQUEST_PARAMS_VALUES if v >= (BY_KEY[k].FLEXIBLE_FROM or 99)}
    classic = {k for k, v in REQUEST_PARAMS_VALUES if v < (BY_KEY[k].FLEXIBLE_FROM or 99)}
    assert len(REQUEST_CASES) >= 10 and len(flexible) >= 10 and len(classic) >= 10


REQUEST_PARAMS_VALUES = [tuple(p.values) for p in REQUEST_PARAMS]


# --- responses: kafka-python's encodings parse in ours, and ours decode in theirs ------


def _api_versions_response(version: int) -> tuple[dict, Any]:
    keys = [{"api_key": 0, "min_version": 3, "max_version": 11}, {"api_key": 18, "min_version": 0, "max_version": 4}]
    ours: dict[str, Any] = {"error_code": 0, "api_keys": keys}
    if version >= 1:
        ours["throttle_time_ms"] = 0
    R = ApiVersionsResponse
    kwargs: dict[str, Any] = {**ours, "api_keys": [R.ApiVersion(**k) for k in keys]}
    if version >= 3:
        feature = {"name": "metadata.version", "max_version_level": 21, "min_version_level": 1}
        ours |= {"finalized_features_epoch": 5, "finalized_features": [feature]}
        kwargs |= {"finalized_features_epoch": 5, "finalized_features": [R.FinalizedFeatureKey(**feature)]}
    return ours, R[version](**kwargs)


def _metadata_response(version: int) -> tuple[dict, Any]:
    broker = {"node_id": 1, "host": "localhost", "port": 9092}
    if version >= 1:
        broker["rack"] = None
    partition: dict[str, Any] = {"error_code": 0, "partition_index": 0, "leader_id": 1,
                                 "replica_nodes": [1], "isr_nodes": [1]}
    if version >= 7:
        partition["leader_epoch"] = 4
    if version >= 5:
        partition["offline_replicas"] = []
    topic: dict[str, Any] = {"error_code": 0, "name": "orders", "partitions": [partition]}
    if version >= 1:
        topic["is_internal"] = False
    if version >= 10:
        topic["topic_id"] = TOPIC_ID
    top: dict[str, Any] = {}
    if version >= 3:
        top["throttle_time_ms"] = 0
    if version >= 2:
        top["cluster_id"] = "cluster-ü"
    if version >= 1:
        top["controller_id"] = 1
    R = MetadataResponse
    theirs = R[version](
        brokers=[R.MetadataResponseBroker(**broker)],
        topics=[R.MetadataResponseTopic(partitions=[R.MetadataResponseTopic.MetadataResponsePartition(**partition)],
                                        **{k: v for k, v in topic.items() if k != "partitions"})],
        **top,
    )
    return {**top, "brokers": [broker], "topics": [topic]}, theirs


def _find_coordinator_response(version: int) -> tuple[dict, Any]:
    if version >= 4:
        coordinator = {"key": "g", "node_id": 1, "host": "localhost", "port": 9092, "error_code": 0,
                       "error_message": None}
        ours = {"throttle_time_ms": 0, "coordinators": [coordinator]}
        C = FindCoordinatorResponse.Coordinator
        return ours, FindCoordinatorResponse[version](throttle_time_ms=0, coordinators=[C(**coordinator)])
    ours = {"error_code": 0, "node_id": 1, "host": "localhost", "port": 9092}
    if version >= 1:
        ours |= {"throttle_time_ms": 0, "error_message": "fine"}
    return ours, FindCoordinatorResponse[version](**ours)


def _produce_response(version: int) -> tuple[dict, Any]:
    partition: dict[str, Any] = {"index": 2, "error_code": 0, "base_offset": 17, "log_append_time_ms": -1}
    if version >= 5:
        partition["log_start_offset"] = 0
    if version >= 8:
        partition |= {"record_errors": [], "error_message": None}
    R = ProduceResponse.TopicProduceResponse
    theirs = ProduceResponse[version](
        responses=[R(name="orders", partition_responses=[R.PartitionProduceResponse(**partition)])],
        throttle_time_ms=0,
    )
    return {"responses": [{"name": "orders", "partition_responses": [partition]}], "throttle_time_ms": 0}, theirs


RESPONSE_CASES = {
    18: (_api_versions_response, [0, 1, 3, 4]),
    3: (_metadata_response, [0, 1, 5, 7, 9, 10, 12]),
    10: (_find_coordinator_response, [0, 1, 3, 4]),
    0: (_produce_response, [3, 5, 8, 9, 11]),
}


@pytest.mark.parametrize(
    ("api_key", "version"),
    [pytest.param(k, v, id=f"{BY_KEY[k].NAME}-v{v}") for k, (_, vs) in RESPONSE_CASES.items() for v in vs],
)
def test_response_agrees_with_kafka_python(api_key: int, version: int) -> None:
    ours, theirs = RESPONSE_CASES[api_key][0](version)
    api = BY_KEY[api_key]
    con = api.RESPONSE[version]
    kp_body = theirs.encode(version=version)
    assert build(con, ours) == kp_body

    assert normalise(parse_exact(con, kp_body)) == expected_parse(con, ours)

    # Whole frames: our ServerProtocol's header choice (v0 for ApiVersions) matches theirs.
    server = ServerProtocol()
    client = ClientProtocol()
    correlation_id, request_frame = client.encode_request(api_key, version, {})
    server.receive_data(request_frame)
    request = server.next_request()
    assert request is not None
    frame = b"".join(bytes(p) for p in server.encode_response(request.header, ours))
    theirs.with_header(correlation_id=correlation_id)
    assert frame == theirs.encode(header=True, framed=True)  # its version is set; passing it again breaks
    decoded = type(theirs).decode(frame, version=version, header=True, framed=True)
    assert decoded.header.correlation_id == correlation_id
    decoded._header = None  # kafka-python's encode() would update a request header's version
    assert decoded.encode() == kp_body


# --- nullable structs ------------------------------------------------------------------


def test_nullable_struct_field_has_presence_byte() -> None:
    """DescribeTopicPartitions' Cursor is a nullable struct: -1 for null, 1 then the struct.

    kafka-python (and Kafka's own generated code) write that presence byte, so a null cursor
    from a real client only parses if our declarations expect it too.
    """
    from kafka.protocol.admin import DescribeTopicPartitionsRequest as Req

    con = BY_KEY[75].REQUEST[0]
    topics = [Req.TopicRequest(name="orders")]
    null_cursor = Req[0](topics=topics, response_partition_limit=2000, cursor=None).encode(version=0)
    assert normalise(parse_exact(con, null_cursor))["cursor"] is None
    cursor = Req.Cursor(topic_name="orders", partition_index=3)
    with_cursor = Req[0](topics=topics, response_partition_limit=2000, cursor=cursor).encode(version=0)
    body = {"topics": [{"name": "orders"}], "response_partition_limit": 2000,
            "cursor": {"topic_name": "orders", "partition_index": 3}}
    assert build(con, body) == with_cursor
