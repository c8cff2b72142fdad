"""The dashboard's data over tables of known content: every section of the snapshot, and missing or unreadable tables.

The data set and the figures expected of it are in tests/support/dashboard_tables.py.
"""

from __future__ import annotations

import json
import shutil
from datetime import timedelta
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from scrutiny.connectors.tables.delta import table_uri
from scrutiny.connectors.tables.schemas import CHECKER_RUNS, OPEN_VIOLATIONS, VIOLATIONS
from scrutiny.connectors.tables.sql import SqlEngine
from scrutiny.dashboard.data import (
    DashboardDataError,
    bucket_seconds,
    check_data_dir,
    entry_ranges,
    load_snapshot,
)
from scrutiny.dashboard.layout import NUMBER_IDS
from scrutiny.dashboard.render import render
from scrutiny.dashboard.snapshot import (
    NO_DATA,
    BookieHealth,
    CategoryCount,
    DashboardSnapshot,
    MissingReplica,
    Segment,
)
from tests.support.dashboard_tables import (
    B1,
    B2,
    B3,
    EXPECTED_LAST_BATCH,
    EXPECTED_OPEN,
    EXPECTED_WORST_ORDER,
    NOW,
    T0,
    TOPIC_AUDIT,
    TOPIC_ORDERS,
    append_lost_bookie,
    known_snapshot,
    known_tables,
)


