"""The dashboard's charts: each section of a :class:`~.dashboard_snapshot.Snapshot` as a Plotly figure.

Every ``*_chart`` function returns a plain dict (``{"data": [...], "layout": {...}}``) that ``dcc.Graph`` draws; a
section that is None gives :func:`empty_chart` with "no data yet", an empty one a figure saying what is absent. They
are pure, so tests check them without a browser.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Final

from scrutiny.connectors.tables.schemas import OPEN_VIOLATIONS
from scrutiny.dashboard.snapshot import (
    NO_DATA,
    SEVERITIES,
    BookieHealth,
    CategoryCount,
    Coverage,
    RunPoint,
    StuckLedger,
    Timeline,
    VerificationAge,
)

__all__ = [
    "SEVERITY_COLORS",
    "bookie_chart",
    "category_chart",
    "checker_chart",
    "coverage_chart",
    "verification_age_chart",
    "empty_chart",
    "timeline_chart",
    "under_replication_chart",
]

SEVERITY_COLORS: Final[Mapping[str, str]] = {"critical": "#c0392b", "warning": "#e08e0b", "info": "#2e86c1"}

_GRID: Final = "#e5e8ec"
_DETECTED_COLOR: Final = "#c0392b"
_RESOLVED_COLOR: Final = "#27ae60"
_NEUTRAL_COLOR: Final = "#9aa4ae"


def _plot_time(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")


def _axis(**extra: object) -> dict[str, object]:
    """An axis sized to its labels, with the page's grid (``extra`` added)."""
    return {"automargin": True, "gridcolor": _GRID, **extra}


def _layout(**extra: object) -> dict[str, object]:
    layout: dict[str, object] = {
        "margin": {"l": 10, "r": 10, "t": 10, "b": 10},
        "paper_bgcolor": "rgba(0,0,0,0)",
        "plot_bgcolor": "rgba(0,0,0,0)",
        "font": {"family": "system-ui, sans-serif", "size": 12, "color": "#2c3e50"},
        "legend": {"orientation": "h", "y": -0.2, "traceorder": "normal"},
        "height": 280,
        "xaxis": _axis(),
        "yaxis": _axis(),
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
            xaxis=_axis(type="date"),
            yaxis=_axis(title={"text": title}, rangemode="tozero"),
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
            xaxis=_axis(title={"text": "hours"}),
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


def verification_age_chart(ages: Sequence[VerificationAge] | None) -> dict[str, object]:
    """Ledgers by the age of their last verification: the quarters of the re-verification interval, late, overdue."""
    if ages is None:
        return empty_chart("no verification counted yet (the streaming job with checker.reverify_interval > 0)")
    if not any(row.ledgers for row in ages):
        return empty_chart("no ledger verified yet")
    colors = {"late": SEVERITY_COLORS["warning"], "overdue": SEVERITY_COLORS["critical"]}
    trace = {
        "type": "bar",
        "name": "ledgers",
        "x": [row.age_class for row in ages],
        "y": [row.ledgers for row in ages],
        "marker": {"color": [colors.get(row.age_class, _RESOLVED_COLOR) for row in ages]},
        "text": [_age_range(row) for row in ages],
        "hovertemplate": "%{text}: %{y} ledger(s)<extra></extra>",
    }
    return {
        "data": [trace],
        "layout": _layout(
            showlegend=False,
            height=240,
            xaxis=_axis(title={"text": "age of the last verification (share of the interval)"}),
            yaxis=_axis(title={"text": "ledgers"}, rangemode="tozero"),
        ),
    }


def _age_range(row: VerificationAge) -> str:
    """An age class as hours, for the hover text."""
    start = row.age_from_seconds / 3600
    return f"{start:g} h and older" if row.age_to_seconds is None else f"{start:g}-{row.age_to_seconds / 3600:g} h"


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
            xaxis=_axis(type="date"),
            yaxis=_axis(title={"text": "ms"}, rangemode="tozero"),
            yaxis2={"overlaying": "y", "side": "right", "rangemode": "tozero", "title": {"text": "records"}},
        ),
    }
