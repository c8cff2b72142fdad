"""Tables written by the job's writer (Delta Lake on Spark), read back without a JVM: delta-rs and DuckDB.

The data set goes through MERGEs that rewrite files, so a reader that took every Parquet file of the directory
would count removed rows; the JVM-free readers must give exactly the numbers Spark's ``format("delta")`` gives. The
tables use only what both engines support: protocol 1/2 (reader 1, writer 2: append-only, NOT NULL invariants), no
deletion vectors, no column mapping, classic Parquet checkpoints (Delta writes one every 10 commits, and the data
set has more than 10 batches so the readers go through one).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from deltalake import DeltaTable
from pyspark.sql import SparkSession

from scrutiny.connectors.tables.delta import live_dataset, read_table
from scrutiny.connectors.tables.schemas import (
    CHECKER_RUNS,
    LEDGER_CHECKS,
    OPEN_VIOLATIONS,
    TABLE_NAMES,
    RunRecord,
    output_table,
)
from scrutiny.connectors.tables.sql import SqlEngine
from scrutiny.streaming.delta_writer import CheckerTables

pytestmark = pytest.mark.integration

T0 = datetime(2026, 3, 1, tzinfo=UTC)
BATCHES = 12
LEDGERS = 40


def _batch(batch: int) -> list[dict[str, object]]:
    """Every ledger is checked; ledgers come and go out of violation so the MERGE updates, resolves and re-opens."""
    at = T0 + timedelta(minutes=batch)
    rows: list[dict[str, object]] = []
    for ledger in range(LEDGERS):
        bad = (ledger + batch) % 3 != 0
        rows.append({"record": "check", "ledger_id": ledger, "at": at, "verdict": "VIOLATED" if bad else "HEALTHY"})
        base = {"ledger_id": ledger, "at": at, "category": "MISSING_REPLICA", "bookie": f"b{ledger % 4}:3181"}
        base["segment_first_entry"] = 0
        if bad:
            rows.append({**base, "record": "violation", "severity": "warning", "entry_count": ledger + batch})
            rows.append({"record": "violation", "ledger_id": ledger, "at": at, "category": "ACK_QUORUM_ONE"})
            rows[-1]["severity"] = "info"
        else:
            rows.append({**base, "record": "resolved"})
    return rows


@pytest.fixture(scope="module")
def data_dir(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("delta-cross-engine")
    tables = CheckerTables(spark, path, app_id="cross-engine")
    for batch in range(BATCHES):
        started = T0 + timedelta(minutes=batch)
        run = RunRecord(f"run-{batch}", started, started + timedelta(seconds=2), events=LEDGERS, lag_records=batch)
        tables.write_batch(batch, output_table(_batch(batch)), run)
    return path


def _spark_figures(spark: SparkSession, data_dir: Path) -> Mapping[str, object]:
    """The figures as Spark reads the tables (``format("delta")``): the writer's own view, the reference."""
    for name in TABLE_NAMES:
        spark.read.format("delta").load(str(data_dir / name)).createOrReplaceTempView(name)
    figures = {f"rows_{name}": _spark_scalar(spark, f"SELECT count(*) FROM {name}") for name in TABLE_NAMES}
    for key, sql in _FIGURES_SQL.items():
        figures[key] = _spark_scalar(spark, sql)
    figures["max_last_seen_us"] = _spark_scalar(spark, "SELECT unix_micros(max(last_seen)) FROM open_violations")
    return figures


def _delta_rs_figures(data_dir: Path) -> Mapping[str, object]:
    open_table = read_table(data_dir, OPEN_VIOLATIONS)
    still_open = open_table.filter(pc.is_null(open_table["resolved_at"]))
    return {
        **{f"rows_{name}": read_table(data_dir, name).num_rows for name in TABLE_NAMES},
        "open": still_open.num_rows,
        "open_entry_count": pc.sum(still_open["entry_count"]).as_py(),
        "violated_checks": pc.sum(pc.equal(read_table(data_dir, LEDGER_CHECKS)["verdict"], "VIOLATED")).as_py(),
        "max_last_seen_us": pc.max(open_table["last_seen"]).cast(pa.int64()).as_py(),
        "lag_sum": pc.sum(read_table(data_dir, CHECKER_RUNS)["lag_records"]).as_py(),
    }


