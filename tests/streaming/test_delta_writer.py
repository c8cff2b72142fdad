"""The tables' writer (Delta Lake on Spark, exactly once), the checker output it validates, read back by delta-rs."""

from __future__ import annotations

import json
import logging
import shutil
import threading
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake
from hypothesis import given, settings
from hypothesis import strategies as st
from pyspark.sql import SparkSession

from scrutiny.connectors.tables.delta import TableError, read_table
from scrutiny.connectors.tables.repair_log import repair_log_rows
from scrutiny.connectors.tables.schemas import (
    CHECKER_RUNS,
    LEDGER_CHECKS,
    OPEN_VIOLATION_KEY,
    OPEN_VIOLATIONS,
    OUTPUT_SCHEMA,
    REJECTED_EVENTS,
    REPAIR_ACTIONS,
    TABLE_NAMES,
    TABLE_SCHEMAS,
    VIOLATIONS,
    VIOLATIONS_SCHEMA,
    WRITTEN_TABLES,
    OutputSchemaError,
    RunRecord,
    conform_output,
    empty_output,
    open_violation_changes,
    output_table,
    run_rows,
    violation_records,
)
from scrutiny.core.errors import ConfigError
from scrutiny.core.repair_plan import RepairAction, RepairOutcome
from scrutiny.core.sequence_groups import EntrySet, from_entries
from scrutiny.paths import PROJECT_ROOT
from scrutiny.settings.sections import CheckerSection
from scrutiny.streaming.delta_writer import TXN_APP_ID_CONF, CheckerTables, WriteOutcome, append_rows, ensure_table
from scrutiny.streaming.table_upkeep import RETENTION_PROPERTY, TableUpkeep
from scrutiny.streaming.uncommitted_log import clear_uncommitted_log

ROOT = PROJECT_ROOT
T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
APP = "test-app"

Key = tuple[object, ...]


def at(minutes: int) -> datetime:
    return T0 + timedelta(minutes=minutes)


def run_record(source: str = "stream") -> RunRecord:
    return RunRecord("run-1", T0, T0 + timedelta(milliseconds=1500), events=3, rpcs=2, source=source)


def violation(ledger_id: int, minute: int, category: str = "NO_REPLICA", **extra: object) -> dict[str, object]:
    row: dict[str, object] = {"record": "violation", "ledger_id": ledger_id, "at": at(minute), "category": category}
    row.setdefault("severity", "critical")
    row.update(extra)
    return row


def resolved(ledger_id: int, minute: int, category: str = "NO_REPLICA", **extra: object) -> dict[str, object]:
    return {"record": "resolved", "ledger_id": ledger_id, "at": at(minute), "category": category, **extra}


def check(ledger_id: int, minute: int, verdict: str = "HEALTHY", **extra: object) -> dict[str, object]:
    return {"record": "check", "ledger_id": ledger_id, "at": at(minute), "verdict": verdict, **extra}


def missing(ledger_id: int, minute: int, bookie: str, segment: int, **extra: object) -> dict[str, object]:
    return violation(ledger_id, minute, "MISSING_REPLICA", bookie=bookie, segment_first_entry=segment, **extra)


def batch_rows(batch: int) -> list[dict[str, object]]:
    """Batch n: a violation and a check of ledger n."""
    return [violation(batch, batch, entry_count=batch + 1), check(batch, batch, "VIOLATED", violation_count=1)]


def batch_counts(data_dir: Path, name: str) -> dict[int, int]:
    counts: dict[int, int] = {}
    for batch_id in read_table(data_dir, name)["batch_id"].to_pylist():
        counts[batch_id] = counts.get(batch_id, 0) + 1
    return counts


def open_rows(data_dir: Path) -> dict[Key, dict[str, Any]]:
    rows = read_table(data_dir, OPEN_VIOLATIONS).to_pylist()
    by_key = {tuple(row[name] for name in OPEN_VIOLATION_KEY): row for row in rows}
    assert len(by_key) == len(rows), "open_violations holds a key twice"
    return by_key


@pytest.fixture
def tables(spark: SparkSession, tmp_path: Path) -> CheckerTables:
    return CheckerTables(spark, tmp_path / "data", app_id=APP)


def write(tables: CheckerTables, batch_id: int, rows: Sequence[Mapping[str, object]]) -> None:
    tables.write_batch(batch_id, output_table(rows), run_record())


# --- exactly once ---


