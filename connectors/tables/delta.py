"""The four Delta tables under one data directory and their exactly-once writer (delta-rs, no JVM).

:class:`CheckerTables` runs on the driver: the streaming job calls :meth:`CheckerTables.write_batch` from
``foreachBatch`` with the batch's checker output, the one-shot scan calls it once. What it guarantees:

* **Validation first.** The output is checked against ``OUTPUT_SCHEMA`` and every table's rows are built before the
  first write; a bad batch raises :class:`~scrutiny.connectors.tables.schemas.OutputSchemaError` and writes nothing.
* **Exactly once per table.** Each table's commit carries the Delta app transaction ``(app_id, batch_id)``; before
  writing a table the writer reads the table's recorded version for ``app_id`` and skips the table when it is
  ``>= batch_id`` (delta-rs itself would accept an older version). A batch re-run after a crash between two table
  commits writes only the tables it had not committed. A table with no rows in a batch gets no commit (idle batches
  cost one commit, to ``checker_runs``, which always gets its row).
* **Order**: ``violations``, ``ledger_checks``, ``open_violations``, ``checker_runs`` — a row in ``checker_runs``
  means the whole batch is in.
* ``app_id`` must identify the stream *and its checkpoint* (Spark's ``query.id``, which a checkpoint keeps across
  restarts, is a good choice): Spark numbers batches from 0 again with a new checkpoint, and a reused ``app_id``
  would then skip them all. A batch id below a table's recorded one is logged as a warning for that reason.
* **Tables exist** after the first call (created with their schema if missing, the three history tables with
  ``delta.appendOnly=true``); an existing table with another schema raises :class:`TableError`.
* **Maintenance** is opt-in: with ``compact_every=N`` every N-th batch (batch ids N-1, 2N-1, ...) compacts small
  files and vacuums files removed more than ``vacuum_retention_hours`` (>= 24) ago, in all four tables. It runs
  after the batch is committed; a failure is logged and reported in the result, never fails the batch.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Final

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.fs as pafs
from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake
from deltalake.exceptions import DeltaError, TableNotFoundError

from scrutiny.connectors.tables.schemas import (
    APPEND_TABLES,
    CHECKER_RUNS,
    LEDGER_CHECKS,
    OPEN_VIOLATIONS,
    READABLE_SCHEMAS,
    TABLE_NAMES,
    TABLE_SCHEMAS,
    VIOLATIONS,
    OutputSchemaError,
    RunRecord,
    conform_output,
    ledger_check_rows,
    open_violation_changes,
    run_rows,
    violation_rows,
)
from scrutiny.core.errors import ConfigError, ScrutinyError

__all__ = [
    "CheckerTables",
    "Maintenance",
    "WriteOutcome",
    "RunRecord",
    "TableError",
    "TableWrite",
    "WriteResult",
    "read_table",
    "table_uri",
]

log = logging.getLogger(__name__)

DEFAULT_VACUUM_RETENTION_HOURS: Final = 168
MIN_VACUUM_RETENTION_HOURS: Final = 24

_DESCRIPTIONS: Final[Mapping[str, str]] = {
    VIOLATIONS: "Scrutiny: every violation detected (append-only history)",
    OPEN_VIOLATIONS: "Scrutiny: current state of each violation key (MERGE)",
    LEDGER_CHECKS: "Scrutiny: every completed ledger check (append-only)",
    CHECKER_RUNS: "Scrutiny: one row per checker batch (append-only)",
}

#: MERGE of the folded changes (OPEN_CHANGES_SCHEMA) into open_violations; NULL-safe on bookie and segment.
_MERGE_PREDICATE: Final = (
    "t.ledger_id = s.ledger_id AND t.category = s.category"
    " AND (t.bookie IS NOT DISTINCT FROM s.bookie)"
    " AND (t.segment_first_entry IS NOT DISTINCT FROM s.segment_first_entry)"
)
_REOPEN_OR_REFRESH: Final = {
    name: f"s.{name}"
    for name in ("last_seen", "severity", "entry_count", "details", "pulsar_topic", "resolved_at", "batch_id", "source")
}
_RESOLVE: Final = {name: f"s.{name}" for name in ("resolved_at", "batch_id", "source")}
_INSERT: Final = {name: f"s.{name}" for name in TABLE_SCHEMAS[OPEN_VIOLATIONS].names}


class TableError(ScrutinyError):
    """A Delta table that cannot be used as asked: unknown name, missing, or a schema other than Scrutiny's."""

    def __init__(self, table: str, reason: str) -> None:
        self.table = table
        self.reason = reason
        super().__init__(f"Delta table {table!r}: {reason}")


