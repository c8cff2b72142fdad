"""The writer keeps its tables' file counts down: Delta's auto compaction and a short retention of replaced files."""

from __future__ import annotations

from pathlib import Path

import pytest
from deltalake import DeltaTable
from pyspark.sql import SparkSession

from scrutiny.connectors.tables.schemas import (
    CHECKER_RUNS,
    LEDGER_CHECKS,
    OPEN_VIOLATIONS,
    TABLE_NAMES,
    VIOLATIONS,
    output_table,
)
from scrutiny.connectors.tables.sql import SqlEngine
from scrutiny.core.errors import ConfigError
from scrutiny.settings.sections import CheckerSection
from scrutiny.streaming.delta_writer import CheckerTables, ensure_table
from scrutiny.streaming.table_upkeep import RETENTION_PROPERTY, TableUpkeep
from tests.streaming.test_delta_writer import APP, batch_counts, batch_rows, open_rows, resolved, run_record

BATCHES = 9
MIN_FILES = 3


def test_auto_compaction_keeps_each_table_to_a_few_files_with_every_row_once(
    spark: SparkSession, tmp_path: Path
) -> None:
    """With compact_min_files = 3, nine batches leave each appended table at most three files (without it: nine),
    each batch's rows there exactly once as delta-rs and DuckDB read them, the compactions in the log as commits of
    their own, and a replayed batch still skipped by Delta."""
    data = tmp_path / "data"
    tables = CheckerTables(spark, data, app_id=APP, upkeep=TableUpkeep(compact_min_files=MIN_FILES, compact_file_mb=4))
    assert tables.spark.conf.get("spark.databricks.delta.autoCompact.maxFileSize") == str(4 * 1024 * 1024)
    for batch in range(BATCHES):
        rows = batch_rows(batch) + ([resolved(batch - 2, batch)] if batch >= 2 else [])
        tables.write_batch(batch, output_table(rows), run_record())
    for name in (VIOLATIONS, LEDGER_CHECKS, CHECKER_RUNS):
        log = DeltaTable(tables.uri(name))
        assert len(log.file_uris()) <= MIN_FILES, name
        operations = [commit["operation"] for commit in log.history()]
        assert operations.count("OPTIMIZE") >= 2, (name, operations)
        assert log.transaction_version(APP) == BATCHES - 1, name
        assert batch_counts(data, name) == {batch: 1 for batch in range(BATCHES)}, name
    assert {key[0]: row["resolved_at"] is not None for key, row in open_rows(data).items()} == {
        batch: batch < BATCHES - 2 for batch in range(BATCHES)
    }
    with SqlEngine(str(data)) as engine:  # DuckDB, as `scrutiny sql` reads them
        grouped = engine.query("SELECT batch_id, count(*) FROM ledger_checks GROUP BY batch_id ORDER BY batch_id")
        assert grouped.rows == [(batch, 1) for batch in range(BATCHES)]
    again = tables.write_batch(BATCHES - 1, output_table(batch_rows(BATCHES - 1)), run_record())
    assert set(again.skipped) == {VIOLATIONS, LEDGER_CHECKS, OPEN_VIOLATIONS, CHECKER_RUNS}
    assert batch_counts(data, VIOLATIONS) == {batch: 1 for batch in range(BATCHES)}

    plain = CheckerTables(spark, tmp_path / "plain", app_id=APP)
    for batch in range(BATCHES):
        plain.write_batch(batch, output_table(batch_rows(batch)), run_record())
    assert len(DeltaTable(plain.uri(CHECKER_RUNS)).file_uris()) == BATCHES


def test_a_compaction_that_fails_leaves_the_batches_committed(spark: SparkSession, tmp_path: Path) -> None:
    """A compaction that cannot read a file (here deleted under the table) fails inside the write that started it:
    Delta logs it, and that write and the next ones are committed as if there were no compaction."""
    data = tmp_path / "data"
    tables = CheckerTables(spark, data, app_id=APP, upkeep=TableUpkeep(compact_min_files=2))
    tables.write_batch(0, output_table(batch_rows(0)), run_record())
    for written in (data / VIOLATIONS).glob("*.parquet"):
        written.unlink()
    for batch in (1, 2, 3):
        result = tables.write_batch(batch, output_table(batch_rows(batch)), run_record())
        assert set(result.written) == {VIOLATIONS, LEDGER_CHECKS, OPEN_VIOLATIONS, CHECKER_RUNS}
    log = DeltaTable(tables.uri(VIOLATIONS))
    assert log.transaction_version(APP) == 3
    assert [commit["operation"] for commit in log.history()].count("OPTIMIZE") == 0  # every try failed
    assert len(log.file_uris()) == 4
    assert batch_counts(data, LEDGER_CHECKS) == {0: 1, 1: 1, 2: 1, 3: 1}  # the other tables were compacted
    assert [commit["operation"] for commit in DeltaTable(tables.uri(LEDGER_CHECKS)).history()].count("OPTIMIZE") >= 1


def test_the_retention_of_replaced_files_is_set_on_new_and_existing_tables(spark: SparkSession, tmp_path: Path) -> None:
    """Tables created with the upkeep carry the retention; a table made without it (an earlier version's) gets it
    when the writer checks it, once; 0 leaves a table's own setting alone."""
    data = tmp_path / "data"
    ensure_table(spark, data, VIOLATIONS)  # as an earlier version made it
    assert RETENTION_PROPERTY not in DeltaTable(str(data / VIOLATIONS)).metadata().configuration
    upkeep = TableUpkeep(removed_file_retention_hours=1.5)
    tables = CheckerTables(spark, data, app_id=APP, upkeep=upkeep)
    assert VIOLATIONS not in tables.ensure_tables()
    for name in TABLE_NAMES:
        configuration = DeltaTable(tables.uri(name)).metadata().configuration
        assert configuration.get(RETENTION_PROPERTY) == "interval 5400 seconds", name
    version = DeltaTable(tables.uri(VIOLATIONS)).version()
    CheckerTables(spark, data, app_id=APP, upkeep=upkeep).ensure_tables()
    assert DeltaTable(tables.uri(VIOLATIONS)).version() == version  # nothing to change: no commit

    CheckerTables(spark, data, app_id=APP, upkeep=TableUpkeep(removed_file_retention_hours=0)).ensure_tables()
    assert DeltaTable(tables.uri(VIOLATIONS)).metadata().configuration[RETENTION_PROPERTY] == "interval 5400 seconds"


def test_the_upkeep_follows_the_checker_settings_and_refuses_bad_values() -> None:
    assert TableUpkeep.of(CheckerSection()) == TableUpkeep(50, 6.0, 16)
    assert TableUpkeep(0, 0).properties() == {}
    assert TableUpkeep(removed_file_retention_hours=0.0001).retention == "interval 1 seconds"
    cases = (
        ("compact_min_files", 1),
        ("compact_min_files", -1),
        ("removed_file_retention_hours", -2),
        ("compact_file_mb", 0),
    )
    for key, bad in cases:
        with pytest.raises(ConfigError, match=rf"checker\.{key}"):
            CheckerSection(**{key: bad})  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="removed_file_retention_hours"):
        TableUpkeep(removed_file_retention_hours=float("nan"))
