"""``scrutiny sql`` and the shipped views, over tables with known content written by the job's writer.

The data set (``now`` = T0 + 2 h throughout):

* open violations: ledger 1 NO_REPLICA (critical), ledger 3 BELOW_ACK_QUORUM (critical) and MISSING_REPLICA on
  b1 and b2 (warning), ledger 4 UNDER_REPLICATION_STUCK on b2 since T0 - 10 h, ledger 5 ACK_QUORUM_ONE (info),
  ledger 6 / 7 ENTRIES_BEYOND_LAST_ENTRY (warning / critical), ledger 12 METADATA_UNREADABLE (critical); resolved:
  ledger 2 (later batch), ledger 8 (same batch);
* checks: ledgers 1-3 conclusive and CLOSED within the day, ledger 4 UNKNOWN, ledger 9 OPEN, ledger 10 checked
  30 h ago, ledger 11 checked after ``now`` (must be ignored);
* runs: stream batches finished at T0, T0 + 1:30, T0 + 1:55 and one after ``now``, plus a scan.
"""

from __future__ import annotations

import io
import json
import shutil
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pytest
from pyspark.sql import SparkSession

from scrutiny.cli.main import main
from scrutiny.connectors.tables.orphan_rows import read_sightings
from scrutiny.connectors.tables.repair_log import repair_log_rows
from scrutiny.connectors.tables.schemas import (
    LEDGER_CHECKS,
    REPAIR_ACTIONS,
    RunRecord,
    output_table,
)
from scrutiny.connectors.tables.sql import (
    VIEWS_DIR,
    DataDirError,
    MissingTableError,
    ParamError,
    RefusedStatementError,
    SqlEngine,
    SqlError,
    load_views,
)
from scrutiny.core.repair_plan import RepairAction, RepairOutcome
from scrutiny.dashboard.data import load_snapshot
from scrutiny.streaming.delta_writer import CheckerTables, append_rows, ensure_table
from scrutiny.streaming.orphan_sightings import merge_sightings
from tests.support.dashboard_tables import verification_age_rows

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
NOW = T0 + timedelta(hours=2)
NOW_PARAM = f"now={NOW.isoformat()}"
SHIPPED_VIEWS = {
    "open_violations_by_category",
    "data_loss_ledgers",
    "violations_per_bookie",
    "under_replication_age",
    "check_coverage",
    "detection_latency",
    "checker_health",
    "verification_age",
}
B1, B2 = "b1:3181", "b2:3181"
TOPIC_A, TOPIC_B, TOPIC_C = "persistent://t/n/a", "persistent://t/n/b", "persistent://t/n/c"


def at(minutes: float) -> datetime:
    return T0 + timedelta(minutes=minutes)


def violation(ledger: int, minutes: float, category: str, severity: str, **extra: object) -> dict[str, object]:
    return {
        "record": "violation",
        "ledger_id": ledger,
        "at": at(minutes),
        "category": category,
        "severity": severity,
        **extra,
    }


def check(ledger: int, minutes: float, verdict: str, state: str, latency: int | None) -> dict[str, object]:
    return {
        "record": "check",
        "ledger_id": ledger,
        "at": at(minutes),
        "verdict": verdict,
        "ledger_state": state,
        "latency_ms": latency,
    }


