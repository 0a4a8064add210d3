"""protocol/specs/ holds the Kafka specs ../shared/kafka-protocol lacks or has older (the released
share-group ones), and kbroker's own (DescribeDelayed, DescribeArchive); the generator lays them
over ../shared.
These tests need only the repository (the name check of kbroker's specs also reads ../shared
where it is): every spec pair kept here makes exactly the module protocol/messages/ holds, each
spec is recorded in the README as Apache's or as kbroker's, the overlay replaces by file name,
and the wire formats read and write as the specs say (bytes worked out by hand from each spec's
field order)."""

from __future__ import annotations

import re
import sys
import uuid
from pathlib import Path

import pytest

from protocol.messages import (
    alter_share_group_offsets,
    delete_share_group_offsets,
    describe_archive,
    describe_delayed,
    describe_share_group_offsets,
    share_fetch,
    share_group_heartbeat,
)

ROOT = Path(__file__).resolve().parents[2]
SPECS = ROOT / "protocol" / "specs"
MESSAGES = ROOT / "protocol" / "messages"
sys.path.insert(0, str(ROOT / "scripts"))
import generate_protocol as generator  # noqa: E402

LICENSE_FIRST_LINE = "// Licensed to the Apache Software Foundation (ASF) under one or more\n"
TOPIC_ID = uuid.UUID("0102030405060708090a0b0c0d0e0f10")


def spec_pairs() -> list[str]:
    """API names whose request spec is kept here."""
    return sorted(p.name.removesuffix("Request.json") for p in SPECS.glob("*Request.json"))


def module_from_specs(api: str) -> tuple[dict, str]:
    request = generator.load_spec(SPECS / f"{api}Request.json")
    response = generator.load_spec(SPECS / f"{api}Response.json")
    return request, generator.api_module(request, response)


def test_every_spec_here_is_part_of_a_pair() -> None:
    """A lone request or response would be checked by nothing below."""
    names = {p.name for p in SPECS.glob("*.json")}
    assert names == {f"{api}{kind}.json" for api in spec_pairs() for kind in ("Request", "Response")}
    assert spec_pairs(), "no specs kept"


@pytest.mark.parametrize("api", spec_pairs())
def test_spec_pair_makes_the_committed_module(api: str) -> None:
    request, source = module_from_specs(api)
    module = generator.module_name(request["name"].removesuffix("Request")) + ".py"
    assert source == (MESSAGES / module).read_text()


WRITTEN_SECTION = "## Written from the released wire format"
OWN_SECTION = "## kbroker's own specs (not from Apache)"
OWN_FIRST_LINE = "// kbroker's own API, not Apache Kafka's"
OWN_KEYS_FROM = 10000


def readme_section(readme: str, title: str) -> str:
    return readme.partition(title)[2].split("\n## ", 1)[0]


def readme_sections() -> tuple[str, str, str]:
    """The README before the project-written table's section, that section, and kbroker's own."""
    readme = (SPECS / "README.md").read_text()
    taken = readme.partition(WRITTEN_SECTION)[0]
    return taken, readme_section(readme, WRITTEN_SECTION), readme_section(readme, OWN_SECTION)


def own_specs() -> list[str]:
    """The spec files the README lists as kbroker's own."""
    return sorted(re.findall(r"^\| (\w+\.json) \| ", readme_sections()[2], re.M))


@pytest.mark.parametrize("spec", sorted(p.name for p in SPECS.glob("*.json")))
def test_spec_keeps_its_header_and_recorded_source(spec: str) -> None:
    """Each spec is Apache's file at a named commit, listed as written by the project from
    Apache's, or listed as kbroker's own; only the first two carry Apache's licence header."""
    taken, written, own = readme_sections()
    row = rf"^\| {re.escape(spec)} \| "
    at_commit = re.search(row + r"[0-9a-f]{40} \|", taken, re.M)
    project_written = re.search(row, written, re.M)
    kbroker_own = re.search(row, own, re.M)
    found = [bool(m) for m in (at_commit, project_written, kbroker_own)]
    assert found.count(True) == 1, f"{spec}: README must name its commit, or list it as written or as kbroker's own"
    first_line = OWN_FIRST_LINE if kbroker_own else LICENSE_FIRST_LINE
    assert (SPECS / spec).read_text().startswith(first_line)


