"""Every batch's checker_runs and verification_ages rows are appended with delta-rs, once, next to Delta on Spark."""

from __future__ import annotations

import threading
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable
from deltalake.exceptions import DeltaError
from pyspark.sql import SparkSession

from scrutiny.connectors.tables.delta import read_table
from scrutiny.connectors.tables.light_append import append_once
from scrutiny.connectors.tables.schemas import (
    CHECKER_RUNS,
    LEDGER_CHECKS,
    VERIFICATION_AGES,
    VERIFICATION_AGES_SCHEMA,
    empty_output,
    output_table,
    run_rows,
)
from scrutiny.settings.sections import CheckerSection
from scrutiny.streaming import delta_writer
from scrutiny.streaming.checker.job import job_tables
from scrutiny.streaming.delta_writer import CheckerTables, WriteOutcome, is_local
from scrutiny.streaming.table_upkeep import TableUpkeep
from tests.streaming.test_delta_writer import APP, batch_counts, batch_rows, run_record


def light_tables(spark: SparkSession, data: Path, *, compact_min_files: int = 0, on: bool = True) -> CheckerTables:
    upkeep = TableUpkeep(compact_min_files=compact_min_files)
    return CheckerTables(spark, data, app_id=APP, upkeep=upkeep, runs_by_delta_rs=on)


def last_engine(tables: CheckerTables, table: str = CHECKER_RUNS) -> str:
    """Who made the table's last commit other than a compaction: "delta-rs" or "spark"."""
    commits = [c for c in DeltaTable(tables.uri(table)).history() if c.get("operation") != "OPTIMIZE"]
    latest = max(commits, key=lambda commit: int(commit["version"]))
    if str(latest.get("engineInfo", "")).startswith("Apache-Spark"):
        return "spark"
    assert str(latest.get("clientVersion", "")).startswith("delta-rs"), latest
    return "delta-rs"


