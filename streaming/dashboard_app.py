"""The dashboard's web application: the Dash page, its live refresh, the token guard and the HTTP server.

:func:`create_app` builds a Dash app (on its own Flask server) whose page refreshes itself every
``refresh_seconds`` (a ``dcc.Interval`` drives one callback that reads a :class:`~.dashboard_data.Snapshot` and
fills every number, table and chart); no page reload is needed while the streaming job writes. Every number is the
text of an element with a stable ``id`` (:data:`NUMBER_IDS`), so scripts and tests can read it. A refresh never
breaks the page: what cannot be read shows "no data yet".

With a ``token``, :func:`install_token_guard` makes every request (the page, its scripts, the callbacks) present it
as ``?token=...`` (answered with an HttpOnly cookie that carries it from then on), as ``Authorization: Bearer ...``
or as that cookie; anything else gets 401. Tokens are compared with :func:`hmac.compare_digest`.

:class:`DashboardServer` serves the app with Werkzeug's threaded server, binding when constructed (so a port in use
is a :class:`DashboardError`, one line); request lines are not logged, since they may carry the token.
"""

from __future__ import annotations

import hmac
import ipaddress
import logging
import socket
import threading
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Final

from dash import Dash, Input, Output, dcc, html
from dash.development.base_component import Component
from flask import Flask, Response, g, request
from werkzeug.serving import BaseWSGIServer, WSGIRequestHandler, get_sockaddr, make_server, select_address_family

from scrutiny.core.errors import ScrutinyError
from scrutiny.core.health_summary import (
    DEFAULT_STALL_AFTER_MS,
    DEFAULT_WORST,
    HEALTHY,
    format_duration_ms,
    format_utc_ms,
)
from scrutiny.streaming.dashboard_data import (
    NO_DATA,
    BookieHealth,
    Snapshot,
    StuckLedger,
    WorstLedger,
    bookie_chart,
    category_chart,
    checker_chart,
    coverage_chart,
    load_snapshot,
    timeline_chart,
    under_replication_chart,
)

__all__ = [
    "DEFAULT_REFRESH_SECONDS",
    "NUMBER_IDS",
    "TOKEN_COOKIE",
    "DashboardError",
    "DashboardServer",
    "SnapshotCache",
    "build_layout",
    "create_app",
    "install_token_guard",
    "is_loopback",
    "render",
]

log = logging.getLogger(__name__)

DEFAULT_REFRESH_SECONDS: Final = 5.0
#: The cookie that carries the token after a ``?token=`` visit.
TOKEN_COOKIE: Final = "scrutiny_dashboard_token"
_PENDING: Final = "…"
_DASH: Final = "–"

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
_BLOCK_IDS: Final = ("data-notes", "worst-ledgers", "bookie-table", "under-replication-table")
_CHART_IDS: Final = (
    "category-chart",
    "timeline-chart",
    "bookie-chart",
    "under-replication-chart",
    "coverage-chart",
    "checker-chart",
)
_OUTPUTS: Final = (
    *((name, "children") for name in NUMBER_IDS + _BLOCK_IDS),
    *((name, "figure") for name in _CHART_IDS),
    ("status", "className"),
    ("checker-state", "className"),
)


class DashboardError(ScrutinyError):
    """The dashboard cannot be served as asked (e.g. the address cannot be bound)."""


# ----------------------------------------------------------------------------------------------- security


