"""The dashboard's web application: the Dash app over the tables and its live refresh.

:func:`create_app` builds a Dash app (on its own Flask server) whose page (:mod:`.dashboard_layout`) refreshes itself
every ``refresh_seconds``: a ``dcc.Interval`` drives one callback that reads a :class:`~.dashboard_snapshot.Snapshot`
(:mod:`.dashboard_data`, shared between tabs by a :class:`SnapshotCache`) and fills every number, table and chart
(:mod:`.dashboard_render`); no page reload is needed while the streaming job writes. A refresh never breaks the page:
what cannot be read shows "no data yet". With a token, every request must present it (:mod:`.dashboard_server`,
which also serves the app).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Final

from dash import Dash, Input, Output
from flask import Flask
from werkzeug.middleware.proxy_fix import ProxyFix

from scrutiny.core.health_summary import DEFAULT_STALL_AFTER_MS, DEFAULT_WORST
from scrutiny.dashboard.data import load_snapshot
from scrutiny.dashboard.layout import INDEX, OUTPUTS, build_layout
from scrutiny.dashboard.render import render
from scrutiny.dashboard.server import (
    DashboardError,
    install_host_guard,
    install_security_headers,
    install_token_guard,
)
from scrutiny.dashboard.snapshot import DashboardSnapshot

__all__ = ["DEFAULT_REFRESH_SECONDS", "SnapshotCache", "create_app"]

log = logging.getLogger(__name__)

DEFAULT_REFRESH_SECONDS: Final = 5.0


class SnapshotCache:
    """The latest snapshot, reloaded when older than ``max_age_s``: tabs refreshing together share one read.

    Thread-safe (the server answers requests on several threads); a caller arriving during a load waits for it.
    """

    def __init__(
        self, load: Callable[[], DashboardSnapshot], *, max_age_s: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._load = load
        self._max_age_s = max_age_s
        self._clock = clock
        self._lock = threading.Lock()
        self._snapshot: DashboardSnapshot | None = None
        self._loaded_at = 0.0

    def get(self) -> DashboardSnapshot:
        """The cached snapshot, or a fresh one when it is missing or stale."""
        with self._lock:
            if self._snapshot is None or self._clock() - self._loaded_at >= self._max_age_s:
                self._snapshot = self._load()
                self._loaded_at = self._clock()
            return self._snapshot


def create_app(
    data_dir: str | Path,
    *,
    token: str | None = None,
    refresh_seconds: float = DEFAULT_REFRESH_SECONDS,
    worst: int = DEFAULT_WORST,
    stall_after_ms: int = DEFAULT_STALL_AFTER_MS,
    clock: Callable[[], datetime] | None = None,
    trust_proxy: bool = False,
) -> Dash:
    """The dashboard over the tables of ``data_dir``; with ``token``, every request must present it (else 401).

    ``trust_proxy``: behind a reverse proxy that terminates TLS, the scheme of ``X-Forwarded-Proto`` is the request's
    (the token's cookie is then ``Secure``); never set it when clients can reach the dashboard directly.

    ``clock`` gives "now" for the time windows (default: the current time). Nothing is read until a page asks.
    """
    if refresh_seconds <= 0:
        raise DashboardError(f"the refresh interval must be positive, got {refresh_seconds}")
    server = Flask(__name__)
    if trust_proxy:
        server.wsgi_app = ProxyFix(server.wsgi_app, x_proto=1)  # type: ignore[method-assign]
    if token is not None:
        install_token_guard(server, token)
    else:
        install_host_guard(server)
    install_security_headers(server)
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
        index_string=INDEX,
    )
    app.layout = build_layout(refresh_seconds, str(data_dir))

    def load() -> DashboardSnapshot:
        now = None if clock is None else clock()  # None: load_snapshot takes the current time
        return load_snapshot(data_dir, now=now, worst=worst, stall_after_ms=stall_after_ms)

    cache = SnapshotCache(load, max_age_s=min(1.0, refresh_seconds / 2))

    def update(_intervals: object) -> list[object]:
        try:
            values = render(cache.get())
        except Exception:  # a refresh must never break the page: log it, show "no data yet"
            log.exception("dashboard refresh failed")
            values = render(
                DashboardSnapshot(str(data_dir), datetime.now(UTC), problems=("refresh failed (see the log)",))
            )
        return [values[key] for key in OUTPUTS]

    app.callback([Output(name, prop) for name, prop in OUTPUTS], Input("refresh", "n_intervals"))(update)
    return app
