"""The dashboard tests' data set: Delta tables of known content and what the page must show for them.

The data set (:func:`write_known_tables`, times relative to ``t0``; the unit tests take the snapshot at ``t0 + 2 h``):

* open, critical: ledger 2 NO_REPLICA (entries 0-4) with MISSING_REPLICA on b1 and b2 (data loss); ledger 1
  BELOW_ACK_QUORUM with MISSING_REPLICA on b3 (entries 1-2, 4-5, 7-8, re-detected at +30 min); ledger 3
  UNDER_REPLICATION_STUCK on b3 since t0 - 10 h;
* open, warning: ledger 4 BELOW_WRITE_QUORUM with MISSING_REPLICA on b1 (entries 10-12), ledger 7 PLACEMENT_FAIL;
  open, info: ledger 5 ACK_QUORUM_ONE; resolved: ledger 6 MISSING_REPLICA on b2 (at +30 min);
* checks: ledgers 1, 2, 4, 6, 7 conclusive and closed within the day, 3 UNKNOWN, 8 checked 30 h ago, 9 open;
* stream batches 0-3 finished at t0, +30 min, +115 min, +118 min (lag 40, 5, 3, 0), and a scan at +119 min.

The unit tests (tests/dashboard/test_*.py) share one copy written at :data:`T0` per test session
(:func:`known_tables`, read-only: a test that alters tables copies it first) and its snapshot at :data:`NOW`
(:func:`known_snapshot`); tests/dashboard/test_dashboard_browser.py writes the data set two hours before it runs.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pytest
from pyspark.sql import SparkSession

from scrutiny.connectors.tables.schemas import VERIFICATION_AGES_SCHEMA, RunRecord, output_table
from scrutiny.core.sequence_groups import SequenceGroup
from scrutiny.dashboard.data import load_snapshot
from scrutiny.dashboard.snapshot import DashboardSnapshot
from scrutiny.streaming.delta_writer import CheckerTables

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
    """The ``entries`` columns of one sequence group."""
    group = SequenceGroup.of(first_start, last_start, size, period)
    return {
        "entries": json.dumps({"groups": [group.as_list()], "count": group.count}),
        "entry_count": group.count,
        "first_entry": group.first,
        "last_entry": group.last,
    }


def ensemble(*segments: tuple[int, list[str]], quorum: tuple[int, int, int]) -> dict[str, object]:
    """The ensemble and quorum columns of a ledger."""
    size, write, ack = quorum
    return {
        "ensemble": json.dumps([{"first_entry": first, "bookies": bookies} for first, bookies in segments]),
        "ensemble_size": size,
        "write_quorum": write,
        "ack_quorum": ack,
    }


LEDGER1 = ensemble((0, [B1, B2, B3]), quorum=(3, 2, 2)) | {"pulsar_topic": TOPIC_AUDIT}
LEDGER2 = ensemble((0, [B1, B2]), (5, [B3, B2]), quorum=(2, 2, 2)) | {"pulsar_topic": TOPIC_ORDERS}


def output_row(record: str, t0: datetime, ledger: int, minutes: float, **fields: object) -> dict[str, object]:
    """One row of the checker's output: a ``record`` about ``ledger`` at ``t0`` + ``minutes``."""
    return {"record": record, "ledger_id": ledger, "at": t0 + timedelta(minutes=minutes), **fields}


def violation(
    t0: datetime, ledger: int, minutes: float, category: str, severity: str, **extra: object
) -> dict[str, object]:
    return output_row("violation", t0, ledger, minutes, category=category, severity=severity, **extra)


def check(t0: datetime, ledger: int, minutes: float, verdict: str, state: str, *, ms: int | None) -> dict[str, object]:
    return output_row("check", t0, ledger, minutes, verdict=verdict, ledger_state=state, latency_ms=ms)


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
    batch1 = [
        output_row("resolved", t0, 6, 30, category="MISSING_REPLICA", bookie=B2, segment_first_entry=0),
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


def verification_age_rows(measured: datetime, batch: int, counts: Sequence[int]) -> pa.Table:
    """``verification_ages`` rows of a 4-hour interval with a 1-hour grace, measured at ``measured``: ``counts`` per
    class, the oldest verification 400 minutes before."""
    bounds = [0.0, 3600.0, 7200.0, 10800.0, 14400.0, 18000.0, None]
    names = ("0-25%", "25-50%", "50-75%", "75-100%", "late", "overdue")
    rows = [
        {
            "at": measured,
            "age_class": name,
            "age_from_seconds": bounds[i],
            "age_to_seconds": bounds[i + 1],
            "ledgers": counts[i],
            "overdue": name == "overdue",
            "oldest_verification": measured - timedelta(minutes=400),
            "batch_id": batch,
            "run_id": "run",
        }
        for i, name in enumerate(names)
    ]
    return pa.Table.from_pylist(rows, schema=VERIFICATION_AGES_SCHEMA)


def write_known_tables(spark: SparkSession, path: Path, t0: datetime) -> None:
    """Write the data set under ``path`` with the checker's own writer (plus one scan batch)."""
    stream = CheckerTables(spark, path, app_id=APP_ID)
    for batch_id, (rows, record) in enumerate(known_batches(t0)):
        ages = verification_age_rows(record.finished_at, batch_id, [4, 2, 1, 0, 1, 1]) if batch_id == 3 else None
        stream.write_batch(batch_id, output_table(rows), record, ages=ages)
    scan_end = t0 + timedelta(minutes=119)
    scan = RunRecord("scan-1", scan_end - timedelta(seconds=5), scan_end, ledgers_checked=9, source="scan")
    CheckerTables(spark, path, app_id="dashboard-scan").write_batch(0, output_table([]), scan)


def append_live_batch(spark: SparkSession, path: Path, at: datetime) -> None:
    """Batch 4: ledger 10 loses entries 0-19 (NO_REPLICA, critical): one more critical, a new worst ledger."""
    rows = [
        violation(at, 10, 0, "NO_REPLICA", "critical", segment_first_entry=0, **entries(0, 0, 20, 0), **LEDGER2),
        check(at, 10, 0, "VIOLATED", "CLOSED", ms=700),
    ]
    record = RunRecord("run-a", at - timedelta(seconds=1), at, events=3, ledgers_checked=1, violations=1, lag_records=1)
    CheckerTables(spark, path, app_id=APP_ID).write_batch(4, output_table(rows), record)


def append_lost_bookie(spark: SparkSession, path: Path, at: datetime, bookie: str, details: str) -> None:
    """Batch 4: ``bookie`` lost (``BOOKIE_LOST``, a cluster finding: ledger id -1, warning)."""
    rows = [violation(at, -1, 0, "BOOKIE_LOST", "warning", bookie=bookie, details=details)]
    record = RunRecord("run-a", at - timedelta(seconds=1), at, events=1, violations=1)
    CheckerTables(spark, path, app_id=APP_ID).write_batch(4, output_table(rows), record)


def known_tables(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The data set at T0 under the session's temporary directory, written by the first caller of the session.

    Shared by every dashboard test module, so read-only: a test that removes or adds tables works on a copy.
    """
    return _known_tables_under(spark, tmp_path_factory.getbasetemp())


@functools.cache
def _known_tables_under(spark: SparkSession, base: Path) -> Path:
    path = base / "dashboard-known-tables" / "data"
    write_known_tables(spark, path, T0)
    return path


@functools.cache
def known_snapshot(data_dir: Path) -> DashboardSnapshot:
    """The snapshot of the tables of ``data_dir`` at NOW, read once (a DashboardSnapshot is frozen)."""
    return load_snapshot(data_dir, now=NOW)