def test_rerunning_committed_batches_writes_nothing(tables: CheckerTables) -> None:
    for batch in range(3):
        write(tables, batch, batch_rows(batch))
    for batch in (1, 2):
        result = tables.write_batch(batch, output_table(batch_rows(batch)), run_record())
        assert result.skipped == TABLE_NAMES and result.written == ()
    data = Path(str(tables.data_dir))
    for name in (VIOLATIONS, LEDGER_CHECKS, CHECKER_RUNS):
        assert batch_counts(data, name) == {0: 1, 1: 1, 2: 1}
    assert {row["ledger_id"]: row["entry_count"] for row in open_rows(data).values()} == {0: 1, 1: 2, 2: 3}
    assert tables.last_batch_id() == 2
    assert all(tables.committed_batch(name) == 2 for name in TABLE_NAMES)


def test_a_crash_between_tables_is_completed_by_the_rerun(
    tables: CheckerTables, monkeypatch: pytest.MonkeyPatch
) -> None:
    write(tables, 0, batch_rows(0))
    real_merge = CheckerTables._merge_open_violations
    calls = {"n": 0}

    def crash_once(self: CheckerTables, *args: Any) -> Any:
        calls["n"] += 1
        if calls["n"] == 1:
            raise OSError("simulated crash before the open_violations commit")
        return real_merge(self, *args)

    monkeypatch.setattr(CheckerTables, "_merge_open_violations", crash_once)
    with pytest.raises(OSError, match="simulated crash"):
        write(tables, 1, batch_rows(1))
    data = Path(str(tables.data_dir))
    assert batch_counts(data, VIOLATIONS) == {0: 1, 1: 1}
    assert batch_counts(data, LEDGER_CHECKS) == {0: 1, 1: 1}
    assert tables.committed_batch(OPEN_VIOLATIONS) == 0
    assert tables.last_batch_id() == 0  # checker_runs is the "batch done" marker

    result = tables.write_batch(1, output_table(batch_rows(1)), run_record())  # the restarted job re-runs batch 1
    assert result.skipped == (VIOLATIONS, LEDGER_CHECKS)
    assert result.written == (OPEN_VIOLATIONS, CHECKER_RUNS)
    for name in (VIOLATIONS, LEDGER_CHECKS, CHECKER_RUNS):
        assert batch_counts(data, name) == {0: 1, 1: 1}
    assert set(open_rows(data)) == {(0, "NO_REPLICA", None, None), (1, "NO_REPLICA", None, None)}
    assert tables.last_batch_id() == 1


def test_an_older_batch_id_is_skipped_and_warned_about(tables: CheckerTables, caplog: pytest.LogCaptureFixture) -> None:
    write(tables, 5, batch_rows(5))
    with caplog.at_level(logging.WARNING, logger="scrutiny.streaming.delta_writer"):
        result = tables.write_batch(0, output_table(batch_rows(0)), run_record())
    assert result.skipped == TABLE_NAMES
    assert "new app_id" in caplog.text
    assert batch_counts(Path(str(tables.data_dir)), VIOLATIONS) == {5: 1}


def test_another_app_id_is_tracked_separately(spark: SparkSession, tmp_path: Path) -> None:
    first = CheckerTables(spark, tmp_path, app_id="stream-a")
    first.write_batch(0, output_table(batch_rows(0)), run_record())
    second = CheckerTables(spark, tmp_path, app_id="scan-b")
    assert second.last_batch_id() is None
    result = second.write_batch(0, output_table(batch_rows(7)), run_record("scan"))
    assert result.written == TABLE_NAMES
    runs = read_table(tmp_path, CHECKER_RUNS)
    assert sorted(runs["source"].to_pylist()) == ["scan", "stream"]


def test_an_empty_batch_creates_all_tables_and_commits_only_its_run(tables: CheckerTables) -> None:
    assert tables.last_batch_id() is None
    assert not Path(str(tables.data_dir)).exists()  # asking does not create anything
    result = tables.write_batch(0, empty_output(), run_record())
    assert result.written == (CHECKER_RUNS,)
    assert tuple(w.table for w in result.tables if w.outcome is WriteOutcome.EMPTY) == WRITTEN_TABLES[:-1]
    assert not Path(tables.uri(REJECTED_EVENTS)).exists()  # created with its first row only
    for name in TABLE_NAMES:
        table = read_table(tables.data_dir, name)
        assert table.schema.equals(TABLE_SCHEMAS[name])
        assert table.num_rows == (1 if name == CHECKER_RUNS else 0)
        assert tables.committed_batch(name) == (0 if name == CHECKER_RUNS else None)
    run = read_table(tables.data_dir, CHECKER_RUNS).to_pylist()[0]
    assert run["duration_ms"] == 1500 and run["events"] == 3 and run["lag_records"] is None


