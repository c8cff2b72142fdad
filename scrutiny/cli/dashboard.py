"""``scrutiny dashboard``: a live web dashboard over the checker's Delta tables (docs/dashboard.md).

Serves the page of :mod:`scrutiny.dashboard.app` with :mod:`scrutiny.dashboard.server` until
Ctrl-C. Bound to 127.0.0.1 by default. A token is enforced when one is given (``--token-file``, ``--token`` or
``$SCRUTINY_DASHBOARD_TOKEN``) and always when the address is not a loopback one: without a given token one is
generated and the URL carrying it is printed once. A missing data directory, one without any of the tables, or an
address that cannot be bound ends the command with exit code 2 and one line on standard error.
"""

from __future__ import annotations

import argparse
import os
import secrets
import signal
import sys
from collections.abc import Mapping

from scrutiny.cli.commands import COMMAND_HELP
from scrutiny.cli.common import (
    InputError,
    add_config_argument,
    host_argument,
    port_argument,
    positive_seconds_argument,
    read_token_file,
)
from scrutiny.dashboard.app import DEFAULT_REFRESH_SECONDS, create_app
from scrutiny.dashboard.data import check_data_dir
from scrutiny.dashboard.server import DashboardServer, is_loopback
from scrutiny.settings.loader import load_settings

#: The environment variable that may hold the token.
TOKEN_ENV = "SCRUTINY_DASHBOARD_TOKEN"
DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8050
#: The page refreshes at least once a day (the browser's timer holds about 24 days of milliseconds).
MAX_REFRESH_SECONDS = 86_400
_TOKEN_BYTES = 32


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``dashboard``."""
    dashboard = commands.add_parser(
        "dashboard",
        help=COMMAND_HELP["dashboard"],
        description=(
            "Serves a web page over the Delta tables of the data directory that refreshes itself while the "
            "streaming job writes: open violations, the worst ledgers with their evidence, bookies, "
            "under-replication, check coverage and the checker's own health. See docs/dashboard.md."
        ),
    )
    dashboard.add_argument("--data-dir", metavar="DIR", help="the tables' directory (default: checker.data_dir)")
    dashboard.add_argument(
        "--host", type=host_argument, default=DEFAULT_HOST, help=f"address to bind (default: {DEFAULT_HOST})"
    )
    dashboard.add_argument(
        "--port",
        type=port_argument,
        default=DEFAULT_PORT,
        help=f"port to bind, 0 for any free one (default: {DEFAULT_PORT})",
    )
    secret = dashboard.add_mutually_exclusive_group()
    secret.add_argument(
        "--token",
        help=f"require this token on every request (default: ${TOKEN_ENV}; generated when the address is not loopback;"
        " visible to other users in the process list: prefer --token-file)",
    )
    secret.add_argument("--token-file", metavar="FILE", help="require the token this file holds")
    dashboard.add_argument(
        "--trust-proxy",
        action="store_true",
        help="behind a TLS-terminating reverse proxy: take the scheme from X-Forwarded-Proto (the cookie is Secure)",
    )
    dashboard.add_argument(
        "--refresh-seconds",
        type=_refresh_seconds,
        default=DEFAULT_REFRESH_SECONDS,
        metavar="S",
        help=f"how often the page refreshes (default: {DEFAULT_REFRESH_SECONDS:g})",
    )
    add_config_argument(dashboard)
    dashboard.set_defaults(handler=_run)


def _refresh_seconds(text: str) -> float:
    value = positive_seconds_argument(text)
    if value > MAX_REFRESH_SECONDS:
        raise argparse.ArgumentTypeError(f"must be at most {MAX_REFRESH_SECONDS} (a day), got {text}")
    return value


def resolve_token(host: str, given: str | None, env: Mapping[str, str]) -> tuple[str | None, bool]:
    """The token to enforce and whether it was generated here.

    A given token (``--token``, else a non-empty ``$SCRUTINY_DASHBOARD_TOKEN``) is always enforced; without one, a
    loopback address needs none and any other address gets a fresh ``secrets.token_urlsafe`` token.
    """
    if given is not None:
        if not given.strip():
            raise InputError("--token must not be empty")
        return given, False
    from_env = env.get(TOKEN_ENV, "")
    if from_env.strip():
        return from_env, False
    if is_loopback(host):
        return None, False
    return secrets.token_urlsafe(_TOKEN_BYTES), True


def _run(args: argparse.Namespace) -> int:
    settings = load_settings(args.config)
    given = read_token_file(args.token_file) if args.token_file else args.token
    token, generated = resolve_token(args.host, given, os.environ)
    data_dir = args.data_dir if args.data_dir is not None else settings.checker.data_dir
    missing = check_data_dir(data_dir)
    if args.token is not None:
        print(
            "scrutiny: warning: --token is visible to other users in the process list; prefer --token-file or"
            f" ${TOKEN_ENV}",
            file=sys.stderr,
        )
    for table in missing:
        print(f"scrutiny: note: table {table!r} does not exist yet in {data_dir}: no data yet", file=sys.stderr)
    app = create_app(
        data_dir,
        token=token,
        refresh_seconds=args.refresh_seconds,
        stall_after_ms=settings.stall_after_ms(),
        trust_proxy=args.trust_proxy,
    )
    server = DashboardServer(app, args.host, args.port)
    if generated:
        print(f"scrutiny dashboard: open {server.url(token)}", flush=True)
    elif token is not None:
        print(f"scrutiny dashboard: {server.url()} (token required)", flush=True)
    else:
        print(f"scrutiny dashboard: {server.url()}", flush=True)
    every = f"{args.refresh_seconds:g}"
    print(f"scrutiny dashboard: serving {data_dir}, refreshing every {every} s; Ctrl-C stops", flush=True)
    # SIGINT and SIGTERM stop it, even when it was started with SIGINT ignored (a background job of a script,
    # where Python installs no Ctrl-C handler of its own), as they stop every long-running command.
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, _interrupt)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        server.stop()
        # Read-only: nothing to write back. Leave at once, even while a request thread is still busy (a first page
        # load imports the charting libraries for seconds, and the interpreter's exit would wait for that).
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
    finally:
        server.stop()
    return 0


def _interrupt(_signum: int, _frame: object) -> None:
    raise KeyboardInterrupt
