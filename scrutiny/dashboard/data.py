"""The dashboard's data: one snapshot of the Delta tables, read through the SQL views, as plain Python values.

:func:`load_snapshot` opens a fresh :class:`~scrutiny.connectors.tables.sql.SqlEngine` over the data directory (so
tables that appeared since the last call are seen, and every figure is the one ``scrutiny sql`` shows for the same
view), runs the queries of each section and returns a :class:`~.dashboard_snapshot.Snapshot`. It never raises on the
tables' content or state: a section whose table does not exist yet, or cannot be read right now (a file vacuumed
between listing and reading, a commit in progress), is ``None`` ("no data yet") and the reason, when it is not just a
missing table, is in :attr:`~.dashboard_snapshot.Snapshot.problems`. Only :func:`check_data_dir`, run once at start,
raises (:class:`DashboardDataError`).

Sections and their sources:

* overview and worst ledgers: the open rows of ``open_violations``, summarized and ranked by
  :mod:`scrutiny.core.health_summary` exactly as ``scrutiny report`` does; each worst ledger's evidence (ensemble,
  quorums, the entries each bookie misses) comes from its latest ``violations`` rows;
* categories, bookies, under-replication, coverage, verification ages, latency, checker health: the shipped views
  ``open_violations_by_category``, ``violations_per_bookie``, ``under_replication_age``, ``check_coverage``,
  ``verification_age``, ``detection_latency`` and ``checker_health`` (docs/sql.md), each row becoming the section's
  dataclass field by field (a column per field, converted by the field's declared type);
* timeline: first detections and resolutions per time bucket from ``open_violations.first_seen`` / ``resolved_at``
  (or, without that table, ``violations.detected_at``); recent batches: ``checker_runs`` of the streaming job.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import json
import logging
import typing
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Final, TypeVar

import duckdb
import pyarrow as pa
from deltalake.exceptions import DeltaError

from scrutiny.connectors.tables.health import TableMissingError, read_open_violations
from scrutiny.connectors.tables.schemas import OPEN_VIOLATIONS, VIOLATIONS
from scrutiny.connectors.tables.sql import MissingTableError, QueryResult, SqlEngine
from scrutiny.core.errors import ScrutinyError
from scrutiny.core.health_summary import (
    DEFAULT_STALL_AFTER_MS,
    DEFAULT_WORST,
    LedgerFindings,
    summarize,
)
from scrutiny.core.sequence_groups import SequenceGroup
from scrutiny.core.vocabulary import Category
from scrutiny.dashboard.snapshot import (
    BookieHealth,
    CategoryCount,
    CheckerHealth,
    ClusterFinding,
    Coverage,
    DashboardSnapshot,
    Latency,
    MissingReplica,
    Overview,
    RunPoint,
    Segment,
    StuckLedger,
    Timeline,
    VerificationAge,
    WorstLedger,
)

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

__all__ = [
    "DashboardDataError",
    "bucket_seconds",
    "check_data_dir",
    "entry_ranges",
    "load_snapshot",
]

log = logging.getLogger(__name__)

#: How far back the timeline looks at most.
TIMELINE_WINDOW: Final = timedelta(days=7)
#: Bucket widths the timeline may use (seconds), the narrowest giving at most TIMELINE_MAX_BUCKETS buckets.
TIMELINE_BUCKETS: Final = (60, 300, 900, 1800, 3600, 3 * 3600, 6 * 3600, 12 * 3600, 86_400)
TIMELINE_MAX_BUCKETS: Final = 72
#: Recent batches drawn in the checker chart.
RECENT_RUNS: Final = 120
#: Sequence groups spelled out per missing replica before "+N more".
RANGE_GROUPS_SHOWN: Final = 4
_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)

#: What a read of a table can fail with while the streaming job writes (besides a missing table).
_READ_ERRORS: Final = (ScrutinyError, DeltaError, OSError, pa.ArrowException, duckdb.Error, ValueError, TypeError)
_T = TypeVar("_T")
_Row = TypeVar("_Row", bound="DataclassInstance")


class DashboardDataError(ScrutinyError):
    """The data directory cannot be served: it does not exist, or holds none of the checker's tables."""