def test_a_creation_killed_before_its_first_commit_is_created_again(
    tables: CheckerTables, caplog: pytest.LogCaptureFixture
) -> None:
    # What a SIGKILL between Delta's making of the log folders and its first commit leaves (seen on a killed checker):
    # Delta's catalog takes such a path for a table that exists, and every batch failed with DELTA_TABLE_NOT_FOUND.
    half_made = Path(tables.uri(VIOLATIONS)) / "_delta_log"
    (half_made / "_staged_commits").mkdir(parents=True)
    (half_made / ".00000000000000000000.json.0a1b.tmp").write_text("{}")
    (half_made / "..00000000000000000000.json.0a1b.tmp.crc").write_bytes(b"crc")
    with caplog.at_level(logging.WARNING, "scrutiny.streaming.delta_writer"):
        write(tables, 0, batch_rows(0))
    assert "never committed" in caplog.text
    assert batch_counts(Path(tables.data_dir), VIOLATIONS) == {0: 1}
    assert read_table(tables.data_dir, VIOLATIONS).schema.equals(TABLE_SCHEMAS[VIOLATIONS])


def test_a_log_with_any_commit_is_never_cleared(spark: SparkSession, tmp_path: Path) -> None:
    ensure_table(spark, tmp_path, VIOLATIONS)
    log_dir = tmp_path / VIOLATIONS / "_delta_log"
    committed = sorted(p.name for p in log_dir.iterdir())
    (log_dir / ".00000000000000000001.json.0a1b.tmp").write_text("{}")  # a write in flight, or one killed
    assert clear_uncommitted_log(spark, str((tmp_path / VIOLATIONS).resolve())) is False
    assert set(committed) < {p.name for p in log_dir.iterdir()}


def test_history_tables_are_append_only_and_free_of_deletion_vectors(tables: CheckerTables) -> None:
    write(tables, 0, batch_rows(0))
    for name in TABLE_NAMES:
        configuration = DeltaTable(tables.uri(name)).metadata().configuration
        assert configuration.get("delta.appendOnly") == ("true" if name != OPEN_VIOLATIONS else None)
        assert configuration.get("delta.enableDeletionVectors") == "false"
    with pytest.raises(Exception, match=r"(?i)append-only|appendOnly"):
        tables.spark.sql(f"DELETE FROM delta.`{tables.uri(VIOLATIONS)}` WHERE ledger_id = 0").collect()
    assert batch_counts(Path(str(tables.data_dir)), VIOLATIONS) == {0: 1}


# --- open_violations MERGE semantics ---


def test_open_violation_lifecycle(tables: CheckerTables) -> None:
    data = Path(str(tables.data_dir))
    key = (7, "NO_REPLICA", None, None)
    write(tables, 0, [violation(7, 0, entry_count=3, details="first")])
    row = open_rows(data)[key]
    assert (row["first_seen"], row["last_seen"], row["resolved_at"], row["batch_id"]) == (at(0), at(0), None, 0)

    write(tables, 1, [violation(7, 5, severity="critical", entry_count=9, details="worse")])
    row = open_rows(data)[key]
    assert (row["first_seen"], row["last_seen"], row["entry_count"], row["details"]) == (at(0), at(5), 9, "worse")
    assert row["resolved_at"] is None and row["batch_id"] == 1

    write(tables, 2, [resolved(7, 8)])
    row = open_rows(data)[key]
    assert (row["resolved_at"], row["last_seen"], row["batch_id"]) == (at(8), at(5), 2)

    write(tables, 3, [resolved(7, 9)])  # already resolved: untouched
    row = open_rows(data)[key]
    assert (row["resolved_at"], row["batch_id"]) == (at(8), 2)

    write(tables, 4, [violation(7, 12, entry_count=1)])  # comes back: re-opened, first_seen kept
    row = open_rows(data)[key]
    assert (row["first_seen"], row["last_seen"], row["resolved_at"], row["entry_count"]) == (at(0), at(12), None, 1)
    assert len(open_rows(data)) == 1


