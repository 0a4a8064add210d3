"""The Kafka specs kept in protocol/specs/ (those ../shared/kafka-protocol lacks or has in an
older form; see its README) are the released share-group ones, checked for what they declare."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SPECS = ROOT / "protocol" / "specs"
MESSAGES = ROOT / "protocol" / "messages"
sys.path.insert(0, str(ROOT / "scripts"))
import generate_protocol as generator  # noqa: E402


def module_from_specs(api: str) -> tuple[dict, str]:
    request = generator.load_spec(SPECS / f"{api}Request.json")
    response = generator.load_spec(SPECS / f"{api}Response.json")
    return request, generator.api_module(request, response)


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
