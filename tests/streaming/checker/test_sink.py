"""The job's foreachBatch sink: bookkeeping records stay out of the tables, figures reach metrics and checker_runs."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import cast

import pyarrow as pa
import pytest
from pyspark.sql import DataFrame, SparkSession

from scrutiny.connectors.tables.delta import read_table
from scrutiny.streaming.checker.job import checkpoint_stream_id
from scrutiny.streaming.checker.metrics import JobMetrics
from scrutiny.streaming.checker.open_gauges import OpenGauges
from scrutiny.streaming.checker.records import NARROW_DDL, REJECTED_KEY, narrow
from scrutiny.streaming.checker.sink import BatchSink, BatchSummary
from scrutiny.streaming.checker.timer_wake import TimerCalendar, Waker
from scrutiny.streaming.checker.verified_counts import VerifiedCounts
from scrutiny.streaming.delta_writer import CheckerTables

pytestmark = pytest.mark.integration

AT = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)


def rows() -> list[dict[str, object]]:
    base = {"at": AT, "source": "stream"}
    return [
        {**base, "record": "stats", "ledger_id": -1, "details": json.dumps({"events": 40, "rpcs": 7})},
        {**base, "record": "stats", "ledger_id": -1, "details": json.dumps({"events": 2, "rpcs": 1})},
        {**base, "record": "retry", "ledger_id": 8, "retries": 0},
        {**base, "record": "violation", "ledger_id": 5, "category": "NO_REPLICA", "severity": "critical"},
        {**base, "record": "violation", "ledger_id": 5, "category": "MISSING_REPLICA", "severity": "critical"},
        {**base, "record": "check", "ledger_id": 5, "verdict": "VIOLATED", "violation_count": 2},
        {**base, "record": "resolved", "ledger_id": 6, "category": "ACK_QUORUM_ONE"},
        {**base, **rejected(17, "bad_key"), "ledger_id": REJECTED_KEY},
        {**base, **rejected(18, "undecodable"), "ledger_id": REJECTED_KEY},
    ]


def rejected(offset: int, reason: str) -> dict[str, object]:
    return {
        "record": "rejected",
        "kafka_partition": 1,
        "kafka_offset": offset,
        "kafka_key": "9",
        "reason": reason,
        "details": f"{reason} at {offset}",
        "value_bytes": 2,
        "value_head": "ffff",
    }


def test_a_batch_lands_once_with_its_figures(spark: SparkSession, tmp_path: Path) -> None:
    frame = spark.createDataFrame([narrow(r) for r in rows()], schema=NARROW_DDL)  # what the stateful step emits
    seen: list[BatchSummary] = []
    metrics = JobMetrics()
    sink = BatchSink(
        CheckerTables(spark, tmp_path, app_id="test"), run_id="r1", metrics=metrics, lag=lambda: 3, on_batch=seen.append
    )
    sink(frame, 0)
    sink(frame, 0)  # Spark re-running the batch after a crash: nothing twice
    assert [v["category"] for v in read_table(tmp_path, "violations").to_pylist()] == ["NO_REPLICA", "MISSING_REPLICA"]
    runs = read_table(tmp_path, "checker_runs").to_pylist()
    assert len(runs) == 1
    assert (runs[0]["events"], runs[0]["rpcs"], runs[0]["ledgers_checked"], runs[0]["violations"]) == (42, 8, 1, 2)
    assert (runs[0]["resolved"], runs[0]["retries_pending"], runs[0]["lag_records"]) == (1, 1, 3)
    assert seen[0].violations == {"NO_REPLICA": 1, "MISSING_REPLICA": 1} and sink.pending == {8}
    registry = metrics.registry
    assert registry.get_sample_value("scrutiny_checker_events_total") == 42  # the re-run is not counted again
    assert registry.get_sample_value("scrutiny_checker_violations_total", {"category": "NO_REPLICA"}) == 1
    assert registry.get_sample_value("scrutiny_checker_checks_total", {"verdict": "VIOLATED"}) == 1
    assert registry.get_sample_value("scrutiny_checker_lag_records") == 3
    assert registry.get_sample_value("scrutiny_checker_retries_pending") == 1
    skipped = read_table(tmp_path, "rejected_events").to_pylist()
    assert [(r["kafka_partition"], r["kafka_offset"], r["reason"], r["batch_id"]) for r in skipped] == [
        (1, 17, "bad_key", 0),
        (1, 18, "undecodable", 0),
    ]
    assert skipped[0]["rejected_at"] == AT and skipped[0]["run_id"] == "r1" and skipped[0]["value_head"] == "ffff"
    assert registry.get_sample_value("scrutiny_checker_rejected_events_total", {"reason": "bad_key"}) == 1


class Computed:
    """A batch's frame that notes when the waker's heartbeat is due while Spark computes it."""

    def __init__(self, frame: DataFrame, waker: Waker) -> None:
        self.frame, self.waker, self.due_while_computing = frame, waker, 0.0

    def toArrow(self) -> pa.Table:  # noqa: N802 - PySpark's name
        self.due_while_computing = self.waker.wake_at()
        return self.frame.toArrow()


def test_a_stream_without_rejected_records_has_no_rejected_events_table(spark: SparkSession, tmp_path: Path) -> None:
    """Also: the heartbeat waits for the batch from the moment the sink starts it."""
    kept = [r for r in rows() if r["record"] != "rejected"]
    clock = [1_000.0]
    waker = Waker(TimerCalendar(None), lambda: None, idle_s=60, clock=lambda: clock[0])
    sink = BatchSink(CheckerTables(spark, tmp_path, app_id="test"), run_id="r1", waker=waker)
    clock[0] = 1_059.0  # the batch starts a second before the heartbeat is due
    frame = Computed(spark.createDataFrame([narrow(r) for r in kept], schema=NARROW_DDL), waker)
    sink(cast(DataFrame, frame), 0)
    assert frame.due_while_computing == 1_119.0  # not 1,060 s: the running batch counts as the heartbeat
    assert read_table(tmp_path, "checker_runs").num_rows == 1
    assert not (tmp_path / "rejected_events").exists()


def test_a_checkpoint_names_its_stream_once_on_a_path_or_a_uri(spark: SparkSession, tmp_path: Path) -> None:
    local = checkpoint_stream_id(spark, str(tmp_path / "a"))
    assert local == checkpoint_stream_id(spark, str(tmp_path / "a")) and len(local) == 16
    uri = checkpoint_stream_id(spark, f"file://{tmp_path}/b")  # through Hadoop's file system, as hdfs:// would be
    assert (
        uri == checkpoint_stream_id(spark, f"file://{tmp_path}/b") == checkpoint_stream_id(spark, str(tmp_path / "b"))
    )
    assert uri != local


def test_verified_records_move_the_age_counts_once_and_reach_the_metrics_and_the_table(
    spark: SparkSession, tmp_path: Path
) -> None:
    now_ms = int(datetime.now(UTC).timestamp() * 1000)
    verified = [
        {"record": "verified", "ledger_id": 5, "at": AT, "was": None, "now": now_ms - 1_000},
        {"record": "verified", "ledger_id": 6, "at": AT, "was": None, "now": now_ms - 100_000},  # past 64 s + 10 s
    ]
    frame = spark.createDataFrame([narrow(r) for r in [*rows(), *verified]], schema=NARROW_DDL)
    metrics = JobMetrics()
    counts = VerifiedCounts(None, interval_ms=64_000, grace_ms=10_000, table_every_s=0)
    sink = BatchSink(CheckerTables(spark, tmp_path, app_id="test"), run_id="r1", metrics=metrics, verified=counts)
    sink(frame, 0)
    sink(frame, 0)  # Spark re-running the batch: counted once
    assert counts.current.total() == 2
    registry = metrics.registry
    assert registry.get_sample_value("scrutiny_checker_verified_ledgers", {"age": "0-25%"}) == 1
    assert registry.get_sample_value("scrutiny_checker_verified_ledgers", {"age": "overdue"}) == 1
    assert registry.get_sample_value("scrutiny_checker_oldest_verification_age_seconds") >= 100  # type: ignore[operator]
    ages = read_table(tmp_path, "verification_ages").to_pylist()
    assert {(r["age_class"], r["ledgers"]) for r in ages if r["ledgers"]} == {("0-25%", 1), ("overdue", 1)}
    assert {r["batch_id"] for r in ages} == {0} and len(ages) == 6  # one set of rows: the re-run wrote none
    assert read_table(tmp_path, "ledger_checks").num_rows == 1  # "verified" records are no table's rows


def test_the_open_violation_gauges_follow_the_table_and_survive_a_restart(spark: SparkSession, tmp_path: Path) -> None:
    metrics = JobMetrics()
    gauges = OpenGauges(metrics, str(tmp_path), every_s=3600)
    gauges.refresh(changed=True)  # no table yet: nothing open
    registry = metrics.registry
    assert (
        registry.get_sample_value("scrutiny_open_violations", {"category": "NO_REPLICA", "severity": "critical"}) == 0
    )
    sink = BatchSink(CheckerTables(spark, tmp_path, app_id="test"), run_id="r1", metrics=metrics, gauges=gauges)
    sink(spark.createDataFrame([narrow(r) for r in rows()], schema=NARROW_DDL), 0)
    assert (
        registry.get_sample_value("scrutiny_open_violations", {"category": "NO_REPLICA", "severity": "critical"}) == 1
    )
    assert registry.get_sample_value("scrutiny_violating_ledgers", {"category": "MISSING_REPLICA"}) == 1
    oldest = "scrutiny_open_violations_oldest_first_seen_timestamp_seconds"
    assert registry.get_sample_value(oldest, {"category": "NO_REPLICA"}) == AT.timestamp()
    assert registry.get_sample_value("scrutiny_checker_resolved_total", {"category": "ACK_QUORUM_ONE"}) == 1

    restarted = JobMetrics()  # a new process: the gauges come from the table, before any batch
    OpenGauges(restarted, str(tmp_path), every_s=3600).refresh(changed=True)
    assert restarted.registry.get_sample_value("scrutiny_violating_ledgers", {"category": "NO_REPLICA"}) == 1

    base = {"at": AT, "source": "stream"}
    resolved = [{**base, "record": "resolved", "ledger_id": 5, "category": "NO_REPLICA"}]
    sink(spark.createDataFrame([narrow(r) for r in resolved], schema=NARROW_DDL), 1)
    assert (
        registry.get_sample_value("scrutiny_open_violations", {"category": "NO_REPLICA", "severity": "critical"}) == 0
    )
    assert registry.get_sample_value(oldest, {"category": "NO_REPLICA"}) is None  # absent: nothing open
    assert registry.get_sample_value(oldest, {"category": "MISSING_REPLICA"}) == AT.timestamp()