def test_keys_match_null_safely_and_stay_distinct(tables: CheckerTables) -> None:
    data = Path(str(tables.data_dir))
    first = [
        violation(1, 0, "BELOW_ACK_QUORUM"),  # ledger level: bookie and segment null
        missing(1, 0, "b1:3181", 0),
        missing(1, 0, "b1:3181", 10),
        missing(1, 0, "b2:3181", 0),
        violation(1, 0, "BOOKIE_UNRESPONSIVE", severity="warning", bookie="b3:3181"),  # bookie only
    ]
    write(tables, 0, first)
    write(tables, 1, [violation(1, 3, "BELOW_ACK_QUORUM"), resolved(1, 3, "BOOKIE_UNRESPONSIVE", bookie="b3:3181")])
    rows = open_rows(data)
    assert len(rows) == 5  # null keys matched their own rows instead of inserting new ones
    assert rows[(1, "BELOW_ACK_QUORUM", None, None)]["last_seen"] == at(3)
    assert rows[(1, "BOOKIE_UNRESPONSIVE", "b3:3181", None)]["resolved_at"] == at(3)
    assert rows[(1, "MISSING_REPLICA", "b1:3181", 10)]["last_seen"] == at(0)
    assert all(row["resolved_at"] is None for key, row in rows.items() if key[1] != "BOOKIE_UNRESPONSIVE")


def test_records_of_one_key_in_one_batch_apply_in_order(tables: CheckerTables) -> None:
    data = Path(str(tables.data_dir))
    write(tables, 0, [violation(1, 0), violation(3, 0)])
    write(
        tables,
        1,
        [
            violation(1, 1, entry_count=1),
            violation(1, 2, entry_count=2),  # same key twice: the last wins
            violation(2, 1),
            resolved(2, 2),  # new key opened and closed in one batch
            resolved(3, 1),
            violation(3, 2, entry_count=5),  # resolved then back in one batch: open
        ],
    )
    rows = open_rows(data)
    assert (rows[(1, "NO_REPLICA", None, None)]["last_seen"], rows[(1, "NO_REPLICA", None, None)]["entry_count"]) == (
        at(2),
        2,
    )
    assert rows[(2, "NO_REPLICA", None, None)]["first_seen"] == at(1)
    assert rows[(2, "NO_REPLICA", None, None)]["resolved_at"] == at(2)
    assert rows[(3, "NO_REPLICA", None, None)]["resolved_at"] is None
    assert rows[(3, "NO_REPLICA", None, None)]["first_seen"] == at(0)
    assert rows[(3, "NO_REPLICA", None, None)]["last_seen"] == at(2)


def test_resolved_for_an_unknown_key_does_nothing(tables: CheckerTables) -> None:
    write(tables, 0, [violation(1, 0)])
    result = tables.write_batch(1, output_table([resolved(99, 1), resolved(1, 1, "ACK_QUORUM_ONE")]), run_record())
    assert result[OPEN_VIOLATIONS].outcome is WriteOutcome.WRITTEN
    assert (result[OPEN_VIOLATIONS].inserted, result[OPEN_VIOLATIONS].updated) == (0, 0)
    assert set(open_rows(Path(str(tables.data_dir)))) == {(1, "NO_REPLICA", None, None)}
    again = tables.write_batch(1, output_table([resolved(99, 1)]), run_record())
    assert again.skipped == (OPEN_VIOLATIONS, CHECKER_RUNS)  # a MERGE that changed nothing still holds its batch
    assert set(open_rows(Path(str(tables.data_dir)))) == {(1, "NO_REPLICA", None, None)}


# A reference for the MERGE: records applied one by one to a dict of rows, as the brief states the rules.


def apply_in_order(state: dict[Key, dict[str, Any]], records: Sequence[Mapping[str, Any]]) -> None:
    for record in records:
        key = tuple(record.get(name) for name in OPEN_VIOLATION_KEY)
        row = state.get(key)
        if record["record"] == "violation":
            if row is None:
                state[key] = {"first_seen": record["at"], "last_seen": record["at"], "resolved_at": None}
            else:
                row.update(last_seen=record["at"], resolved_at=None)
            state[key]["entry_count"] = record.get("entry_count")
        elif row is not None and row["resolved_at"] is None:
            row["resolved_at"] = record["at"]


def apply_changes(state: dict[Key, dict[str, Any]], changes: pa.Table) -> None:
    """The MERGE's three clauses, in Python, on the folded source rows."""
    for change in changes.to_pylist():
        key = tuple(change[name] for name in OPEN_VIOLATION_KEY)
        row = state.get(key)
        if change["has_violation"]:
            fresh = {"last_seen": change["last_seen"], "resolved_at": change["resolved_at"]}
            fresh["entry_count"] = change["entry_count"]
            if row is None:
                state[key] = {"first_seen": change["first_seen"], **fresh}
            else:
                row.update(fresh)
        elif row is not None and row["resolved_at"] is None:
            row["resolved_at"] = change["resolved_at"]


