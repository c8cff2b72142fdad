"""The tables' writer on Spark: Delta Lake's own writer (delta-spark), exactly once per micro-batch.

:class:`CheckerTables` runs on the driver: the streaming job calls :meth:`CheckerTables.write_batch` from
``foreachBatch`` with the batch's checker output, the one-shot scan calls it once per chunk. What it guarantees:

* **Validation first.** The output is checked against ``OUTPUT_SCHEMA`` and every table's rows are built before the
  first write; a bad batch raises :class:`~scrutiny.connectors.tables.schemas.OutputSchemaError` and writes nothing.
* **Exactly once per table, by Delta itself.** Every write carries Delta's idempotent-write identifiers: the
  ``txnAppId``/``txnVersion`` options of an append, the session's ``spark.databricks.delta.write.txnAppId`` /
  ``txnVersion`` for the ``MERGE``. Delta records ``(app_id, batch_id)`` in the commit and skips a write whose
  version is not above the one recorded. A batch re-run after a crash between two table commits therefore writes
  only the tables that do not hold it. The outcome reported per table (written or already held) comes from the
  version recorded before the write; the decision to skip is Delta's.
* **Order**: ``violations``, ``ledger_checks``, ``open_violations`` and ``rejected_events`` are written at the same
  time (Spark jobs in parallel: a Delta write is mostly fixed cost, so a batch takes one write's time, not one per
  table), and ``checker_runs`` only after all of them committed — a row in ``checker_runs`` means the whole batch
  is in. A table with no rows in a batch gets no commit (``checker_runs`` always gets its row).
* ``app_id`` must identify the stream *and its checkpoint* (Spark numbers batches from 0 again with a new
  checkpoint; a reused ``app_id`` would skip them all). A batch id below a table's recorded one is logged.
* **Concurrent writers.** The stream and any number of scans may write the same tables at once: appends never
  conflict, and a write that meets Delta's optimistic-concurrency conflict (two MERGEs of ``open_violations`` at
  the same time) is tried again, up to ``conflict_attempts`` times with a randomised growing wait. Trying again is
  safe: the identifiers above make Delta skip a write that did commit.
* **Tables exist** after :meth:`CheckerTables.ensure_tables` (created with their schema if missing, the three history
  tables with ``delta.appendOnly=true``, all without deletion vectors so that the JVM-free readers see every row the
  way Spark does); an existing table with another schema raises
  :class:`~scrutiny.connectors.tables.delta.TableError`. Tables written by earlier versions (delta-rs, protocol 1/2)
  are used as they are: Delta writes them without upgrading their protocol.

* **Files kept few** (``upkeep``, :class:`~scrutiny.streaming.table_upkeep.TableUpkeep`): Delta's auto compaction on
  the writer's sessions and a short retention of replaced files on every table it creates or checks, so that a
  write's cost does not grow with the tables' age. A compaction is a commit of its own, after the batch's.

* **The job's own record and its findings' appends without Spark** (``runs_by_delta_rs`` and ``findings_by_delta_rs``,
  the streaming job's choices): every batch's ``checker_runs`` row and ``verification_ages`` rows
  (:data:`BOOKKEEPING_TABLES`), and its rows of the append-only findings' tables ``ledger_checks``, ``violations`` and
  ``rejected_events`` (:data:`FINDINGS_APPENDS`), are appended with delta-rs, carrying the same idempotent-write
  record (:mod:`scrutiny.connectors.tables.light_append`): a few hundredths of a second of CPU instead of a second of
  Spark jobs a table (planning, code generation, Parquet writing, the commit), and ``checker_runs``, which must wait
  for the other tables' commits, no longer adds a Spark write's time to every batch. Left to Spark on an object store,
  on a table of another protocol, on one holding as many files as auto compaction waits for, and after delta-rs failed
  once. ``open_violations`` is a MERGE: always Delta on Spark's.

* **State built ahead** (``prefetch_state``, the streaming job's choice): an idempotent write makes Delta 4.4
  rebuild the table's whole state to find the app id's last version, and a commit leaves the new version's state
  unbuilt; :class:`~scrutiny.streaming.state_prefetch.StatePrefetch` rebuilds it after each write, while the job
  waits for the next batch, so the next write finds it built (Delta still makes every decision).

The writes go through sessions of their own (``spark.newSession()``: same JVM, own SQL settings): the MERGE's
transaction settings live on a session only the MERGE uses, so they never reach an append or another query.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Final
from urllib.parse import urlsplit

import pyarrow as pa
from delta import exceptions as delta_exceptions
from delta.tables import DeltaTable
from deltalake import DeltaTable as LogReader
from deltalake.exceptions import DeltaError
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.pandas.types import from_arrow_schema
from pyspark.sql.types import StructType
from tenacity import RetryCallState, Retrying, retry_if_exception_type, stop_after_attempt, wait_random_exponential

from scrutiny.connectors.tables.delta import TableError, table_uri
from scrutiny.connectors.tables.light_append import append_once
from scrutiny.connectors.tables.schemas import (
    APPEND_TABLES,
    CHECKER_RUNS,
    CREATED_ON_FIRST_ROW,
    LEDGER_CHECKS,
    OPEN_VIOLATIONS,
    OPEN_VIOLATIONS_MERGE,
    ORPHAN_SIGHTINGS,
    READABLE_SCHEMAS,
    REJECTED_EVENTS,
    REPAIR_ACTIONS,
    TABLE_NAMES,
    VERIFICATION_AGES,
    VERIFICATION_AGES_SCHEMA,
    VIOLATIONS,
    WRITTEN_TABLES,
    OutputSchemaError,
    RunRecord,
    conform_output,
    ledger_check_rows,
    open_violation_changes,
    rejected_event_rows,
    run_rows,
    violation_rows,
)
from scrutiny.core.errors import ConfigError
from scrutiny.streaming.state_prefetch import StatePrefetch
from scrutiny.streaming.table_upkeep import TableUpkeep
from scrutiny.streaming.uncommitted_log import clear_uncommitted_log

__all__ = [
    "CheckerTables",
    "TableWrite",
    "WriteOutcome",
    "WriteResult",
    "append_rows",
    "ensure_table",
    "read_delta",
]

log = logging.getLogger(__name__)

#: The session settings a MERGE's idempotent write reads (Delta has no MERGE option for them).
TXN_APP_ID_CONF: Final = "spark.databricks.delta.write.txnAppId"
TXN_VERSION_CONF: Final = "spark.databricks.delta.write.txnVersion"

DESCRIPTIONS: Final[Mapping[str, str]] = {
    VIOLATIONS: "Scrutiny: every violation detected (append-only history)",
    OPEN_VIOLATIONS: "Scrutiny: current state of each violation key (MERGE)",
    LEDGER_CHECKS: "Scrutiny: every completed ledger check (append-only)",
    CHECKER_RUNS: "Scrutiny: one row per checker batch (append-only)",
    REJECTED_EVENTS: "Scrutiny: every record of the topic the checker could not use (append-only)",
    VERIFICATION_AGES: "Scrutiny: ledgers by the age of their last verification, over time (append-only)",
    REPAIR_ACTIONS: "Scrutiny: every under-replication mark a fix made or skipped (append-only)",
    ORPHAN_SIGHTINGS: "Scrutiny: when each ledger held without metadata was first seen, per bookie (MERGE)",
}


#: Delta's optimistic-concurrency conflicts: another writer committed first; the write may simply be tried again.
CONFLICTS: Final = (
    delta_exceptions.ConcurrentAppendException,
    delta_exceptions.ConcurrentDeleteDeleteException,
    delta_exceptions.ConcurrentDeleteReadException,
    delta_exceptions.ConcurrentTransactionException,
    delta_exceptions.ConcurrentWriteException,
    delta_exceptions.DeltaConcurrentModificationException,
    delta_exceptions.MetadataChangedException,
    delta_exceptions.ProtocolChangedException,
)
#: How many times a conflicting write is tried in all, unless the writer is told otherwise.
DEFAULT_CONFLICT_ATTEMPTS: Final = 8

#: Tables created with ``delta.appendOnly=true``: the checker's history tables and the fix's record.
_APPEND_ONLY: Final = (*APPEND_TABLES, *CREATED_ON_FIRST_ROW, REPAIR_ACTIONS)

#: The tables of the job's own record, appended by delta-rs when ``runs_by_delta_rs``: a row per batch and, once every
#: ``checker.verification_ages_seconds``, the count of ledgers by the age of their last verification.
BOOKKEEPING_TABLES: Final = (VERIFICATION_AGES, CHECKER_RUNS)
#: The findings' append-only tables, appended by delta-rs when ``findings_by_delta_rs``: a batch's checks, the
#: violations it found and the records of the topic it could not use. ``open_violations`` is a MERGE: always Spark's.
FINDINGS_APPENDS: Final = (VIOLATIONS, LEDGER_CHECKS, REJECTED_EVENTS)


class WriteOutcome(StrEnum):
    """What :meth:`CheckerTables.write_batch` did to one table."""

    WRITTEN = "written"
    SKIPPED = "skipped"  # the table had already committed this batch (or a later one): Delta wrote nothing
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
class WriteResult:
    """The outcome of :meth:`CheckerTables.write_batch`, per table in commit order."""

    batch_id: int
    tables: tuple[TableWrite, ...]

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


def spark_schema(name: str) -> StructType:
    """Table ``name``'s schema as Spark's type (nullability kept, list elements included)."""
    return from_arrow_schema(READABLE_SCHEMAS[name])


def location(data_dir: str | Path, name: str) -> str:
    """Where table ``name`` lives, as Spark must be told: a URI as given, a local path made absolute.

    Delta's table builder reads a relative path as a table name (``data/violations`` is refused as one).
    """
    uri = table_uri(data_dir, name)
    return uri if "://" in uri else str(Path(uri).resolve())


def ensure_table(
    spark: SparkSession, data_dir: str | Path, name: str, *, properties: Mapping[str, str] | None = None
) -> bool:
    """Create table ``name`` under ``data_dir`` if missing (True), else check its schema (False).

    ``properties``: table properties it must carry; an existing table without them gets them (one commit).
    TableError when an existing table's schema is not Scrutiny's.
    """
    uri = location(data_dir, name)
    expected = spark_schema(name)
    if DeltaTable.isDeltaTable(spark, uri):
        _check_schema(name, DeltaTable.forPath(spark, uri).toDF().schema, expected)
        _set_properties(spark, name, uri, properties or {})
        return False
    if clear_uncommitted_log(spark, uri):
        log.warning("table %s: removed the log of a creation that never committed (a crash while creating it)", name)
    builder = (
        DeltaTable.createIfNotExists(spark)
        .location(uri)
        .addColumns(expected)
        .comment(DESCRIPTIONS[name])
        .property("delta.enableDeletionVectors", "false")
    )
    if name in _APPEND_ONLY:
        builder = builder.property("delta.appendOnly", "true")
    for key, value in (properties or {}).items():
        builder = builder.property(key, value)
    builder.execute()
    return True


def _set_properties(spark: SparkSession, name: str, uri: str, properties: Mapping[str, str]) -> None:
    """Give an existing table the ``properties`` it lacks or has with another value (read without Spark)."""
    current = LogReader(uri).metadata().configuration
    changed = {key: value for key, value in properties.items() if current.get(key) != value}
    if not changed:
        return
    listed = ", ".join(f"'{key}' = '{value}'" for key, value in changed.items())
    conflict_retrying()(spark.sql, f"ALTER TABLE delta.`{uri}` SET TBLPROPERTIES ({listed})")
    log.info("table %s: set %s", name, listed)


def append_rows(
    spark: SparkSession, data_dir: str | Path, name: str, rows: pa.Table, *, txn: tuple[str, int] | None = None
) -> None:
    """One Delta append of ``rows`` to table ``name``; with ``txn`` = (app id, version), Delta's idempotent write."""
    writer = spark.createDataFrame(rows).write.format("delta").mode("append")
    if txn is not None:
        writer = writer.option("txnAppId", txn[0]).option("txnVersion", str(txn[1]))
    writer.save(location(data_dir, name))


