"""``scrutiny services up|status|down``: the embedded ZooKeeper and Kafka broker.

Standard output carries only shell-style lines, so ``eval "$(scrutiny services up)"`` points every
later command at the services; progress and server logs go to standard error. Formats:

* ``sh`` (default): ``SCRUTINY_ZOOKEEPER=127.0.0.1:PORT; export SCRUTINY_ZOOKEEPER;``
* ``env``: ``SCRUTINY_ZOOKEEPER=127.0.0.1:PORT`` (an env file, ``set -a; . FILE``)

``status`` also prints one ``# <service> <state> ...`` comment line per service (comments are
ignored by ``eval`` and by env files) and exits 0 when both run, 3 when neither is recorded and
1 otherwise (crashed, unresponsive or only one running).
"""

from __future__ import annotations

import argparse
import shlex
import sys
from collections.abc import Mapping

from scrutiny.cli.commands import COMMAND_HELP
from scrutiny.cli.common import add_config_argument, seconds_argument
from scrutiny.services.servers import (
    ENV_NAMES,
    EmbeddedServices,
    ServicesError,
    ServiceState,
    resolve_state_dir,
)
from scrutiny.settings.loader import load_settings

EXIT_STATUS_DEGRADED = 1
EXIT_STATUS_STOPPED = 3
FORMATS = ("sh", "env")


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``services`` with its ``up``, ``status`` and ``down`` subcommands."""
    services = commands.add_parser(
        "services",
        help=COMMAND_HELP["services"],
        description="Local ZooKeeper and Apache Kafka (one KRaft node) servers on free 127.0.0.1 ports; "
        'eval "$(scrutiny services up)" points every command at them.',
    )
    actions = services.add_subparsers(dest="action", required=True, metavar="ACTION")
    up = actions.add_parser("up", help="start the services (reusing running ones) and print their variables")
    up.add_argument("--restart-crashed", action="store_true", help="start again a service whose recorded process died")
    up.add_argument(
        "--timeout", type=seconds_argument, default=30.0, metavar="SECONDS", help="start deadline per service"
    )
    status = actions.add_parser("status", help="print each service's state and the variables of running ones")
    down = actions.add_parser("down", help="stop the processes 'up' started and remove their state")
    for action in (up, status, down):
        action.add_argument("--state-dir", help="state directory (default: services.state_dir, then XDG)")
        add_config_argument(action)
    for action in (up, status):
        action.add_argument("--format", choices=FORMATS, default="sh", help="output lines for eval (sh) or env files")
    up.set_defaults(handler=_up)
    status.set_defaults(handler=_status)
    down.set_defaults(handler=_down)


def shell_lines(variables: Mapping[str, str], fmt: str = "sh") -> list[str]:
    """``NAME=VALUE; export NAME;`` lines (``sh``) or ``NAME=VALUE`` lines (``env``)."""
    if fmt == "env":
        return [f"{name}={value}" for name, value in variables.items()]
    return [f"{name}={shlex.quote(value)}; export {name};" for name, value in variables.items()]


def _services(args: argparse.Namespace, **options: float) -> EmbeddedServices:
    settings = load_settings(args.config)
    state_dir = args.state_dir or str(resolve_state_dir(settings.services.state_dir))
    return EmbeddedServices(state_dir, **options)


def _progress(message: str) -> None:
    print(f"scrutiny: {message}", file=sys.stderr, flush=True)


def _one_line_error(error: ServicesError) -> ServicesError:
    """Print the error's log lines to stderr and return an error with only its headline."""
    if error.log_tail:
        print(error.log_tail, file=sys.stderr)
    return ServicesError(error.headline)


def _up(args: argparse.Namespace) -> int:
    services = _services(args, start_timeout=args.timeout)
    try:
        result = services.up(restart_crashed=args.restart_crashed, progress=_progress)
    except ServicesError as error:
        raise _one_line_error(error) from None
    print("\n".join(shell_lines(result.endpoints.env(), args.format)))
    return 0


def _status(args: argparse.Namespace) -> int:
    services = _services(args)
    statuses = services.status()
    lines = [f"# state_dir={services.state_dir}"]
    variables: dict[str, str] = {}
    for status in statuses.values():
        lines.append(f"# {status.describe()}")
        if status.state is ServiceState.RUNNING and status.record is not None:
            variables[ENV_NAMES[status.name]] = status.record.address
        elif status.state in (ServiceState.CRASHED, ServiceState.UNRESPONSIVE):
            _progress(f"{status.name} is {status.state}; last lines of {status.log_file}:")
            print(status.log_tail(), file=sys.stderr)
    print("\n".join(lines + shell_lines(variables, args.format)))
    states = {status.state for status in statuses.values()}
    if states == {ServiceState.RUNNING}:
        return 0
    return EXIT_STATUS_STOPPED if states == {ServiceState.STOPPED} else EXIT_STATUS_DEGRADED


def _down(args: argparse.Namespace) -> int:
    services = _services(args)
    try:
        services.down(progress=_progress)
    except ServicesError as error:
        raise _one_line_error(error) from None
    return 0