record_strategy = st.builds(
    lambda kind, ledger, bookie, minute, count: (
        violation(ledger, minute, "MISSING_REPLICA", bookie=bookie, segment_first_entry=0, entry_count=count)
        if kind == "violation" and bookie
        else violation(ledger, minute, entry_count=count)
        if kind == "violation"
        else resolved(ledger, minute, "MISSING_REPLICA", bookie=bookie, segment_first_entry=0)
        if bookie
        else resolved(ledger, minute)
    ),
    st.sampled_from(["violation", "resolved"]),
    st.integers(1, 2),
    st.sampled_from([None, "b1:3181"]),
    st.integers(0, 50),
    st.integers(0, 9),
)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(record_strategy, max_size=6), max_size=4))
def test_folding_a_batch_equals_applying_its_records_in_order(batches: list[list[dict[str, object]]]) -> None:
    expected: dict[Key, dict[str, Any]] = {}
    merged: dict[Key, dict[str, Any]] = {}
    for batch_id, batch in enumerate(batches):
        apply_in_order(expected, batch)
        apply_changes(merged, open_violation_changes(output_table(batch), batch_id=batch_id, source="stream"))
    assert merged == expected


def test_the_delta_merge_matches_the_reference_over_several_batches(tables: CheckerTables) -> None:
    batches = [
        [missing(1, 0, "b1", 0, entry_count=4), violation(1, 0), violation(2, 0), resolved(2, 1)],
        [missing(1, 2, "b1", 0, entry_count=3), resolved(1, 2), resolved(1, 3), violation(3, 2, entry_count=1)],
        [violation(1, 4, entry_count=2), resolved(1, 4, "MISSING_REPLICA", bookie="b1", segment_first_entry=0)],
        [violation(2, 6), violation(2, 7, entry_count=8), resolved(3, 6), resolved(3, 7), violation(3, 8)],
    ]
    expected: dict[Key, dict[str, Any]] = {}
    for batch_id, batch in enumerate(batches):
        apply_in_order(expected, batch)
        write(tables, batch_id, batch)
    actual = {
        key: {name: row[name] for name in ("first_seen", "last_seen", "resolved_at", "entry_count")}
        for key, row in open_rows(Path(str(tables.data_dir))).items()
    }
    assert actual == expected


# --- validation ---


def _renamed(table: pa.Table, old: str, new: str) -> pa.Table:
    return table.rename_columns([new if name == old else name for name in table.schema.names])


@pytest.mark.parametrize(
    ("mutate", "column"),
    [
        (lambda t: t.drop_columns(["severity"]), "severity"),
        (lambda t: t.append_column("extra", pa.array([1, 2], pa.int64())), "extra"),
        (lambda t: t.set_column(1, "ledger_id", pa.array([1, 2], pa.int32())), "ledger_id"),
        (lambda t: t.set_column(2, "at", pa.array([T0, T0], pa.timestamp("us"))), "at"),
        (lambda t: t.set_column(2, "at", pa.array([T0, T0], pa.timestamp("ms", tz="UTC"))), "at"),
        (lambda t: _renamed(t, "entries", "entry_set"), "entries"),
        (lambda t: t.append_column("details", pa.array(["a", "b"])), "details"),
    ],
)
def test_a_mistyped_output_names_the_column_and_writes_nothing(tables: CheckerTables, mutate: Any, column: str) -> None:
    good = output_table([violation(1, 0), check(1, 0)])
    with pytest.raises(OutputSchemaError) as raised:
        tables.write_batch(0, mutate(good), run_record())
    assert raised.value.column == column
    assert column in str(raised.value)
    assert not Path(str(tables.data_dir)).exists()


@pytest.mark.parametrize(
    ("rows", "column", "row"),
    [
        ([violation(1, 0), {**violation(2, 0), "category": "NOT_A_CATEGORY"}], "category", 1),
        ([{**violation(1, 0), "severity": None}], "severity", 0),
        ([check(1, 0), {**check(2, 0), "verdict": None}], "verdict", 1),
        ([{**resolved(1, 0), "category": None}], "category", 0),
        ([{**check(1, 0), "record": "checked"}], "record", 0),
        ([{**check(1, 0), "source": "batch"}], "source", 0),
        ([{**check(1, 0), "ledger_id": None}], "ledger_id", 0),
    ],
)
def test_a_bad_value_names_the_column_and_row(rows: list[dict[str, object]], column: str, row: int) -> None:
    with pytest.raises(OutputSchemaError) as raised:
        output_table(rows)
    assert (raised.value.column, raised.value.row) == (column, row)