# ----------------------------------------------------------------------------------------------- loading


def check_data_dir(data_dir: str | Path) -> tuple[str, ...]:
    """The checker's tables missing from ``data_dir`` (the page shows "no data yet" for them until they appear).

    Raises DashboardDataError (one line) when the directory does not exist or holds none of the tables.
    """
    text = str(data_dir)
    if "://" not in text and not Path(text).is_dir():
        raise DashboardDataError(
            f"data directory {text} does not exist (give --data-dir, or set [checker] data_dir in the configuration)"
        )
    try:
        with SqlEngine(text) as engine:
            return engine.missing_tables
    except ScrutinyError as error:
        raise DashboardDataError(
            f"{error} (start the streaming job or a scan first: it creates them; or give --data-dir)"
        ) from error


def load_snapshot(
    data_dir: str | Path,
    *,
    now: datetime | None = None,
    worst: int = DEFAULT_WORST,
    stall_after_ms: int = DEFAULT_STALL_AFTER_MS,
) -> DashboardSnapshot:
    """Every section read from the tables of ``data_dir`` as of ``now`` (default: the current time).

    Runs on each refresh of the page. Never raises on the tables' state: a section that cannot be read is None and,
    unless its table is just missing, its reason is in ``problems``.
    """
    moment = (now or datetime.now(UTC)).astimezone(UTC)
    problems: list[str] = []
    try:
        engine = SqlEngine(str(data_dir), now=moment)
    except _READ_ERRORS as error:
        return DashboardSnapshot(str(data_dir), moment, problems=(_one_line(str(error)),))

    def section(name: str, read: Callable[[], _T]) -> _T | None:
        try:
            return read()
        except (MissingTableError, TableMissingError):
            return None
        except _READ_ERRORS as error:
            log.info("dashboard section %s cannot be read now: %s", name, error)
            problems.append(f"{name}: {_one_line(str(error))}")
            return None

    with engine:
        opened = section("open violations", lambda: _open_summary(str(data_dir), worst))
        overview, cluster, ranked = opened if opened is not None else (None, None, None)
        worst_ledgers = None if ranked is None else section("worst ledgers", lambda: _worst_ledgers(engine, ranked))
        categories = section("categories", lambda: _categories(engine))
        timeline = section("timeline", lambda: _timeline(engine, moment))
        bookies = section("bookies", lambda: _bookies(engine))
        under_replication = section("under-replication", lambda: _under_replication(engine))
        coverage = section("coverage", lambda: _coverage(engine))
        ages = section("verification ages", lambda: _view_rows(engine, "verification_age", VerificationAge))
        latency = section("latency", lambda: _latency(engine))
        checker = section("checker health", lambda: _checker(engine, stall_after_ms))
        runs = section("recent batches", lambda: _runs(engine))
        missing = engine.missing_tables
    return DashboardSnapshot(
        data_dir=str(data_dir),
        generated_at=moment,
        missing_tables=missing,
        problems=tuple(problems),
        overview=overview,
        cluster=cluster,
        categories=categories,
        timeline=timeline,
        worst=worst_ledgers,
        bookies=bookies,
        under_replication=under_replication,
        coverage=coverage,
        verification_ages=ages,
        latency=latency,
        checker=checker,
        runs=runs,
    )


def _records(result: QueryResult) -> list[dict[str, object]]:
    return [dict(zip(result.columns, row, strict=True)) for row in result.rows]


def _number(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float | Decimal):
        raise TypeError(f"expected a number, got {value!r}")
    return float(value)


def _int(value: object) -> int:
    return int(_number(value))


def _time(value: object) -> datetime:
    if not isinstance(value, datetime):
        raise TypeError(f"expected a timestamp, got {value!r}")
    return value.astimezone(UTC) if value.tzinfo is not None else value.replace(tzinfo=UTC)


