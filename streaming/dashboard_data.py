"""The dashboard's data: one snapshot of the Delta tables, read through the SQL views, as plain Python values.

:func:`load_snapshot` opens a fresh :class:`~scrutiny.connectors.sql_engine.SqlEngine` over the data directory (so
tables that appeared since the last call are seen, and every figure is the one ``scrutiny sql`` shows for the same
view), runs the queries of each section and returns a :class:`Snapshot`. It never raises on the tables' content or
state: a section whose table does not exist yet, or cannot be read right now (a file vacuumed between listing and
reading, a commit in progress), is ``None`` ("no data yet") and the reason, when it is not just a missing table, is in
:attr:`Snapshot.problems`. Only :func:`check_data_dir`, run once at start, raises (:class:`DashboardDataError`).

The chart functions (``*_chart``) turn a section into a Plotly figure as a plain dict (``{"data": [...],
"layout": {...}}``) that ``dcc.Graph`` draws; they are pure, so tests check them without a browser.

Sections and their sources:

* overview and worst ledgers: the open rows of ``open_violations``, summarized and ranked by
  :mod:`scrutiny.core.health_summary` exactly as ``scrutiny report`` does; each worst ledger's evidence (ensemble,
  quorums, the entries each bookie misses) comes from its latest ``violations`` rows;
* categories, bookies, under-replication, coverage, latency, checker health: the shipped views
  ``open_violations_by_category``, ``violations_per_bookie``, ``under_replication_age``, ``check_coverage``,
  ``detection_latency`` and ``checker_health`` (docs/sql.md);
* timeline: first detections and resolutions per time bucket from ``open_violations.first_seen`` / ``resolved_at``
  (or, without that table, ``violations.detected_at``); recent batches: ``checker_runs`` of the streaming job.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Final, TypeVar

import duckdb
import pyarrow as pa
from deltalake.exceptions import DeltaError

from scrutiny.connectors.sql_engine import MissingTableError, QueryResult, SqlEngine
from scrutiny.connectors.table_schemas import OPEN_VIOLATIONS, VIOLATIONS
from scrutiny.core.errors import ScrutinyError
from scrutiny.core.health_summary import (
    DATA_LOSS_CATEGORIES,
    DEFAULT_STALL_AFTER_MS,
    DEFAULT_WORST,
    LedgerFindings,
    OpenViolation,
    summarize,
)
from scrutiny.core.sequence_groups import SequenceGroup
from scrutiny.core.vocabulary import Category, Severity

__all__ = [
    "NO_DATA",
    "SEVERITIES",
    "SEVERITY_COLORS",
    "BookieHealth",
    "CategoryCount",
    "CheckerHealth",
    "Coverage",
    "DashboardDataError",
    "Latency",
    "MissingReplica",
    "Overview",
    "RunPoint",
    "Segment",
    "Snapshot",
    "StuckLedger",
    "Timeline",
    "WorstLedger",
    "bookie_chart",
    "bucket_seconds",
    "category_chart",
    "check_data_dir",
    "checker_chart",
    "coverage_chart",
    "empty_chart",
    "entry_ranges",
    "load_snapshot",
    "timeline_chart",
    "under_replication_chart",
]

log = logging.getLogger(__name__)

#: Severities worst first, as the page lists them.
SEVERITIES: Final = (Severity.CRITICAL.value, Severity.WARNING.value, Severity.INFO.value)
SEVERITY_COLORS: Final[Mapping[str, str]] = {"critical": "#c0392b", "warning": "#e08e0b", "info": "#2e86c1"}
#: How far back the timeline looks at most.
TIMELINE_WINDOW: Final = timedelta(days=7)
#: Bucket widths the timeline may use (seconds), the narrowest giving at most TIMELINE_MAX_BUCKETS buckets.
TIMELINE_BUCKETS: Final = (60, 300, 900, 1800, 3600, 3 * 3600, 6 * 3600, 12 * 3600, 86_400)
TIMELINE_MAX_BUCKETS: Final = 72
#: Recent batches drawn in the checker chart.
RECENT_RUNS: Final = 120
#: Sequence groups spelled out per missing replica before "+N more".
RANGE_GROUPS_SHOWN: Final = 4
NO_DATA: Final = "no data yet"
_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)

#: What a read of a table can fail with while the streaming job writes (besides a missing table).
_READ_ERRORS: Final = (ScrutinyError, DeltaError, OSError, pa.ArrowException, duckdb.Error, ValueError, TypeError)
_T = TypeVar("_T")


class DashboardDataError(ScrutinyError):
    """The data directory cannot be served: it does not exist, or holds none of the checker's tables."""