def test_kbroker_specs_keep_out_of_kafkas_keys_and_names() -> None:
    """A kbroker API must never meet a Kafka one: not by key, and not by file name, which the
    overlay would replace Kafka's file by."""
    specs = own_specs()
    assert specs, "the README lists no kbroker spec"
    for name in specs:
        spec = generator.load_spec(SPECS / name)
        assert spec["apiKey"] >= OWN_KEYS_FROM, name
        assert spec["name"] + ".json" == name
    kafka_keys = {generator.load_spec(p)["apiKey"] for p in SPECS.glob("*.json") if p.name not in specs}
    assert not kafka_keys & {generator.load_spec(SPECS / n)["apiKey"] for n in specs}
    if generator.DEFAULT_SPEC_DIR.is_dir():  # Kafka's own specs, beside the clone
        assert not {p.name for p in generator.DEFAULT_SPEC_DIR.glob("*.json")} & set(specs)


def test_overlay_replaces_by_file_name_and_adds(tmp_path: Path) -> None:
    base, overlay = tmp_path / "base", tmp_path / "overlay"
    base.mkdir()
    overlay.mkdir()
    for name in ("FooRequest.json", "BarRequest.json"):
        (base / name).write_text("{}")
    for name in ("FooRequest.json", "BazRequest.json"):
        (overlay / name).write_text("{}")
    paths = generator.spec_paths(base, overlay)
    assert paths == {
        "BarRequest.json": base / "BarRequest.json",
        "FooRequest.json": overlay / "FooRequest.json",
        "BazRequest.json": overlay / "BazRequest.json",
    }
    assert generator.spec_paths(base) == {p.name: p for p in base.glob("*.json")}
    with pytest.raises(SystemExit, match="no spec directory"):
        generator.spec_paths(base, tmp_path / "missing")


def test_released_share_group_describe_is_v1_only() -> None:
    _, source = module_from_specs("ShareGroupDescribe")
    namespace: dict = {}
    exec(compile(source, "share_group_describe", "exec"), namespace)  # noqa: S102 - generated here
    assert (namespace["API_KEY"], namespace["MIN_VERSION"], namespace["MAX_VERSION"]) == (77, 1, 1)
    request = namespace["REQUEST"][1]
    wire = request.build({"group_ids": ["g1"], "include_authorized_operations": True})
    # compact array of 1, compact string "g1", true, no tagged fields
    assert wire == bytes.fromhex("02" "036731" "01" "00")
    assert request.parse(wire).group_ids == ["g1"]


def test_share_group_heartbeat_v1_request() -> None:
    assert (share_group_heartbeat.API_KEY, share_group_heartbeat.MIN_VERSION) == (76, 1)
    request = share_group_heartbeat.REQUEST[1]
    wire = bytes.fromhex(
        "0267"  # group_id "g"
        "036d31"  # member_id "m1"
        "00000000"  # member_epoch 0: join
        "00"  # rack_id null
        "02" "0274"  # subscribed_topic_names ["t"]
        "00"  # no tagged fields
    )
    parsed = request.parse(wire)
    assert (parsed.group_id, parsed.member_id, parsed.member_epoch) == ("g", "m1", 0)
    assert parsed.rack_id is None and parsed.subscribed_topic_names == ["t"]
    assert request.build(parsed) == wire
    unchanged = request.build({"group_id": "g", "member_id": "m1", "member_epoch": 3, "subscribed_topic_names": None})
    assert unchanged == bytes.fromhex("0267" "036d31" "00000003" "00" "00" "00")


SHARE_FETCH_V1_REQUEST = bytes.fromhex(
    "0267"  # group_id "g"
    "036d31"  # member_id "m1"
    "00000001"  # share_session_epoch
    "000001f4"  # max_wait_ms 500
    "00000001"  # min_bytes
    "00100000"  # max_bytes
    "000001f4"  # max_records 500
    "00000064"  # batch_size 100
    "02"  # topics: 1
    "0102030405060708090a0b0c0d0e0f10"  # topic_id
    "02"  # partitions: 1
    "00000000"  # partition_index
    "02"  # acknowledgement_batches: 1
    "000000000000000a"  # first_offset 10
    "000000000000000c"  # last_offset 12
    "04" "010002"  # acknowledge_types [accept, gap, release]
    "00" "00" "00"  # tagged fields of batch, partition, topic
    "01"  # forgotten_topics_data: empty
    "00"  # no tagged fields
)


def test_share_fetch_v1_request() -> None:
    assert (share_fetch.API_KEY, share_fetch.MIN_VERSION, share_fetch.MAX_VERSION) == (78, 1, 1)
    request = share_fetch.REQUEST[1]
    parsed = request.parse(SHARE_FETCH_V1_REQUEST)
    assert (parsed.group_id, parsed.member_id, parsed.max_records, parsed.batch_size) == ("g", "m1", 500, 100)
    [topic] = parsed.topics
    assert topic.topic_id == TOPIC_ID
    [batch] = topic.partitions[0].acknowledgement_batches
    assert (batch.first_offset, batch.last_offset, batch.acknowledge_types) == (10, 12, [1, 0, 2])
    assert request.build(parsed) == SHARE_FETCH_V1_REQUEST


