"""``scrutiny services up|status|down|bookie``: the embedded ZooKeeper and Kafka broker, and real local bookies.

Standard output carries only shell-style lines, so ``eval "$(scrutiny services up)"`` points every
later command at the services; progress and server logs go to standard error. Formats:

* ``sh`` (default): ``SCRUTINY_ZOOKEEPER=127.0.0.1:PORT; export SCRUTINY_ZOOKEEPER;``
* ``env``: ``SCRUTINY_ZOOKEEPER=127.0.0.1:PORT`` (an env file, ``set -a; . FILE``)

``status`` also prints one ``# <service> <state> ...`` comment line per service and per local bookie
(comments are ignored by ``eval`` and by env files) and exits 0 when both run, 3 when neither is
recorded and 1 otherwise (crashed, unresponsive or only one running). ``status --format json``
prints one JSON document instead: ``services`` (name -> state, pid, address, log) and ``bookies``
(each bookie's ``id``, ``pid``, ports, directories, state and its agent's ``host:port``).

``up --bookies N`` also starts N real Apache BookKeeper bookies on the services' ZooKeeper, each
with the bookie agent beside it when it runs DbLedgerStorage, and prints
``SCRUTINY_BOOKIES_AGENT_OVERRIDES`` so the checker asks those agents. ``bookie stop|start|wipe ID``
kills, restarts or wipes one of them (:mod:`scrutiny.services.bookkeeper`); ``autorecovery start|stop`` runs
BookKeeper's own Auditor and ReplicationWorker beside them (:mod:`scrutiny.services.autorecovery`).
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from collections.abc import Mapping
from pathlib import Path

from scrutiny.cli.commands import COMMAND_HELP
from scrutiny.cli.common import (
    InputError,
    add_config_argument,
    bounded_count,
    checked_directory,
    positive_seconds_argument,
)
from scrutiny.services.autorecovery import AutoRecoveryOptions
from scrutiny.services.bookkeeper import BookieOptions, BookieStatus, BookieStorage, agent_overrides
from scrutiny.services.local_stack import AGENT_OVERRIDES_ENV, EmbeddedServices, resolve_state_dir
from scrutiny.services.servers import ENV_NAMES, ServicesError, ServiceState, ServiceStatus
from scrutiny.settings.loader import load_settings

EXIT_STATUS_DEGRADED = 1
EXIT_STATUS_STOPPED = 3
FORMATS = ("sh", "env")
STATUS_FORMATS = (*FORMATS, "json")
BOOKIE_ACTIONS = ("stop", "start", "wipe")
#: The most local bookies ``up --bookies`` starts: each is a JVM of about 160 MB.
MAX_LOCAL_BOOKIES = 32
#: The largest DbLedgerStorage write cache of a local bookie, in MB (its JVM reserves twice as much direct memory).
MAX_WRITE_CACHE_MB = 65_536
#: BookKeeper reads the flush interval (in ms) and the AutoRecovery intervals as 32-bit integers.
_JAVA_INT = 2**31 - 1


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
        "--timeout", type=positive_seconds_argument, default=30.0, metavar="SECONDS", help="start deadline per service"
    )
    up.add_argument(
        "--bookies",
        type=bounded_count(0, MAX_LOCAL_BOOKIES, "a JVM each"),
        default=0,
        metavar="N",
        help=f"also run N real BookKeeper bookies (at most {MAX_LOCAL_BOOKIES})",
    )
    up.add_argument(
        "--storage",
        choices=[str(s) for s in BookieStorage],
        default=str(BookieStorage.DB),
        help="new bookies' ledger storage: db (DbLedgerStorage, with a bookie agent beside each) or sorted "
        "(SortedLedgerStorage, answers BookKeeper's v3 listing itself); default db",
    )
    up.add_argument(
        "--write-cache-mb",
        type=bounded_count(1, MAX_WRITE_CACHE_MB),
        default=16,
        metavar="MB",
        help="DbLedgerStorage write cache",
    )
    up.add_argument(
        "--flush-interval",
        type=_flush_interval,
        default=10.0,
        metavar="SECONDS",
        help="how often a DbLedgerStorage bookie flushes its write cache into its index (default 10)",
    )
    status = actions.add_parser("status", help="print each service's state and the variables of running ones")
    down = actions.add_parser("down", help="stop the processes 'up' started and remove their state")
    bookie = actions.add_parser(
        "bookie",
        help="stop (SIGKILL), start or wipe one local bookie",
        description="stop: kill the bookie (SIGKILL, its agent keeps running); start: start it again with the same "
        "id and directories; wipe: kill it, delete its journal, ledger and index directories and its cookie, "
        "and start it again empty.",
    )
    bookie.add_argument("bookie_action", choices=BOOKIE_ACTIONS, metavar="stop|start|wipe")
    bookie.add_argument("bookie_id", metavar="BOOKIE_ID", help="the bookie's id (127.0.0.1:PORT) or name (bookie-1)")
    recovery = actions.add_parser(
        "autorecovery",
        help="start or stop BookKeeper's AutoRecovery (Auditor and ReplicationWorker) beside the local bookies",
        description="start: (re)start AutoRecovery with these intervals and return once an auditor is elected; "
        "stop: stop it. Intervals in seconds, 0 turns that check off.",
    )
    recovery.add_argument("recovery_action", choices=("start", "stop"), metavar="start|stop")
    defaults = AutoRecoveryOptions()
    for flag, dest, default, text in (
        ("--check-interval", "periodic_check_s", defaults.periodic_check_s, "every ledger's entries checked"),
        ("--bookie-check-interval", "bookie_check_s", defaults.bookie_check_s, "lost bookies looked for"),
        ("--replicas-check-interval", "replicas_check_s", defaults.replicas_check_s, "closed ledgers' replicas"),
        (
            "--lost-bookie-recovery-delay",
            "lost_bookie_recovery_delay_s",
            defaults.lost_bookie_recovery_delay_s,
            "how long a bookie may be gone before its ledgers are marked",
        ),
    ):
        recovery.add_argument(
            flag,
            dest=dest,
            type=bounded_count(0, _JAVA_INT, "BookKeeper's 32-bit integers"),
            default=default,
            metavar="S",
            help=f"{text} (default %(default)s)",
        )
    for action in (up, status, down, bookie, recovery):
        action.add_argument("--state-dir", help="state directory (default: services.state_dir, then XDG)")
        add_config_argument(action)
    up.add_argument("--format", choices=FORMATS, default="sh", help="output lines for eval (sh) or env files")
    status.add_argument(
        "--format", choices=STATUS_FORMATS, default="sh", help="output lines for eval (sh), env files, or JSON"
    )
    up.set_defaults(handler=_up)
    status.set_defaults(handler=_status)
    down.set_defaults(handler=_down)
    bookie.set_defaults(handler=_bookie)
    recovery.set_defaults(handler=_autorecovery)


def _flush_interval(text: str) -> float:
    """At least a millisecond, at most what BookKeeper's ``flushInterval`` (a 32-bit number of ms) holds."""
    value = positive_seconds_argument(text)
    if not 0.001 <= value <= _JAVA_INT / 1000:
        raise argparse.ArgumentTypeError(f"must be from 0.001 to {_JAVA_INT / 1000} seconds, got {text}")
    return value