def test_a_bad_row_in_a_later_batch_leaves_every_table_untouched(tables: CheckerTables) -> None:
    write(tables, 0, batch_rows(0))
    versions = {name: DeltaTable(tables.uri(name)).version() for name in TABLE_NAMES}
    table = output_table([violation(1, 1), check(1, 1)])
    bad = table.set_column(2, "at", pa.array([T0, None], pa.timestamp("us", tz="UTC")))
    with pytest.raises(OutputSchemaError, match="'at'"):
        tables.write_batch(1, bad, run_record())
    assert {name: DeltaTable(tables.uri(name)).version() for name in TABLE_NAMES} == versions


def test_spark_style_types_are_accepted() -> None:
    table = output_table([violation(1, 0, bookie="b1"), check(1, 0)])
    fields: list[pa.Field] = []
    columns: list[pa.ChunkedArray] = []
    for field, column in zip(OUTPUT_SCHEMA, table.columns, strict=True):
        loose = field.with_nullable(True)
        if field.type == pa.string():
            loose = loose.with_type(pa.large_string())
        elif field.name == "at":
            loose = loose.with_type(pa.timestamp("us", tz="Etc/UTC"))
        fields.append(loose)
        columns.append(column.cast(loose.type))
    spark_like = pa.Table.from_arrays(columns, schema=pa.schema(fields))
    conformed = conform_output(spark_like.select(list(reversed(spark_like.schema.names))))
    assert conformed.schema.equals(OUTPUT_SCHEMA)
    assert conformed.to_pylist() == table.to_pylist()


def test_output_table_rejects_unknown_keys() -> None:
    with pytest.raises(OutputSchemaError) as raised:
        output_table([{**check(1, 0), "latency": 5}])
    assert raised.value.column == "latency"


def test_run_record_needs_aware_times_and_a_known_source() -> None:
    with pytest.raises(OutputSchemaError, match="started_at"):
        RunRecord("r", datetime(2026, 1, 1), T0)
    with pytest.raises(OutputSchemaError, match="source"):
        RunRecord("r", T0, T0, source="batch")
    assert RunRecord("r", T0, T0 - timedelta(seconds=1)).duration_ms == 0


def test_an_empty_app_id_is_refused(spark: SparkSession, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="app_id"):
        CheckerTables(spark, tmp_path, app_id="")


def test_an_existing_table_with_another_schema_is_refused(spark: SparkSession, tmp_path: Path) -> None:
    schema = VIOLATIONS_SCHEMA.remove(VIOLATIONS_SCHEMA.get_field_index("details"))
    write_deltalake(str(tmp_path / VIOLATIONS), schema.empty_table())
    tables = CheckerTables(spark, tmp_path, app_id=APP)
    with pytest.raises(TableError, match="'details' is missing"):
        tables.write_batch(0, empty_output(), run_record())
    assert tables.committed_batch(VIOLATIONS) is None


def test_read_table_names_unknown_and_missing_tables(tmp_path: Path) -> None:
    with pytest.raises(TableError, match="unknown table"):
        read_table(tmp_path, "violation")
    with pytest.raises(TableError, match="no Delta table"):
        read_table(tmp_path, CHECKER_RUNS)


# --- documentation stays in step with the code ---


def test_every_column_is_documented() -> None:
    text = (ROOT / "docs" / "tables.md").read_text()
    for name, schema in {**TABLE_SCHEMAS, "checker output": OUTPUT_SCHEMA}.items():
        for column in schema.names:
            assert f"`{column}`" in text, f"{name}.{column} is not in docs/tables.md"


_JSON_TYPES = {"string": str, "integer": int, "object": dict, "array": list, "null": type(None)}


def _conforms(value: object, spec: Mapping[str, Any]) -> bool:
    kinds = spec["type"] if isinstance(spec["type"], list) else [spec["type"]]
    return any(isinstance(value, _JSON_TYPES[kind]) and not isinstance(value, bool) for kind in kinds)