_FIGURES_SQL = {
    "open": "SELECT count(*) FROM open_violations WHERE resolved_at IS NULL",
    "open_entry_count": "SELECT sum(entry_count) FROM open_violations WHERE resolved_at IS NULL",
    "violated_checks": "SELECT count(*) FROM ledger_checks WHERE verdict = 'VIOLATED'",
    "lag_sum": "SELECT sum(lag_records) FROM checker_runs",
}


def test_the_data_set_exercises_merges_that_remove_files_and_a_checkpoint(data_dir: Path) -> None:
    live = {Path(uri).name for uri in DeltaTable(str(data_dir / OPEN_VIOLATIONS)).file_uris()}
    on_disk = {p.name for p in (data_dir / OPEN_VIOLATIONS).glob("*.parquet")}
    assert live < on_disk  # removed files are still there: a directory read would be wrong
    assert list((data_dir / CHECKER_RUNS / "_delta_log").glob("*.checkpoint.parquet"))
    figures = _delta_rs_figures(data_dir)
    assert figures["rows_open_violations"] == 2 * LEDGERS
    assert 0 < int(str(figures["open"])) < 2 * LEDGERS  # some open, some resolved


def test_every_commit_is_delta_lakes_spark_writer_with_features_delta_rs_reads(data_dir: Path) -> None:
    for name in TABLE_NAMES:
        commits = sorted((data_dir / name / "_delta_log").glob("*.json"))
        assert len(commits) > 1
        for commit in commits:
            info = next(
                json.loads(line)["commitInfo"] for line in commit.read_text().splitlines() if "commitInfo" in line
            )
            assert info["engineInfo"].startswith("Apache-Spark/") and "Delta-Lake/" in info["engineInfo"], commit
        protocol = DeltaTable(str(data_dir / name)).protocol()
        assert (protocol.min_reader_version, protocol.min_writer_version) == (1, 2), name
        assert not protocol.reader_features and not protocol.writer_features, name


def test_delta_rs_sees_what_spark_sees(spark: SparkSession, data_dir: Path) -> None:
    assert _delta_rs_figures(data_dir) == _spark_figures(spark, data_dir)


def test_duckdb_sees_what_spark_sees(spark: SparkSession, data_dir: Path) -> None:
    expected = _spark_figures(spark, data_dir)
    connection = duckdb.connect()
    try:
        for name in TABLE_NAMES:
            connection.register(name, live_dataset(data_dir, name))
        actual: dict[str, object] = {}
        for name in TABLE_NAMES:
            actual[f"rows_{name}"] = _scalar(connection, f"SELECT count(*) FROM {name}")
        for key, sql in _FIGURES_SQL.items():
            actual[key] = _scalar(connection, sql)
        actual["max_last_seen_us"] = _scalar(connection, "SELECT epoch_us(max(last_seen)) FROM open_violations")
        reopened = _scalar(
            connection, "SELECT count(*) FROM open_violations WHERE resolved_at IS NULL AND first_seen < last_seen"
        )
    finally:
        connection.close()
    assert actual == expected
    assert int(str(reopened)) > 0  # rows updated (and re-opened) by later batches


def test_the_sql_command_engine_sees_what_spark_sees(spark: SparkSession, data_dir: Path) -> None:
    expected = _spark_figures(spark, data_dir)
    with SqlEngine(data_dir) as engine:
        for key, sql in _FIGURES_SQL.items():
            assert engine.query(sql).rows[0][0] == expected[key], key


def _scalar(connection: duckdb.DuckDBPyConnection, sql: str) -> object:
    row = connection.execute(sql).fetchone()
    assert row is not None
    return row[0]


def _spark_scalar(spark: SparkSession, sql: str) -> object:
    row = spark.sql(sql).first()
    assert row is not None
    return row[0]