def _optional(convert: Callable[[object], _T]) -> Callable[[object], _T | None]:
    """``convert`` that passes None (a null column) through."""
    return lambda value: None if value is None else convert(value)


_opt_str: Final = _optional(str)


def _from_epoch_ms(epoch_ms: int) -> datetime:
    return _EPOCH + timedelta(milliseconds=epoch_ms)


def _one_line(text: str) -> str:
    return " ".join(text.split())


# --- open violations, overview, worst ledgers


def _open_summary(data_dir: str, worst: int) -> tuple[Overview, tuple[ClusterFinding, ...], tuple[LedgerFindings, ...]]:
    """The open violations summarized once: the overview, the cluster findings (worst first) and the ``worst``
    worst ledgers, ranked as the report ranks.

    Read by the report's own reader, so the dashboard and ``scrutiny report`` count the same rows.
    """
    rows = read_open_violations(data_dir)
    summary = summarize(rows, worst=worst)
    overview = Overview(
        status=summary.status,
        open_total=summary.open_violations,
        ledgers_affected=summary.ledgers_affected,
        by_severity={severity.value: count for severity, count in summary.by_severity.items()},
        data_loss_ledgers=summary.data_loss_ledgers,
    )
    cluster = tuple(
        ClusterFinding(
            category=f.category.value,
            severity=f.severity.value,
            bookie=f.bookie,
            first_seen=_from_epoch_ms(f.first_seen_ms),
            details=f.details,
        )
        for f in summary.cluster
    )
    return overview, cluster, summary.worst


def _worst_ledgers(engine: SqlEngine, ranked: Sequence[LedgerFindings]) -> tuple[WorstLedger, ...]:
    """The ranked ledgers with their evidence from ``violations``."""
    if not ranked:
        return ()
    evidence = _evidence(engine, [ledger.ledger_id for ledger in ranked])
    return tuple(_worst_ledger(ledger, evidence.get(ledger.ledger_id, [])) for ledger in ranked)


def _evidence(engine: SqlEngine, ledger_ids: Sequence[int]) -> dict[int, list[dict[str, object]]]:
    """The latest ``violations`` row of each violation key of these ledgers (none without the table)."""
    if VIOLATIONS not in engine.tables:
        return {}
    ids = ", ".join(str(int(ledger_id)) for ledger_id in ledger_ids)
    result = engine.query(
        "SELECT ledger_id, category, bookie, segment_first_entry, entries, entry_count, ensemble, ensemble_size,"
        " write_quorum, ack_quorum, detected_at FROM violations"
        f" WHERE ledger_id IN ({ids}) AND detected_at <= getvariable('now')"
        " QUALIFY row_number() OVER (PARTITION BY ledger_id, category, bookie, segment_first_entry"
        " ORDER BY detected_at DESC, batch_id DESC) = 1"
    )
    by_ledger: dict[int, list[dict[str, object]]] = {}
    for record in _records(result):
        by_ledger.setdefault(_int(record["ledger_id"]), []).append(record)
    return by_ledger


def _worst_ledger(ledger: LedgerFindings, evidence: Sequence[Mapping[str, object]]) -> WorstLedger:
    by_key = {(row["category"], row["bookie"], row["segment_first_entry"]): row for row in evidence}
    missing = []
    for finding in ledger.findings:
        if finding.category is not Category.MISSING_REPLICA or finding.bookie is None:
            continue
        row = by_key.get((finding.category.value, finding.bookie, finding.segment_first_entry))
        ranges = entry_ranges(_opt_str(row["entries"])) if row is not None else ""
        missing.append(MissingReplica(finding.bookie, finding.segment_first_entry, finding.entry_count, ranges))
    with_ensemble = [row for row in evidence if row["ensemble"] is not None]
    latest = max(with_ensemble, key=lambda row: _time(row["detected_at"]), default=None)
    return WorstLedger(
        ledger_id=ledger.ledger_id,
        worst_severity=ledger.worst_severity.value,
        data_loss=ledger.data_loss,
        entries_affected=ledger.entries_affected,
        first_seen=_from_epoch_ms(ledger.first_seen_ms),
        pulsar_topic=ledger.pulsar_topic,
        categories=tuple(dict.fromkeys(finding.category.value for finding in ledger.findings)),
        missing=tuple(missing),
        ensemble=_ensemble(_opt_str(latest["ensemble"])) if latest is not None else (),
        quorum=_quorum(latest) if latest is not None else None,
    )