@pytest.fixture(scope="module")
def data_dir(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return known_tables(spark, tmp_path_factory)


@pytest.fixture(scope="module")
def snapshot(data_dir: Path) -> DashboardSnapshot:
    return known_snapshot(data_dir)


# --- the snapshot


def test_overview_counts_open_violations_by_severity(snapshot: DashboardSnapshot) -> None:
    assert snapshot.problems == ()
    assert snapshot.missing_tables == ()
    overview = snapshot.overview
    assert overview is not None
    assert dict(overview.by_severity) == EXPECTED_OPEN
    assert overview.open_total == 10
    assert overview.ledgers_affected == 6
    assert overview.data_loss_ledgers == 1
    assert overview.status == "UNHEALTHY"


def test_a_lost_bookie_is_a_cluster_finding_shown_first_and_counted_without_a_ledger(
    spark: SparkSession, data_dir: Path, snapshot: DashboardSnapshot, tmp_path: Path
) -> None:
    assert snapshot.cluster == ()
    assert "none" in str(render(snapshot)[("cluster-findings", "children")])
    copy = tmp_path / "data"
    shutil.copytree(data_dir, copy)
    details = '{"ledgers": 40, "entries": 1200}'
    append_lost_bookie(spark, copy, NOW - timedelta(minutes=5), B3, details)
    lost = load_snapshot(copy, now=NOW)
    assert lost.cluster is not None and lost.overview is not None and snapshot.overview is not None
    ((finding),) = lost.cluster
    assert (finding.category, finding.severity, finding.bookie, finding.details) == (
        "BOOKIE_LOST",
        "warning",
        B3,
        details,
    )
    assert finding.first_seen == NOW - timedelta(minutes=5)
    assert lost.overview.open_total == snapshot.overview.open_total + 1
    assert lost.overview.ledgers_affected == snapshot.overview.ledgers_affected  # no ledger of its own
    assert lost.worst is not None and all(ledger.ledger_id >= 0 for ledger in lost.worst)
    table = str(render(lost)[("cluster-findings", "children")])
    assert "cluster-0-category" in table and "BOOKIE_LOST" in table and B3 in table and "1200" in table


def test_categories_are_the_view_rows(snapshot: DashboardSnapshot) -> None:
    assert snapshot.categories == (
        CategoryCount("MISSING_REPLICA", "critical", 3, 2),
        CategoryCount("BELOW_ACK_QUORUM", "critical", 1, 1),
        CategoryCount("NO_REPLICA", "critical", 1, 1),
        CategoryCount("UNDER_REPLICATION_STUCK", "critical", 1, 1),
        CategoryCount("BELOW_WRITE_QUORUM", "warning", 1, 1),
        CategoryCount("MISSING_REPLICA", "warning", 1, 1),
        CategoryCount("PLACEMENT_FAIL", "warning", 1, 1),
        CategoryCount("ACK_QUORUM_ONE", "info", 1, 1),
    )


def test_numbers_match_scrutiny_sql(data_dir: Path, snapshot: DashboardSnapshot) -> None:
    with SqlEngine(data_dir, now=NOW) as engine:
        rows = engine.query("SELECT severity, sum(open_count) FROM open_violations_by_category GROUP BY 1").rows
        (bpm,) = engine.query("SELECT batches_per_minute FROM checker_health").rows[0]
    assert snapshot.overview is not None
    assert {str(s): int(n) for s, n in rows} == dict(snapshot.overview.by_severity)  # type: ignore[call-overload]
    assert snapshot.checker is not None
    assert snapshot.checker.batches_per_minute == pytest.approx(float(bpm))  # type: ignore[arg-type]


def test_worst_ledgers_are_ranked_like_the_report_with_their_evidence(snapshot: DashboardSnapshot) -> None:
    worst = snapshot.worst
    assert worst is not None
    assert [ledger.ledger_id for ledger in worst] == EXPECTED_WORST_ORDER
    first, second = worst[0], worst[1]
    assert (first.worst_severity, first.data_loss, first.entries_affected) == ("critical", True, 5)
    assert first.categories == ("NO_REPLICA", "MISSING_REPLICA")
    assert first.missing == (MissingReplica(B1, 0, 5, "0-4"), MissingReplica(B2, 0, 5, "0-4"))
    assert first.ensemble == (Segment(0, (B1, B2)), Segment(5, (B3, B2)))
    assert first.quorum == "E 2, WQ 2, AQ 2"
    assert first.pulsar_topic == TOPIC_ORDERS
    assert first.first_seen == T0
    assert second.ledger_id == 1
    assert second.missing == (MissingReplica(B3, 0, 6, "1-2, 4-5, 7-8"),)
    assert second.ensemble == (Segment(0, (B1, B2, B3)),)
    assert second.pulsar_topic == TOPIC_AUDIT
    stuck = worst[2]
    assert (stuck.ledger_id, stuck.missing, stuck.ensemble, stuck.quorum) == (3, (), (), None)
    assert stuck.first_seen == T0 - timedelta(hours=10)


def test_worst_ledgers_without_the_violations_table_keep_bookie_and_count(data_dir: Path, tmp_path: Path) -> None:
    copy = tmp_path / "data"
    shutil.copytree(data_dir, copy)
    shutil.rmtree(copy / VIOLATIONS)
    snapshot = load_snapshot(copy, now=NOW)
    assert snapshot.missing_tables == (VIOLATIONS,)
    assert snapshot.worst is not None
    assert snapshot.worst[0].missing == (MissingReplica(B1, 0, 5, ""), MissingReplica(B2, 0, 5, ""))
    assert snapshot.worst[0].ensemble == ()


def test_bookies_under_replication_coverage_latency(snapshot: DashboardSnapshot) -> None:
    assert snapshot.bookies == (
        BookieHealth(B3, open_count=2, ledgers=2, critical=2, warning=0, info=0, entries=6),
        BookieHealth(B1, open_count=2, ledgers=2, critical=1, warning=1, info=0, entries=8),
        BookieHealth(B2, open_count=1, ledgers=1, critical=1, warning=0, info=0, entries=5),
    )
    assert snapshot.under_replication is not None
    (stuck,) = snapshot.under_replication
    assert (stuck.ledger_id, stuck.bookie, stuck.age_hours) == (3, B3, 12.0)
    coverage = snapshot.coverage
    assert coverage is not None
    assert (coverage.closed_ledgers, coverage.verified_ledgers, coverage.unverified_ledgers) == (7, 5, 2)
    assert coverage.coverage == pytest.approx(0.7143)
    assert coverage.oldest_verification == T0 - timedelta(hours=30)
    latency = snapshot.latency
    assert latency is not None
    assert (latency.checks, latency.p50_ms, latency.max_ms) == (7, 1500, 4000)
    ages = snapshot.verification_ages
    assert ages is not None and [(row.age_class, row.ledgers) for row in ages] == [
        ("0-25%", 4),
        ("25-50%", 2),
        ("50-75%", 1),
        ("75-100%", 0),
        ("late", 1),
        ("overdue", 1),
    ]
    assert ages[-1].age_to_seconds is None and ages[0].oldest_verification == ages[0].measured_at - timedelta(
        hours=400 / 60
    )


def test_checker_health_is_the_streaming_job_s(snapshot: DashboardSnapshot, data_dir: Path) -> None:
    checker = snapshot.checker
    assert checker is not None
    assert (checker.last_batch_id, checker.last_run_id) == (EXPECTED_LAST_BATCH, "run-a")  # not the later scan
    assert checker.last_batch_at == T0 + timedelta(minutes=118)
    assert checker.seconds_since_last_batch == 120.0
    assert checker.last_lag_records == 0
    assert checker.batches_per_minute == pytest.approx(0.2)
    assert (checker.events_last_hour, checker.checks_last_hour) == (6, 0)
    assert not checker.stalled
    assert load_snapshot(data_dir, now=NOW, stall_after_ms=60_000).checker.stalled  # type: ignore[union-attr]
    assert snapshot.runs is not None
    assert [(r.batch_id, r.lag_records) for r in snapshot.runs] == [(0, 40), (1, 5), (2, 3), (3, 0)]


def test_timeline_counts_first_detections_and_resolutions(snapshot: DashboardSnapshot) -> None:
    timeline = snapshot.timeline
    assert timeline is not None
    assert timeline.source == OPEN_VIOLATIONS
    assert timeline.bucket_seconds == 900  # 12 h of history: 48 buckets of 15 min
    assert timeline.starts[0] == T0 - timedelta(hours=10)
    assert timeline.starts[-1] == NOW
    assert len(timeline.starts) == len(timeline.detected) == len(timeline.resolved) == 49
    counts = dict(zip(timeline.starts, timeline.detected, strict=True))
    assert counts[T0 - timedelta(hours=10)] == 1
    assert counts[T0] == 9
    assert counts[T0 + timedelta(minutes=30)] == 1
    assert sum(timeline.detected) == 11
    resolved = dict(zip(timeline.starts, timeline.resolved, strict=True))
    assert resolved[T0 + timedelta(minutes=30)] == 1
    assert sum(timeline.resolved) == 1


def test_timeline_falls_back_to_violations_without_open_violations(data_dir: Path, tmp_path: Path) -> None:
    copy = tmp_path / "data"
    shutil.copytree(data_dir, copy)
    shutil.rmtree(copy / OPEN_VIOLATIONS)
    snapshot = load_snapshot(copy, now=NOW)
    assert snapshot.overview is None and snapshot.worst is None and snapshot.bookies is None
    assert snapshot.timeline is not None
    assert snapshot.timeline.source == VIOLATIONS
    assert sum(snapshot.timeline.detected) == 12  # every recorded detection, the re-detection of ledger 1 too
    assert sum(snapshot.timeline.resolved) == 0


@pytest.mark.parametrize(
    ("hours", "expected"), [(0, 60), (1, 60), (1.3, 300), (6, 300), (12, 900), (24, 1800), (24 * 7, 3 * 3600)]
)
def test_bucket_seconds_keeps_the_timeline_short(hours: float, expected: int) -> None:
    assert bucket_seconds(timedelta(hours=hours)) == expected


@pytest.mark.parametrize(
    ("groups", "text"),
    [
        ([[0, 0, 5, 0]], "0-4"),
        ([[7, 7, 1, 0]], "7"),
        ([[1, 7, 2, 3]], "1-2, 4-5, 7-8"),
        ([[0, 99, 1, 3]], "0, 3, ..., 99 (every 3)"),
        ([[0, 9, 2, 3]], "0-1, 3-4, ..., 9-10 (every 3)"),
        ([[0, 4, 2, 2]], "0-5"),  # touching runs
        ([[0, 0, 1, 0], [2, 2, 1, 0], [4, 4, 1, 0], [6, 6, 1, 0], [8, 8, 1, 0], [10, 10, 1, 0]], "0, 2, 4, 6, +2 more"),
    ],
)
def test_entry_ranges(groups: list[list[int]], text: str) -> None:
    assert entry_ranges(json.dumps({"groups": groups, "count": 0})) == text


@pytest.mark.parametrize("bad", [None, "", "not json", '{"groups": [[5, 1, 1, 0]]}', '{"count": 3}', "[1]"])
def test_entry_ranges_of_absent_or_malformed_evidence_is_empty(bad: str | None) -> None:
    assert entry_ranges(bad) == ""


# --- tables that are missing, appear later, or cannot be read


def test_missing_tables_give_no_data_yet_not_errors(data_dir: Path, tmp_path: Path) -> None:
    partial = tmp_path / "data"
    partial.mkdir()
    shutil.copytree(data_dir / CHECKER_RUNS, partial / CHECKER_RUNS)
    assert check_data_dir(partial) == (VIOLATIONS, "ledger_checks", OPEN_VIOLATIONS)
    snapshot = load_snapshot(partial, now=NOW)
    assert snapshot.problems == ()
    assert snapshot.overview is None and snapshot.worst is None and snapshot.timeline is None
    assert snapshot.coverage is None and snapshot.latency is None and snapshot.under_replication is None
    assert snapshot.verification_ages is None
    assert snapshot.checker is not None and snapshot.checker.last_batch_id == EXPECTED_LAST_BATCH
    values = render(snapshot)
    assert values[("open-critical", "children")] == NO_DATA
    assert values[("coverage-percent", "children")] == NO_DATA
    assert values[("last-batch-id", "children")] == str(EXPECTED_LAST_BATCH)
    # a table that appears later is read by the next snapshot
    shutil.copytree(data_dir / OPEN_VIOLATIONS, partial / OPEN_VIOLATIONS)
    later = load_snapshot(partial, now=NOW)
    assert later.overview is not None and dict(later.overview.by_severity) == EXPECTED_OPEN


def test_an_unreadable_table_is_a_problem_of_its_sections_only(data_dir: Path, tmp_path: Path) -> None:
    copy = tmp_path / "data"
    shutil.copytree(data_dir, copy)
    for parquet in Path(table_uri(copy, OPEN_VIOLATIONS)).glob("*.parquet"):
        parquet.unlink()  # as if a vacuum removed the files between the log read and the file read
    snapshot = load_snapshot(copy, now=NOW)
    assert snapshot.overview is None and snapshot.categories is None
    assert any(problem.startswith("open violations:") for problem in snapshot.problems)
    assert snapshot.checker is not None and snapshot.coverage is not None  # other tables still read
    notes = render(snapshot)[("data-notes", "children")]
    assert "cannot read now" in str(notes)


def test_a_vanished_data_directory_gives_an_empty_snapshot(tmp_path: Path) -> None:
    snapshot = load_snapshot(tmp_path / "gone", now=NOW)
    assert snapshot.overview is None and snapshot.checker is None
    assert len(snapshot.problems) == 1 and "does not exist" in snapshot.problems[0]
    values = render(snapshot)
    assert all(values[(name, "children")] in (NO_DATA, "–") for name in NUMBER_IDS if name != "generated-at")


@pytest.mark.parametrize("make", ["missing", "empty"])
def test_check_data_dir_refuses_a_directory_without_tables(tmp_path: Path, make: str) -> None:
    path = tmp_path / "data"
    if make == "empty":
        path.mkdir()
    with pytest.raises(DashboardDataError, match="does not exist" if make == "missing" else "holds none"):
        check_data_dir(path)