BATCH0 = [
    violation(1, 0, "NO_REPLICA", "critical", segment_first_entry=0, entry_count=5, pulsar_topic=TOPIC_A),
    violation(2, 0, "MISSING_REPLICA", "warning", bookie=B1, segment_first_entry=0, entry_count=3),
    violation(3, 0, "MISSING_REPLICA", "warning", bookie=B1, segment_first_entry=0, entry_count=4),
    violation(3, 0, "BELOW_ACK_QUORUM", "critical", segment_first_entry=0, entry_count=2, pulsar_topic=TOPIC_B),
    violation(4, -600, "UNDER_REPLICATION_STUCK", "critical", bookie=B2, details="stuck"),
    violation(5, 0, "ACK_QUORUM_ONE", "info"),
    check(1, 0, "VIOLATED", "CLOSED", 1000),
    check(2, 0, "VIOLATED", "CLOSED", 2000),
    check(3, 0, "VIOLATED", "CLOSED", 3000),
    check(10, -30 * 60, "HEALTHY", "CLOSED", 100_000),
]
BATCH1 = [
    {
        "record": "resolved",
        "ledger_id": 2,
        "at": at(30),
        "category": "MISSING_REPLICA",
        "bookie": B1,
        "segment_first_entry": 0,
    },
    violation(4, 30, "UNDER_REPLICATION_STUCK", "critical", bookie=B2, details="still stuck"),
    violation(6, 30, "ENTRIES_BEYOND_LAST_ENTRY", "warning", entry_count=2),
    violation(7, 30, "ENTRIES_BEYOND_LAST_ENTRY", "critical", entry_count=1, pulsar_topic=TOPIC_C),
    violation(8, 30, "NO_REPLICA", "critical", entry_count=9),
    violation(12, 30, "METADATA_UNREADABLE", "critical", details="bad bytes"),
    {"record": "resolved", "ledger_id": 8, "at": at(31), "category": "NO_REPLICA"},
    violation(3, 30, "MISSING_REPLICA", "warning", bookie=B2, segment_first_entry=0, entry_count=1),
    violation(-1, 30, "BOOKIE_LOST", "warning", bookie=B2, details="a cluster-level finding: of no ledger"),
    check(2, 30, "HEALTHY", "CLOSED", 500),
    check(4, 30, "UNKNOWN", "CLOSED", 4000),
    check(9, 30, "HEALTHY", "OPEN", None),
]
BATCH2 = [check(11, 180, "HEALTHY", "CLOSED", 7)]


def ages(minutes: float, batch: int, counts: Sequence[int]) -> pa.Table:
    """``verification_ages`` rows measured at ``minutes``."""
    return verification_age_rows(at(minutes), batch, counts)