class WriteOutcome(StrEnum):
    """What :meth:`CheckerTables.write_batch` did to one table."""

    WRITTEN = "written"
    SKIPPED = "skipped"  # the table had already committed this batch (or a later one)
    EMPTY = "empty"  # nothing for this table in this batch: no commit (checker_runs always gets its row)


@dataclass(frozen=True, slots=True)
class TableWrite:
    """One table's part of a batch: ``rows`` appended (or keys merged); ``inserted``/``updated`` for the MERGE."""

    table: str
    outcome: WriteOutcome
    rows: int = 0
    inserted: int = 0
    updated: int = 0


@dataclass(frozen=True, slots=True)
class Maintenance:
    """What a compaction + vacuum pass did: files rewritten and deleted over all tables, or the error."""

    files_compacted: int = 0
    files_vacuumed: int = 0
    error: str | None = None


@dataclass(frozen=True, slots=True)
class WriteResult:
    """The outcome of :meth:`CheckerTables.write_batch`, per table in commit order."""

    batch_id: int
    tables: tuple[TableWrite, ...]
    maintenance: Maintenance | None = None

    def __getitem__(self, table: str) -> TableWrite:
        for write in self.tables:
            if write.table == table:
                return write
        raise KeyError(table)

    @property
    def written(self) -> tuple[str, ...]:
        """Tables committed by this call."""
        return tuple(w.table for w in self.tables if w.outcome is WriteOutcome.WRITTEN)

    @property
    def skipped(self) -> tuple[str, ...]:
        """Tables that already held this batch."""
        return tuple(w.table for w in self.tables if w.outcome is WriteOutcome.SKIPPED)


def table_uri(data_dir: str | Path, name: str) -> str:
    """Where table ``name`` lives under ``data_dir`` (a local path or an object-store URI)."""
    if name not in READABLE_SCHEMAS:
        raise TableError(name, f"unknown table (known: {', '.join(READABLE_SCHEMAS)})")
    base = str(data_dir)
    if "://" in base:
        return f"{base.rstrip('/')}/{name}"
    return str(Path(base) / name)


def live_dataset(
    data_dir: str | Path, name: str, *, string_view: bool = False, storage_options: Mapping[str, str] | None = None
) -> ds.Dataset:
    """The live files of table ``name`` (as of its latest version) as a pyarrow dataset, for readers.

    Local tables are read with pyarrow's own file system: delta-rs's file-system handler makes the
    interpreter abort at exit now and then ("terminate called without an active exception", exit
    134), which would break the CLI's exit codes. ``string_view`` declares text columns as
    ``string_view``: the files delta-rs's MERGE writes store them so, and a filter pushed into the
    dataset (e.g. by DuckDB) on a ``string`` declaration fails in pyarrow ("no kernel matching
    input types (string, string_view)"); files stored as ``string`` are cast on read.
    """
    uri = table_uri(data_dir, name)
    table = _open(uri, name, storage_options)
    declared = READABLE_SCHEMAS[name]
    schema = pa.schema([_as_view(f) for f in declared]) if string_view else declared
    if "://" in uri:
        remote_dataset = table.to_pyarrow_dataset()
        files = [fragment.path for fragment in remote_dataset.get_fragments()]
        return ds.FileSystemDataset.from_paths(
            files, schema=schema, format=remote_dataset.format, filesystem=remote_dataset.filesystem
        )
    paths = [uri.removeprefix("file://") for uri in table.file_uris()]
    return ds.FileSystemDataset.from_paths(
        paths, schema=schema, format=ds.ParquetFileFormat(), filesystem=pafs.LocalFileSystem()
    )


def read_table(
    data_dir: str | Path,
    name: str,
    *,
    columns: list[str] | None = None,
    storage_options: Mapping[str, str] | None = None,
) -> pa.Table:
    """The current rows of table ``name`` (live files only, as of its latest version), in its declared schema."""
    return live_dataset(data_dir, name, storage_options=storage_options).to_table(columns=columns)


def _as_view(field: pa.Field) -> pa.Field:
    if pa.types.is_string(field.type) or pa.types.is_large_string(field.type):
        return field.with_type(pa.string_view())
    return field