SHARE_FETCH_V1_RESPONSE = bytes.fromhex(
    "00000000"  # throttle_time_ms
    "0000"  # error_code
    "00"  # error_message null
    "00007530"  # acquisition_lock_timeout_ms 30000
    "02"  # responses: 1
    "0102030405060708090a0b0c0d0e0f10"  # topic_id
    "02"  # partitions: 1
    "00000000"  # partition_index
    "0000" "00"  # error_code, error_message null
    "0000" "00"  # acknowledge_error_code, acknowledge_error_message null
    "00000001" "00000005" "00"  # current_leader: id 1, epoch 5, no tagged fields
    "03" "abcd"  # records: 2 bytes
    "02"  # acquired_records: 1
    "000000000000000a"  # first_offset 10
    "000000000000000c"  # last_offset 12
    "0001"  # delivery_count 1
    "00" "00" "00"  # tagged fields of acquired records, partition, topic
    "01"  # node_endpoints: empty
    "00"  # no tagged fields
)


def test_share_fetch_v1_response_with_acquired_records() -> None:
    response = share_fetch.RESPONSE[1]
    body = {
        "acquisition_lock_timeout_ms": 30000,
        "responses": [{
            "topic_id": TOPIC_ID,
            "partitions": [{
                "partition_index": 0,
                "current_leader": {"leader_id": 1, "leader_epoch": 5},
                "records": b"\xab\xcd",
                "acquired_records": [{"first_offset": 10, "last_offset": 12, "delivery_count": 1}],
            }],
        }],
    }
    assert response.build(body) == SHARE_FETCH_V1_RESPONSE
    parsed = response.parse(SHARE_FETCH_V1_RESPONSE)
    [partition] = parsed.responses[0].partitions
    [acquired] = partition.acquired_records
    assert (acquired.first_offset, acquired.last_offset, acquired.delivery_count) == (10, 12, 1)
    assert bytes(partition.records) == b"\xab\xcd"
    assert partition.error_message is None and partition.current_leader.leader_epoch == 5


def test_describe_share_group_offsets_request_null_topics_means_all() -> None:
    assert (describe_share_group_offsets.API_KEY, describe_share_group_offsets.MIN_VERSION,
            describe_share_group_offsets.MAX_VERSION) == (90, 0, 1)
    request = describe_share_group_offsets.REQUEST[1]
    wire = bytes.fromhex(
        "03"  # groups: 2
        "0267" "00" "00"  # "g", topics null, no tagged fields
        "0268" "02" "0274" "03" "00000000" "00000002" "00" "00"  # "h", [t: [0, 2]]
        "00"  # no tagged fields
    )
    parsed = request.parse(wire)
    assert parsed.groups[0].topics is None
    assert parsed.groups[1].topics[0].partitions == [0, 2]
    assert request.build(parsed) == wire


DESCRIBE_PARTITION = {"partition_index": 1, "start_offset": 10, "leader_epoch": 3, "lag": 7}


def describe_response(version: int) -> bytes:
    body = {"groups": [{"group_id": "g", "topics": [
        {"topic_name": "t", "topic_id": TOPIC_ID, "partitions": [DESCRIBE_PARTITION]}]}]}
    return describe_share_group_offsets.RESPONSE[version].build(body)


def test_describe_share_group_offsets_response_v1_carries_lag_after_the_leader_epoch() -> None:
    head = "00000000" "02" "0267" "02" "0274" "0102030405060708090a0b0c0d0e0f10" "02" "00000001" "000000000000000a" "00000003"
    tail = "0000" "00" "00" "00" "0000" "00" "00" "00"  # error, message, tags (partition, topic), group error, tags
    assert describe_response(1) == bytes.fromhex(head + "0000000000000007" + tail)
    assert describe_response(0) == bytes.fromhex(head + tail)


def test_alter_share_group_offsets_response_has_a_top_level_error() -> None:
    assert (alter_share_group_offsets.API_KEY, alter_share_group_offsets.MAX_VERSION) == (91, 0)
    wire = alter_share_group_offsets.RESPONSE[0].build(
        {"error_code": 68, "error_message": "x", "responses": []})
    assert wire == bytes.fromhex("00000000" "0044" "0278" "01" "00")
    request = alter_share_group_offsets.REQUEST[0]
    request_wire = bytes.fromhex("0267" "02" "0274" "02" "00000000" "0000000000000005" "00" "00" "00")
    parsed = request.parse(request_wire)
    assert parsed.topics[0].partitions[0].start_offset == 5