def run(batch: int, started: float, finished: float, **figures: object) -> RunRecord:
    return RunRecord(f"run-{batch}", at(started), at(finished), **figures)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def data_dir(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("sql") / "data"
    stream = CheckerTables(spark, path, app_id="stream-test")
    stream.write_batch(
        0, output_table(BATCH0), run(0, -1, 0, events=10, ledgers_checked=4, violations=6, lag_records=5)
    )
    batch1 = run(1, 89, 90, events=20, ledgers_checked=3, violations=6, resolved=2)
    stream.write_batch(1, output_table(BATCH1), batch1, ages=ages(90, 1, [5, 4, 3, 2, 1, 0]))
    batch2 = run(2, 114, 115, events=7, ledgers_checked=1)
    stream.write_batch(2, output_table(BATCH2), batch2, ages=ages(115, 2, [6, 4, 3, 2, 0, 1]))
    stream.write_batch(3, output_table([]), run(3, 124, 125, events=99))
    scan = CheckerTables(spark, path, app_id="scan-test")
    scan_run = RunRecord("scan-1", at(117), at(118), events=1000, ledgers_checked=500, source="scan")
    scan.write_batch(0, output_table([]), scan_run)
    return path


def view(data_dir: Path, name: str, **params: str) -> list[dict[str, object]]:
    with SqlEngine(data_dir, params=params, now=NOW) as engine:
        result = engine.query(f"SELECT * FROM {name}")
    return [dict(zip(result.columns, row, strict=True)) for row in result.rows]


def cli(args: Sequence[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(["sql", *args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


# --- the views ---


def test_the_shipped_views_are_all_there_and_documented() -> None:
    views = load_views(VIEWS_DIR)
    assert {v.name for v in views} == SHIPPED_VIEWS
    for spec in views:
        assert spec.header.startswith(f"{spec.name}:"), spec.name
        assert "Columns:" in spec.header, spec.name
        assert spec.summary.endswith("?"), spec.name


def test_open_violations_by_category(data_dir: Path) -> None:
    rows = [
        (r["category"], r["severity"], r["open_count"], r["ledgers"], r["oldest_first_seen"])
        for r in view(data_dir, "open_violations_by_category")
    ]
    assert rows == [
        ("BELOW_ACK_QUORUM", "critical", 1, 1, T0),
        ("ENTRIES_BEYOND_LAST_ENTRY", "critical", 1, 1, at(30)),
        ("METADATA_UNREADABLE", "critical", 1, 1, at(30)),
        ("NO_REPLICA", "critical", 1, 1, T0),
        ("UNDER_REPLICATION_STUCK", "critical", 1, 1, at(-600)),
        ("MISSING_REPLICA", "warning", 2, 1, T0),
        ("BOOKIE_LOST", "warning", 1, 0, at(30)),  # of no ledger
        ("ENTRIES_BEYOND_LAST_ENTRY", "warning", 1, 1, at(30)),
        ("ACK_QUORUM_ONE", "info", 1, 1, T0),
    ]
    warning = view(data_dir, "open_violations_by_category", min_severity="warning")
    assert [(r["category"], r["severity"]) for r in warning] == [(c, s) for c, s, *_ in rows[:8]]


def test_data_loss_ledgers(data_dir: Path) -> None:
    """The critical NO_REPLICA, ENTRIES_BEYOND_LAST_ENTRY and METADATA_UNREADABLE rows; not BELOW_ACK_QUORUM
    (ledger 3: every entry still has a copy) nor a warning ENTRIES_BEYOND_LAST_ENTRY (ledger 6)."""
    common = {"bookie": None, "details": None}
    assert view(data_dir, "data_loss_ledgers") == [
        {
            **common,
            "ledger_id": 1,
            "category": "NO_REPLICA",
            "segment_first_entry": 0,
            "pulsar_topic": TOPIC_A,
            "first_seen": T0,
            "last_seen": T0,
            "entries_affected": 5,
        },
        {
            **common,
            "ledger_id": 7,
            "category": "ENTRIES_BEYOND_LAST_ENTRY",
            "segment_first_entry": None,
            "pulsar_topic": TOPIC_C,
            "first_seen": at(30),
            "last_seen": at(30),
            "entries_affected": 1,
        },
        {
            **common,
            "ledger_id": 12,
            "category": "METADATA_UNREADABLE",
            "segment_first_entry": None,
            "pulsar_topic": None,
            "first_seen": at(30),
            "last_seen": at(30),
            "entries_affected": None,
            "details": "bad bytes",
        },
    ]


def test_report_view_and_dashboard_agree_on_data_loss(data_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """One definition of data loss: the report's figure and flags, the view and the dashboard count the same ledgers."""
    in_view = {row["ledger_id"] for row in view(data_dir, "data_loss_ledgers")}
    assert main(["report", "--data-dir", str(data_dir), "--format", "json", "--worst", "100"]) == 1
    report = json.loads(capsys.readouterr().out)
    flagged = {ledger["ledger_id"] for ledger in report["worst_ledgers"] if ledger["data_loss"]}
    overview = load_snapshot(data_dir, now=NOW).overview
    assert overview is not None
    assert in_view == flagged == {1, 7, 12}
    assert report["data_loss_ledgers"] == overview.data_loss_ledgers == len(in_view)


def test_violations_per_bookie(data_dir: Path) -> None:
    assert view(data_dir, "violations_per_bookie") == [
        {
            "bookie": B2,
            "open_count": 3,  # with its BOOKIE_LOST, of no ledger
            "ledgers": 2,
            "critical": 1,
            "warning": 2,
            "info": 0,
            "entries": 1,
            "oldest_first_seen": at(-600),
        },
        {
            "bookie": B1,
            "open_count": 1,
            "ledgers": 1,
            "critical": 0,
            "warning": 1,
            "info": 0,
            "entries": 4,
            "oldest_first_seen": T0,
        },
    ]


def test_under_replication_age_counts_from_the_first_detection(data_dir: Path) -> None:
    assert view(data_dir, "under_replication_age") == [
        {
            "ledger_id": 4,
            "bookie": B2,
            "pulsar_topic": None,
            "first_seen": at(-600),
            "last_seen": at(30),
            "age_hours": 12.0,
            "details": "still stuck",
        },
    ]


def test_verification_age_is_the_latest_count_by_class(data_dir: Path) -> None:
    rows = view(data_dir, "verification_age")
    assert [(r["age_class"], r["ledgers"], r["overdue"]) for r in rows] == [
        ("0-25%", 6, False),
        ("25-50%", 4, False),
        ("50-75%", 3, False),
        ("75-100%", 2, False),
        ("late", 0, False),
        ("overdue", 1, True),
    ]
    assert rows[0]["measured_at"] == at(115) and rows[-1]["age_to_seconds"] is None
    assert rows[0]["oldest_verification"] == at(115 - 400)
    with SqlEngine(data_dir, now=at(100)) as engine:  # before batch 2: batch 1's count
        assert engine.query("SELECT sum(ledgers) FROM verification_age").rows == [(15,)]


@pytest.mark.parametrize(
    ("hours", "verified", "coverage"),
    [("24", 3, 0.6), ("48", 4, 0.8), ("1", 0, 0.0)],
)
def test_check_coverage(data_dir: Path, hours: str, verified: int, coverage: float) -> None:
    # closed as of now: 1, 2, 3 (conclusive within the day), 4 (UNKNOWN only), 10 (30 h ago); 9 is open, 11 is later
    assert view(data_dir, "check_coverage", hours=hours) == [
        {
            "window_hours": float(hours),
            "closed_ledgers": 5,
            "verified_ledgers": verified,
            "unverified_ledgers": 5 - verified,
            "coverage": coverage,
            "oldest_verification": at(-30 * 60),
        },
    ]


def test_detection_latency(data_dir: Path) -> None:
    # within (now - 24 h, now]: 1000, 2000, 3000, 500, 4000; not ledger 10 (30 h ago), 11 (later), 9 (no latency)
    assert view(data_dir, "detection_latency") == [
        {"window_hours": 24.0, "checks": 5, "p50_ms": 2000, "p90_ms": 4000, "p99_ms": 4000, "max_ms": 4000},
    ]
    assert view(data_dir, "detection_latency", hours="1")[0]["checks"] == 0
    assert view(data_dir, "detection_latency", hours="1")[0]["p50_ms"] is None


def test_checker_health(data_dir: Path) -> None:
    # batch 3 finished after now; the scan is another source; batch 2 (the latest) has no known lag
    assert view(data_dir, "checker_health") == [
        {
            "last_run_id": "run-2",
            "last_batch_id": 2,
            "last_batch_at": at(115),
            "seconds_since_last_batch": 300.0,
            "last_duration_ms": 60_000,
            "last_lag_records": None,
            "batches_per_minute": 0.1,
            "events_last_hour": 27,
            "checks_last_hour": 4,
            "violations_last_hour": 6,
        },
    ]
    scan = view(data_dir, "checker_health", source="scan")
    assert [(r["last_run_id"], r["events_last_hour"]) for r in scan] == [("scan-1", 1000)]
    assert view(data_dir, "checker_health", now=(T0 - timedelta(days=1)).isoformat()) == []


# --- the engine ---


def test_tables_are_read_from_live_files_only(data_dir: Path) -> None:
    # open_violations went through MERGEs that rewrote files: every key must appear once
    with SqlEngine(data_dir, now=NOW) as engine:
        result = engine.query("SELECT count(*), count(DISTINCT (ledger_id, category, bookie)) FROM open_violations")
    assert result.rows == [(12, 12)]


@pytest.mark.parametrize(
    "sql",
    [
        "COPY (SELECT 1) TO '{target}'",
        "SELECT 1; COPY (SELECT 1) TO '{target}'",
        "CREATE TABLE t AS SELECT 1",
        "ATTACH '{target}' AS other",
        "INSERT INTO violations SELECT * FROM violations",
        "SET VARIABLE hours = 1",
    ],
)
def test_statements_other_than_queries_are_refused(data_dir: Path, tmp_path: Path, sql: str) -> None:
    target = tmp_path / "written"
    with SqlEngine(data_dir, now=NOW) as engine, pytest.raises(RefusedStatementError):
        engine.query(sql.format(target=target))
    assert not target.exists()


def test_queries_cannot_touch_files(data_dir: Path) -> None:
    with SqlEngine(data_dir, now=NOW) as engine, pytest.raises(SqlError, match="disabled"):
        engine.query(f"SELECT * FROM read_parquet('{data_dir}/violations/*.parquet')")


def test_a_missing_table_skips_its_views_and_is_named(data_dir: Path, tmp_path: Path) -> None:
    partial = tmp_path / "partial"
    shutil.copytree(data_dir, partial)
    shutil.rmtree(partial / LEDGER_CHECKS)
    with SqlEngine(partial, now=NOW) as engine:
        assert engine.missing_tables == (LEDGER_CHECKS,)
        assert engine.skipped_views == {"check_coverage": LEDGER_CHECKS, "detection_latency": LEDGER_CHECKS}
        assert engine.query("SELECT last_batch_id FROM checker_health").rows == [(2,)]
        with pytest.raises(MissingTableError, match=f"'ledger_checks' .*{partial}"):
            engine.query("SELECT count(*) FROM ledger_checks")
        with pytest.raises(MissingTableError, match="needed by view 'check_coverage'"):
            engine.query("SELECT * FROM check_coverage")


def test_repair_actions_time_reads_unquoted_as_fixed_at(spark: SparkSession, data_dir: Path, tmp_path: Path) -> None:
    fixed = tmp_path / "data"
    shutil.copytree(data_dir, fixed)
    ensure_table(spark, fixed, REPAIR_ACTIONS)
    action = RepairAction(5, RepairOutcome.MARKED, (B1,), "/ledgers/underreplication/ledgers/0000/0000/0000/L0005")
    append_rows(spark, fixed, REPAIR_ACTIONS, repair_log_rows([action], run_id="scan-9", at=at(5)))
    with SqlEngine(fixed, now=NOW) as engine:
        result = engine.query('SELECT ledger_id, fixed_at, "at" FROM repair_actions')
    assert result.rows == [(5, at(5), at(5))]


def test_orphan_sightings_are_merged_bookie_by_bookie_and_read_by_sql(
    spark: SparkSession, data_dir: Path, tmp_path: Path
) -> None:
    sighted = tmp_path / "data"
    shutil.copytree(data_dir, sighted)
    ms = {lid: int(at(lid).timestamp() * 1000) for lid in (3, 7, 9)}
    merge_sightings(spark, sighted, {B1: {3: ms[3], 7: ms[7]}, "b2:3181": {7: ms[9]}}, conflict_attempts=1)
    # b1's sightings are now 3 (its first sighting kept, whatever is given) and 9: 7 goes; b2's stay as they were.
    merge_sightings(spark, sighted, {B1: {3: ms[9], 9: ms[9]}}, conflict_attempts=1)
    assert read_sightings(str(sighted)) == {B1: {3: ms[3], 9: ms[9]}, "b2:3181": {7: ms[9]}}  # read without Spark
    with SqlEngine(sighted, now=NOW) as engine:
        result = engine.query("SELECT bookie, ledger_id, first_seen FROM orphan_sightings ORDER BY 1, 2")
    assert result.rows == [(B1, 3, at(3)), (B1, 9, at(9)), ("b2:3181", 7, at(9))]
    merge_sightings(spark, sighted, {"b2:3181": {}}, conflict_attempts=1)  # none left: its rows go
    assert read_sightings(str(sighted)) == {B1: {3: ms[3], 9: ms[9]}}


@pytest.mark.parametrize("table", ["repair_actions", "rejected_events", "orphan_sightings"])
def test_an_optional_table_not_written_yet_is_named_as_missing(data_dir: Path, table: str) -> None:
    message = f"table '{table}' does not exist in data directory {data_dir}"
    with SqlEngine(data_dir, now=NOW) as engine, pytest.raises(MissingTableError, match=message):
        engine.query(f"SELECT * FROM {table}")
    with SqlEngine(data_dir, now=NOW) as engine:
        assert table not in engine.missing_tables


def test_a_data_dir_without_tables_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(DataDirError, match="does not exist"):
        SqlEngine(tmp_path / "nowhere")
    with pytest.raises(DataDirError, match="none of the tables"):
        SqlEngine(tmp_path)


def test_parameters_are_checked(data_dir: Path) -> None:
    with pytest.raises(ParamError, match="unknown parameter 'hour'"):
        SqlEngine(data_dir, params={"hour": "1"})
    with pytest.raises(ParamError, match="hours='soon' is not a DOUBLE"):
        SqlEngine(data_dir, params={"hours": "soon"})


# --- the command ---


def test_cli_table_output_is_aligned(data_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    query = "SELECT ledger_id, category, entry_count FROM open_violations WHERE ledger_id IN (1, 4) ORDER BY 1"
    code, out, _ = cli([query, "--data-dir", str(data_dir)], capsys)
    assert code == 0
    assert out.splitlines() == [
        "ledger_id  category                 entry_count",
        "---------  -----------------------  -----------",
        "        1  NO_REPLICA                         5",
        "        4  UNDER_REPLICATION_STUCK",
    ]


def test_cli_json_and_csv(data_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["SELECT * FROM under_replication_age", "--data-dir", str(data_dir), "--param", NOW_PARAM]
    code, out, _ = cli([*args, "--format", "json"], capsys)
    assert code == 0
    assert json.loads(out) == [
        {
            "ledger_id": 4,
            "bookie": B2,
            "pulsar_topic": None,
            "first_seen": "2026-03-01T02:00:00Z",
            "last_seen": "2026-03-01T12:30:00Z",
            "age_hours": 12.0,
            "details": "still stuck",
        },
    ]
    code, out, _ = cli([*args, "--format", "csv"], capsys)
    assert code == 0
    assert out == (
        "ledger_id,bookie,pulsar_topic,first_seen,last_seen,age_hours,details\n"
        "4,b2:3181,,2026-03-01T02:00:00Z,2026-03-01T12:30:00Z,12.0,still stuck\n"
    )


@pytest.mark.parametrize("fmt", ["table", "json", "csv"])
def test_cli_prints_times_to_the_second(data_dir: Path, fmt: str, capsys: pytest.CaptureFixture[str]) -> None:
    query = "SELECT TIMESTAMPTZ '2026-03-01 12:00:07.654321+00' AS t, epoch_ms(t) AS ms"
    code, out, _ = cli([query, "--data-dir", str(data_dir), "--format", fmt], capsys)
    assert code == 0
    assert "2026-03-01T12:00:07Z" in out and ".654" not in out.replace("1772366407654", "")
    assert "1772366407654" in out


def test_cli_reads_the_data_dir_from_the_configuration(
    data_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "scrutiny.toml"
    config.write_text(f'[checker]\ndata_dir = "{data_dir}"\n')
    code, out, _ = cli(["SELECT count(*) AS n FROM violations", "--config", str(config), "--format", "csv"], capsys)
    assert (code, out) == (0, "n\n13\n")  # BATCH0 and BATCH1 violation rows


def test_cli_lists_the_views(data_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = cli(["--list-views", "--data-dir", str(data_dir), "--format", "json"], capsys)
    assert code == 0
    listed = {row["view"]: row for row in json.loads(out)}
    assert set(listed) == SHIPPED_VIEWS
    assert listed["check_coverage"]["params"] == "hours=24"
    assert all(row["status"] == "ok" for row in listed.values())


def test_cli_notes_skipped_views(data_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    partial = tmp_path / "partial"
    shutil.copytree(data_dir, partial)
    shutil.rmtree(partial / LEDGER_CHECKS)
    code, out, err = cli(["SELECT count(*) AS n FROM checker_runs", "--data-dir", str(partial)], capsys)
    assert code == 0 and out.splitlines()[-1].strip() == "5"
    assert "note: view check_coverage skipped: table 'ledger_checks' does not exist" in err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["SELEC 1"], "Parser Error"),
        (["SELECT nope FROM violations"], "nope"),
        (["COPY violations TO '{tmp}/out.csv'"], "only SELECT queries"),
        (["SELECT 1", "--param", "hours=x"], "not a DOUBLE"),
        (["SELECT 1", "--param", "nothing"], "NAME=VALUE"),
        ([], "give a query"),
    ],
)
def test_cli_errors_exit_2_with_one_line(
    data_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    code, out, err = cli([a.format(tmp=tmp_path) for a in args] + ["--data-dir", str(data_dir)], capsys)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("scrutiny: error: ") and message in err
    assert not (tmp_path / "out.csv").exists()


def test_cli_missing_data_dir_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = cli(["SELECT 1", "--data-dir", str(tmp_path / "nowhere")], capsys)
    assert code == 2 and "nowhere does not exist" in err


def test_cli_reads_the_query_from_stdin(
    data_dir: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO("SELECT max(ledger_id) AS top FROM ledger_checks\n"))
    code, out, _ = cli(["-", "--data-dir", str(data_dir), "--format", "json"], capsys)
    assert (code, json.loads(out)) == (0, [{"top": 11}])