def _open(uri: str, name: str, storage_options: Mapping[str, str] | None) -> DeltaTable:
    try:
        return DeltaTable(uri, storage_options=dict(storage_options) if storage_options else None)
    except TableNotFoundError as error:
        raise TableError(name, f"no Delta table at {uri}") from error


def _commit(app_id: str, batch_id: int) -> CommitProperties:
    return CommitProperties(app_transactions=[Transaction(app_id, batch_id)])


class CheckerTables:
    """The writer of the four tables for one stream (``app_id``); see the module docstring for its guarantees.

    Not thread-safe; one instance per driver. ``storage_options`` go to delta-rs (object stores).
    """

    def __init__(
        self,
        data_dir: str | Path,
        *,
        app_id: str,
        compact_every: int | None = None,
        vacuum_retention_hours: int = DEFAULT_VACUUM_RETENTION_HOURS,
        storage_options: Mapping[str, str] | None = None,
    ) -> None:
        if not app_id:
            raise ConfigError("app_id must not be empty")
        if compact_every is not None and compact_every < 1:
            raise ConfigError(f"compact_every must be at least 1 (or None for never), got {compact_every}")
        if vacuum_retention_hours < MIN_VACUUM_RETENTION_HOURS:
            raise ConfigError(
                f"vacuum_retention_hours must be at least {MIN_VACUUM_RETENTION_HOURS}, got {vacuum_retention_hours}"
            )
        self.data_dir = data_dir
        self.app_id = app_id
        self.compact_every = compact_every
        self.vacuum_retention_hours = vacuum_retention_hours
        self._storage = dict(storage_options) if storage_options else None
        self._ready = False

    def uri(self, name: str) -> str:
        """The location of table ``name``."""
        return table_uri(self.data_dir, name)

    def ensure_tables(self) -> tuple[str, ...]:
        """Create the missing tables (empty, with their schema); check the others' schema. Returns those created."""
        created: list[str] = []
        for name in TABLE_NAMES:
            uri = self.uri(name)
            if DeltaTable.is_deltatable(uri, storage_options=self._storage):
                _check_schema(name, self._table(name))
                continue
            DeltaTable.create(
                uri,
                TABLE_SCHEMAS[name],
                mode="ignore",
                name=name,
                description=_DESCRIPTIONS[name],
                configuration={"delta.appendOnly": "true"} if name in APPEND_TABLES else None,
                storage_options=self._storage,
            )
            created.append(name)
        if created:
            log.info("created Delta tables %s under %s", ", ".join(created), self.data_dir)
        self._ready = True
        return tuple(created)

    def committed_batch(self, name: str) -> int | None:
        """The last batch id table ``name`` committed for this ``app_id``; None if none (or no table)."""
        uri = self.uri(name)
        if not DeltaTable.is_deltatable(uri, storage_options=self._storage):
            return None
        version: int | None = self._table(name).transaction_version(self.app_id)
        return version

    def last_batch_id(self) -> int | None:
        """The last batch fully written (``checker_runs`` is committed last), or None: for the startup log."""
        return self.committed_batch(CHECKER_RUNS)

    def write_batch(self, batch_id: int, output: pa.Table, run: RunRecord) -> WriteResult:
        """Write batch ``batch_id`` to all four tables exactly once (tables that already hold it are skipped).

        Raises OutputSchemaError (nothing written) on bad output; a delta-rs error mid-way leaves the committed
        tables committed, and calling again with the same batch completes the rest.
        """
        if isinstance(batch_id, bool) or not isinstance(batch_id, int) or batch_id < 0:
            raise OutputSchemaError("batch_id", f"must be a non-negative integer, got {batch_id!r}", what="batch")
        if not isinstance(run, RunRecord):
            raise OutputSchemaError("run", f"must be a RunRecord, got {type(run).__name__}", what="batch")
        conformed = conform_output(output)
        rows = {
            VIOLATIONS: violation_rows(conformed, batch_id=batch_id, source=run.source),
            LEDGER_CHECKS: ledger_check_rows(conformed, batch_id=batch_id, source=run.source),
            OPEN_VIOLATIONS: open_violation_changes(conformed, batch_id=batch_id, source=run.source),
            CHECKER_RUNS: run_rows(run, batch_id=batch_id),
        }
        if not self._ready:
            self.ensure_tables()
        writes = tuple(self._write_table(name, rows[name], batch_id) for name in TABLE_NAMES)
        maintenance = self.maintain() if self._maintenance_due(batch_id) else None
        return WriteResult(batch_id, writes, maintenance)

    def maintain(self) -> Maintenance:
        """Compact small files and vacuum removed ones older than the retention, in every table, now.

        Safe at any time for readers younger than the retention; a delta-rs or I/O error is logged and returned.
        """
        compacted = vacuumed = 0
        try:
            for name in TABLE_NAMES:
                table = self._table(name)
                metrics = table.optimize.compact()
                compacted += int(metrics.get("numFilesRemoved", 0))
                removed = table.vacuum(
                    retention_hours=self.vacuum_retention_hours, dry_run=False, enforce_retention_duration=False
                )
                vacuumed += len(removed)
        except (DeltaError, OSError) as error:
            log.warning("Delta table maintenance failed (the batch itself is committed): %s", error)
            return Maintenance(compacted, vacuumed, str(error))
        log.info("Delta table maintenance: %d files compacted, %d vacuumed", compacted, vacuumed)
        return Maintenance(compacted, vacuumed)

    def _maintenance_due(self, batch_id: int) -> bool:
        return self.compact_every is not None and (batch_id + 1) % self.compact_every == 0

    def _table(self, name: str) -> DeltaTable:
        return _open(self.uri(name), name, self._storage)

    def _write_table(self, name: str, rows: pa.Table, batch_id: int) -> TableWrite:
        if not rows.num_rows and name != CHECKER_RUNS:
            return TableWrite(name, WriteOutcome.EMPTY)  # a re-run that finds rows here never wrote them before
        table = self._table(name)
        done = table.transaction_version(self.app_id)
        if done is not None and done >= batch_id:
            if done > batch_id:
                log.warning(
                    "table %s already holds batch %d of app %s; skipping older batch %d "
                    "(a new checkpoint needs a new app_id)",
                    name,
                    done,
                    self.app_id,
                    batch_id,
                )
            return TableWrite(name, WriteOutcome.SKIPPED)
        if name == OPEN_VIOLATIONS:
            return self._merge_open_violations(table, rows, batch_id)
        self._append(table, rows, batch_id)
        return TableWrite(name, WriteOutcome.WRITTEN, rows=rows.num_rows, inserted=rows.num_rows)

    def _append(self, table: DeltaTable, rows: pa.Table, batch_id: int) -> None:
        """One commit: ``rows`` (possibly none) plus the app transaction."""
        write_deltalake(table, rows, mode="append", commit_properties=_commit(self.app_id, batch_id))

    def _merge_open_violations(self, table: DeltaTable, changes: pa.Table, batch_id: int) -> TableWrite:
        """MERGE the batch's folded changes (never empty here); a MERGE that changes nothing commits nothing."""
        metrics = (
            table.merge(
                changes,
                _MERGE_PREDICATE,
                source_alias="s",
                target_alias="t",
                commit_properties=_commit(self.app_id, batch_id),
            )
            .when_matched_update(_REOPEN_OR_REFRESH, predicate="s.has_violation")
            .when_matched_update(_RESOLVE, predicate="(NOT s.has_violation) AND (t.resolved_at IS NULL)")
            .when_not_matched_insert(_INSERT, predicate="s.has_violation")
            .execute()
        )
        return TableWrite(
            OPEN_VIOLATIONS,
            WriteOutcome.WRITTEN,
            rows=changes.num_rows,
            inserted=int(metrics.get("num_target_rows_inserted", 0)),
            updated=int(metrics.get("num_target_rows_updated", 0)),
        )


def _check_schema(name: str, table: DeltaTable) -> None:
    """Raise TableError naming the first column of an existing table that differs from Scrutiny's schema."""
    expected = TABLE_SCHEMAS[name]
    actual = pa.schema(table.schema().to_arrow())
    for field in expected:
        index = actual.get_field_index(field.name)
        if index < 0:
            raise TableError(name, f"column {field.name!r} is missing")
        found = actual.field(index)
        if found.type != field.type or found.nullable != field.nullable:
            raise TableError(name, f"column {field.name!r} is {found}, expected {field}")
    extra = [n for n in actual.names if expected.get_field_index(n) < 0]
    if extra:
        raise TableError(name, f"column {extra[0]!r} is not Scrutiny's")
