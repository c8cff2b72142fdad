"""The checker's output records and the four Delta tables: schemas, validation, and one batch's rows per table.

Everything here is pure (pyarrow in memory, no files); :mod:`scrutiny.connectors.tables.delta` does the I/O.

* :data:`OUTPUT_SCHEMA` is what the streaming checker (and the scan) hands the writer per micro-batch: one row per
  record, ``record`` = ``violation`` | ``resolved`` | ``check``. :func:`conform_output` checks a table against it
  before anything is written and raises :class:`OutputSchemaError` naming the column (and the row, for a bad value).
* :data:`VIOLATIONS_SCHEMA`, :data:`OPEN_VIOLATIONS_SCHEMA`, :data:`LEDGER_CHECKS_SCHEMA` and
  :data:`CHECKER_RUNS_SCHEMA` are the tables' schemas (docs/tables.md documents every column).
* :func:`violation_rows`, :func:`ledger_check_rows`, :func:`open_violation_changes` and :func:`run_rows` map one
  conformed batch onto each table. :func:`open_violation_changes` folds several records of one key into one source
  row with the effect of applying them in order, since a MERGE needs unique source keys.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any, Final

import pyarrow as pa
import pyarrow.compute as pc

from scrutiny.core.errors import ScrutinyError
from scrutiny.core.verdict import VerdictKind
from scrutiny.core.vocabulary import Category, Severity

VIOLATIONS: Final = "violations"
OPEN_VIOLATIONS: Final = "open_violations"
LEDGER_CHECKS: Final = "ledger_checks"
CHECKER_RUNS: Final = "checker_runs"
#: The four tables, in the order the writer commits them (``checker_runs`` last: the "batch done" marker).
TABLE_NAMES: Final = (VIOLATIONS, LEDGER_CHECKS, OPEN_VIOLATIONS, CHECKER_RUNS)
#: The tables that only ever receive appends (created with ``delta.appendOnly=true``).
APPEND_TABLES: Final = (VIOLATIONS, LEDGER_CHECKS, CHECKER_RUNS)

#: The key of ``open_violations``; ``bookie`` and ``segment_first_entry`` are null for ledger-level categories.
OPEN_VIOLATION_KEY: Final = ("ledger_id", "category", "bookie", "segment_first_entry")

SOURCES: Final = ("stream", "scan")
UTC_TIMESTAMP: Final = pa.timestamp("us", tz="UTC")
_UTC_ALIASES: Final = frozenset({"UTC", "Etc/UTC", "+00:00", "Z", "utc"})
_STRING_ALIASES: Final = (pa.large_string(), pa.string_view())
_ONE_MS: Final = timedelta(milliseconds=1)


class RecordKind(StrEnum):
    """What one checker output row is."""

    VIOLATION = "violation"
    RESOLVED = "resolved"
    CHECK = "check"


class OutputSchemaError(ScrutinyError, ValueError):
    """Checker output or a run record that does not fit the schema; ``column`` names the culprit.

    ``row`` is the index of the first offending row when the problem is a value rather than a type.
    """

    def __init__(self, column: str, reason: str, *, row: int | None = None, what: str = "checker output") -> None:
        self.column = column
        self.reason = reason
        self.row = row
        where = f" (row {row})" if row is not None else ""
        super().__init__(f"{what} column {column!r}{where}: {reason}")


def _field(name: str, kind: pa.DataType, *, nullable: bool = True) -> pa.Field:
    return pa.field(name, kind, nullable=nullable)


_VIOLATION_EVIDENCE: Final = (
    _field("bookie", pa.string()),
    _field("segment_first_entry", pa.int64()),
    _field("entries", pa.string()),
    _field("entry_count", pa.int64()),
    _field("first_entry", pa.int64()),
    _field("last_entry", pa.int64()),
    _field("metadata_version", pa.int64()),
    _field("ensemble", pa.string()),
    _field("ensemble_size", pa.int32()),
    _field("write_quorum", pa.int32()),
    _field("ack_quorum", pa.int32()),
    _field("ledger_state", pa.string()),
    _field("pulsar_topic", pa.string()),
    _field("details", pa.string()),
)

OUTPUT_SCHEMA: Final = pa.schema(
    [
        _field("record", pa.string(), nullable=False),
        _field("ledger_id", pa.int64(), nullable=False),
        _field("at", UTC_TIMESTAMP, nullable=False),
        _field("category", pa.string()),
        _field("severity", pa.string()),
        *_VIOLATION_EVIDENCE,
        _field("verdict", pa.string()),
        _field("latency_ms", pa.int64()),
        _field("bookies_asked", pa.int32()),
        _field("retries", pa.int32()),
        _field("violation_count", pa.int32()),
        _field("source", pa.string()),
    ]
)

VIOLATIONS_SCHEMA: Final = pa.schema(
    [
        _field("ledger_id", pa.int64(), nullable=False),
        _field("category", pa.string(), nullable=False),
        _field("severity", pa.string(), nullable=False),
        *_VIOLATION_EVIDENCE,
        _field("detected_at", UTC_TIMESTAMP, nullable=False),
        _field("batch_id", pa.int64(), nullable=False),
        _field("source", pa.string(), nullable=False),
    ]
)

OPEN_VIOLATIONS_SCHEMA: Final = pa.schema(
    [
        _field("ledger_id", pa.int64(), nullable=False),
        _field("category", pa.string(), nullable=False),
        _field("bookie", pa.string()),
        _field("segment_first_entry", pa.int64()),
        _field("severity", pa.string(), nullable=False),
        _field("entry_count", pa.int64()),
        _field("details", pa.string()),
        _field("pulsar_topic", pa.string()),
        _field("first_seen", UTC_TIMESTAMP, nullable=False),
        _field("last_seen", UTC_TIMESTAMP, nullable=False),
        _field("resolved_at", UTC_TIMESTAMP),
        _field("batch_id", pa.int64(), nullable=False),
        _field("source", pa.string(), nullable=False),
    ]
)

LEDGER_CHECKS_SCHEMA: Final = pa.schema(
    [
        _field("ledger_id", pa.int64(), nullable=False),
        _field("checked_at", UTC_TIMESTAMP, nullable=False),
        _field("verdict", pa.string(), nullable=False),
        _field("ledger_state", pa.string()),
        _field("metadata_version", pa.int64()),
        _field("latency_ms", pa.int64()),
        _field("bookies_asked", pa.int32()),
        _field("retries", pa.int32()),
        _field("violation_count", pa.int32()),
        _field("batch_id", pa.int64(), nullable=False),
        _field("source", pa.string(), nullable=False),
    ]
)

CHECKER_RUNS_SCHEMA: Final = pa.schema(
    [
        _field("run_id", pa.string(), nullable=False),
        _field("batch_id", pa.int64(), nullable=False),
        _field("started_at", UTC_TIMESTAMP, nullable=False),
        _field("finished_at", UTC_TIMESTAMP, nullable=False),
        _field("duration_ms", pa.int64(), nullable=False),
        _field("events", pa.int64(), nullable=False),
        _field("ledgers_checked", pa.int64(), nullable=False),
        _field("violations", pa.int64(), nullable=False),
        _field("resolved", pa.int64(), nullable=False),
        _field("rpcs", pa.int64(), nullable=False),
        _field("retries_pending", pa.int64(), nullable=False),
        _field("lag_records", pa.int64()),
        _field("source", pa.string(), nullable=False),
    ]
)

TABLE_SCHEMAS: Final[Mapping[str, pa.Schema]] = {
    VIOLATIONS: VIOLATIONS_SCHEMA,
    LEDGER_CHECKS: LEDGER_CHECKS_SCHEMA,
    OPEN_VIOLATIONS: OPEN_VIOLATIONS_SCHEMA,
    CHECKER_RUNS: CHECKER_RUNS_SCHEMA,
}

#: The fix's record (``scrutiny scan --fix``, written by :mod:`scrutiny.connectors.zookeeper.marks`; docs/fix.md).
REPAIR_ACTIONS: Final = "repair_actions"
REPAIR_ACTIONS_SCHEMA: Final = pa.schema(
    [
        _field("run_id", pa.string(), nullable=False),
        _field("ledger_id", pa.int64(), nullable=False),
        _field("action", pa.string(), nullable=False),
        _field("missing_bookies", pa.list_(pa.field("element", pa.string(), nullable=False)), nullable=False),
        _field("path", pa.string(), nullable=False),
        _field("reason", pa.string()),
        _field("at", UTC_TIMESTAMP, nullable=False),
    ]
)
#: The records of the topic the streaming checker could not use (docs/tables.md), written with each batch.
REJECTED_EVENTS: Final = "rejected_events"
REJECTED_EVENTS_SCHEMA: Final = pa.schema(
    [
        _field("rejected_at", UTC_TIMESTAMP, nullable=False),
        _field("kafka_partition", pa.int32(), nullable=False),
        _field("kafka_offset", pa.int64(), nullable=False),
        _field("kafka_key", pa.string()),
        _field("reason", pa.string(), nullable=False),
        _field("details", pa.string(), nullable=False),
        _field("value_bytes", pa.int64(), nullable=False),
        _field("value_head", pa.string(), nullable=False),
        _field("batch_id", pa.int64(), nullable=False),
        _field("run_id", pa.string(), nullable=False),
    ]
)
#: The streaming checker's count of ledgers by the age of their last verification (docs/tables.md), written every
#: ``checker.verification_ages_seconds``: one row per age class.
VERIFICATION_AGES: Final = "verification_ages"
VERIFICATION_AGES_SCHEMA: Final = pa.schema(
    [
        _field("at", UTC_TIMESTAMP, nullable=False),
        _field("age_class", pa.string(), nullable=False),
        _field("age_from_seconds", pa.float64(), nullable=False),
        _field("age_to_seconds", pa.float64()),
        _field("ledgers", pa.int64(), nullable=False),
        _field("overdue", pa.bool_(), nullable=False),
        _field("oldest_verification", UTC_TIMESTAMP),
        _field("batch_id", pa.int64(), nullable=False),
        _field("run_id", pa.string(), nullable=False),
    ]
)
#: The first sightings of ledgers a bookie holds without metadata (docs/tables.md), kept by the deep scan's survey:
#: one row per (bookie, ledger) until the ledger is no longer held without metadata. ``ORPHAN_LEDGER``'s grace runs
#: from ``first_seen``.
ORPHAN_SIGHTINGS: Final = "orphan_sightings"
ORPHAN_SIGHTINGS_SCHEMA: Final = pa.schema(
    [
        _field("bookie", pa.string(), nullable=False),
        _field("ledger_id", pa.int64(), nullable=False),
        _field("first_seen", UTC_TIMESTAMP, nullable=False),
    ]
)
#: The tables the checker's writer commits per batch, in order (``checker_runs`` last: the "batch done" marker).
WRITTEN_TABLES: Final = (VIOLATIONS, LEDGER_CHECKS, OPEN_VIOLATIONS, REJECTED_EVENTS, VERIFICATION_AGES, CHECKER_RUNS)
#: Tables created with their first row (most data directories never have one, or not at first).
CREATED_ON_FIRST_ROW: Final = (REJECTED_EVENTS, VERIFICATION_AGES)
#: Every table a reader may ask for by name: the checker's four, the rejected records, the verification ages, the
#: fix's record and the orphan sightings.
READABLE_SCHEMAS: Final[Mapping[str, pa.Schema]] = {
    **TABLE_SCHEMAS,
    REJECTED_EVENTS: REJECTED_EVENTS_SCHEMA,
    VERIFICATION_AGES: VERIFICATION_AGES_SCHEMA,
    REPAIR_ACTIONS: REPAIR_ACTIONS_SCHEMA,
    ORPHAN_SIGHTINGS: ORPHAN_SIGHTINGS_SCHEMA,
}

#: The MERGE source of ``open_violations``: one row per key with the batch's net effect on it.
#: ``has_violation`` false means "resolve the open row, if any"; ``first_seen`` is used only on insert.
OPEN_CHANGES_SCHEMA: Final = pa.schema(
    [
        *(OPEN_VIOLATIONS_SCHEMA.field(name) for name in OPEN_VIOLATION_KEY),
        _field("has_violation", pa.bool_(), nullable=False),
        _field("severity", pa.string()),
        _field("entry_count", pa.int64()),
        _field("details", pa.string()),
        _field("pulsar_topic", pa.string()),
        _field("first_seen", UTC_TIMESTAMP),
        _field("last_seen", UTC_TIMESTAMP),
        _field("resolved_at", UTC_TIMESTAMP),
        _field("batch_id", pa.int64(), nullable=False),
        _field("source", pa.string(), nullable=False),
    ]
)


@dataclass(frozen=True, slots=True)
class MergeSpec:
    """A MERGE of a source ``s`` into a target ``t``: its match predicate and its three clauses (Spark SQL text)."""

    predicate: str
    refresh_when: str
    refresh: Mapping[str, str]
    resolve_when: str
    resolve: Mapping[str, str]
    insert_when: str
    insert: Mapping[str, str]


#: The MERGE of a batch's folded changes (OPEN_CHANGES_SCHEMA) into ``open_violations``; NULL-safe on bookie and
#: segment. A violation refreshes (or reopens) its row or inserts one; a resolution closes an open row only.
OPEN_VIOLATIONS_MERGE: Final = MergeSpec(
    predicate=(
        "t.ledger_id = s.ledger_id AND t.category = s.category"
        " AND (t.bookie IS NOT DISTINCT FROM s.bookie)"
        " AND (t.segment_first_entry IS NOT DISTINCT FROM s.segment_first_entry)"
    ),
    refresh_when="s.has_violation",
    refresh={
        name: f"s.{name}"
        for name in (
            "last_seen",
            "severity",
            "entry_count",
            "details",
            "pulsar_topic",
            "resolved_at",
            "batch_id",
            "source",
        )
    },
    resolve_when="(NOT s.has_violation) AND (t.resolved_at IS NULL)",
    resolve={name: f"s.{name}" for name in ("resolved_at", "batch_id", "source")},
    insert_when="s.has_violation",
    insert={name: f"s.{name}" for name in OPEN_VIOLATIONS_SCHEMA.names},
)

_CATEGORIES: Final = tuple(c.value for c in Category)
_SEVERITIES: Final = tuple(s.value for s in Severity)
_VERDICTS: Final = tuple(v.value for v in VerdictKind)
_RECORDS: Final = tuple(r.value for r in RecordKind)
#: The record kinds that carry a finding of an ``open_violations`` key.
_FINDING_RECORDS: Final = pa.array([RecordKind.VIOLATION.value, RecordKind.RESOLVED.value])


@dataclass(frozen=True, slots=True)
class RunRecord:
    """The figures of one micro-batch (or one scan) for ``checker_runs``; times are timezone-aware.

    ``duration_ms`` is derived from the two times (never negative). ``lag_records`` is None when unknown.
    """

    run_id: str
    started_at: datetime
    finished_at: datetime
    events: int = 0
    ledgers_checked: int = 0
    violations: int = 0
    resolved: int = 0
    rpcs: int = 0
    retries_pending: int = 0
    lag_records: int | None = None
    source: str = "stream"

    def __post_init__(self) -> None:
        if not self.run_id:
            raise OutputSchemaError("run_id", "must not be empty", what="run record")
        for name in ("started_at", "finished_at"):
            moment = getattr(self, name)
            if not isinstance(moment, datetime) or moment.utcoffset() is None:
                raise OutputSchemaError(name, "must be a timezone-aware datetime", what="run record")
        if self.source not in SOURCES:
            raise OutputSchemaError("source", f"{self.source!r} is not one of {list(SOURCES)}", what="run record")

    @property
    def duration_ms(self) -> int:
        """Milliseconds from start to finish, 0 if the clock went backwards."""
        return max(0, (self.finished_at - self.started_at) // _ONE_MS)


def empty_output() -> pa.Table:
    """A checker output table with no rows."""
    return OUTPUT_SCHEMA.empty_table()


def output_table(rows: Sequence[Mapping[str, object]]) -> pa.Table:
    """A checker output table from dicts (missing keys are null); an unknown key raises OutputSchemaError."""
    known = set(OUTPUT_SCHEMA.names)
    for index, row in enumerate(rows):
        unknown = sorted(set(row) - known)
        if unknown:
            raise OutputSchemaError(unknown[0], "is not a column of the checker output", row=index)
    try:
        table = pa.Table.from_pylist([dict(row) for row in rows], schema=OUTPUT_SCHEMA)
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError) as error:
        raise OutputSchemaError("?", f"rows do not convert: {error}") from error
    return conform_output(table)


def conform_output(table: pa.Table | pa.RecordBatch) -> pa.Table:
    """``table`` checked against OUTPUT_SCHEMA and returned in its exact types and column order.

    Runs before anything is written. Accepted besides the exact types: any column order, ``large_string`` /
    ``string_view`` for strings, a UTC alias (``Etc/UTC``, ``+00:00``) for the timestamp's zone, and nullable flags
    on the first three columns as long as they hold no null (Spark marks every column nullable). Raises
    :class:`OutputSchemaError` for a missing, extra or mistyped column, a null where none may be, and a value
    outside the vocabulary (record kind, category, severity, verdict, source) or missing for its record kind.
    """
    if isinstance(table, pa.RecordBatch):
        table = pa.Table.from_batches([table])
    if not isinstance(table, pa.Table):
        raise OutputSchemaError("*", f"expected a pyarrow Table, got {type(table).__name__}")
    if len(set(table.schema.names)) != len(table.schema.names):
        duplicate = next(name for name in table.schema.names if table.schema.names.count(name) > 1)
        raise OutputSchemaError(duplicate, "appears more than once")
    columns = [_conform_column(table, field) for field in OUTPUT_SCHEMA]
    extra = [name for name in table.schema.names if OUTPUT_SCHEMA.get_field_index(name) < 0]
    if extra:
        raise OutputSchemaError(extra[0], "is not a column of the checker output")
    conformed = pa.Table.from_arrays(columns, schema=OUTPUT_SCHEMA)
    _check_values(conformed)
    return conformed


def _conform_column(table: pa.Table, expected: pa.Field) -> pa.ChunkedArray:
    index = table.schema.get_field_index(expected.name)
    if index < 0:
        raise OutputSchemaError(expected.name, f"is missing (expected {expected.type})")
    column = table.column(index)
    actual = column.type
    if actual == expected.type:
        return column
    if expected.type == pa.string() and any(actual == alias for alias in _STRING_ALIASES):
        return column.cast(pa.string())
    if (
        pa.types.is_timestamp(actual)
        and actual.unit == expected.type.unit
        and actual.tz in _UTC_ALIASES
        and expected.type.tz == "UTC"
    ):
        return column.cast(expected.type)
    raise OutputSchemaError(expected.name, f"has type {actual}, expected {expected.type}")


def _check_values(table: pa.Table) -> None:
    for field in OUTPUT_SCHEMA:
        if not field.nullable:
            _require(table, field.name, pc.is_valid(table[field.name]), "must not be null")
    _require_in(table, "record", _RECORDS)
    _require_in(table, "source", SOURCES, allow_null=True)
    record = table["record"]
    finding = pc.is_in(record, value_set=_FINDING_RECORDS)
    _require_in(table, "category", _CATEGORIES, rows=finding, label="violation and resolved records")
    _require_in(table, "severity", _SEVERITIES, rows=pc.equal(record, "violation"), label="violation records")
    _require_in(table, "verdict", _VERDICTS, rows=pc.equal(record, "check"), label="check records")


def _require_in(
    table: pa.Table,
    column: str,
    allowed: Sequence[str],
    *,
    rows: pa.ChunkedArray | None = None,
    label: str = "",
    allow_null: bool = False,
) -> None:
    """Values of ``column`` must be in ``allowed`` (only on ``rows``, when given); nulls only if ``allow_null``."""
    values = table[column]
    ok = pc.fill_null(pc.is_in(values, value_set=pa.array(allowed, pa.string())), False)
    if allow_null:
        ok = pc.or_(ok, pc.is_null(values))
    if rows is not None:
        ok = pc.or_(ok, pc.invert(rows))
    scope = f" for {label}" if label else ""
    _require(table, column, ok, f"must be one of {list(allowed)}{scope}")


def _require(table: pa.Table, column: str, ok: pa.ChunkedArray, reason: str) -> None:
    row = _first_false(ok)
    if row is not None:
        value = table[column][row].as_py()
        raise OutputSchemaError(column, f"{reason}, got {value!r}", row=row)


def _first_false(mask: pa.ChunkedArray) -> int | None:
    bad = pc.indices_nonzero(pc.invert(mask))
    return int(bad[0].as_py()) if len(bad) else None


def violation_rows(output: pa.Table, *, batch_id: int, source: str) -> pa.Table:
    """The ``violations`` rows of a conformed batch: its ``violation`` records, in order."""
    rows = output.filter(pc.equal(output["record"], RecordKind.VIOLATION.value))
    return _project(rows, VIOLATIONS_SCHEMA, {"detected_at": "at"}, batch_id=batch_id, source=source)


def ledger_check_rows(output: pa.Table, *, batch_id: int, source: str) -> pa.Table:
    """The ``ledger_checks`` rows of a conformed batch: its ``check`` records, in order."""
    rows = output.filter(pc.equal(output["record"], RecordKind.CHECK.value))
    return _project(rows, LEDGER_CHECKS_SCHEMA, {"checked_at": "at"}, batch_id=batch_id, source=source)


def _project(rows: pa.Table, schema: pa.Schema, renames: Mapping[str, str], *, batch_id: int, source: str) -> pa.Table:
    count = rows.num_rows
    columns: list[Any] = []
    for field in schema:
        if field.name == "batch_id":
            columns.append(pa.array([batch_id] * count, pa.int64()))
        elif field.name == "source":
            columns.append(pc.fill_null(rows["source"], source))
        else:
            columns.append(rows[renames.get(field.name, field.name)])
    return pa.Table.from_arrays(columns, schema=schema)


@dataclass(slots=True)
class _KeyChange:
    """The net effect of one key's records in one batch, built by applying them in order."""

    key: tuple[object, ...]
    source: str
    has_violation: bool = False
    first_seen: datetime | None = None
    last_seen: datetime | None = None
    severity: str | None = None
    entry_count: int | None = None
    details: str | None = None
    pulsar_topic: str | None = None
    resolved_at: datetime | None = None

    def apply(self, row: Mapping[str, Any], source: str) -> None:
        self.source = source
        if row["record"] == RecordKind.RESOLVED:
            if self.resolved_at is None:  # a later "resolved" finds the row already closed
                self.resolved_at = row["at"]
            return
        if not self.has_violation:
            self.first_seen = row["at"]
        self.has_violation = True
        self.last_seen = row["at"]
        self.severity = row["severity"]
        self.entry_count = row["entry_count"]
        self.details = row["details"]
        self.pulsar_topic = row["pulsar_topic"]
        self.resolved_at = None  # a violation after a resolution re-opens the row

    def as_row(self, batch_id: int) -> dict[str, object]:
        row: dict[str, object] = dict(zip(OPEN_VIOLATION_KEY, self.key, strict=True))
        row.update(
            has_violation=self.has_violation,
            severity=self.severity,
            entry_count=self.entry_count,
            details=self.details,
            pulsar_topic=self.pulsar_topic,
            first_seen=self.first_seen,
            last_seen=self.last_seen,
            resolved_at=self.resolved_at,
            batch_id=batch_id,
            source=self.source,
        )
        return row