def _ensemble(text: str | None) -> tuple[Segment, ...]:
    """``violations.ensemble`` (JSON ``[{"first_entry": 0, "bookies": [...]}, ...]``); () when it does not parse."""
    if text is None:
        return ()
    try:
        document = json.loads(text)
        return tuple(
            Segment(int(segment["first_entry"]), tuple(str(bookie) for bookie in segment["bookies"]))
            for segment in document
        )
    except (ValueError, TypeError, KeyError):
        return ()


def _quorum(row: Mapping[str, object]) -> str | None:
    values = [row["ensemble_size"], row["write_quorum"], row["ack_quorum"]]
    if any(value is None for value in values):
        return None
    size, write, ack = (_int(value) for value in values)
    return f"E {size}, WQ {write}, AQ {ack}"


def entry_ranges(entries: str | None, *, groups_shown: int = RANGE_GROUPS_SHOWN) -> str:
    """``violations.entries`` (JSON ``{"groups": [[first_start, last_start, size, period], ...], "count": n}``) as
    ranges for people: ``0-4``, ``1-2, 4-5, 7-8``, ``0, 3, ..., 99 (every 3)``; empty when absent or malformed."""
    if not entries:
        return ""
    try:
        groups = [SequenceGroup.of(*(int(v) for v in group)) for group in json.loads(entries)["groups"]]
    except (ValueError, TypeError, KeyError):
        return ""
    parts = [_group_text(group) for group in groups[:groups_shown]]
    if len(groups) > groups_shown:
        parts.append(f"+{len(groups) - groups_shown} more")
    return ", ".join(parts)


def _run_text(first: int, last: int) -> str:
    return str(first) if first == last else f"{first}-{last}"


def _group_text(group: SequenceGroup) -> str:
    if group.contiguous:
        return _run_text(group.first, group.last)
    runs = list(itertools.islice(group.run_bounds(), 3))
    if group.runs <= 3:
        return ", ".join(_run_text(first, last) for first, last in runs)
    head = ", ".join(_run_text(first, last) for first, last in runs[:2])
    tail = _run_text(group.last_start, group.last)
    return f"{head}, ..., {tail} (every {group.period})"


# --- the views


def _categories(engine: SqlEngine) -> tuple[CategoryCount, ...]:
    return _view_rows(engine, "open_violations_by_category", CategoryCount)


def _bookies(engine: SqlEngine) -> tuple[BookieHealth, ...]:
    return _view_rows(engine, "violations_per_bookie", BookieHealth)


def _under_replication(engine: SqlEngine) -> tuple[StuckLedger, ...]:
    return _view_rows(engine, "under_replication_age", StuckLedger)


def _coverage(engine: SqlEngine) -> Coverage:
    (coverage,) = _view_rows(engine, "check_coverage", Coverage)
    return coverage


def _latency(engine: SqlEngine) -> Latency:
    (latency,) = _view_rows(engine, "detection_latency", Latency)
    return latency


def _checker(engine: SqlEngine, stall_after_ms: int) -> CheckerHealth | None:
    rows = _records(engine.query("SELECT * FROM checker_health"))
    if not rows:
        return None
    stalled = _number(rows[0]["seconds_since_last_batch"]) * 1000 >= stall_after_ms
    return _from_record(CheckerHealth, rows[0], stalled=stalled)


