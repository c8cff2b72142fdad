"""A Delta table's state built between writes: the next idempotent write finds it built and runs fewer Spark jobs."""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from deltalake import DeltaTable
from pyspark.sql import SparkSession

from scrutiny.connectors.tables.schemas import CHECKER_RUNS, LEDGER_CHECKS, RunRecord, empty_output, run_rows
from scrutiny.streaming.delta_writer import CheckerTables, append_rows, ensure_table
from scrutiny.streaming.state_prefetch import StatePrefetch

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
_groups = itertools.count()


def run_record() -> RunRecord:
    return RunRecord("run-1", T0, T0 + timedelta(milliseconds=500), events=0, rpcs=0, source="stream")


def spark_jobs(spark: SparkSession, action: Callable[[], None]) -> int:
    """How many Spark jobs ``action`` ran on this thread (a job group of its own; the prefetch thread is not in it)."""
    group = f"prefetch-test-{next(_groups)}"
    context = spark.sparkContext
    context.setJobGroup(group, "counted")
    try:
        action()
    finally:
        context.setLocalProperty("spark.jobGroup.id", None)  # type: ignore[arg-type]
    return len(context.statusTracker().getJobIdsForGroup(group))


def idempotent_append(spark: SparkSession, data_dir: Path, version: int) -> Callable[[], None]:
    rows = run_rows(run_record(), batch_id=version)
    return lambda: append_rows(spark, data_dir, CHECKER_RUNS, rows, txn=("app", version))


def test_a_built_state_spares_the_next_idempotent_write_its_state_jobs(spark: SparkSession, tmp_path: Path) -> None:
    ensure_table(spark, tmp_path, CHECKER_RUNS)
    uri = str(tmp_path / CHECKER_RUNS)
    idempotent_append(spark, tmp_path, 0)()
    cold = spark_jobs(spark, idempotent_append(spark, tmp_path, 1))  # builds version 1's state itself

    prefetch = StatePrefetch(spark)
    try:
        prefetch.request(uri)
        assert prefetch.wait(timeout=120)
        assert prefetch.prepared[uri] == DeltaTable(uri).version() == 2
        warm = spark_jobs(spark, idempotent_append(spark, tmp_path, 2))
    finally:
        prefetch.close()
    assert warm < cold, f"{warm} Spark jobs with the state built ahead, {cold} without"
    table = DeltaTable(uri)
    assert table.version() == 3 and table.transaction_version("app") == 2


def test_a_failed_build_is_only_a_lost_head_start(
    spark: SparkSession, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    ensure_table(spark, tmp_path, CHECKER_RUNS)
    good = str(tmp_path / CHECKER_RUNS)
    corrupt = tmp_path / "corrupt"
    (corrupt / "_delta_log").mkdir(parents=True)
    (corrupt / "_delta_log" / f"{0:020d}.json").write_text("not a commit\n")
    prefetch = StatePrefetch(spark)
    caplog.set_level(logging.DEBUG, logger="scrutiny.streaming.state_prefetch")
    try:
        prefetch.request(str(tmp_path / "not-a-table"))
        prefetch.request(str(corrupt))
        prefetch.request(good)
        assert prefetch.wait(timeout=120)
        assert list(prefetch.prepared) == [good]  # no table: nothing to build; a corrupt one: logged
        assert [r.getMessage().split(":")[0] for r in caplog.records] == [f"no head start for the state of {corrupt}"]
    finally:
        prefetch.close()
    prefetch.request(good)  # closed: taken no more, and nothing waits
    assert prefetch.wait(timeout=5)


def test_the_checker_tables_build_each_written_tables_state(spark: SparkSession, tmp_path: Path) -> None:
    tables = CheckerTables(spark, tmp_path / "data", app_id="app", prefetch_state=True)
    try:
        assert tables.prefetch is not None
        tables.write_batch(0, empty_output(), run_record())
        tables.write_batch(1, empty_output(), run_record())
        assert tables.prefetch.wait(timeout=120)
        assert tables.prefetch.prepared[tables.uri(CHECKER_RUNS)] == DeltaTable(tables.uri(CHECKER_RUNS)).version()
        assert tables.uri(LEDGER_CHECKS) not in tables.prefetch.prepared  # an empty table is not written
        assert tables.committed_batch(CHECKER_RUNS) == 1
    finally:
        tables.close()
    assert CheckerTables(spark, tmp_path / "other", app_id="app").prefetch is None  # off unless asked for
