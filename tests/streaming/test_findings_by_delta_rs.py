"""The findings' append-only tables (ledger_checks, violations, rejected_events) are appended with delta-rs, once,
and read back by Spark exactly as Delta on Spark's own appends would be; open_violations stays a MERGE on Spark."""

from __future__ import annotations

from pathlib import Path

from pyspark.sql import SparkSession

from scrutiny.connectors.tables.schemas import (
    CHECKER_RUNS,
    LEDGER_CHECKS,
    OPEN_VIOLATIONS,
    REJECTED_EVENTS,
    VIOLATIONS,
    output_table,
)
from scrutiny.settings.sections import CheckerSection
from scrutiny.streaming.checker.job import job_tables
from scrutiny.streaming.delta_writer import FINDINGS_APPENDS, CheckerTables, WriteOutcome
from scrutiny.streaming.table_upkeep import TableUpkeep
from tests.streaming.test_delta_writer import APP, at, batch_counts, batch_rows, check, run_record
from tests.streaming.test_runs_by_delta_rs import last_engine


def findings_tables(spark: SparkSession, data: Path, *, on: bool = True, compact_min_files: int = 0) -> CheckerTables:
    upkeep = TableUpkeep(compact_min_files=compact_min_files)
    return CheckerTables(spark, data, app_id=APP, upkeep=upkeep, runs_by_delta_rs=on, findings_by_delta_rs=on)


def rejected(offset: int) -> dict[str, object]:
    """A "rejected" record as the sink hands it on (the fetch stage's JSON, widened)."""
    return {
        "record": "rejected",
        "at": at(offset),
        "kafka_partition": 1,
        "kafka_offset": offset,
        "kafka_key": None if offset % 2 else f"key-{offset}",
        "reason": "NOT_AN_EVENT",
        "details": "bytes that are not a LedgerEvent",
        "value_bytes": 3,
        "value_head": "010203",
    }


def write_batches(tables: CheckerTables, batches: range) -> None:
    """Each batch: a violation and a check of ledger n, a healthy check of ledger 100 + n, a rejected record."""
    for batch in batches:
        rows = [*batch_rows(batch), check(100 + batch, batch, ensemble_size=3, write_quorum=2, ack_quorum=2)]
        tables.write_batch(batch, output_table(rows), run_record(), rejected=[rejected(batch)])


def spark_rows(spark: SparkSession, tables: CheckerTables, name: str) -> list[tuple[object, ...]]:
    """The table as Spark reads it, every column, in a stable order."""
    frame = spark.read.format("delta").load(tables.uri(name))
    return sorted((tuple(row) for row in frame.collect()), key=repr)


def test_a_batchs_findings_are_appended_by_delta_rs_once_and_each_engine_skips_the_others(
    spark: SparkSession, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    light = findings_tables(spark, data)
    write_batches(light, range(2))  # the first batch creates rejected_events (Spark), the second appends to it
    for name in FINDINGS_APPENDS:
        assert last_engine(light, name) == "delta-rs", name
    assert last_engine(light, OPEN_VIOLATIONS) == "spark"  # a MERGE
    again = light.write_batch(1, output_table(batch_rows(1)), run_record(), rejected=[rejected(1)])
    assert set(again.skipped) == {VIOLATIONS, LEDGER_CHECKS, OPEN_VIOLATIONS, REJECTED_EVENTS, CHECKER_RUNS}

    spark_only = findings_tables(spark, data, on=False)
    rerun = spark_only.write_batch(1, output_table(batch_rows(1)), run_record(), rejected=[rejected(1)])
    assert set(rerun.skipped) == set(again.skipped)  # Delta on Spark skips what delta-rs recorded
    write_batches(spark_only, range(2, 3))
    assert last_engine(light, LEDGER_CHECKS) == "spark"
    assert light.write_batch(2, output_table(batch_rows(2)), run_record()).written == ()  # delta-rs skips Spark's
    for name in (VIOLATIONS, REJECTED_EVENTS, CHECKER_RUNS):
        assert batch_counts(data, name) == {0: 1, 1: 1, 2: 1}, name
    assert batch_counts(data, LEDGER_CHECKS) == {0: 2, 1: 2, 2: 2}


def test_spark_reads_delta_rs_appends_exactly_as_its_own(spark: SparkSession, tmp_path: Path) -> None:
    """The same batches written by each engine: every table reads back the same, column for column, in Spark."""
    by_delta_rs = findings_tables(spark, tmp_path / "light")
    by_spark = findings_tables(spark, tmp_path / "spark", on=False)
    for tables in (by_delta_rs, by_spark):
        write_batches(tables, range(3))
    for name in (*FINDINGS_APPENDS, OPEN_VIOLATIONS):
        assert last_engine(by_spark, name) == "spark"
        light_rows = spark_rows(spark, by_delta_rs, name)
        assert light_rows == spark_rows(spark, by_spark, name), name
        assert light_rows, name
    light_schema = spark.read.format("delta").load(by_delta_rs.uri(LEDGER_CHECKS)).schema
    assert light_schema == spark.read.format("delta").load(by_spark.uri(LEDGER_CHECKS)).schema


def test_a_findings_table_holding_compact_min_files_files_is_written_and_compacted_by_spark(
    spark: SparkSession, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    tables = findings_tables(spark, data, compact_min_files=3)
    engines = []
    for batch in range(5):
        write_batches(tables, range(batch, batch + 1))
        engines.append(last_engine(tables, LEDGER_CHECKS))
    assert engines == ["delta-rs", "delta-rs", "delta-rs", "spark", "delta-rs"]
    assert batch_counts(data, LEDGER_CHECKS) == {batch: 2 for batch in range(5)}


def test_the_streaming_job_writes_its_findings_as_its_settings_say(spark: SparkSession, tmp_path: Path) -> None:
    on = job_tables(spark, CheckerSection(data_dir=str(tmp_path / "on")), app_id=APP)
    off = job_tables(spark, CheckerSection(data_dir=str(tmp_path / "off"), findings_by_delta_rs=False), app_id=APP)
    for tables in (on, off):
        result = tables.write_batch(0, output_table(batch_rows(0)), run_record())
        assert result[LEDGER_CHECKS].outcome is WriteOutcome.WRITTEN
        tables.close()
    assert (last_engine(on, LEDGER_CHECKS), last_engine(off, LEDGER_CHECKS)) == ("delta-rs", "spark")
    assert (last_engine(on, VIOLATIONS), last_engine(off, VIOLATIONS)) == ("delta-rs", "spark")
    assert last_engine(off) == "delta-rs"  # the job's own record, by its own setting
