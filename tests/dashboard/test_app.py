"""The dashboard's page: the values a refresh puts in its elements, the snapshot cache, the layout and the callback.

Over the known data set of tests/support/dashboard_tables.py, through Flask's test client (no server, no browser).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from scrutiny.dashboard.app import SnapshotCache, create_app
from scrutiny.dashboard.layout import NUMBER_IDS
from scrutiny.dashboard.render import render
from scrutiny.dashboard.snapshot import DashboardSnapshot
from tests.support.dashboard_tables import (
    EXPECTED_COVERAGE_TEXT,
    EXPECTED_LAST_BATCH,
    NOW,
    known_snapshot,
    known_tables,
)


@pytest.fixture(scope="module")
def data_dir(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return known_tables(spark, tmp_path_factory)


def test_render_puts_the_numbers_in_their_elements(data_dir: Path) -> None:
    values = render(known_snapshot(data_dir))
    texts = {name: values[(name, "children")] for name in NUMBER_IDS}
    assert texts["status"] == "UNHEALTHY"
    assert values[("status", "className")] == "status unhealthy"
    assert (texts["open-critical"], texts["open-warning"], texts["open-info"], texts["open-total"]) == (
        "6",
        "3",
        "1",
        "10",
    )
    assert texts["coverage-percent"] == EXPECTED_COVERAGE_TEXT
    assert (texts["coverage-closed"], texts["coverage-verified"], texts["coverage-unverified"]) == ("7", "5", "2")
    assert texts["last-batch-id"] == str(EXPECTED_LAST_BATCH)
    assert texts["checker-lag"] == "0"
    assert texts["batches-per-minute"] == "0.2"
    assert texts["checker-state"] == "running"
    assert texts["latency-p50"] == "1.5 s"
    assert texts["under-replication-count"] == "1" and texts["under-replication-oldest"] == "12.00"
    table = str(values[("worst-ledgers", "children")])
    assert "worst-ledger-0-id" in table and "b1:3181 (segment 0): 0-4" in table


def test_render_shows_a_stalled_checker(data_dir: Path) -> None:
    snapshot = known_snapshot(data_dir)
    assert snapshot.checker is not None
    assert render(snapshot)[("checker-state", "className")] == "running"
    stalled = dataclasses.replace(snapshot, checker=dataclasses.replace(snapshot.checker, stalled=True))
    values = render(stalled)
    assert values[("checker-state", "children")] == "stalled (2 min idle)"
    assert values[("checker-state", "className")] == "stalled"
    assert values[("last-batch-age", "children")] == "2 min"


def test_snapshot_cache_reloads_only_when_stale() -> None:
    loads: list[int] = []
    moment = [0.0]

    def load() -> DashboardSnapshot:
        loads.append(1)
        return DashboardSnapshot("d", NOW)

    cache = SnapshotCache(load, max_age_s=1.0, clock=lambda: moment[0])
    cache.get()
    moment[0] = 0.5
    cache.get()
    assert len(loads) == 1
    moment[0] = 1.5
    cache.get()
    assert len(loads) == 2


def test_without_a_token_the_page_is_served(data_dir: Path) -> None:
    client = create_app(data_dir).server.test_client()
    response = client.get("/")
    assert response.status_code == 200
    assert "Set-Cookie" not in response.headers
    layout = json.dumps(client.get("/_dash-layout").get_json())
    for name in (*NUMBER_IDS, "worst-ledgers", "category-chart", "refresh"):
        assert f'"{name}"' in layout, name


def test_the_refresh_callback_returns_every_output(data_dir: Path) -> None:
    client = create_app(data_dir, clock=lambda: NOW).server.test_client()
    dependencies = client.get("/_dash-dependencies").get_json()
    assert len(dependencies) == 1
    (callback,) = dependencies
    outputs = callback["output"].strip(".").split("...")
    body = {
        "output": callback["output"],
        "outputs": [{"id": o.split(".")[0], "property": o.split(".")[1]} for o in outputs],
        "inputs": [{"id": "refresh", "property": "n_intervals", "value": 1}],
        "changedPropIds": ["refresh.n_intervals"],
    }
    response = client.post("/_dash-update-component", json=body)
    assert response.status_code == 200
    answer = response.get_json()["response"]
    assert answer["open-critical"]["children"] == "6"
    assert answer["last-batch-id"]["children"] == str(EXPECTED_LAST_BATCH)
    assert answer["coverage-percent"]["children"] == EXPECTED_COVERAGE_TEXT