# ----------------------------------------------------------------------------------------------- the snapshot


@dataclass(frozen=True, slots=True)
class Overview:
    """Open violations in numbers; ``status`` is ``HEALTHY`` unless some open violation is critical."""

    status: str
    open_total: int
    ledgers_affected: int
    by_severity: Mapping[str, int]
    data_loss_ledgers: int


@dataclass(frozen=True, slots=True)
class CategoryCount:
    """One row of the ``open_violations_by_category`` view."""

    category: str
    severity: str
    open_count: int
    ledgers: int


@dataclass(frozen=True, slots=True)
class Timeline:
    """First detections and resolutions per bucket of ``bucket_seconds``, oldest first, empty buckets included."""

    bucket_seconds: int
    starts: tuple[datetime, ...]
    detected: tuple[int, ...]
    resolved: tuple[int, ...]
    source: str  # the table the counts come from


@dataclass(frozen=True, slots=True)
class Segment:
    """One ensemble of a ledger: from ``first_entry`` on, entries are striped over ``bookies``."""

    first_entry: int
    bookies: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class MissingReplica:
    """A bookie lacking entries it should hold (an open ``MISSING_REPLICA``); ``ranges`` empty when not recorded."""

    bookie: str
    segment_first_entry: int | None
    entry_count: int | None
    ranges: str


@dataclass(frozen=True, slots=True)
class WorstLedger:
    """A ledger among the worst (ranked as ``scrutiny report`` ranks them) with its evidence."""

    ledger_id: int
    worst_severity: str
    data_loss: bool
    entries_affected: int | None
    first_seen: datetime
    pulsar_topic: str | None
    categories: tuple[str, ...]
    missing: tuple[MissingReplica, ...]
    ensemble: tuple[Segment, ...]
    quorum: str | None  # "E 3, WQ 2, AQ 2" when recorded


@dataclass(frozen=True, slots=True)
class BookieHealth:
    """One row of the ``violations_per_bookie`` view."""

    bookie: str
    open_count: int
    ledgers: int
    critical: int
    warning: int
    info: int
    entries: int


@dataclass(frozen=True, slots=True)
class StuckLedger:
    """One row of the ``under_replication_age`` view."""

    ledger_id: int
    bookie: str | None
    pulsar_topic: str | None
    first_seen: datetime
    age_hours: float
    details: str | None


@dataclass(frozen=True, slots=True)
class Coverage:
    """The ``check_coverage`` view; ``coverage`` (0..1) is None when no ledger is closed."""

    window_hours: float
    closed_ledgers: int
    verified_ledgers: int
    unverified_ledgers: int
    coverage: float | None
    oldest_verification: datetime | None


@dataclass(frozen=True, slots=True)
class Latency:
    """The ``detection_latency`` view: percentiles of close-to-verdict latency (None when there is no check)."""

    window_hours: float
    checks: int
    p50_ms: int | None
    p90_ms: int | None
    p99_ms: int | None
    max_ms: int | None


@dataclass(frozen=True, slots=True)
class CheckerHealth:
    """The ``checker_health`` view for the streaming job, and whether it looks stalled."""

    last_run_id: str
    last_batch_id: int
    last_batch_at: datetime
    seconds_since_last_batch: float
    last_duration_ms: int
    last_lag_records: int | None
    batches_per_minute: float
    events_last_hour: int
    checks_last_hour: int
    violations_last_hour: int
    stalled: bool


@dataclass(frozen=True, slots=True)
class RunPoint:
    """One recent batch of the streaming job (``checker_runs``)."""

    batch_id: int
    finished_at: datetime
    duration_ms: int
    events: int
    ledgers_checked: int
    lag_records: int | None


