"""The dashboard's data over tables of known content: every section of the snapshot, and missing or unreadable tables.

The data set (:func:`write_known_tables`, times relative to ``t0``; the snapshot is taken at ``t0 + 2 h``):

* open, critical: ledger 2 NO_REPLICA (entries 0-4) with MISSING_REPLICA on b1 and b2 (data loss); ledger 1
  BELOW_ACK_QUORUM with MISSING_REPLICA on b3 (entries 1-2, 4-5, 7-8, re-detected at +30 min); ledger 3
  UNDER_REPLICATION_STUCK on b3 since t0 - 10 h;
* open, warning: ledger 4 BELOW_WRITE_QUORUM with MISSING_REPLICA on b1 (entries 10-12), ledger 7 PLACEMENT_FAIL;
  open, info: ledger 5 ACK_QUORUM_ONE; resolved: ledger 6 MISSING_REPLICA on b2 (at +30 min);
* checks: ledgers 1, 2, 4, 6, 7 conclusive and closed within the day, 3 UNKNOWN, 8 checked 30 h ago, 9 open;
* stream batches 0-3 finished at t0, +30 min, +115 min, +118 min (lag 40, 5, 3, 0), and a scan at +119 min.

The other dashboard tests (tests/unit/test_dashboard_*.py, tests/integration/test_dashboard.py) use the same data set.
"""

from __future__ import annotations

import json
import shutil
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from scrutiny.connectors.delta_tables import CheckerTables, table_uri
from scrutiny.connectors.sql_engine import SqlEngine
from scrutiny.connectors.table_schemas import CHECKER_RUNS, OPEN_VIOLATIONS, VIOLATIONS, RunRecord, output_table
from scrutiny.core.sequence_groups import SequenceGroup
from scrutiny.streaming.dashboard_data import (
    DashboardDataError,
    bucket_seconds,
    check_data_dir,
    entry_ranges,
    load_snapshot,
)
from scrutiny.streaming.dashboard_layout import NUMBER_IDS
from scrutiny.streaming.dashboard_render import render
from scrutiny.streaming.dashboard_snapshot import (
    NO_DATA,
    BookieHealth,
    CategoryCount,
    MissingReplica,
    Segment,
    Snapshot,
)

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
NOW = T0 + timedelta(hours=2)
B1, B2, B3 = "b1:3181", "b2:3181", "b3:3181"
TOPIC_ORDERS = "persistent://shop/orders/payments"
TOPIC_AUDIT = "persistent://shop/audit/log"
APP_ID = "dashboard-test"
STUCK_DETAILS = "marked under-replicated, not repaired"

#: What the page must show for the known tables.
EXPECTED_OPEN = {"critical": 6, "warning": 3, "info": 1}
EXPECTED_WORST_ORDER = [2, 1, 3, 4, 7, 5]
EXPECTED_LAST_BATCH = 3
EXPECTED_COVERAGE_TEXT = "71.4 %"


def entries(first_start: int, last_start: int, size: int, period: int) -> dict[str, object]:
    group = SequenceGroup.of(first_start, last_start, size, period)
    return {
        "entries": json.dumps({"groups": [group.as_list()], "count": group.count}),
        "entry_count": group.count,
        "first_entry": group.first,
        "last_entry": group.last,
    }


def ensemble(*segments: tuple[int, list[str]], quorum: tuple[int, int, int]) -> dict[str, object]:
    size, write, ack = quorum
    return {
        "ensemble": json.dumps([{"first_entry": first, "bookies": bookies} for first, bookies in segments]),
        "ensemble_size": size,
        "write_quorum": write,
        "ack_quorum": ack,
    }


LEDGER1 = ensemble((0, [B1, B2, B3]), quorum=(3, 2, 2)) | {"pulsar_topic": TOPIC_AUDIT}
LEDGER2 = ensemble((0, [B1, B2]), (5, [B3, B2]), quorum=(2, 2, 2)) | {"pulsar_topic": TOPIC_ORDERS}


def violation(
    t0: datetime, ledger: int, minutes: float, category: str, severity: str, **extra: object
) -> dict[str, object]:
    return {
        "record": "violation",
        "ledger_id": ledger,
        "at": t0 + timedelta(minutes=minutes),
        "category": category,
        "severity": severity,
        **extra,
    }


def check(t0: datetime, ledger: int, minutes: float, verdict: str, state: str, *, ms: int | None) -> dict[str, object]:
    return {
        "record": "check",
        "ledger_id": ledger,
        "at": t0 + timedelta(minutes=minutes),
        "verdict": verdict,
        "ledger_state": state,
        "latency_ms": ms,
    }


def run(t0: datetime, finished_minutes: float, **figures: object) -> RunRecord:
    finished = t0 + timedelta(minutes=finished_minutes)
    return RunRecord("run-a", finished - timedelta(seconds=2), finished, **figures)  # type: ignore[arg-type]


