"""The dashboard's HTTP side: the token guard, the security headers and the server that binds the app.

With a token, :func:`install_token_guard` makes every request (the page, its scripts, the callbacks) present it as
``?token=...`` (answered with an HttpOnly cookie, :data:`TOKEN_COOKIE`, that carries it from then on), as
``Authorization: Bearer ...`` or as that cookie; anything else gets 401. Tokens are compared with
:func:`hmac.compare_digest`. :func:`install_security_headers` keeps a ``?token=`` URL from leaking and the page from
being framed. :func:`is_loopback` tells whether an address needs a token at all; without one,
:func:`install_host_guard` answers only requests addressed to a loopback name (no DNS rebinding).

:class:`DashboardServer` serves the app with Werkzeug's threaded server, binding when constructed (so a port in use
is a :class:`DashboardError`, one line); request lines are not logged, since they may carry the token.
"""

from __future__ import annotations

import hmac
import socket
import threading
from typing import Final

from dash import Dash
from flask import Flask, Response, g, request
from werkzeug.serving import BaseWSGIServer, WSGIRequestHandler, get_sockaddr, make_server, select_address_family

from scrutiny.core.errors import ScrutinyError
from scrutiny.core.loopback import is_loopback

__all__ = [
    "TOKEN_COOKIE",
    "DashboardError",
    "DashboardServer",
    "install_security_headers",
    "install_host_guard",
    "install_token_guard",
    "is_loopback",
]

#: The cookie that carries the token after a ``?token=`` visit.
TOKEN_COOKIE: Final = "scrutiny_dashboard_token"


class DashboardError(ScrutinyError):
    """The dashboard cannot be served as asked (e.g. the address cannot be bound)."""


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


def install_host_guard(server: Flask) -> None:
    """Without a token: answer only requests addressed to a loopback name (``Host`` 127.0.0.1, [::1], localhost),
    else 421. A web page of another site whose name its DNS points at 127.0.0.1 (DNS rebinding) then cannot read the
    dashboard through the visitor's browser: its requests carry its own name in ``Host``."""

    def guard() -> Response | None:
        host = request.host.rsplit(":", 1)[0] if not request.host.endswith("]") else request.host
        if is_loopback(host):
            return None
        return Response(
            "421 Misdirected Request: this dashboard answers only to a loopback name (127.0.0.1, [::1], localhost)\n",
            status=421,
            mimetype="text/plain",
        )

    server.before_request(guard)


def install_security_headers(server: Flask) -> None:
    """Headers on every response: no Referer (a ``?token=`` URL must not leak), no framing, no sniffing."""

    def add(response: Response) -> Response:
        response.headers.setdefault("Referrer-Policy", "no-referrer")
        response.headers.setdefault("X-Frame-Options", "DENY")
        response.headers.setdefault("X-Content-Type-Options", "nosniff")
        return response

    server.after_request(add)


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
            # the server holds its own duplicate of the socket: this one is closed on leaving the block
            with socket.socket(family, socket.SOCK_STREAM) as listener:
                listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                listener.bind(get_sockaddr(host, port, family))
                listener.listen(128)
                self._server: BaseWSGIServer = make_server(
                    host, port, app.server, threaded=True, request_handler=_QuietHandler, fd=listener.fileno()
                )
        except OSError as error:
            raise DashboardError(f"cannot listen on {host}:{port}: {error.strerror or error}") from error
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