def shell_lines(variables: Mapping[str, str], fmt: str = "sh") -> list[str]:
    """``NAME=VALUE; export NAME;`` lines (``sh``) or ``NAME=VALUE`` lines (``env``)."""
    if fmt == "env":
        return [f"{name}={value}" for name, value in variables.items()]
    return [f"{name}={shlex.quote(value)}; export {name};" for name, value in variables.items()]


def _services(args: argparse.Namespace, **options: float) -> EmbeddedServices:
    settings = load_settings(args.config)
    state_dir = args.state_dir or str(resolve_state_dir(settings.services.state_dir))
    return EmbeddedServices(checked_directory(state_dir, "state directory"), **options)


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
        options = BookieOptions(
            storage=BookieStorage(args.storage),
            write_cache_mb=args.write_cache_mb,
            flush_interval_ms=round(args.flush_interval * 1000),
        )
        result = services.up(
            restart_crashed=args.restart_crashed, progress=_progress, bookies=args.bookies, bookie_options=options
        )
    except ServicesError as error:
        raise _one_line_error(error) from None
    for bookie in result.bookies:
        _progress(bookie.describe())
    print("\n".join(shell_lines(result.env(), args.format)))
    return 0


def _status(args: argparse.Namespace) -> int:
    services = _services(args)
    statuses = services.status()
    bookies = services.bookie_status()
    if args.format == "json":
        document = _status_document(services.state_dir, statuses, bookies)
        document["autorecovery"] = services.autorecovery().status().to_json()
        print(json.dumps(document, indent=2))
        return _status_exit(statuses)
    lines = [f"# state_dir={services.state_dir}"]
    variables: dict[str, str] = {}
    for status in statuses.values():
        lines.append(f"# {status.describe()}")
        if status.state is ServiceState.RUNNING and status.record is not None:
            variables[ENV_NAMES[status.name]] = status.record.address
        elif status.state in (ServiceState.CRASHED, ServiceState.UNRESPONSIVE):
            _progress(f"{status.name} is {status.state}; last lines of {status.log_file}:")
            print(status.log_tail(), file=sys.stderr)
    lines += [f"# {bookie.describe()}" for bookie in bookies]
    overrides = agent_overrides(bookies)
    if overrides:
        variables[AGENT_OVERRIDES_ENV] = overrides
    print("\n".join(lines + shell_lines(variables, args.format)))
    return _status_exit(statuses)