def known_batches(t0: datetime) -> list[tuple[list[dict[str, object]], RunRecord]]:
    """The batches of the data set (module docstring), each with its run record."""
    v, c = violation, check
    batch0 = [
        v(t0, 1, 0, "BELOW_ACK_QUORUM", "critical", segment_first_entry=0, **entries(1, 7, 2, 3), **LEDGER1),
        v(t0, 1, 0, "MISSING_REPLICA", "critical", bookie=B3, segment_first_entry=0, **entries(1, 7, 2, 3), **LEDGER1),
        v(t0, 2, 0, "NO_REPLICA", "critical", segment_first_entry=0, **entries(0, 0, 5, 0), **LEDGER2),
        v(t0, 2, 0, "MISSING_REPLICA", "critical", bookie=B1, segment_first_entry=0, **entries(0, 0, 5, 0), **LEDGER2),
        v(t0, 2, 0, "MISSING_REPLICA", "critical", bookie=B2, segment_first_entry=0, **entries(0, 0, 5, 0), **LEDGER2),
        v(t0, 3, -600, "UNDER_REPLICATION_STUCK", "critical", bookie=B3, details=STUCK_DETAILS),
        v(t0, 4, 0, "BELOW_WRITE_QUORUM", "warning", segment_first_entry=0, **entries(10, 10, 3, 0)),
        v(t0, 4, 0, "MISSING_REPLICA", "warning", bookie=B1, segment_first_entry=0, **entries(10, 10, 3, 0)),
        v(t0, 5, 0, "ACK_QUORUM_ONE", "info"),
        v(t0, 6, 0, "MISSING_REPLICA", "warning", bookie=B2, segment_first_entry=0, **entries(0, 0, 2, 0)),
        c(t0, 1, 0, "VIOLATED", "CLOSED", ms=1500),
        c(t0, 2, 0, "VIOLATED", "CLOSED", ms=2500),
        c(t0, 4, 0, "VIOLATED", "CLOSED", ms=800),
        c(t0, 3, 0, "UNKNOWN", "CLOSED", ms=4000),
        c(t0, 8, -30 * 60, "HEALTHY", "CLOSED", ms=100_000),
        c(t0, 9, 0, "HEALTHY", "OPEN", ms=None),
    ]
    resolved_6 = {
        "record": "resolved",
        "ledger_id": 6,
        "at": t0 + timedelta(minutes=30),
        "category": "MISSING_REPLICA",
        "bookie": B2,
        "segment_first_entry": 0,
    }
    batch1 = [
        resolved_6,
        v(t0, 7, 30, "PLACEMENT_FAIL", "warning", segment_first_entry=0),
        v(t0, 1, 30, "BELOW_ACK_QUORUM", "critical", segment_first_entry=0, **entries(1, 7, 2, 3), **LEDGER1),
        c(t0, 6, 30, "HEALTHY", "CLOSED", ms=300),
        c(t0, 7, 30, "VIOLATED", "CLOSED", ms=900),
        c(t0, 1, 30, "VIOLATED", "CLOSED", ms=1600),
    ]
    return [
        (batch0, run(t0, 0, events=12, ledgers_checked=6, violations=10, lag_records=40)),
        (batch1, run(t0, 30, events=8, ledgers_checked=3, violations=2, resolved=1, lag_records=5)),
        ([], run(t0, 115, events=4, lag_records=3)),
        ([], run(t0, 118, events=2, lag_records=0)),
    ]


def write_known_tables(path: Path, t0: datetime) -> None:
    """Write the data set under ``path`` with the checker's own writer (plus one scan batch)."""
    stream = CheckerTables(path, app_id=APP_ID)
    for batch_id, (rows, record) in enumerate(known_batches(t0)):
        stream.write_batch(batch_id, output_table(rows), record)
    scan_end = t0 + timedelta(minutes=119)
    scan = RunRecord("scan-1", scan_end - timedelta(seconds=5), scan_end, ledgers_checked=9, source="scan")
    CheckerTables(path, app_id="dashboard-scan").write_batch(0, output_table([]), scan)


def append_live_batch(path: Path, at: datetime) -> None:
    """Batch 4: ledger 10 loses entries 0-19 (NO_REPLICA, critical): one more critical, a new worst ledger."""
    rows = [
        violation(at, 10, 0, "NO_REPLICA", "critical", segment_first_entry=0, **entries(0, 0, 20, 0), **LEDGER2),
        check(at, 10, 0, "VIOLATED", "CLOSED", ms=700),
    ]
    record = RunRecord("run-a", at - timedelta(seconds=1), at, events=3, ledgers_checked=1, violations=1, lag_records=1)
    CheckerTables(path, app_id=APP_ID).write_batch(4, output_table(rows), record)


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("dashboard") / "data"
    write_known_tables(path, T0)
    return path


@pytest.fixture(scope="module")
def snapshot(data_dir: Path) -> Snapshot:
    return load_snapshot(data_dir, now=NOW)


# --- the snapshot


def test_overview_counts_open_violations_by_severity(snapshot: Snapshot) -> None:
    assert snapshot.problems == ()
    assert snapshot.missing_tables == ()
    overview = snapshot.overview
    assert overview is not None
    assert dict(overview.by_severity) == EXPECTED_OPEN
    assert overview.open_total == 10
    assert overview.ledgers_affected == 6
    assert overview.data_loss_ledgers == 1
    assert overview.status == "UNHEALTHY"


def test_categories_are_the_view_rows(snapshot: Snapshot) -> None:
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


def test_numbers_match_scrutiny_sql(data_dir: Path, snapshot: Snapshot) -> None:
    with SqlEngine(data_dir, now=NOW) as engine:
        rows = engine.query("SELECT severity, sum(open_count) FROM open_violations_by_category GROUP BY 1").rows
        (bpm,) = engine.query("SELECT batches_per_minute FROM checker_health").rows[0]
    assert snapshot.overview is not None
    assert {str(s): int(n) for s, n in rows} == dict(snapshot.overview.by_severity)  # type: ignore[call-overload]
    assert snapshot.checker is not None
    assert snapshot.checker.batches_per_minute == pytest.approx(float(bpm))  # type: ignore[arg-type]


def test_worst_ledgers_are_ranked_like_the_report_with_their_evidence(snapshot: Snapshot) -> None:
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


def test_bookies_under_replication_coverage_latency(snapshot: Snapshot) -> None:
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


def test_checker_health_is_the_streaming_job_s(snapshot: Snapshot, data_dir: Path) -> None:
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


def test_timeline_counts_first_detections_and_resolutions(snapshot: Snapshot) -> None:
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