def open_violation_changes(output: pa.Table, *, batch_id: int, source: str) -> pa.Table:
    """One MERGE source row per ``open_violations`` key (OPEN_CHANGES_SCHEMA), the batch's records applied in order.

    For a key, ``has_violation`` says whether any ``violation`` record came; ``first_seen`` is the first of them
    (used only when the row is new), ``last_seen`` / severity / count / details the last; ``resolved_at`` is the
    first ``resolved`` after the last violation (null when a violation came last). Keys keep first-appearance order.
    """
    wanted = ["record", *OPEN_VIOLATION_KEY, "at", "severity", "entry_count", "details", "pulsar_topic", "source"]
    findings = output.filter(pc.is_in(output["record"], value_set=_FINDING_RECORDS)).select(wanted)
    changes: dict[tuple[object, ...], _KeyChange] = {}
    for row in findings.to_pylist():
        key = tuple(row[name] for name in OPEN_VIOLATION_KEY)
        row_source = row["source"] or source
        change = changes.setdefault(key, _KeyChange(key, row_source))
        change.apply(row, row_source)
    return pa.Table.from_pylist([c.as_row(batch_id) for c in changes.values()], schema=OPEN_CHANGES_SCHEMA)


def run_rows(run: RunRecord, *, batch_id: int) -> pa.Table:
    """The one ``checker_runs`` row of a batch."""
    row = {
        "run_id": run.run_id,
        "batch_id": batch_id,
        "started_at": run.started_at,
        "finished_at": run.finished_at,
        "duration_ms": run.duration_ms,
        "events": run.events,
        "ledgers_checked": run.ledgers_checked,
        "violations": run.violations,
        "resolved": run.resolved,
        "rpcs": run.rpcs,
        "retries_pending": run.retries_pending,
        "lag_records": run.lag_records,
        "source": run.source,
    }
    return pa.Table.from_pylist([row], schema=CHECKER_RUNS_SCHEMA)


def rejected_event_rows(records: Sequence[Mapping[str, object]], *, batch_id: int, run_id: str) -> pa.Table:
    """The ``rejected_events`` rows of a batch's "rejected" records (the fetch stage's JSON, widened)."""
    names = [f.name for f in REJECTED_EVENTS_SCHEMA if f.name not in ("rejected_at", "batch_id", "run_id")]
    rows = [
        {"rejected_at": r["at"], **{n: r.get(n) for n in names}, "batch_id": batch_id, "run_id": run_id}
        for r in records
    ]
    return pa.Table.from_pylist(rows, schema=REJECTED_EVENTS_SCHEMA)


def violation_records(table: pa.Table) -> list[dict[str, object]]:
    """``violations`` rows as JSON-ready records (conf/schemas/violation.schema.json).

    ``entries`` and ``ensemble`` are parsed from their JSON text; ``detected_at`` becomes an RFC 3339 string.
    """
    records: list[dict[str, object]] = []
    for row in table.to_pylist():
        record: dict[str, object] = dict(row)
        for name in ("entries", "ensemble"):
            text = row[name]
            record[name] = json.loads(text) if text is not None else None
        record["detected_at"] = row["detected_at"].isoformat().replace("+00:00", "Z")
        records.append(record)
    return records