def is_loopback(host: str) -> bool:
    """Whether binding to ``host`` exposes the dashboard to this machine only (127.0.0.0/8, ::1, localhost)."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a host name: it may resolve to any interface


def _same(supplied: str, token: str) -> bool:
    return hmac.compare_digest(supplied.encode("utf-8"), token.encode("utf-8"))


def install_token_guard(server: Flask, token: str) -> None:
    """Make every request of ``server`` present ``token`` (query, bearer header or cookie), else answer 401."""
    if not token:
        raise DashboardError("the dashboard token must not be empty")

    def guard() -> Response | None:
        supplied = request.args.get("token")
        if supplied is not None and _same(supplied, token):
            g.scrutiny_set_cookie = True
            return None
        scheme, _, credentials = request.headers.get("Authorization", "").partition(" ")
        if scheme.lower() == "bearer" and _same(credentials.strip(), token):
            return None
        cookie = request.cookies.get(TOKEN_COOKIE)
        if cookie is not None and _same(cookie, token):
            return None
        return Response(
            "401 Unauthorized: this dashboard needs its token (?token=... or Authorization: Bearer ...)\n",
            status=401,
            mimetype="text/plain",
            headers={"WWW-Authenticate": 'Bearer realm="scrutiny dashboard"'},
        )

    def remember(response: Response) -> Response:
        if g.get("scrutiny_set_cookie"):
            response.set_cookie(
                TOKEN_COOKIE, token, httponly=True, samesite="Strict", secure=request.is_secure, path="/"
            )
        return response

    server.before_request(guard)
    server.after_request(remember)


def _install_headers(server: Flask) -> None:
    """Headers on every response: no Referer (a ``?token=`` URL must not leak), no framing, no sniffing."""

    def add(response: Response) -> Response:
        response.headers.setdefault("Referrer-Policy", "no-referrer")
        response.headers.setdefault("X-Frame-Options", "DENY")
        response.headers.setdefault("X-Content-Type-Options", "nosniff")
        return response

    server.after_request(add)


# ----------------------------------------------------------------------------------------------- data


class SnapshotCache:
    """The latest snapshot, reloaded when older than ``max_age_s``: tabs refreshing together share one read.

    Thread-safe (the server answers requests on several threads); a caller arriving during a load waits for it.
    """

    def __init__(
        self, load: Callable[[], Snapshot], *, max_age_s: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._load = load
        self._max_age_s = max_age_s
        self._clock = clock
        self._lock = threading.Lock()
        self._snapshot: Snapshot | None = None
        self._loaded_at = 0.0

    def get(self) -> Snapshot:
        """The cached snapshot, or a fresh one when it is missing or stale."""
        with self._lock:
            if self._snapshot is None or self._clock() - self._loaded_at >= self._max_age_s:
                self._snapshot = self._load()
                self._loaded_at = self._clock()
            return self._snapshot


# ----------------------------------------------------------------------------------------------- layout

_INDEX: Final = """<!DOCTYPE html>
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
        _section(
            "Open violations",
            [
                html.Div(
                    className="tiles",
                    children=[
                        _tile("critical", "open-critical", "critical"),
                        _tile("warning", "open-warning", "warning"),
                        _tile("info", "open-info", "info"),
                        _tile("total", "open-total"),
                        _tile("ledgers affected", "ledgers-affected"),
                        _tile("ledgers losing data", "data-loss-ledgers", "critical"),
                    ],
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
                html.Div(
                    className="tiles",
                    children=[
                        _tile("ledgers", "under-replication-count", "critical"),
                        _tile("oldest (hours)", "under-replication-oldest"),
                    ],
                ),
                _graph("under-replication-chart"),
                html.Div(id="under-replication-table"),
            ],
        ),
        _section(
            "Check coverage",
            [
                html.Div(
                    className="tiles",
                    children=[
                        _tile("coverage", "coverage-percent"),
                        _tile("closed ledgers", "coverage-closed"),
                        _tile("verified", "coverage-verified"),
                        _tile("not verified", "coverage-unverified"),
                        _tile("oldest verification", "coverage-oldest"),
                    ],
                ),
                html.Div(
                    className="tiles",
                    children=[
                        _tile("checks with latency", "latency-checks"),
                        _tile("latency p50", "latency-p50"),
                        _tile("p90", "latency-p90"),
                        _tile("p99", "latency-p99"),
                    ],
                ),
                _graph("coverage-chart"),
            ],
        ),
        _section(
            "Checker",
            [
                html.Div(
                    className="tiles",
                    children=[
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
                    ],
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


# ----------------------------------------------------------------------------------------------- rendering


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
        return html.P(NO_DATA, className="empty")
    if not worst:
        return html.P("no open violations", className="empty")
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
    headers = (
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
    return _table(headers, rows)


def _bookie_table(bookies: Sequence[BookieHealth] | None) -> Component:
    if bookies is None:
        return html.P(NO_DATA, className="empty")
    if not bookies:
        return html.P("no open violation names a bookie", className="empty")
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
        return html.P(NO_DATA, className="empty")
    if not stuck:
        return html.P("none", className="empty")
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
    for severity in ("critical", "warning", "info"):
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


# ----------------------------------------------------------------------------------------------- the app


def create_app(
    data_dir: str | Path,
    *,
    token: str | None = None,
    refresh_seconds: float = DEFAULT_REFRESH_SECONDS,
    worst: int = DEFAULT_WORST,
    stall_after_ms: int = DEFAULT_STALL_AFTER_MS,
    clock: Callable[[], datetime] | None = None,
) -> Dash:
    """The dashboard over the tables of ``data_dir``; with ``token``, every request must present it (else 401).

    ``clock`` gives "now" for the time windows (default: the current time). Nothing is read until a page asks.
    """
    if refresh_seconds <= 0:
        raise DashboardError(f"the refresh interval must be positive, got {refresh_seconds}")
    server = Flask(__name__)
    if token is not None:
        install_token_guard(server, token)
    _install_headers(server)
    app = Dash(
        __name__,
        server=server,  # type: ignore[arg-type]  # Dash's annotation leaves out the Flask instance it accepts
        title="Scrutiny dashboard",
        update_title="",
        serve_locally=True,
        include_assets_files=False,
        compress=False,
        add_log_handler=False,
        enable_mcp=False,
        index_string=_INDEX,
    )
    app.layout = build_layout(refresh_seconds, str(data_dir))

    def load() -> Snapshot:
        now = clock() if clock is not None else datetime.now(UTC)
        return load_snapshot(data_dir, now=now, worst=worst, stall_after_ms=stall_after_ms)

    cache = SnapshotCache(load, max_age_s=min(1.0, refresh_seconds / 2))

    def update(_intervals: object) -> list[object]:
        try:
            values = render(cache.get())
        except Exception:  # a refresh must never break the page: log it, show "no data yet"
            log.exception("dashboard refresh failed")
            values = render(Snapshot(str(data_dir), datetime.now(UTC), problems=("refresh failed (see the log)",)))
        return [values[key] for key in _OUTPUTS]

    app.callback([Output(name, prop) for name, prop in _OUTPUTS], Input("refresh", "n_intervals"))(update)
    return app


# ----------------------------------------------------------------------------------------------- the server


class _QuietHandler(WSGIRequestHandler):
    """Werkzeug's handler without request lines in the log: they may carry ``?token=``, and the page polls."""

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        return


class DashboardServer:
    """The app on ``host:port`` (port 0: any free port), multi-threaded. Binds when constructed.

    Run it with :meth:`serve_forever` (the command) or :meth:`start` / :meth:`stop` (a background thread, tests).
    Raises DashboardError (one line) when the address cannot be bound.
    """

    def __init__(self, app: Dash, host: str, port: int) -> None:
        self.host = host
        family = select_address_family(host, port)
        try:
            listener = socket.socket(family, socket.SOCK_STREAM)
        except OSError as error:
            raise DashboardError(f"cannot listen on {host}:{port}: {error.strerror or error}") from error
        try:
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            listener.bind(get_sockaddr(host, port, family))
            listener.listen(128)
            self._server: BaseWSGIServer = make_server(
                host, port, app.server, threaded=True, request_handler=_QuietHandler, fd=listener.fileno()
            )
        except OSError as error:
            raise DashboardError(f"cannot listen on {host}:{port}: {error.strerror or error}") from error
        finally:
            listener.close()  # the server holds its own duplicate of the socket
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        """The port bound (the one chosen when 0 was asked)."""
        return int(self._server.port)

    def url(self, token: str | None = None) -> str:
        """The page's address (with ``?token=`` when given)."""
        host = self.host
        if host in ("", "0.0.0.0", "::"):
            host = socket.gethostname()
        elif ":" in host:
            host = f"[{host}]"
        query = f"?token={token}" if token else ""
        return f"http://{host}:{self.port}/{query}"

    def serve_forever(self) -> None:
        """Serve until :meth:`stop` or Ctrl-C; closes the socket on the way out."""
        self._server.serve_forever()

    def start(self) -> None:
        """Serve on a daemon thread."""
        self._thread = threading.Thread(target=self.serve_forever, name="scrutiny-dashboard", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        """Stop serving and close the socket (idempotent)."""
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join(timeout)
            self._thread = None
        self._server.server_close()
