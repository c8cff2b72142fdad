"""``scrutiny report`` on Delta tables built in a temporary directory with the checker's own writer."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from scrutiny.cli.main import main
from scrutiny.connectors.tables.schemas import RunRecord, output_table
from scrutiny.streaming.delta_writer import CheckerTables
from tests.core.test_health_summary import DOCUMENTED_KEYS


def ago(minutes: float) -> datetime:
    return datetime.now(UTC) - timedelta(minutes=minutes)  # at call time: the suite may run long before this


def violation(
    ledger_id: int, category: str, severity: str, minutes_ago: float = 30, **extra: object
) -> dict[str, object]:
    return {
        "record": "violation",
        "ledger_id": ledger_id,
        "at": ago(minutes_ago),
        "category": category,
        "severity": severity,
        **extra,
    }


def resolved(ledger_id: int, category: str, minutes_ago: float = 1) -> dict[str, object]:
    return {"record": "resolved", "ledger_id": ledger_id, "at": ago(minutes_ago), "category": category}


def check(ledger_id: int, verdict: str = "HEALTHY") -> dict[str, object]:
    return {"record": "check", "ledger_id": ledger_id, "at": ago(1), "verdict": verdict}


def write(
    spark: SparkSession,
    data_dir: Path,
    batches: Sequence[Sequence[Mapping[str, object]]],
    *,
    finished_minutes_ago: float = 0.5,
) -> None:
    tables = CheckerTables(spark, data_dir, app_id="test-report")
    for batch_id, rows in enumerate(batches):
        finished = ago(finished_minutes_ago)
        run = RunRecord("run-1", finished - timedelta(seconds=1), finished, ledgers_checked=len(rows), lag_records=5)
        tables.write_batch(batch_id, output_table(list(rows)), run)


def report(capsys: pytest.CaptureFixture[str], data_dir: Path, *options: str) -> tuple[int, list[str], str]:
    code = main(["report", "--data-dir", str(data_dir), *options])
    captured = capsys.readouterr()
    return code, captured.out.splitlines(), captured.err


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    return tmp_path / "data"


def test_healthy_tables_exit_0(spark: SparkSession, data_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write(spark, data_dir, [[check(1), check(2)], [check(2)]])
    code, lines, err = report(capsys, data_dir)
    assert (code, err) == (0, "")
    assert lines[-1] == "Status: HEALTHY"
    assert " Ledgers checked:            2" in lines
    assert " Open violations:            0" in lines
    assert " Lag:                        5 records" in lines
    assert " Batches, last 10 min:       2" in lines
    assert not any(line.startswith("WARNING") for line in lines)


def test_a_critical_open_violation_is_unhealthy(
    spark: SparkSession, data_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = [
        violation(42, "NO_REPLICA", "critical", entry_count=10, pulsar_topic="persistent://p/n/orders"),
        violation(7, "BELOW_WRITE_QUORUM", "warning", entry_count=99),
        check(42, "VIOLATED"),
    ]
    write(spark, data_dir, [rows])
    code, lines, _ = report(capsys, data_dir)
    assert code == 1
    assert lines[-1] == "Status: UNHEALTHY"
    assert " Ledgers with violations:    2" in lines
    first = lines.index("Worst ledgers (2 of 2):") + 1
    assert lines[first].startswith(" 1. ledger 42, critical, DATA LOSS, 10 entries")
    assert "topic persistent://p/n/orders" in lines[first]


def test_the_fail_on_threshold_decides_the_exit_code(
    spark: SparkSession, data_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write(spark, data_dir, [[violation(3, "BOOKIE_UNRESPONSIVE", "warning", bookie="b1:3181")]])
    code, lines, _ = report(capsys, data_dir, "--fail-on", "critical")
    assert (code, lines[-1]) == (0, "Status: HEALTHY")
    code, lines, _ = report(capsys, data_dir, "--fail-on", "warning")
    assert (code, lines[-1]) == (1, "Status: UNHEALTHY")
    code, lines, _ = report(capsys, data_dir)  # the default is critical
    assert (code, lines[-1]) == (0, "Status: HEALTHY")


def test_a_resolved_violation_does_not_count(
    spark: SparkSession, data_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write(spark, data_dir, [[violation(5, "NO_REPLICA", "critical")], [resolved(5, "NO_REPLICA"), check(5)]])
    code, lines, _ = report(capsys, data_dir, "--fail-on", "info")
    assert (code, lines[-1]) == (0, "Status: HEALTHY")
    assert " Open violations:            0" in lines
    assert not any("ledger 5" in line for line in lines)


def test_a_missing_data_dir_or_table_exits_2_with_one_line(data_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, lines, err = report(capsys, data_dir)
    assert (code, lines) == (2, [])
    assert err.count("\n") == 1 and "data directory" in err and str(data_dir) in err
    data_dir.mkdir()
    code, lines, err = report(capsys, data_dir)
    assert (code, lines) == (2, [])
    assert err.count("\n") == 1 and "no Delta table 'open_violations'" in err


def test_json_output_has_the_documented_keys(
    spark: SparkSession, data_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write(spark, data_dir, [[violation(9, "NO_REPLICA", "critical", entry_count=4, bookie=None), check(9, "VIOLATED")]])
    code, lines, _ = report(capsys, data_dir, "--format", "json", "--worst", "1")
    document = json.loads("\n".join(lines))
    assert code == 1
    assert list(document) == DOCUMENTED_KEYS
    assert document["status"] == "UNHEALTHY" and document["fail_on"] == "critical"
    assert (document["ledgers_checked"], document["ledgers_affected"], document["open_violations"]) == (1, 1, 1)
    assert document["by_severity"] == {"critical": 1, "warning": 0, "info": 0}
    assert document["by_category"] == {"NO_REPLICA": {"critical": 1, "warning": 0, "info": 0}}
    assert [ledger["ledger_id"] for ledger in document["worst_ledgers"]] == [9]
    assert document["worst_ledgers"][0]["findings"][0]["entry_count"] == 4
    checker = document["checker"]
    assert (checker["last_batch_id"], checker["lag_records"], checker["stalled"]) == (0, 5, False)
    assert checker["batches_last_10_minutes"] == 1
    assert document["warnings"] == []


def test_a_stalled_checker_is_warned_about(
    spark: SparkSession, data_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write(spark, data_dir, [[check(1)]], finished_minutes_ago=30)
    code, lines, _ = report(capsys, data_dir)
    assert (code, lines[-1]) == (0, "Status: HEALTHY")
    assert "WARNING: no batch for 30 min: the streaming checker looks stalled" in lines
    assert " Batches, last 10 min:       0" in lines


def test_worst_zero_lists_no_ledger(spark: SparkSession, data_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write(spark, data_dir, [[violation(1, "NO_REPLICA", "critical")]])
    code, lines, _ = report(capsys, data_dir, "--worst", "0")
    assert code == 1
    assert not any(line.startswith("Worst ledgers") for line in lines)
    assert any(line.startswith(" NO_REPLICA") for line in lines)
    with pytest.raises(SystemExit) as exit_info:
        main(["report", "--data-dir", str(data_dir), "--worst", "-1"])
    assert exit_info.value.code == 2


def test_records_the_checker_skipped_are_counted_from_their_table(
    spark: SparkSession, data_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write(spark, data_dir, [[check(1)]])
    first = json.loads("\n".join(report(capsys, data_dir, "--format", "json")[1]))
    assert first["checker"]["rejected_events"] == 0 and first["warnings"] == []  # no table yet: nothing skipped
    rejected = {
        "record": "rejected",
        "at": ago(1),
        "kafka_partition": 0,
        "kafka_offset": 12,
        "kafka_key": "x",
        "reason": "undecodable",
        "details": "not a ledger event",
        "value_bytes": 3,
        "value_head": "ffffff",
    }
    finished = ago(0.5)
    run = RunRecord("run-1", finished - timedelta(seconds=1), finished, lag_records=0)
    CheckerTables(spark, data_dir, app_id="test-report").write_batch(1, output_table([]), run, rejected=[rejected])
    code, lines, _ = report(capsys, data_dir)
    assert code == 0 and any(line.startswith(" Rejected records:           1, last ") for line in lines)
    assert "WARNING: 1 record(s) of the topic could not be used and were skipped (table rejected_events)" in lines
