"""The Kafka specs kept in protocol/specs/ (being gathered; see its README) must make the same
modules as the ones protocol/messages/ holds, so that moving the generator to them changes
nothing the broker serves. Share-group specs are the released (v1+) ones and are checked for
what they declare instead."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SPECS = ROOT / "protocol" / "specs"
MESSAGES = ROOT / "protocol" / "messages"
sys.path.insert(0, str(ROOT / "scripts"))
import generate_protocol as generator  # noqa: E402

SHARE_GROUP_APIS = {"ShareGroupHeartbeat", "ShareGroupDescribe", "ShareFetch", "ShareAcknowledge"}


def complete_pairs() -> list[str]:
    """API names whose request and response specs are both present."""
    names = [p.name.removesuffix("Request.json") for p in SPECS.glob("*Request.json")]
    return sorted(n for n in names if (SPECS / f"{n}Response.json").exists())


def module_from_specs(api: str) -> tuple[dict, str]:
    request = generator.load_spec(SPECS / f"{api}Request.json")
    response = generator.load_spec(SPECS / f"{api}Response.json")
    return request, generator.api_module(request, response)


@pytest.mark.parametrize("api", [a for a in complete_pairs() if a not in SHARE_GROUP_APIS])
def test_spec_pair_makes_todays_module(api: str) -> None:
    request, source = module_from_specs(api)
    module = generator.module_name(request["name"].removesuffix("Request")) + ".py"
    assert source == (MESSAGES / module).read_text()


def test_consumer_protocol_assignment_makes_todays_module() -> None:
    spec = generator.load_spec(SPECS / "ConsumerProtocolAssignment.json")
    assert generator.data_module(spec) == (MESSAGES / "consumer_protocol_assignment.py").read_text()


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