def test_delete_share_group_offsets_response_answers_per_topic() -> None:
    assert (delete_share_group_offsets.API_KEY, delete_share_group_offsets.MAX_VERSION) == (92, 0)
    wire = delete_share_group_offsets.RESPONSE[0].build(
        {"responses": [{"topic_name": "t", "topic_id": TOPIC_ID, "error_code": 3}]})
    assert wire == bytes.fromhex("00000000" "0000" "00" "02" "0274" "0102030405060708090a0b0c0d0e0f10"
                                 "0003" "00" "00" "00")
    assert delete_share_group_offsets.REQUEST[0].parse(bytes.fromhex("0267" "02" "0274" "00" "00")).topics[0] \
        .topic_name == "t"


def test_describe_delayed_request_null_means_all() -> None:
    assert (describe_delayed.API_KEY, describe_delayed.MIN_VERSION, describe_delayed.MAX_VERSION) == (10000, 0, 0)
    request = describe_delayed.REQUEST[0]
    assert request.build({"topics": None}) == bytes.fromhex("00" "00")  # topics null, no tagged fields
    wire = bytes.fromhex(
        "03"  # topics: 2
        "0274" "00" "00"  # "t", partition_indexes null (all), no tagged fields
        "0275" "03" "00000000" "00000002" "00"  # "u", [0, 2]
        "00"  # no tagged fields
    )
    parsed = request.parse(wire)
    assert parsed.topics[0].partition_indexes is None and parsed.topics[1].partition_indexes == [0, 2]
    assert request.build(parsed) == wire


def test_describe_delayed_response_carries_counts_and_the_next_due_time() -> None:
    response = describe_delayed.RESPONSE[0]
    body = {"topics": [{"name": "t", "partitions": [
        {"partition_index": 1, "pending_count": 3, "pending_bytes": 300, "held_count": 1,
         "next_due_ms": 1_700_000_000_000},
        {"partition_index": 2, "error_code": 6}]}]}
    wire = bytes.fromhex(
        "00000000" "0000" "00"  # throttle_time_ms, error_code, error_message null
        "02" "0274" "0000" "00"  # topics: 1, "t", no error
        "03"  # partitions: 2
        "00000001" "0000" "00"  # partition 1, no error
        "0000000000000003" "000000000000012c" "0000000000000001" "0000018bcfe56800" "00"
        "00000002" "0006" "00"  # partition 2: NOT_LEADER_OR_FOLLOWER
        "0000000000000000" "0000000000000000" "0000000000000000" "ffffffffffffffff" "00"  # next due: -1
        "00" "00"  # tagged fields of topic, response
    )
    assert response.build(body) == wire
    assert response.parse(wire).topics[0].partitions[1].next_due_ms == -1


def test_describe_archive_asks_as_describe_delayed_does() -> None:
    assert (describe_archive.API_KEY, describe_archive.MIN_VERSION, describe_archive.MAX_VERSION) == (10001, 0, 0)
    request = describe_archive.REQUEST[0]
    assert request.build({"topics": None}) == bytes.fromhex("00" "00")  # topics null, no tagged fields
    wire = bytes.fromhex("02" "0274" "02" "00000003" "00" "00")  # [t: [3]]
    assert request.parse(wire).topics[0].partition_indexes == [3]
    assert describe_delayed.REQUEST[0].build(request.parse(wire)) == wire


def test_describe_archive_response_carries_local_and_archived_sizes() -> None:
    response = describe_archive.RESPONSE[0]
    body = {"topics": [{"name": "t", "partitions": [
        {"partition_index": 0, "local_log_start_offset": 120, "local_size": 300_000, "log_start_offset": 0,
         "archived_size": 1_200_000, "archived_segment_count": 12, "highest_archived_offset": 119},
        {"partition_index": 1, "error_code": 6}]}]}
    wire = bytes.fromhex(
        "00000000" "0000" "00"  # throttle_time_ms, error_code, error_message null
        "02" "0274" "0000" "00"  # topics: 1, "t", no error
        "03"  # partitions: 2
        "00000000" "0000" "00"  # partition 0, no error
        "0000000000000078" "00000000000493e0" "0000000000000000"  # local start 120, local 300000, start 0
        "0000000000124f80" "0000000c" "0000000000000077" "00"  # archived 1200000 in 12, highest 119
        "00000001" "0006" "00"  # partition 1: NOT_LEADER_OR_FOLLOWER, the defaults:
        "ffffffffffffffff" "0000000000000000" "ffffffffffffffff"  # no offsets, no bytes
        "0000000000000000" "00000000" "ffffffffffffffff" "00"  # nothing archived
        "00" "00"  # tagged fields of topic, response
    )
    assert response.build(body) == wire
    assert response.parse(wire).topics[0].partitions[0].highest_archived_offset == 119
