"""The shipped Grafana dashboard: its identity, a durability row first, and queries about real metrics only."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from scrutiny.paths import PROJECT_ROOT
from tests.support.promql import PROMETHEUS_OWN, exported_metrics, promtool, selectors

DASHBOARD = PROJECT_ROOT / "conf" / "monitoring" / "grafana" / "scrutiny-durability.json"


def dashboard() -> dict[str, Any]:
    document: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return document


def test_the_dashboard_has_its_uid_a_datasource_variable_and_the_durability_row_first() -> None:
    board = dashboard()
    assert board["uid"] == "scrutiny-durability"
    assert [(v["type"], v["name"]) for v in board["templating"]["list"]] == [("datasource", "datasource")]
    rows = [p["title"] for p in board["panels"] if p["type"] == "row"]
    assert rows == ["Durability", "Checker", "Watcher", "Agents"]
    first = board["panels"][1 : board["panels"].index(next(p for p in board["panels"] if p["title"] == "Checker"))]
    titles = {p["title"] for p in first}
    assert {"Ledgers losing data", "Below ack quorum", "Below write quorum", "Stuck under-replication"} <= titles
    assert {"Violating ledgers by category", "Oldest open violation", "Firing alerts"} <= titles


def test_every_query_parses_uses_the_variable_and_names_only_exported_metrics() -> None:
    known = exported_metrics() | PROMETHEUS_OWN
    queries = 0
    for panel in dashboard()["panels"]:
        if panel["type"] == "row":
            continue
        assert panel["datasource"]["uid"] == "${datasource}"
        for target in panel["targets"]:
            names = {s.name for s in selectors(target["expr"]) if s.name}
            assert names and names <= known, f"{panel['title']}: {sorted(names - known)}"
            assert target["datasource"]["uid"] == "${datasource}"
            queries += 1
    assert queries >= 25


def test_prometheus_itself_parses_every_query(tmp_path: Path) -> None:
    """Each query as a recording rule, checked by promtool: Prometheus's own parser, not a reimplementation."""
    exprs = [t["expr"] for p in dashboard()["panels"] if p["type"] != "row" for t in p["targets"]]
    rules = [{"record": f"dashboard:query_{i}:check", "expr": e} for i, e in enumerate(exprs)]
    path = tmp_path / "dashboard_queries.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    checked = promtool("check", "rules", str(path))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert f"{len(exprs)} rules found" in checked.stdout


def test_panels_do_not_overlap() -> None:
    cells: set[tuple[int, int]] = set()
    for panel in dashboard()["panels"]:
        grid = panel["gridPos"]
        mine = {(grid["x"] + dx, grid["y"] + dy) for dx in range(grid["w"]) for dy in range(grid["h"])}
        assert not mine & cells, panel["title"]
        assert grid["x"] + grid["w"] <= 24
        cells |= mine
