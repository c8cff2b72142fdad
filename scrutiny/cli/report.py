"""``scrutiny report``: the fsck-style health summary from the Delta tables the checker keeps (no cluster access).

Reads ``open_violations`` (rows whose ``resolved_at`` is null), ``ledger_checks`` (distinct ledgers checked) and
``checker_runs`` (last batch, lag, recent batches) under the data directory, summarizes them with
:mod:`scrutiny.core.health_summary` and prints the summary (text, last line ``Status: HEALTHY|UNHEALTHY``, or JSON).
Exit code 0 when healthy, 1 when an open violation is at or above ``--fail-on``, 2 (one-line error) when the data
directory or a table is missing or unreadable. docs/report.md documents the output.
"""

from __future__ import annotations

import argparse
import time

from scrutiny.cli.commands import COMMAND_HELP
from scrutiny.cli.common import add_config_argument, add_summary_arguments, print_json
from scrutiny.connectors.tables.health import read_checker_figures, read_ledgers_checked, read_open_violations
from scrutiny.core.health_summary import Figures, as_json_dict, exit_code, render, summarize
from scrutiny.core.terminal_text import terminal_safe
from scrutiny.core.vocabulary import Severity
from scrutiny.settings.loader import load_settings


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``report``."""
    report = commands.add_parser(
        "report",
        help=COMMAND_HELP["report"],
        description="Exit code 0 when healthy, 1 when an open violation is at or above --fail-on, 2 on errors.",
    )
    report.add_argument("--data-dir", metavar="DIR", help="the tables' directory (default: checker.data_dir)")
    add_summary_arguments(report)
    add_config_argument(report)
    report.set_defaults(handler=_run)


def _run(args: argparse.Namespace) -> int:
    started = time.monotonic()
    settings = load_settings(args.config)
    data_dir = args.data_dir if args.data_dir is not None else settings.checker.data_dir
    now_ms = int(time.time() * 1000)
    violations = read_open_violations(data_dir)
    ledgers_checked = read_ledgers_checked(data_dir)
    checker = read_checker_figures(data_dir, now_ms=now_ms, stall_after_ms=settings.stall_after_ms())
    figures = Figures(
        ledgers_checked=ledgers_checked,
        seconds_taken=time.monotonic() - started,
        now_ms=now_ms,
        checker=checker,
    )
    summary = summarize(violations, figures, fail_on=Severity(args.fail_on), worst=args.worst)
    if args.format == "json":
        print_json(as_json_dict(summary))
    else:
        print(terminal_safe(render(summary), keep_newlines=True), flush=True)
    return exit_code(summary)
