"""The dashboard's refresh: the value of every element of the page for one :class:`~.dashboard_snapshot.Snapshot`.

:func:`render` gives, keyed by (element id, property) as :data:`~.dashboard_layout.OUTPUTS` lists them, the text of
every figure, the tables (cluster findings, worst ledgers with their evidence, bookies, stuck under-replicated
ledgers), the notes on missing or unreadable tables and the charts of :mod:`.dashboard_charts`. A section that is
None shows "no data yet"; a figure that does not apply shows "–".
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Final

from dash import html
from dash.development.base_component import Component

from scrutiny.core.health_summary import HEALTHY
from scrutiny.core.utc_text import format_duration_ms, format_utc_ms
from scrutiny.dashboard.charts import (
    bookie_chart,
    category_chart,
    checker_chart,
    coverage_chart,
    timeline_chart,
    under_replication_chart,
    verification_age_chart,
)
from scrutiny.dashboard.layout import NUMBER_IDS
from scrutiny.dashboard.snapshot import (
    NO_DATA,
    SEVERITIES,
    BookieHealth,
    CheckerHealth,
    ClusterFinding,
    Coverage,
    DashboardSnapshot,
    Latency,
    Overview,
    StuckLedger,
    WorstLedger,
)

__all__ = ["render"]

_DASH: Final = "–"


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
                        _DASH if ledger.entries_affected is None else str(ledger.entries_affected),
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


def _cluster_table(cluster: Sequence[ClusterFinding] | None) -> Component:
    if cluster is None:
        return _empty(NO_DATA)
    if not cluster:
        return _empty("none: every bookie that held ledgers is registered")
    rows = [
        html.Tr(
            [
                html.Td(row.category, id=f"cluster-{i}-category"),
                html.Td(_severity(row.severity)),
                html.Td(row.bookie or _DASH, id=f"cluster-{i}-bookie"),
                html.Td(_when(row.first_seen), className="time"),
                html.Td(row.details or ""),
            ]
        )
        for i, row in enumerate(cluster)
    ]
    return _table(("finding", "severity", "bookie", "first seen", "details"), rows)


def _notes(snapshot: DashboardSnapshot) -> list[Component]:
    notes: list[Component] = []
    if snapshot.missing_tables:
        notes.append(html.Div(f"not created yet: {', '.join(snapshot.missing_tables)} (no data yet)"))
    notes.extend(html.Div(f"cannot read now: {problem}") for problem in snapshot.problems)
    return notes


def render(snapshot: DashboardSnapshot) -> dict[tuple[str, str], object]:
    """The value of every output of the page for ``snapshot``, keyed by (element id, property)."""
    overview, checker = snapshot.overview, snapshot.checker
    texts = dict.fromkeys(NUMBER_IDS, NO_DATA)  # the figures of the sections that are None
    texts["status"] = _DASH
    texts["generated-at"] = _when(snapshot.generated_at)
    if overview is not None:
        texts |= _overview_texts(overview)
    if snapshot.coverage is not None:
        texts |= _coverage_texts(snapshot.coverage)
    if snapshot.latency is not None:
        texts |= _latency_texts(snapshot.latency)
    if snapshot.under_replication is not None:
        texts |= _stuck_texts(snapshot.under_replication)
    if checker is not None:
        texts |= _checker_texts(checker)
    values: dict[tuple[str, str], object] = {(element_id, "children"): text for element_id, text in texts.items()}
    status_class = "unknown" if overview is None else ("healthy" if overview.status == HEALTHY else "unhealthy")
    values[("status", "className")] = f"status {status_class}"
    values[("checker-state", "className")] = "" if checker is None else ("stalled" if checker.stalled else "running")
    values[("data-notes", "children")] = _notes(snapshot)
    values[("cluster-findings", "children")] = _cluster_table(snapshot.cluster)
    values[("worst-ledgers", "children")] = _worst_table(snapshot.worst)
    values[("bookie-table", "children")] = _bookie_table(snapshot.bookies)
    values[("under-replication-table", "children")] = _stuck_table(snapshot.under_replication)
    values[("category-chart", "figure")] = category_chart(snapshot.categories)
    values[("timeline-chart", "figure")] = timeline_chart(snapshot.timeline)
    values[("bookie-chart", "figure")] = bookie_chart(snapshot.bookies)
    values[("under-replication-chart", "figure")] = under_replication_chart(snapshot.under_replication)
    values[("coverage-chart", "figure")] = coverage_chart(snapshot.coverage)
    values[("verification-age-chart", "figure")] = verification_age_chart(snapshot.verification_ages)
    values[("checker-chart", "figure")] = checker_chart(snapshot.runs)
    return values


def _overview_texts(overview: Overview) -> dict[str, str]:
    return {
        "status": overview.status,
        **{f"open-{severity}": str(overview.by_severity.get(severity, 0)) for severity in SEVERITIES},
        "open-total": str(overview.open_total),
        "ledgers-affected": str(overview.ledgers_affected),
        "data-loss-ledgers": str(overview.data_loss_ledgers),
    }


def _coverage_texts(coverage: Coverage) -> dict[str, str]:
    return {
        "coverage-percent": _DASH if coverage.coverage is None else f"{coverage.coverage * 100:.1f} %",
        "coverage-closed": str(coverage.closed_ledgers),
        "coverage-verified": str(coverage.verified_ledgers),
        "coverage-unverified": str(coverage.unverified_ledgers),
        "coverage-oldest": _when(coverage.oldest_verification),
    }


def _latency_texts(latency: Latency) -> dict[str, str]:
    return {
        "latency-checks": str(latency.checks),
        "latency-p50": _ms_text(latency.p50_ms),
        "latency-p90": _ms_text(latency.p90_ms),
        "latency-p99": _ms_text(latency.p99_ms),
    }


def _stuck_texts(stuck: Sequence[StuckLedger]) -> dict[str, str]:
    oldest = f"{max(row.age_hours for row in stuck):.2f}" if stuck else _DASH
    return {"under-replication-count": str(len(stuck)), "under-replication-oldest": oldest}


def _checker_texts(checker: CheckerHealth) -> dict[str, str]:
    idle = format_duration_ms(int(checker.seconds_since_last_batch * 1000))
    return {
        "checker-state": f"stalled ({idle} idle)" if checker.stalled else "running",
        "last-batch-id": str(checker.last_batch_id),
        "last-batch-at": _when(checker.last_batch_at),
        "last-batch-age": idle,
        "last-batch-duration": _ms_text(checker.last_duration_ms),
        "checker-lag": "unknown" if checker.last_lag_records is None else str(checker.last_lag_records),
        "batches-per-minute": f"{checker.batches_per_minute:.1f}",
        "events-last-hour": str(checker.events_last_hour),
        "checks-last-hour": str(checker.checks_last_hour),
        "violations-last-hour": str(checker.violations_last_hour),
    }
