"""The dashboard's charts: the figures drawn from the known data set of tests/support/dashboard_tables.py."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from pyspark.sql import SparkSession

from scrutiny.dashboard.charts import (
    bookie_chart,
    category_chart,
    checker_chart,
    coverage_chart,
    timeline_chart,
    under_replication_chart,
    verification_age_chart,
)
from scrutiny.dashboard.snapshot import NO_DATA, DashboardSnapshot
from tests.support.dashboard_tables import B1, B2, B3, known_snapshot, known_tables


@pytest.fixture(scope="module")
def snapshot(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> DashboardSnapshot:
    return known_snapshot(known_tables(spark, tmp_path_factory))


def test_category_chart_stacks_severities_worst_first(snapshot: DashboardSnapshot) -> None:
    figure = category_chart(snapshot.categories)
    traces = figure["data"]
    assert isinstance(traces, list)
    assert [t["name"] for t in traces] == ["critical", "warning", "info"]
    critical = traces[0]
    assert critical["y"][:4] == ["MISSING_REPLICA", "BELOW_ACK_QUORUM", "NO_REPLICA", "UNDER_REPLICATION_STUCK"]
    assert critical["x"][:4] == [3, 1, 1, 1]
    assert sum(sum(t["x"]) for t in traces) == 10


def test_other_charts_carry_the_figures(snapshot: DashboardSnapshot) -> None:
    timeline = timeline_chart(snapshot.timeline)["data"]
    assert isinstance(timeline, list)
    assert [t["name"] for t in timeline] == ["detected", "resolved"]
    assert (sum(timeline[0]["y"]), sum(timeline[1]["y"])) == (11, 1)
    bookies = bookie_chart(snapshot.bookies)["data"]
    assert isinstance(bookies, list)
    assert bookies[0]["x"] == [B3, B1, B2] and bookies[0]["y"] == [2, 1, 1]
    stuck = under_replication_chart(snapshot.under_replication)["data"]
    assert isinstance(stuck, list) and stuck[0]["x"] == [12.0]
    ring = coverage_chart(snapshot.coverage)["data"]
    assert isinstance(ring, list) and ring[0]["values"] == [5, 2]
    runs = checker_chart(snapshot.runs)["data"]
    assert isinstance(runs, list) and runs[1]["y"] == [40, 5, 3, 0]


@pytest.mark.parametrize(
    "chart", [category_chart, timeline_chart, bookie_chart, under_replication_chart, coverage_chart, checker_chart]
)
def test_charts_without_data_say_so(chart: object) -> None:
    figure = chart(None)  # type: ignore[operator]
    assert figure["data"] == []
    assert figure["layout"]["annotations"][0]["text"] == NO_DATA


def test_verification_age_chart_counts_ledgers_by_class_late_and_overdue_in_colour(snapshot: DashboardSnapshot) -> None:
    ages = snapshot.verification_ages
    assert ages is not None and [row.age_class for row in ages][-2:] == ["late", "overdue"]
    traces = verification_age_chart(ages)["data"]
    assert isinstance(traces, list) and len(traces) == 1
    bars: dict[str, Any] = traces[0]
    assert bars["y"] == [4, 2, 1, 0, 1, 1]
    assert bars["marker"]["color"][-1] != bars["marker"]["color"][0] != bars["marker"]["color"][-2]
    assert bars["text"][0] == "0-1 h" and bars["text"][-1] == "5 h and older"
    assert verification_age_chart(None)["data"] == []
    nothing = verification_age_chart([replace(row, ledgers=0) for row in ages])
    assert nothing["layout"]["annotations"][0]["text"] == "no ledger verified yet"  # type: ignore[index]