@dataclass(frozen=True, slots=True)
class Snapshot:
    """Everything the page shows, as of ``generated_at``; a section that is None has no data yet."""

    data_dir: str
    generated_at: datetime
    missing_tables: tuple[str, ...] = ()
    problems: tuple[str, ...] = ()
    overview: Overview | None = None
    categories: tuple[CategoryCount, ...] | None = None
    timeline: Timeline | None = None
    worst: tuple[WorstLedger, ...] | None = None
    bookies: tuple[BookieHealth, ...] | None = None
    under_replication: tuple[StuckLedger, ...] | None = None
    coverage: Coverage | None = None
    latency: Latency | None = None
    checker: CheckerHealth | None = None
    runs: tuple[RunPoint, ...] | None = None


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
) -> Snapshot:
    """Every section read from the tables of ``data_dir`` as of ``now`` (default: the current time).

    Runs on each refresh of the page. Never raises on the tables' state: a section that cannot be read is None and,
    unless its table is just missing, its reason is in ``problems``.
    """
    moment = (now or datetime.now(UTC)).astimezone(UTC)
    problems: list[str] = []
    try:
        engine = SqlEngine(str(data_dir), now=moment)
    except _READ_ERRORS as error:
        return Snapshot(str(data_dir), moment, problems=(_one_line(str(error)),))

    def section(name: str, read: Callable[[], _T]) -> _T | None:
        try:
            return read()
        except MissingTableError:
            return None
        except _READ_ERRORS as error:
            log.info("dashboard section %s cannot be read now: %s", name, error)
            problems.append(f"{name}: {_one_line(str(error))}")
            return None

    with engine:
        open_rows = section("open violations", lambda: _open_violations(engine))
        worst_ledgers = None
        if open_rows is not None:
            worst_ledgers = section("worst ledgers", lambda: _worst_ledgers(engine, open_rows, worst))
        categories = section("categories", lambda: _categories(engine))
        timeline = section("timeline", lambda: _timeline(engine, moment))
        bookies = section("bookies", lambda: _bookies(engine))
        under_replication = section("under-replication", lambda: _under_replication(engine))
        coverage = section("coverage", lambda: _coverage(engine))
        latency = section("latency", lambda: _latency(engine))
        checker = section("checker health", lambda: _checker(engine, stall_after_ms))
        runs = section("recent batches", lambda: _runs(engine))
        missing = engine.missing_tables
    return Snapshot(
        data_dir=str(data_dir),
        generated_at=moment,
        missing_tables=missing,
        problems=tuple(problems),
        overview=None if open_rows is None else _overview(open_rows),
        categories=categories,
        timeline=timeline,
        worst=worst_ledgers,
        bookies=bookies,
        under_replication=under_replication,
        coverage=coverage,
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


def _opt_int(value: object) -> int | None:
    return None if value is None else _int(value)


def _opt_str(value: object) -> str | None:
    return None if value is None else str(value)


def _time(value: object) -> datetime:
    if not isinstance(value, datetime):
        raise TypeError(f"expected a timestamp, got {value!r}")
    return value.astimezone(UTC) if value.tzinfo is not None else value.replace(tzinfo=UTC)


def _opt_time(value: object) -> datetime | None:
    return None if value is None else _time(value)


def _epoch_ms(moment: datetime) -> int:
    return (moment - _EPOCH) // timedelta(milliseconds=1)


def _from_epoch_ms(epoch_ms: int) -> datetime:
    return _EPOCH + timedelta(milliseconds=epoch_ms)


def _one_line(text: str) -> str:
    return " ".join(text.split())


# --- open violations, overview, worst ledgers


def _open_violations(engine: SqlEngine) -> list[OpenViolation]:
    result = engine.query(
        "SELECT ledger_id, category, severity, bookie, segment_first_entry, entry_count, pulsar_topic, first_seen,"
        " details FROM open_violations WHERE resolved_at IS NULL"
    )
    rows: list[OpenViolation] = []
    for record in _records(result):
        record["first_seen"] = _epoch_ms(_time(record["first_seen"]))
        rows.append(OpenViolation.from_mapping(record))
    return rows


def _overview(rows: Sequence[OpenViolation]) -> Overview:
    summary = summarize(rows, worst=0)
    return Overview(
        status=summary.status,
        open_total=summary.open_violations,
        ledgers_affected=summary.ledgers_affected,
        by_severity={severity.value: count for severity, count in summary.by_severity.items()},
        data_loss_ledgers=len({row.ledger_id for row in rows if row.category in DATA_LOSS_CATEGORIES}),
    )


def _worst_ledgers(engine: SqlEngine, rows: Sequence[OpenViolation], worst: int) -> tuple[WorstLedger, ...]:
    ranked = summarize(rows, worst=worst).worst
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
    runs = list(_first_runs(group, 3))
    if group.runs <= 3:
        return ", ".join(_run_text(first, last) for first, last in runs)
    head = ", ".join(_run_text(first, last) for first, last in runs[:2])
    tail = _run_text(group.last_start, group.last)
    return f"{head}, ..., {tail} (every {group.period})"


def _first_runs(group: SequenceGroup, count: int) -> list[tuple[int, int]]:
    runs: list[tuple[int, int]] = []
    for bounds in group.run_bounds():
        runs.append(bounds)
        if len(runs) == count:
            break
    return runs


# --- the views


def _categories(engine: SqlEngine) -> tuple[CategoryCount, ...]:
    return tuple(
        CategoryCount(str(r["category"]), str(r["severity"]), _int(r["open_count"]), _int(r["ledgers"]))
        for r in _records(engine.query("SELECT * FROM open_violations_by_category"))
    )


def _bookies(engine: SqlEngine) -> tuple[BookieHealth, ...]:
    return tuple(
        BookieHealth(
            bookie=str(r["bookie"]),
            open_count=_int(r["open_count"]),
            ledgers=_int(r["ledgers"]),
            critical=_int(r["critical"]),
            warning=_int(r["warning"]),
            info=_int(r["info"]),
            entries=_int(r["entries"]),
        )
        for r in _records(engine.query("SELECT * FROM violations_per_bookie"))
    )


def _under_replication(engine: SqlEngine) -> tuple[StuckLedger, ...]:
    return tuple(
        StuckLedger(
            ledger_id=_int(r["ledger_id"]),
            bookie=_opt_str(r["bookie"]),
            pulsar_topic=_opt_str(r["pulsar_topic"]),
            first_seen=_time(r["first_seen"]),
            age_hours=_number(r["age_hours"]),
            details=_opt_str(r["details"]),
        )
        for r in _records(engine.query("SELECT * FROM under_replication_age"))
    )


def _coverage(engine: SqlEngine) -> Coverage:
    (r,) = _records(engine.query("SELECT * FROM check_coverage"))
    return Coverage(
        window_hours=_number(r["window_hours"]),
        closed_ledgers=_int(r["closed_ledgers"]),
        verified_ledgers=_int(r["verified_ledgers"]),
        unverified_ledgers=_int(r["unverified_ledgers"]),
        coverage=None if r["coverage"] is None else _number(r["coverage"]),
        oldest_verification=_opt_time(r["oldest_verification"]),
    )


def _latency(engine: SqlEngine) -> Latency:
    (r,) = _records(engine.query("SELECT * FROM detection_latency"))
    return Latency(
        window_hours=_number(r["window_hours"]),
        checks=_int(r["checks"]),
        p50_ms=_opt_int(r["p50_ms"]),
        p90_ms=_opt_int(r["p90_ms"]),
        p99_ms=_opt_int(r["p99_ms"]),
        max_ms=_opt_int(r["max_ms"]),
    )


def _checker(engine: SqlEngine, stall_after_ms: int) -> CheckerHealth | None:
    rows = _records(engine.query("SELECT * FROM checker_health"))
    if not rows:
        return None
    r = rows[0]
    idle_s = _number(r["seconds_since_last_batch"])
    return CheckerHealth(
        last_run_id=str(r["last_run_id"]),
        last_batch_id=_int(r["last_batch_id"]),
        last_batch_at=_time(r["last_batch_at"]),
        seconds_since_last_batch=idle_s,
        last_duration_ms=_int(r["last_duration_ms"]),
        last_lag_records=_opt_int(r["last_lag_records"]),
        batches_per_minute=_number(r["batches_per_minute"]),
        events_last_hour=_int(r["events_last_hour"]),
        checks_last_hour=_int(r["checks_last_hour"]),
        violations_last_hour=_int(r["violations_last_hour"]),
        stalled=idle_s * 1000 >= stall_after_ms,
    )


def _runs(engine: SqlEngine) -> tuple[RunPoint, ...]:
    result = engine.query(
        "SELECT batch_id, finished_at, duration_ms, events, ledgers_checked, lag_records FROM checker_runs"
        " WHERE source = getvariable('source') AND finished_at <= getvariable('now')"
        f" ORDER BY finished_at DESC, batch_id DESC LIMIT {RECENT_RUNS}"
    )
    points = [
        RunPoint(
            batch_id=_int(r["batch_id"]),
            finished_at=_time(r["finished_at"]),
            duration_ms=_int(r["duration_ms"]),
            events=_int(r["events"]),
            ledgers_checked=_int(r["ledgers_checked"]),
            lag_records=_opt_int(r["lag_records"]),
        )
        for r in _records(result)
    ]
    return tuple(reversed(points))


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


# ----------------------------------------------------------------------------------------------- charts

_GRID: Final = "#e5e8ec"
_DETECTED_COLOR: Final = "#c0392b"
_RESOLVED_COLOR: Final = "#27ae60"
_NEUTRAL_COLOR: Final = "#9aa4ae"


def _plot_time(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")


def _layout(**extra: object) -> dict[str, object]:
    layout: dict[str, object] = {
        "margin": {"l": 10, "r": 10, "t": 10, "b": 10},
        "paper_bgcolor": "rgba(0,0,0,0)",
        "plot_bgcolor": "rgba(0,0,0,0)",
        "font": {"family": "system-ui, sans-serif", "size": 12, "color": "#2c3e50"},
        "legend": {"orientation": "h", "y": -0.2, "traceorder": "normal"},
        "height": 280,
        "xaxis": {"automargin": True, "gridcolor": _GRID},
        "yaxis": {"automargin": True, "gridcolor": _GRID},
    }
    layout.update(extra)
    return layout


def empty_chart(message: str) -> dict[str, object]:
    """A figure with no trace and ``message`` in its middle ("no data yet", "no open violations")."""
    note = {
        "text": message,
        "showarrow": False,
        "xref": "paper",
        "yref": "paper",
        "x": 0.5,
        "y": 0.5,
        "font": {"size": 15, "color": "#7f8c8d"},
    }
    return {
        "data": [],
        "layout": _layout(xaxis={"visible": False}, yaxis={"visible": False}, annotations=[note], height=200),
    }


def category_chart(categories: Sequence[CategoryCount] | None) -> dict[str, object]:
    """Open violations per category (worst first, top down), one stacked bar segment per severity."""
    if categories is None:
        return empty_chart(NO_DATA)
    if not categories:
        return empty_chart("no open violations")
    names = list(dict.fromkeys(row.category for row in categories))
    counts = {(row.category, row.severity): row.open_count for row in categories}
    traces = [
        {
            "type": "bar",
            "orientation": "h",
            "name": severity,
            "y": names,
            "x": [counts.get((name, severity), 0) for name in names],
            "marker": {"color": SEVERITY_COLORS[severity]},
        }
        for severity in SEVERITIES
        if any(row.severity == severity for row in categories)
    ]
    return {
        "data": traces,
        "layout": _layout(barmode="stack", yaxis={"automargin": True, "autorange": "reversed"}),
    }


def timeline_chart(timeline: Timeline | None) -> dict[str, object]:
    """First detections and resolutions per bucket."""
    if timeline is None:
        return empty_chart(NO_DATA)
    if not timeline.starts:
        return empty_chart("nothing detected yet")
    x = [_plot_time(start) for start in timeline.starts]
    traces: list[dict[str, object]] = [
        {"type": "bar", "name": "detected", "x": x, "y": list(timeline.detected), "marker": {"color": _DETECTED_COLOR}}
    ]
    if timeline.source == OPEN_VIOLATIONS:
        traces.append(
            {
                "type": "bar",
                "name": "resolved",
                "x": x,
                "y": list(timeline.resolved),
                "marker": {"color": _RESOLVED_COLOR},
            }
        )
    minutes = timeline.bucket_seconds // 60
    title = f"per {minutes} min" if minutes < 60 else f"per {minutes // 60} h"
    return {
        "data": traces,
        "layout": _layout(
            barmode="group",
            xaxis={"type": "date", "automargin": True, "gridcolor": _GRID},
            yaxis={"automargin": True, "gridcolor": _GRID, "title": {"text": title}, "rangemode": "tozero"},
        ),
    }


def bookie_chart(bookies: Sequence[BookieHealth] | None) -> dict[str, object]:
    """Open violations naming each bookie, stacked by severity."""
    if bookies is None:
        return empty_chart(NO_DATA)
    if not bookies:
        return empty_chart("no open violation names a bookie")
    names = [row.bookie for row in bookies]
    by_severity = {
        "critical": [row.critical for row in bookies],
        "warning": [row.warning for row in bookies],
        "info": [row.info for row in bookies],
    }
    traces = [
        {"type": "bar", "name": severity, "x": names, "y": by_severity[severity], "marker": {"color": color}}
        for severity, color in SEVERITY_COLORS.items()
        if any(by_severity[severity])
    ]
    return {"data": traces, "layout": _layout(barmode="stack")}


def under_replication_chart(stuck: Sequence[StuckLedger] | None) -> dict[str, object]:
    """Hours each stuck under-replicated ledger has been reported, oldest on top."""
    if stuck is None:
        return empty_chart(NO_DATA)
    if not stuck:
        return empty_chart("no ledger stuck under-replicated")
    labels = [f"ledger {row.ledger_id}" + (f" ({row.bookie})" if row.bookie else "") for row in stuck]
    trace = {
        "type": "bar",
        "orientation": "h",
        "name": "age (h)",
        "y": labels,
        "x": [row.age_hours for row in stuck],
        "marker": {"color": SEVERITY_COLORS["critical"]},
    }
    return {
        "data": [trace],
        "layout": _layout(
            showlegend=False,
            height=min(400, 110 + 32 * len(stuck)),
            yaxis={"automargin": True, "autorange": "reversed"},
            xaxis={"automargin": True, "gridcolor": _GRID, "title": {"text": "hours"}},
        ),
    }


def coverage_chart(coverage: Coverage | None) -> dict[str, object]:
    """Closed ledgers verified within the window against those not verified, as a ring."""
    if coverage is None:
        return empty_chart(NO_DATA)
    if coverage.closed_ledgers == 0:
        return empty_chart("no closed ledger checked yet")
    trace = {
        "type": "pie",
        "hole": 0.6,
        "sort": False,
        "labels": ["verified", "not verified"],
        "values": [coverage.verified_ledgers, coverage.unverified_ledgers],
        "marker": {"colors": [_RESOLVED_COLOR, _NEUTRAL_COLOR]},
        "textinfo": "value",
    }
    return {"data": [trace], "layout": _layout(height=240)}


def checker_chart(runs: Sequence[RunPoint] | None) -> dict[str, object]:
    """The streaming job's recent batches: duration (bars) and lag in records (line, right axis)."""
    if runs is None:
        return empty_chart(NO_DATA)
    if not runs:
        return empty_chart("no batch of the streaming job yet")
    x = [_plot_time(run.finished_at) for run in runs]
    traces = [
        {
            "type": "bar",
            "name": "batch duration (ms)",
            "x": x,
            "y": [run.duration_ms for run in runs],
            "marker": {"color": "#5d6d7e"},
        },
        {
            "type": "scatter",
            "mode": "lines+markers",
            "name": "lag (records)",
            "x": x,
            "y": [run.lag_records for run in runs],
            "yaxis": "y2",
            "line": {"color": SEVERITY_COLORS["warning"]},
        },
    ]
    return {
        "data": traces,
        "layout": _layout(
            margin={"l": 10, "r": 60, "t": 10, "b": 10},
            xaxis={"type": "date", "automargin": True, "gridcolor": _GRID},
            yaxis={"automargin": True, "gridcolor": _GRID, "title": {"text": "ms"}, "rangemode": "tozero"},
            yaxis2={"overlaying": "y", "side": "right", "rangemode": "tozero", "title": {"text": "records"}},
        ),
    }