def test_violation_json_schema_matches_the_table_and_its_records(tables: CheckerTables) -> None:
    schema = json.loads((ROOT / "conf" / "schemas" / "violation.schema.json").read_text())
    assert list(schema["properties"]) == VIOLATIONS_SCHEMA.names
    assert set(schema["required"]) == set(VIOLATIONS_SCHEMA.names)
    for field in VIOLATIONS_SCHEMA:
        kinds = schema["properties"][field.name]["type"]
        assert ("null" in kinds) == field.nullable, field.name
    entries = EntrySet.of(from_entries([0, 1, 2, 5]))
    ensemble = [{"first_entry": 0, "bookies": ["b1:3181", "b2:3181"]}]
    rich = missing(1, 0, "b1:3181", 0, entries=json.dumps(entries.as_json_dict()), ensemble=json.dumps(ensemble))
    write(tables, 0, [rich, violation(2, 0)])
    records = violation_records(read_table(tables.data_dir, VIOLATIONS))
    assert records[0]["entries"] == {"groups": [[0, 0, 3, 0], [5, 5, 1, 0]], "count": 4}
    assert records[0]["detected_at"] == "2026-03-01T12:00:00Z"
    for record in records:
        assert set(record) == set(schema["properties"])
        for name, value in record.items():
            assert _conforms(value, schema["properties"][name]), (name, value)


# --- Delta itself makes the writes idempotent ---


def test_delta_skips_an_append_whose_transaction_it_holds(spark: SparkSession, tmp_path: Path) -> None:
    ensure_table(spark, tmp_path, CHECKER_RUNS)
    rows = run_rows(run_record(), batch_id=4)
    for _ in range(2):
        append_rows(spark, tmp_path, CHECKER_RUNS, rows, txn=("app", 4))
    append_rows(spark, tmp_path, CHECKER_RUNS, rows, txn=("app", 3))  # older: skipped as well
    table = DeltaTable(str(tmp_path / CHECKER_RUNS))
    assert table.version() == 1 and table.transaction_version("app") == 4
    assert read_table(tmp_path, CHECKER_RUNS).num_rows == 1


def test_delta_skips_a_merge_whose_transaction_it_holds(tables: CheckerTables) -> None:
    write(tables, 0, [violation(1, 0)])
    changes = open_violation_changes(output_table([violation(2, 1)]), batch_id=0, source="stream")
    version = DeltaTable(tables.uri(OPEN_VIOLATIONS)).version()
    assert tables._merge_open_violations(changes, 0) == (0, 0)  # no own check before the MERGE: Delta skips it
    assert DeltaTable(tables.uri(OPEN_VIOLATIONS)).version() == version
    assert set(open_rows(Path(str(tables.data_dir)))) == {(1, "NO_REPLICA", None, None)}
    assert (
        tables._merge_session.conf.get(TXN_APP_ID_CONF, None) is None
    )  # the session's transaction settings are cleared


# --- an existing user upgrades in place: tables the delta-rs writer left (tests/data/tables-delta-rs) ---

OLD_APP = "scrutiny-checker-0f1e2d3c-4b5a-4968-8776-a5b4c3d2e1f0"
OLD_TABLES = PROJECT_ROOT / "tests" / "data" / "tables-delta-rs"


