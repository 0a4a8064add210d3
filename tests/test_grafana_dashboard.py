"""The Grafana dashboard in conf/grafana: well-formed, and naming only series the metrics
endpoint documents (tests/integration/test_metrics.py has a real Prometheus evaluate every query)."""

from __future__ import annotations

import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DASHBOARD = ROOT / "conf/grafana/kbroker-dashboard.json"
SUFFIXES = ("_bucket", "_count", "_sum")


def documented_series() -> set[str]:
    """Series names in the tables of docs/operations.md's Metrics section."""
    text = (ROOT / "docs/operations.md").read_text()
    return set(re.findall(r"^\| `(kbroker_[a-z_]+)`", text, re.M))


def test_panels_are_well_formed() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    panels = dashboard["panels"]
    ids = [panel["id"] for panel in panels]
    assert len(ids) == len(set(ids))
    for panel in panels:
        assert panel["targets"], panel["title"]
        position = panel["gridPos"]
        assert position["x"] + position["w"] <= 24, panel["title"]
    names = [variable["name"] for variable in dashboard["templating"]["list"]]
    assert names == ["datasource", "instance"]


def test_every_series_a_panel_names_is_documented() -> None:
    documented = documented_series()
    assert len(documented) > 20
    used = set()
    for panel in json.loads(DASHBOARD.read_text())["panels"]:
        for target in panel["targets"]:
            for name in re.findall(r"kbroker_[a-z_]+", target["expr"]):
                base = next((name[: -len(s)] for s in SUFFIXES if name.endswith(s)), name)
                used.add(name if name in documented else base)
    assert used <= documented, used - documented