def _status_document(
    state_dir: Path, statuses: Mapping[str, ServiceStatus], bookies: list[BookieStatus]
) -> dict[str, object]:
    services: dict[str, object] = {}
    for name, status in statuses.items():
        record = status.record
        services[name] = {
            "state": str(status.state),
            "pid": record.pid if record else None,
            "address": record.address if record else None,
            "log_file": str(status.log_file),
        }
    return {"state_dir": str(state_dir), "services": services, "bookies": [b.to_json() for b in bookies]}


def _status_exit(statuses: Mapping[str, ServiceStatus]) -> int:
    states = {status.state for status in statuses.values()}
    if states == {ServiceState.RUNNING}:
        return 0
    return EXIT_STATUS_STOPPED if states == {ServiceState.STOPPED} else EXIT_STATUS_DEGRADED


def _bookie(args: argparse.Namespace) -> int:
    services = _services(args)
    bookies = services.bookies()
    actions = {"stop": bookies.stop, "start": bookies.start, "wipe": bookies.wipe}
    try:
        status = actions[args.bookie_action](args.bookie_id)
    except ServicesError as error:
        raise _one_line_error(error) from None
    print(status.describe())
    return 0


def _autorecovery(args: argparse.Namespace) -> int:
    services = _services(args)
    recovery = services.autorecovery()
    if args.recovery_action == "start" and not recovery.bookies.zookeeper:
        raise InputError(f"no ZooKeeper is recorded in {services.state_dir}: start it with 'scrutiny services up'")
    try:
        if args.recovery_action == "stop":
            status = recovery.stop()
        else:
            options = AutoRecoveryOptions(
                periodic_check_s=args.periodic_check_s,
                bookie_check_s=args.bookie_check_s,
                replicas_check_s=args.replicas_check_s,
                lost_bookie_recovery_delay_s=args.lost_bookie_recovery_delay_s,
            )
            status = recovery.start(options)
    except ServicesError as error:
        raise _one_line_error(error) from None
    pid = f" pid={status.pid}" if status.pid else ""
    print(f"autorecovery {status.state}{pid} log={status.log_file}")
    return 0


def _down(args: argparse.Namespace) -> int:
    services = _services(args)
    try:
        services.down(progress=_progress)
    except ServicesError as error:
        raise _one_line_error(error) from None
    return 0