def test_tables_written_by_the_delta_rs_writer_are_appended_and_merged_with_nothing_lost(
    spark: SparkSession, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    shutil.copytree(OLD_TABLES, data)
    before = {name: read_table(data, name).to_pylist() for name in (*TABLE_NAMES, REPAIR_ACTIONS)}
    assert {name: len(rows) for name, rows in before.items()} == {
        VIOLATIONS: 4,
        LEDGER_CHECKS: 8,
        OPEN_VIOLATIONS: 3,
        CHECKER_RUNS: 4,
        REPAIR_ACTIONS: 1,
    }
    protocols = {name: DeltaTable(str(data / name)).protocol() for name in TABLE_NAMES}
    upkeep = TableUpkeep.of(CheckerSection())  # the job's: compaction on, the retention set on the old tables
    tables = CheckerTables(spark, data, app_id=OLD_APP, upkeep=upkeep)
    assert tables.ensure_tables() == () and tables.last_batch_id() == 2
    for name in TABLE_NAMES:  # the property is a plain setting: the tables keep their protocol (1/2)
        assert DeltaTable(str(data / name)).metadata().configuration[RETENTION_PROPERTY] == upkeep.retention, name
        assert DeltaTable(str(data / name)).protocol() == protocols[name], name
    replay = tables.write_batch(2, output_table([violation(10, 2), check(10, 2, "VIOLATED")]), run_record())
    assert replay.skipped == TABLE_NAMES  # the old writer's transactions are Delta's own: the replay is skipped
    new_rows = [
        violation(10, 60, entry_count=7),  # still open since the old batches: refreshed
        resolved(13, 60, "BELOW_WRITE_QUORUM", bookie="bk-2:3181", segment_first_entry=0),  # resolved now
        violation(20, 60),  # new
        check(10, 60, "VIOLATED"),
        check(20, 60, "VIOLATED"),
    ]
    result = tables.write_batch(3, output_table(new_rows), run_record())
    assert result.written == TABLE_NAMES
    assert (result[OPEN_VIOLATIONS].inserted, result[OPEN_VIOLATIONS].updated) == (1, 2)
    ensure_table(spark, data, REPAIR_ACTIONS)
    action = RepairAction(20, RepairOutcome.MARKED, ("bk-1:3181",), "/ledgers/underreplication/ledgers/x")
    append_rows(spark, data, REPAIR_ACTIONS, repair_log_rows([action], run_id="fix-new", at=at(61)))

    after = {name: read_table(data, name).to_pylist() for name in (*TABLE_NAMES, REPAIR_ACTIONS)}
    for name in (VIOLATIONS, LEDGER_CHECKS, CHECKER_RUNS, REPAIR_ACTIONS):  # history: every old row is still there
        assert all(row in after[name] for row in before[name]), name
    assert [len(after[name]) - len(before[name]) for name in (VIOLATIONS, LEDGER_CHECKS, CHECKER_RUNS)] == [2, 2, 1]
    assert len(after[REPAIR_ACTIONS]) == 2
    rows = open_rows(data)
    assert set(rows) == {
        (10, "NO_REPLICA", None, None),
        (11, "MISSING_REPLICA", "bk-1:3181", 0),
        (13, "BELOW_WRITE_QUORUM", "bk-2:3181", 0),
        (20, "NO_REPLICA", None, None),
    }
    old_10 = next(r for r in before[OPEN_VIOLATIONS] if r["ledger_id"] == 10)
    assert rows[(10, "NO_REPLICA", None, None)]["first_seen"] == old_10["first_seen"]  # kept across the upgrade
    assert (rows[(10, "NO_REPLICA", None, None)]["last_seen"], rows[(10, "NO_REPLICA", None, None)]["entry_count"]) == (
        at(60),
        7,
    )
    assert rows[(13, "BELOW_WRITE_QUORUM", "bk-2:3181", 0)]["resolved_at"] == at(60)
    assert rows[(11, "MISSING_REPLICA", "bk-1:3181", 0)] == next(
        r for r in before[OPEN_VIOLATIONS] if r["ledger_id"] == 11
    )  # untouched by the new writer
    for name in TABLE_NAMES:  # Spark reads what delta-rs reads
        assert spark.read.format("delta").load(str(data / name)).count() == len(after[name]), name


# --- concurrent writers ---


def test_the_stream_and_two_scans_writing_at_once_never_fail_or_lose_a_row(spark: SparkSession, tmp_path: Path) -> None:
    """Three writers (app ids) commit batches to the same tables at the same time; the MERGEs conflict and retry."""
    data = tmp_path / "data"
    CheckerTables(spark, data, app_id="setup").ensure_tables()
    writers = {name: CheckerTables(spark, data, app_id=name) for name in ("stream", "scan-1", "scan-2")}
    batches = 2
    errors: list[BaseException] = []

    def run(name: str) -> None:
        source = "stream" if name == "stream" else "scan"
        try:
            for batch in range(batches):
                rows = [violation(ledger, batch, bookie=name) for ledger in (1, 2, 3)]  # the same ledgers' keys
                rows += [resolved(ledger, batch, bookie=name) for ledger in (1, 2, 3) if batch % 2]
                writers[name].write_batch(batch, output_table(rows), run_record(source))
        except BaseException as error:  # the assertion below names it
            errors.append(error)

    threads = [threading.Thread(target=run, args=(name,)) for name in writers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=600)
    assert not errors, errors
    assert len(read_table(data, "violations")) == 3 * batches * len(writers)
    assert len(read_table(data, "checker_runs")) == batches * len(writers)
    keys = open_rows(data)
    assert {(k[0], k[2]) for k in keys} == {(ledger, name) for ledger in (1, 2, 3) for name in writers}
    assert all(row["resolved_at"] is not None for row in keys.values())  # the last batch (3) resolved each
