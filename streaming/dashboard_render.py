"""The dashboard's refresh: the value of every element of the page for one :class:`~.dashboard_snapshot.Snapshot`.

:func:`render` gives, keyed by (element id, property) as :data:`~.dashboard_layout.OUTPUTS` lists them, the text of
every figure, the tables (worst ledgers with their evidence, bookies, stuck under-replicated ledgers), the notes on
missing or unreadable tables and the charts of :mod:`.dashboard_charts`. A section that is None shows "no data yet";
a figure that does not apply shows "–".
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Final

from dash import html
from dash.development.base_component import Component

from scrutiny.core.health_summary import HEALTHY, format_duration_ms, format_utc_ms
from scrutiny.streaming.dashboard_charts import (
    bookie_chart,
    category_chart,
    checker_chart,
    coverage_chart,
    timeline_chart,
    under_replication_chart,
)
from scrutiny.streaming.dashboard_snapshot import NO_DATA, SEVERITIES, BookieHealth, Snapshot, StuckLedger, WorstLedger

__all__ = ["render"]

_DASH: Final = "–"


def _count(value: int | None) -> str:
    return NO_DATA if value is None else str(value)


def _ms_text(value: int | None) -> str:
    if value is None:
        return _DASH
    if value < 1000:
        return f"{value} ms"
    if value < 120_000:
        return f"{value / 1000:.1f} s"
    return format_duration_ms(value)


def _when(moment: datetime | None) -> str:
    if moment is None:
        return _DASH
    return format_utc_ms(int(moment.timestamp() * 1000))


def _table(headers: Sequence[str], rows: Sequence[html.Tr]) -> html.Table:
    return html.Table(children=[html.Thead(html.Tr([html.Th(name) for name in headers])), html.Tbody(list(rows))])


def _empty(text: str) -> html.P:
    return html.P(text, className="empty")


def _severity(value: str, extra: str = "") -> html.Span:
    return html.Span(f"{value}{extra}", className=f"sev-{value}")


def _missing_lines(ledger: WorstLedger) -> list[Component]:
    lines: list[Component] = []
    for replica in ledger.missing:
        where = (
            replica.bookie
            if replica.segment_first_entry is None
            else f"{replica.bookie} (segment {replica.segment_first_entry})"
        )
        if replica.ranges:
            what = replica.ranges
        elif replica.entry_count is not None:
            what = f"{replica.entry_count} entries"
        else:
            what = "entries not recorded"
        lines.append(html.Div(f"{where}: {what}"))
    return lines or [html.Span(_DASH)]


def _ensemble_lines(ledger: WorstLedger) -> list[Component]:
    lines: list[Component] = [
        html.Div(f"from {segment.first_entry}: {', '.join(segment.bookies)}") for segment in ledger.ensemble
    ]
    if ledger.quorum:
        lines.append(html.Div(ledger.quorum, className="empty"))
    return lines or [html.Span(_DASH)]


_WORST_HEADERS: Final = (
    "#",
    "ledger",
    "worst",
    "categories",
    "entries",
    "missing replicas",
    "ensemble",
    "Pulsar topic",
    "first seen",
)


def _worst_table(worst: Sequence[WorstLedger] | None) -> Component:
    if worst is None:
        return _empty(NO_DATA)
    if not worst:
        return _empty("no open violations")
    rows = []
    for i, ledger in enumerate(worst):
        rows.append(
            html.Tr(
                id=f"worst-ledger-{i}",
                children=[
                    html.Td(str(i + 1)),
                    html.Td(str(ledger.ledger_id), id=f"worst-ledger-{i}-id"),
                    html.Td(
                        _severity(ledger.worst_severity, ", DATA LOSS" if ledger.data_loss else ""),
                        id=f"worst-ledger-{i}-severity",
                    ),
                    html.Td(", ".join(ledger.categories), id=f"worst-ledger-{i}-categories"),
                    html.Td(
                        _count(ledger.entries_affected) if ledger.entries_affected is not None else _DASH,
                        id=f"worst-ledger-{i}-entries",
                        className="num",
                    ),
                    html.Td(_missing_lines(ledger), id=f"worst-ledger-{i}-missing"),
                    html.Td(_ensemble_lines(ledger), id=f"worst-ledger-{i}-ensemble"),
                    html.Td(ledger.pulsar_topic or _DASH, id=f"worst-ledger-{i}-topic"),
                    html.Td(_when(ledger.first_seen), id=f"worst-ledger-{i}-first-seen", className="time"),
                ],
            )
        )
    return _table(_WORST_HEADERS, rows)


def _bookie_table(bookies: Sequence[BookieHealth] | None) -> Component:
    if bookies is None:
        return _empty(NO_DATA)
    if not bookies:
        return _empty("no open violation names a bookie")
    rows = [
        html.Tr(
            [
                html.Td(row.bookie, id=f"bookie-{i}-name"),
                html.Td(str(row.open_count), id=f"bookie-{i}-open", className="num"),
                html.Td(str(row.ledgers), className="num"),
                html.Td(str(row.critical), id=f"bookie-{i}-critical", className="num"),
                html.Td(str(row.warning), className="num"),
                html.Td(str(row.info), className="num"),
                html.Td(str(row.entries), className="num"),
            ]
        )
        for i, row in enumerate(bookies)
    ]
    return _table(("bookie", "open", "ledgers", "critical", "warning", "info", "entries"), rows)


def _stuck_table(stuck: Sequence[StuckLedger] | None) -> Component:
    if stuck is None:
        return _empty(NO_DATA)
    if not stuck:
        return _empty("none")
    rows = [
        html.Tr(
            [
                html.Td(str(row.ledger_id), id=f"stuck-{i}-ledger"),
                html.Td(row.bookie or _DASH, id=f"stuck-{i}-bookie"),
                html.Td(f"{row.age_hours:.2f}", id=f"stuck-{i}-age", className="num"),
                html.Td(_when(row.first_seen), className="time"),
                html.Td(row.pulsar_topic or _DASH),
                html.Td(row.details or ""),
            ]
        )
        for i, row in enumerate(stuck)
    ]
    return _table(("ledger", "bookie", "hours", "first seen", "Pulsar topic", "details"), rows)


def _notes(snapshot: Snapshot) -> list[Component]:
    notes: list[Component] = []
    if snapshot.missing_tables:
        notes.append(html.Div(f"not created yet: {', '.join(snapshot.missing_tables)} (no data yet)"))
    notes.extend(html.Div(f"cannot read now: {problem}") for problem in snapshot.problems)
    return notes


def render(snapshot: Snapshot) -> dict[tuple[str, str], object]:
    """The value of every output of the page for ``snapshot``, keyed by (element id, property)."""
    values: dict[tuple[str, str], object] = {}

    def text(element_id: str, value: str) -> None:
        values[(element_id, "children")] = value

    overview = snapshot.overview
    text("status", _DASH if overview is None else overview.status)
    status_class = "unknown" if overview is None else ("healthy" if overview.status == HEALTHY else "unhealthy")
    values[("status", "className")] = f"status {status_class}"
    text("generated-at", _when(snapshot.generated_at))
    for severity in SEVERITIES:
        text(f"open-{severity}", _count(None if overview is None else overview.by_severity.get(severity, 0)))
    text("open-total", _count(None if overview is None else overview.open_total))
    text("ledgers-affected", _count(None if overview is None else overview.ledgers_affected))
    text("data-loss-ledgers", _count(None if overview is None else overview.data_loss_ledgers))

    coverage = snapshot.coverage
    if coverage is None:
        for name in ("percent", "closed", "verified", "unverified", "oldest"):
            text(f"coverage-{name}", NO_DATA)
    else:
        text("coverage-percent", _DASH if coverage.coverage is None else f"{coverage.coverage * 100:.1f} %")
        text("coverage-closed", str(coverage.closed_ledgers))
        text("coverage-verified", str(coverage.verified_ledgers))
        text("coverage-unverified", str(coverage.unverified_ledgers))
        text("coverage-oldest", _when(coverage.oldest_verification))
    latency = snapshot.latency
    text("latency-checks", _count(None if latency is None else latency.checks))
    for name in ("p50", "p90", "p99"):
        text(f"latency-{name}", NO_DATA if latency is None else _ms_text(getattr(latency, f"{name}_ms")))

    stuck = snapshot.under_replication
    text("under-replication-count", _count(None if stuck is None else len(stuck)))
    oldest = None if not stuck else max(row.age_hours for row in stuck)
    text("under-replication-oldest", NO_DATA if stuck is None else (_DASH if oldest is None else f"{oldest:.2f}"))

    _render_checker(snapshot, text, values)
    values[("data-notes", "children")] = _notes(snapshot)
    values[("worst-ledgers", "children")] = _worst_table(snapshot.worst)
    values[("bookie-table", "children")] = _bookie_table(snapshot.bookies)
    values[("under-replication-table", "children")] = _stuck_table(snapshot.under_replication)
    values[("category-chart", "figure")] = category_chart(snapshot.categories)
    values[("timeline-chart", "figure")] = timeline_chart(snapshot.timeline)
    values[("bookie-chart", "figure")] = bookie_chart(snapshot.bookies)
    values[("under-replication-chart", "figure")] = under_replication_chart(snapshot.under_replication)
    values[("coverage-chart", "figure")] = coverage_chart(snapshot.coverage)
    values[("checker-chart", "figure")] = checker_chart(snapshot.runs)
    return values


def _render_checker(
    snapshot: Snapshot, text: Callable[[str, str], None], values: dict[tuple[str, str], object]
) -> None:
    checker = snapshot.checker
    names = ("last-batch-id", "last-batch-at", "last-batch-age", "last-batch-duration", "checker-lag")
    if checker is None:
        for name in (*names, "batches-per-minute", "events-last-hour", "checks-last-hour", "violations-last-hour"):
            text(name, NO_DATA)
        text("checker-state", NO_DATA)
        values[("checker-state", "className")] = ""
        return
    idle_ms = int(checker.seconds_since_last_batch * 1000)
    state = f"stalled ({format_duration_ms(idle_ms)} idle)" if checker.stalled else "running"
    text("checker-state", state)
    values[("checker-state", "className")] = "stalled" if checker.stalled else "running"
    text("last-batch-id", str(checker.last_batch_id))
    text("last-batch-at", _when(checker.last_batch_at))
    text("last-batch-age", f"{format_duration_ms(idle_ms)}")
    text("last-batch-duration", _ms_text(checker.last_duration_ms))
    text("checker-lag", "unknown" if checker.last_lag_records is None else str(checker.last_lag_records))
    text("batches-per-minute", f"{checker.batches_per_minute:.1f}")
    text("events-last-hour", str(checker.events_last_hour))
    text("checks-last-hour", str(checker.checks_last_hour))
    text("violations-last-hour", str(checker.violations_last_hour))