def test_a_batch_row_is_appended_by_delta_rs_once_and_each_engine_skips_the_others(
    spark: SparkSession, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    light = light_tables(spark, data)
    result = light.write_batch(0, empty_output(), run_record())
    assert result[CHECKER_RUNS].outcome is WriteOutcome.WRITTEN and result[CHECKER_RUNS].rows == 1
    assert last_engine(light) == "delta-rs"
    assert light.last_batch_id() == 0  # Delta's idempotent-write record, in delta-rs's commit
    assert light.write_batch(0, empty_output(), run_record()).skipped == (CHECKER_RUNS,)

    spark_only = light_tables(spark, data, on=False)
    assert spark_only.write_batch(0, empty_output(), run_record()).skipped == (CHECKER_RUNS,)  # Delta on Spark skips it
    assert batch_counts(data, CHECKER_RUNS) == {0: 1}

    spark_only.write_batch(1, empty_output(), run_record())
    assert last_engine(light) == "spark"
    assert light.write_batch(1, empty_output(), run_record()).skipped == (CHECKER_RUNS,)  # delta-rs skips Spark's
    busy = light.write_batch(2, output_table(batch_rows(2)), run_record())  # a check: its table through Spark
    assert busy[CHECKER_RUNS].outcome is WriteOutcome.WRITTEN and last_engine(light) == "delta-rs"
    assert busy[LEDGER_CHECKS].outcome is WriteOutcome.WRITTEN and last_engine(light, LEDGER_CHECKS) == "spark"
    assert batch_counts(data, CHECKER_RUNS) == {0: 1, 1: 1, 2: 1}
    assert batch_counts(data, LEDGER_CHECKS) == {2: 1}


def ages(batch_id: int) -> pa.Table:
    """A batch's verification_ages rows: two age classes."""
    at = datetime(2026, 12, 7, tzinfo=UTC)
    rows = [
        {"at": at, "age_class": name, "age_from_seconds": low, "age_to_seconds": high, "ledgers": 5, "overdue": False}
        | {"oldest_verification": at, "batch_id": batch_id, "run_id": "run-1"}
        for name, low, high in (("q1", 0, 3600), ("q2", 3600, 7200))
    ]
    return pa.Table.from_pylist(rows, schema=VERIFICATION_AGES_SCHEMA)


def test_a_batch_writes_its_verification_ages_by_delta_rs_too(spark: SparkSession, tmp_path: Path) -> None:
    data = tmp_path / "data"
    light = light_tables(spark, data)
    light.write_batch(0, empty_output(), run_record(), ages=ages(0))  # the table's first rows: Spark creates it
    result = light.write_batch(1, empty_output(), run_record(), ages=ages(1))
    assert result[VERIFICATION_AGES].outcome is WriteOutcome.WRITTEN and result[VERIFICATION_AGES].rows == 2
    assert last_engine(light, VERIFICATION_AGES) == "delta-rs" and last_engine(light) == "delta-rs"
    assert light.write_batch(1, empty_output(), run_record(), ages=ages(1)).skipped == (VERIFICATION_AGES, CHECKER_RUNS)
    assert light_tables(spark, data, on=False).write_batch(1, empty_output(), run_record(), ages=ages(1)).skipped == (
        VERIFICATION_AGES,
        CHECKER_RUNS,
    )  # Delta on Spark skips what delta-rs recorded

    busy = light.write_batch(2, output_table(batch_rows(2)), run_record(), ages=ages(2))  # a check: Spark writes it
    assert last_engine(light, VERIFICATION_AGES) == "delta-rs" and last_engine(light) == "delta-rs"
    assert last_engine(light, LEDGER_CHECKS) == "spark"
    assert busy[VERIFICATION_AGES].outcome is WriteOutcome.WRITTEN
    assert batch_counts(data, VERIFICATION_AGES) == {0: 2, 1: 2, 2: 2}
    assert batch_counts(data, CHECKER_RUNS) == {0: 1, 1: 1, 2: 1}


def test_off_every_row_goes_through_spark(spark: SparkSession, tmp_path: Path) -> None:
    tables = light_tables(spark, tmp_path / "data", on=False)
    tables.write_batch(0, empty_output(), run_record())
    assert last_engine(tables) == "spark"


def test_a_table_holding_compact_min_files_files_is_written_and_compacted_by_spark(
    spark: SparkSession, tmp_path: Path
) -> None:
    """With compact_min_files = 3, rows 0-2 add three files by delta-rs; row 3 goes through Spark, whose auto
    compaction then rewrites the files, and row 4 is delta-rs's again."""
    data = tmp_path / "data"
    tables = light_tables(spark, data, compact_min_files=3)
    engines = []
    for batch in range(5):
        tables.write_batch(batch, empty_output(), run_record())
        engines.append(last_engine(tables))
    assert engines == ["delta-rs", "delta-rs", "delta-rs", "spark", "delta-rs"]
    log = DeltaTable(tables.uri(CHECKER_RUNS))
    assert [c["operation"] for c in log.history()].count("OPTIMIZE") == 1
    assert len(log.file_uris()) == 2  # the compacted file and row 4's
    assert batch_counts(data, CHECKER_RUNS) == {batch: 1 for batch in range(5)}


def test_a_table_of_a_newer_protocol_is_left_to_spark_untouched(spark: SparkSession, tmp_path: Path) -> None:
    data = tmp_path / "data"
    tables = light_tables(spark, data)
    tables.ensure_tables()
    uri = tables.uri(CHECKER_RUNS)
    spark.sql(f"ALTER TABLE delta.`{uri}` SET TBLPROPERTIES ('delta.minWriterVersion' = '3')")
    assert append_once(uri, run_rows(run_record(), batch_id=0), app_id=APP, version=0) is None
    assert not list(Path(uri).glob("*.parquet"))  # declined before anything was written
    tables.write_batch(0, empty_output(), run_record())
    assert last_engine(tables) == "spark" and batch_counts(data, CHECKER_RUNS) == {0: 1}


def test_a_commit_delta_rs_refuses_raises_and_records_nothing(spark: SparkSession, tmp_path: Path) -> None:
    tables = light_tables(spark, tmp_path / "data")
    tables.ensure_tables()
    rows = run_rows(run_record(), batch_id=0)
    wrong = rows.append_column("not_a_column", pa.array([7], pa.int64()))  # not the table's schema
    with pytest.raises(DeltaError):
        append_once(tables.uri(CHECKER_RUNS), wrong, app_id=APP, version=0)
    assert tables.last_batch_id() is None
    assert append_once(tables.uri(CHECKER_RUNS), rows, app_id=APP, version=0) is True
    assert append_once(tables.uri(CHECKER_RUNS), rows, app_id=APP, version=0) is False
    assert tables.last_batch_id() == 0


def test_after_delta_rs_fails_the_writer_leaves_every_row_to_spark(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    data = tmp_path / "data"
    tables = light_tables(spark, data)
    calls = []

    def failing(*args: object, **kwargs: object) -> bool | None:
        calls.append(args)
        raise OSError("disk full")

    monkeypatch.setattr(delta_writer, "append_once", failing)
    for batch in range(2):
        assert tables.write_batch(batch, empty_output(), run_record()).written == (CHECKER_RUNS,)
        assert last_engine(tables) == "spark"
    assert len(calls) == 1 and "rows go through Spark from now on" in caplog.text
    assert batch_counts(data, CHECKER_RUNS) == {0: 1, 1: 1}


def test_only_a_local_data_directory_is_written_by_delta_rs() -> None:
    """An object store's URI is Spark's (its credentials are Hadoop's settings, which delta-rs does not read)."""
    assert is_local("/var/lib/scrutiny") and is_local(Path("data")) and is_local("file:///var/lib/scrutiny")
    assert not is_local("s3a://bucket/scrutiny") and not is_local("hdfs://namenode:8020/scrutiny")


def test_spark_continues_a_log_that_delta_rs_checkpointed(spark: SparkSession, tmp_path: Path) -> None:
    """A day's rows by delta-rs: past its checkpoint interval (100 commits), Spark still reads the table's state from
    delta-rs's checkpoint, skips a batch delta-rs recorded and appends the next (a writer whose delta-rs failed)."""
    data = tmp_path / "data"
    tables = light_tables(spark, data, on=False)
    tables.ensure_tables()
    for batch in range(105):
        assert append_once(tables.uri(CHECKER_RUNS), run_rows(run_record(), batch_id=batch), app_id=APP, version=batch)
    log_dir = Path(tables.uri(CHECKER_RUNS)) / "_delta_log"
    assert list(log_dir.glob("*.checkpoint.parquet")), "delta-rs wrote no checkpoint"
    assert tables.write_batch(104, output_table(batch_rows(104)), run_record())[CHECKER_RUNS].outcome is (
        WriteOutcome.SKIPPED
    )
    tables.write_batch(105, output_table(batch_rows(105)), run_record())
    assert last_engine(tables) == "spark"
    assert batch_counts(data, CHECKER_RUNS) == {batch: 1 for batch in range(106)}


def test_the_streaming_job_writes_its_record_as_its_settings_say(spark: SparkSession, tmp_path: Path) -> None:
    on = job_tables(spark, CheckerSection(data_dir=str(tmp_path / "on")), app_id=APP)
    off = job_tables(spark, CheckerSection(data_dir=str(tmp_path / "off"), runs_by_delta_rs=False), app_id=APP)
    for tables in (on, off):
        tables.write_batch(0, empty_output(), run_record())
        tables.close()
    assert (last_engine(on), last_engine(off)) == ("delta-rs", "spark")


def test_delta_rs_and_another_writers_spark_appends_at_once_each_land_once(spark: SparkSession, tmp_path: Path) -> None:
    """The stream's rows by delta-rs while another writer of the same tables (the orphan sweep, a scan) appends its own
    through Spark: the two engines' commits race for the same log versions, and every row lands once."""
    data = tmp_path / "data"
    stream = light_tables(spark, data)
    stream.ensure_tables()
    other = CheckerTables(spark, data, app_id="another-writer")
    done = threading.Event()
    written: list[int] = []
    errors: list[BaseException] = []

    def stream_batches() -> None:  # until the other writer is done
        try:
            while not done.is_set() or len(written) < 3:
                batch = len(written)
                assert stream.write_batch(batch, empty_output(), run_record()).written == (CHECKER_RUNS,)
                written.append(batch)
        except BaseException as error:  # handed to the test's thread
            errors.append(error)

    thread = threading.Thread(target=stream_batches)
    thread.start()
    try:
        for batch in range(3):
            other.write_batch(batch, empty_output(), replace(run_record(), run_id="run-2"))
    finally:
        done.set()
        thread.join(timeout=120)
    assert not thread.is_alive() and not errors, errors
    rows = read_table(data, CHECKER_RUNS).to_pylist()
    by_writer = {run: sorted(r["batch_id"] for r in rows if r["run_id"] == run) for run in ("run-1", "run-2")}
    assert by_writer == {"run-1": written, "run-2": [0, 1, 2]}
    assert stream.last_batch_id() == written[-1] and other.last_batch_id() == 2
    history = DeltaTable(stream.uri(CHECKER_RUNS)).history()
    commits = sorted((c for c in history if c.get("operation") == "WRITE"), key=lambda c: int(c["version"]))
    engines = ["spark" if str(c.get("engineInfo", "")).startswith("Apache-Spark") else "delta-rs" for c in commits]
    first, last = engines.index("spark"), len(engines) - 1 - engines[::-1].index("spark")
    assert "delta-rs" in engines[first:last], engines  # the writers' appends interleaved: they ran at once
