"""The dashboard's page: its HTML skeleton, the elements every refresh fills, and their ids.

:func:`build_layout` gives the page: a header, one section per question and the ``dcc.Interval`` that refreshes it;
every figure starts as "…" until the first refresh. Every number is the text of an element with a stable ``id``
(:data:`NUMBER_IDS`), so scripts and tests can read it; :data:`OUTPUTS` lists every (element id, property) the
refresh callback sets, in the order it returns them. :data:`INDEX` is the HTML around the page, with its styles.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from dash import dcc, html
from dash.development.base_component import Component

__all__ = ["INDEX", "NUMBER_IDS", "OUTPUTS", "build_layout"]

_PENDING: Final = "…"

#: The elements whose text is one figure, in page order (what scripts and tests may read).
NUMBER_IDS: Final = (
    "status",
    "generated-at",
    "open-critical",
    "open-warning",
    "open-info",
    "open-total",
    "ledgers-affected",
    "data-loss-ledgers",
    "coverage-percent",
    "coverage-closed",
    "coverage-verified",
    "coverage-unverified",
    "coverage-oldest",
    "latency-checks",
    "latency-p50",
    "latency-p90",
    "latency-p99",
    "under-replication-count",
    "under-replication-oldest",
    "checker-state",
    "last-batch-id",
    "last-batch-at",
    "last-batch-age",
    "last-batch-duration",
    "checker-lag",
    "batches-per-minute",
    "events-last-hour",
    "checks-last-hour",
    "violations-last-hour",
)
#: Elements whose children are built per refresh (tables, notes).
_BLOCK_IDS: Final = ("data-notes", "cluster-findings", "worst-ledgers", "bookie-table", "under-replication-table")
_CHART_IDS: Final = (
    "category-chart",
    "timeline-chart",
    "bookie-chart",
    "under-replication-chart",
    "coverage-chart",
    "verification-age-chart",
    "checker-chart",
)
#: Every (element id, property) the refresh sets, in the order the callback returns them.
OUTPUTS: Final = (
    *((name, "children") for name in NUMBER_IDS + _BLOCK_IDS),
    *((name, "figure") for name in _CHART_IDS),
    ("status", "className"),
    ("checker-state", "className"),
)

#: The HTML around the page (Dash fills the ``{%...%}`` parts): the page's styles live here.
INDEX: Final = """<!DOCTYPE html>
<html lang="en">
    <head>
        {%metas%}
        <title>{%title%}</title>
        {%favicon%}
        {%css%}
        <style>
            body { margin: 0; background: #f4f6f8; color: #2c3e50; font: 14px/1.4 system-ui, sans-serif; }
            header { display: flex; align-items: baseline; gap: 16px; padding: 14px 24px; background: #1f2d3a;
                     color: #ecf0f1; }
            header h1 { margin: 0; font-size: 20px; }
            header .meta { color: #aab7c4; font-size: 12px; }
            .status { padding: 2px 10px; border-radius: 10px; font-weight: 600; background: #7f8c8d; }
            .status.healthy { background: #27ae60; } .status.unhealthy { background: #c0392b; }
            main { padding: 16px 24px; display: grid; gap: 16px; grid-template-columns: repeat(2, minmax(0, 1fr)); }
            .wide { grid-column: 1 / -1; }
            section { background: #fff; border-radius: 8px; padding: 12px 16px; box-shadow: 0 1px 2px #0001; }
            section h2 { margin: 0 0 8px; font-size: 15px; }
            .tiles { display: flex; flex-wrap: wrap; gap: 10px; margin-bottom: 6px; }
            .tile { min-width: 110px; padding: 6px 10px; border-radius: 6px; background: #f4f6f8; }
            .tile .label { font-size: 11px; color: #7f8c8d; text-transform: uppercase; letter-spacing: .03em; }
            .tile .value { font-size: 20px; font-weight: 600; }
            .tile.critical .value { color: #c0392b; } .tile.warning .value { color: #e08e0b; }
            .tile.info .value { color: #2e86c1; }
            .running { color: #27ae60; } .stalled { color: #c0392b; }
            table { border-collapse: collapse; width: 100%; font-size: 13px; }
            th, td { text-align: left; padding: 4px 8px; border-bottom: 1px solid #e5e8ec; vertical-align: top; }
            th { color: #7f8c8d; font-weight: 600; }
            td.num { text-align: right; font-variant-numeric: tabular-nums; }
            td.time { white-space: nowrap; }
            .sev-critical { color: #c0392b; font-weight: 600; } .sev-warning { color: #e08e0b; font-weight: 600; }
            .sev-info { color: #2e86c1; }
            .empty, .notes { color: #7f8c8d; margin: 4px 0; }
            .notes:empty { display: none; }
        </style>
    </head>
    <body>
        {%app_entry%}
        <footer>
            {%config%}
            {%scripts%}
            {%renderer%}
        </footer>
    </body>
</html>"""


def _tile(label: str, element_id: str, kind: str = "") -> html.Div:
    return html.Div(
        className=f"tile {kind}".strip(),
        children=[html.Div(label, className="label"), html.Div(_PENDING, id=element_id, className="value")],
    )


def _tiles(*tiles: html.Div) -> html.Div:
    return html.Div(className="tiles", children=list(tiles))


def _graph(element_id: str) -> dcc.Graph:
    return dcc.Graph(id=element_id, config={"displaylogo": False, "displayModeBar": False})


def _section(title: str, children: Sequence[Component], *, wide: bool = False) -> html.Section:
    return html.Section(className="wide" if wide else "", children=[html.H2(title), *children])


def build_layout(refresh_seconds: float, data_dir: str) -> html.Div:
    """The page: header, one section per question, and the interval that refreshes it."""
    header = html.Header(
        children=[
            html.H1("Scrutiny"),
            html.Span(_PENDING, id="status", className="status"),
            html.Span(
                className="meta", children=[f"data: {data_dir} · updated ", html.Span(_PENDING, id="generated-at")]
            ),
        ]
    )
    sections = [
        _section("Cluster findings", [html.Div(id="cluster-findings", children=_PENDING)], wide=True),
        _section(
            "Open violations",
            [
                _tiles(
                    _tile("critical", "open-critical", "critical"),
                    _tile("warning", "open-warning", "warning"),
                    _tile("info", "open-info", "info"),
                    _tile("total", "open-total"),
                    _tile("ledgers affected", "ledgers-affected"),
                    _tile("ledgers losing data", "data-loss-ledgers", "critical"),
                ),
                _graph("category-chart"),
            ],
        ),
        _section("Detections and resolutions", [_graph("timeline-chart")]),
        _section("Worst ledgers", [html.Div(id="worst-ledgers", children=_PENDING)], wide=True),
        _section("Violations per bookie", [_graph("bookie-chart"), html.Div(id="bookie-table")]),
        _section(
            "Stuck under-replicated ledgers",
            [
                _tiles(
                    _tile("ledgers", "under-replication-count", "critical"),
                    _tile("oldest (hours)", "under-replication-oldest"),
                ),
                _graph("under-replication-chart"),
                html.Div(id="under-replication-table"),
            ],
        ),
        _section(
            "Check coverage",
            [
                _tiles(
                    _tile("coverage", "coverage-percent"),
                    _tile("closed ledgers", "coverage-closed"),
                    _tile("verified", "coverage-verified"),
                    _tile("not verified", "coverage-unverified"),
                    _tile("oldest verification", "coverage-oldest"),
                ),
                _tiles(
                    _tile("checks with latency", "latency-checks"),
                    _tile("latency p50", "latency-p50"),
                    _tile("p90", "latency-p90"),
                    _tile("p99", "latency-p99"),
                ),
                _graph("coverage-chart"),
                _graph("verification-age-chart"),
            ],
        ),
        _section(
            "Checker",
            [
                _tiles(
                    _tile("state", "checker-state"),
                    _tile("last batch", "last-batch-id"),
                    _tile("finished", "last-batch-at"),
                    _tile("ago", "last-batch-age"),
                    _tile("duration", "last-batch-duration"),
                    _tile("lag (records)", "checker-lag"),
                    _tile("batches / min", "batches-per-minute"),
                    _tile("events, 1 h", "events-last-hour"),
                    _tile("checks, 1 h", "checks-last-hour"),
                    _tile("violations, 1 h", "violations-last-hour"),
                ),
                _graph("checker-chart"),
            ],
        ),
    ]
    return html.Div(
        children=[
            header,
            html.Div(id="data-notes", className="notes", style={"padding": "0 24px"}),
            html.Main(children=sections),
            dcc.Interval(id="refresh", interval=int(refresh_seconds * 1000), n_intervals=0),
        ]
    )