def _runs(engine: SqlEngine) -> tuple[RunPoint, ...]:
    result = engine.query(
        "SELECT batch_id, finished_at, duration_ms, events, ledgers_checked, lag_records FROM checker_runs"
        " WHERE source = getvariable('source') AND finished_at <= getvariable('now')"
        f" ORDER BY finished_at DESC, batch_id DESC LIMIT {RECENT_RUNS}"
    )
    return tuple(reversed([_from_record(RunPoint, record) for record in _records(result)]))


def _view_rows(engine: SqlEngine, view: str, row_type: type[_Row]) -> tuple[_Row, ...]:
    """Every row of ``view`` as a ``row_type``."""
    return tuple(_from_record(row_type, record) for record in _records(engine.query(f"SELECT * FROM {view}")))


#: How a column becomes a field of a section, by the field's declared type.
_CONVERSIONS: Final[Mapping[object, Callable[[object], object]]] = {
    str: str,
    str | None: _opt_str,
    int: _int,
    int | None: _optional(_int),
    float: _number,
    float | None: _optional(_number),
    datetime: _time,
    datetime | None: _optional(_time),
}


@functools.cache
def _field_types(row_type: type[DataclassInstance]) -> dict[str, object]:
    return typing.get_type_hints(row_type)


def _from_record(row_type: type[_Row], record: Mapping[str, object], **computed: object) -> _Row:
    """A ``row_type`` whose fields are the columns of the same names (but those given in ``computed``)."""
    types = _field_types(row_type)
    values = dict(computed)
    for field in dataclasses.fields(row_type):
        if field.name not in values:
            values[field.name] = _CONVERSIONS[types[field.name]](record[field.name])
    return row_type(**values)


# --- the timeline


def bucket_seconds(span: timedelta) -> int:
    """The narrowest bucket of TIMELINE_BUCKETS that cuts ``span`` into at most TIMELINE_MAX_BUCKETS buckets."""
    seconds = max(span.total_seconds(), 0.0)
    for width in TIMELINE_BUCKETS:
        if seconds / width <= TIMELINE_MAX_BUCKETS:
            return width
    return TIMELINE_BUCKETS[-1]


def _timeline(engine: SqlEngine, now: datetime) -> Timeline:
    """Counts per bucket from the earliest detection (at most TIMELINE_WINDOW back) to ``now``."""
    if OPEN_VIOLATIONS in engine.tables:
        table, detected_column, resolved_column = OPEN_VIOLATIONS, "first_seen", "resolved_at"
    elif VIOLATIONS in engine.tables:
        table, detected_column, resolved_column = VIOLATIONS, "detected_at", None
    else:
        raise MissingTableError(engine.data_dir, OPEN_VIOLATIONS)
    (earliest,) = engine.query(
        f"SELECT min({detected_column}) FROM {table} WHERE {detected_column} <= getvariable('now')"
    ).rows[0]
    if earliest is None:
        return Timeline(bucket_seconds(timedelta(0)), (), (), (), table)
    start = max(_time(earliest), now - TIMELINE_WINDOW)
    width = bucket_seconds(now - start)
    first_key = int(start.timestamp()) // width
    last_key = int(now.timestamp()) // width
    detected = _bucket_counts(engine, table, detected_column, width, first_key)
    resolved = _bucket_counts(engine, table, resolved_column, width, first_key) if resolved_column else {}
    keys = range(first_key, last_key + 1)
    return Timeline(
        bucket_seconds=width,
        starts=tuple(datetime.fromtimestamp(key * width, UTC) for key in keys),
        detected=tuple(detected.get(key, 0) for key in keys),
        resolved=tuple(resolved.get(key, 0) for key in keys),
        source=table,
    )


def _bucket_counts(engine: SqlEngine, table: str, column: str, width: int, first_key: int) -> dict[int, int]:
    key = f"CAST(floor(epoch({column}) / {width}) AS BIGINT)"
    result = engine.query(
        f"SELECT {key} AS bucket, count(*) AS n FROM {table}"
        f" WHERE {column} <= getvariable('now') AND {key} >= {first_key} GROUP BY bucket"
    )
    return {_int(bucket): _int(n) for bucket, n in result.rows}