def read_delta(spark: SparkSession, data_dir: str | Path, name: str) -> DataFrame:
    """Table ``name`` read by Spark (``format("delta")``); TableError when there is no such table."""
    uri = location(data_dir, name)
    if not DeltaTable.isDeltaTable(spark, uri):
        raise TableError(name, f"no Delta table at {uri}")
    return spark.read.format("delta").load(uri)


def _check_schema(name: str, actual: StructType, expected: StructType) -> None:
    """Raise TableError naming the first column of an existing table that differs from Scrutiny's schema."""
    found = {field.name: field for field in actual.fields}
    for field in expected.fields:
        if field.name not in found:
            raise TableError(name, f"column {field.name!r} is missing")
        other = found[field.name]
        if other.dataType != field.dataType or other.nullable != field.nullable:
            raise TableError(
                name,
                f"column {field.name!r} is {other.dataType.simpleString()}{'' if other.nullable else ' not null'},"
                f" expected {field.dataType.simpleString()}{'' if field.nullable else ' not null'}",
            )
    extra = [n for n in found if n not in expected.names]
    if extra:
        raise TableError(name, f"column {extra[0]!r} is not Scrutiny's")


class CheckerTables:
    """The writer of the checker's tables for one stream (``app_id``); see the module docstring for its guarantees.

    Not thread-safe; one instance per driver.
    """

    def __init__(
        self,
        spark: SparkSession,
        data_dir: str | Path,
        *,
        app_id: str,
        conflict_attempts: int = DEFAULT_CONFLICT_ATTEMPTS,
        prefetch_state: bool = False,
        upkeep: TableUpkeep | None = None,
        runs_by_delta_rs: bool = False,
        findings_by_delta_rs: bool = False,
    ) -> None:
        if not app_id:
            raise ConfigError("app_id must not be empty")
        if conflict_attempts < 1:
            raise ConfigError(f"conflict_attempts must be at least 1, not {conflict_attempts}")
        self.spark = spark.newSession()
        self._merge_session = spark.newSession()  # holds the MERGE's transaction settings while it runs
        self.upkeep = upkeep or TableUpkeep()
        for session in (self.spark, self._merge_session):
            self.upkeep.apply_to(session)
        self.data_dir = data_dir
        self.app_id = app_id
        self._retrying = conflict_retrying(conflict_attempts)
        self._ready = False
        self._created: set[str] = set()
        # With prefetch_state, each table's state is rebuilt after its write, before the next batch asks for it.
        self.prefetch = StatePrefetch(self.spark) if prefetch_state else None
        #: The tables appended by delta-rs (:meth:`_append_light`); emptied when delta-rs fails once.
        self.light_tables: frozenset[str] = frozenset(
            (*(BOOKKEEPING_TABLES if runs_by_delta_rs else ()), *(FINDINGS_APPENDS if findings_by_delta_rs else ()))
        )

    def close(self) -> None:
        """Stop rebuilding the tables' state ahead of their writes (a no-op without ``prefetch_state``)."""
        if self.prefetch is not None:
            self.prefetch.close()

    def uri(self, name: str) -> str:
        """The location of table ``name``."""
        return location(self.data_dir, name)

    def ensure_tables(self) -> tuple[str, ...]:
        """Create the four tables if missing (empty, with their schema); check the others' schema; those created.

        ``rejected_events`` is created with its first row (most streams never have one).
        """
        properties = self.upkeep.properties()
        created = tuple(
            name for name in TABLE_NAMES if ensure_table(self.spark, self.data_dir, name, properties=properties)
        )
        if created:
            log.info("created Delta tables %s under %s", ", ".join(created), self.data_dir)
        self._ready = True
        return created

    def committed_batch(self, name: str) -> int | None:
        """The last batch id table ``name`` committed for this ``app_id``; None if none (or no table).

        Read from the table's log without Spark (delta-rs): the figure is for reports and logs; skipping a batch
        already written is Delta's own decision when the write runs.
        """
        uri = self.uri(name)
        if not LogReader.is_deltatable(uri):
            return None
        version: int | None = LogReader(uri).transaction_version(self.app_id)
        return version

    def last_batch_id(self) -> int | None:
        """The last batch fully written (``checker_runs`` is committed last), or None: for the startup log."""
        return self.committed_batch(CHECKER_RUNS)

    def write_batch(
        self,
        batch_id: int,
        output: pa.Table,
        run: RunRecord,
        *,
        rejected: Sequence[Mapping[str, object]] = (),
        ages: pa.Table | None = None,
    ) -> WriteResult:
        """Write batch ``batch_id`` to every table exactly once (tables that already hold it are skipped).

        ``rejected``: the batch's "rejected" records (records of the topic the checker could not use); ``ages``: the
        ``verification_ages`` rows, when the batch has some.

        Raises OutputSchemaError (nothing written) on bad output; an error mid-way leaves the committed tables
        committed, and calling again with the same batch completes the rest.
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
            REJECTED_EVENTS: rejected_event_rows(rejected, batch_id=batch_id, run_id=run.run_id),
            VERIFICATION_AGES: ages if ages is not None else VERIFICATION_AGES_SCHEMA.empty_table(),
            CHECKER_RUNS: run_rows(run, batch_id=batch_id),
        }
        if not self._ready:
            self.ensure_tables()
        first, last = WRITTEN_TABLES[:-1], WRITTEN_TABLES[-1]
        with ThreadPoolExecutor(max_workers=len(first), thread_name_prefix="delta-write") as pool:
            pending = [pool.submit(self._write_table, name, rows[name], batch_id) for name in first]
            writes = [future.result() for future in pending]  # the first error is raised once all have ended
        return WriteResult(batch_id, (*writes, self._write_table(last, rows[last], batch_id)))

    def _write_table(self, name: str, rows: pa.Table, batch_id: int) -> TableWrite:
        """Write one table's rows (those of :attr:`light_tables` by delta-rs: :meth:`_append_light`)."""
        if not rows.num_rows and name != CHECKER_RUNS:
            return TableWrite(name, WriteOutcome.EMPTY)  # a re-run that finds rows here never wrote them before
        if name in CREATED_ON_FIRST_ROW and name not in self._created:
            ensure_table(self.spark, self.data_dir, name, properties=self.upkeep.properties())
            self._created.add(name)
        if name in self.light_tables:
            appended = self._append_light(name, rows, batch_id)  # reads the app's record itself
            if appended is not None:
                outcome = WriteOutcome.WRITTEN if appended else WriteOutcome.SKIPPED
                return TableWrite(name, outcome, rows=rows.num_rows if appended else 0)
        done = self.committed_batch(name)
        held = done is not None and done >= batch_id
        if done is not None and done > batch_id:
            log.warning(
                "table %s already holds batch %d of app %s; older batch %d is skipped (a new checkpoint needs a new"
                " app_id)",
                name,
                done,
                self.app_id,
                batch_id,
            )
        if name == OPEN_VIOLATIONS:
            inserted, updated = self._retrying(self._merge_open_violations, rows, batch_id)
        else:
            self._retrying(append_rows, self.spark, self.data_dir, name, rows, txn=(self.app_id, batch_id))
            inserted, updated = rows.num_rows, 0
        if self.prefetch is not None:
            self.prefetch.request(self.uri(name))
        if held:
            return TableWrite(name, WriteOutcome.SKIPPED)
        return TableWrite(name, WriteOutcome.WRITTEN, rows=rows.num_rows, inserted=inserted, updated=updated)

    def _append_light(self, name: str, rows: pa.Table, batch_id: int) -> bool | None:
        """A batch's rows of one of :attr:`light_tables`, appended by delta-rs.

        A one-row idempotent append costs Delta on Spark about a second of CPU (the table's state rebuilt, then the
        write's and the commit's Spark jobs), delta-rs a few hundredths, with the same idempotent-write record: see
        :mod:`scrutiny.connectors.tables.light_append`. True: written; False: already held; None: write it through
        Spark (a data directory that is not local, the table's protocol, as many files as auto compaction waits for,
        or delta-rs failed once: from then on this writer leaves every row to Spark, which records or skips it as
        Delta decides).
        """
        if not is_local(self.data_dir):
            return None
        max_files = self.upkeep.compact_min_files or None
        try:
            return append_once(self.uri(name), rows, app_id=self.app_id, version=batch_id, max_files=max_files)
        except (DeltaError, OSError, pa.ArrowException) as error:
            self.light_tables = frozenset()
            log.warning("delta-rs could not append to %s (%s): all rows go through Spark from now on", name, error)
            return None

    def _merge_open_violations(self, changes: pa.Table, batch_id: int) -> tuple[int, int]:
        """MERGE the batch's folded changes (never empty here); (rows inserted, rows updated), (0, 0) when skipped."""
        merge = OPEN_VIOLATIONS_MERGE
        session = self._merge_session
        source = session.createDataFrame(changes).alias("s")
        target = DeltaTable.forPath(session, self.uri(OPEN_VIOLATIONS)).alias("t")
        conf = session.conf
        conf.set(TXN_APP_ID_CONF, self.app_id)
        conf.set(TXN_VERSION_CONF, str(batch_id))
        try:
            metrics = (
                target.merge(source, merge.predicate)
                .whenMatchedUpdate(condition=merge.refresh_when, set=dict(merge.refresh))
                .whenMatchedUpdate(condition=merge.resolve_when, set=dict(merge.resolve))
                .whenNotMatchedInsert(condition=merge.insert_when, values=dict(merge.insert))
                .execute()
                .collect()
            )
        finally:
            conf.unset(TXN_APP_ID_CONF)
            conf.unset(TXN_VERSION_CONF)
        if not metrics:  # Delta skipped the MERGE: this batch was already in the table
            return 0, 0
        row = metrics[0].asDict()
        return int(row.get("num_inserted_rows") or 0), int(row.get("num_updated_rows") or 0)


def is_local(data_dir: str | Path) -> bool:
    """Whether ``data_dir`` is on this machine's file system (a path or a ``file:`` URI), not an object store's."""
    return urlsplit(str(data_dir)).scheme in ("", "file")


def conflict_retrying(attempts: int = DEFAULT_CONFLICT_ATTEMPTS) -> Retrying:
    """Calls a write, trying it again (``attempts`` times in all) while it meets another writer's commit, waiting a
    random, growing time (0.2 s up to 5 s) between tries."""
    return Retrying(
        retry=retry_if_exception_type(CONFLICTS),
        stop=stop_after_attempt(attempts),
        wait=wait_random_exponential(multiplier=0.2, max=5.0),
        before_sleep=_log_conflict,
        reraise=True,
    )


def _log_conflict(state: RetryCallState) -> None:
    error = state.outcome.exception() if state.outcome is not None else None
    reason = str(error).split("\n", 1)[0] if error is not None else "a concurrent commit"
    log.info("write conflict, trying again (attempt %d): %s", state.attempt_number + 1, reason[:300])
