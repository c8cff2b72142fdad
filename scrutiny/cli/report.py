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
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
from deltalake.exceptions import DeltaError

from scrutiny.cli.commands import COMMAND_HELP
from scrutiny.cli.common import add_config_argument, count_argument, print_json
from scrutiny.connectors.tables.delta import TableError, read_table, table_uri
from scrutiny.connectors.tables.schemas import CHECKER_RUNS, LEDGER_CHECKS, OPEN_VIOLATIONS
from scrutiny.core.errors import ScrutinyError
from scrutiny.core.health_summary import (
    DEFAULT_FAIL_ON,
    DEFAULT_STALL_AFTER_MS,
    DEFAULT_WORST,
    RECENT_WINDOW_MS,
    CheckerFigures,
    Figures,
    OpenViolation,
    as_json_dict,
    exit_code,
    render,
    summarize,
)
from scrutiny.core.vocabulary import Severity
from scrutiny.settings.loader import Settings, load_settings

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_ONE_MS = timedelta(milliseconds=1)
#: A streaming checker looks stalled after this many watcher ticks (or trigger intervals) without a batch.
STALL_INTERVALS = 20
_OPEN_COLUMNS = [
    "ledger_id",
    "category",
    "severity",
    "bookie",
    "segment_first_entry",
    "entry_count",
    "pulsar_topic",
    "first_seen",
    "details",
    "resolved_at",
]
_RUN_COLUMNS = ["batch_id", "finished_at", "lag_records", "source"]


class ReportError(ScrutinyError):
    """The tables cannot be read: no data directory, a missing table, or a table delta-rs cannot open."""


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


def add_summary_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of a command that ends with the health summary: ``--fail-on``, ``--worst``, ``--format``."""
    parser.add_argument(
        "--fail-on",
        choices=[s.value for s in Severity],
        default=DEFAULT_FAIL_ON.value,
        help=f"lowest severity that makes the status UNHEALTHY (default: {DEFAULT_FAIL_ON.value})",
    )
    parser.add_argument(
        "--worst",
        type=count_argument,
        default=DEFAULT_WORST,
        metavar="N",
        help=f"worst ledgers to list (default: {DEFAULT_WORST})",
    )
    parser.add_argument("--format", choices=["text", "json"], default="text", help="output format (default: text)")


def _run(args: argparse.Namespace) -> int:
    started = time.monotonic()
    settings = load_settings(args.config)
    data_dir = args.data_dir if args.data_dir is not None else settings.checker.data_dir
    now_ms = _epoch_ms(datetime.now(UTC))
    violations = read_open_violations(data_dir)
    ledgers_checked = read_ledgers_checked(data_dir)
    checker = read_checker_figures(data_dir, now_ms=now_ms, stall_after_ms=stall_after_ms(settings))
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
        print(render(summary), flush=True)
    return exit_code(summary)


def stall_after_ms(settings: Settings) -> int:
    """How long without a batch makes the streaming checker look stalled: 5 min, or 20 ticks/triggers if longer."""
    interval_s = max(settings.watcher.tick_interval_seconds, settings.checker.trigger_seconds)
    return max(DEFAULT_STALL_AFTER_MS, int(STALL_INTERVALS * interval_s * 1000))


def read_open_violations(data_dir: str) -> list[OpenViolation]:
    """The open rows (``resolved_at`` null) of ``open_violations`` under ``data_dir``."""
    table = _read(data_dir, OPEN_VIOLATIONS, _OPEN_COLUMNS)
    table = table.filter(pc.is_null(table["resolved_at"]))
    out: list[OpenViolation] = []
    for row in table.to_pylist():
        row["first_seen"] = _epoch_ms(row["first_seen"])
        out.append(OpenViolation.from_mapping(row))
    return out


def read_ledgers_checked(data_dir: str) -> int:
    """Distinct ledgers with a completed check in ``ledger_checks``."""
    ids = _read(data_dir, LEDGER_CHECKS, ["ledger_id"])["ledger_id"]
    return int(pc.count_distinct(ids).as_py()) if len(ids) else 0


def read_checker_figures(data_dir: str, *, now_ms: int, stall_after_ms: int) -> CheckerFigures:
    """The last batch of ``checker_runs`` (latest ``finished_at``), its lag, and the batches of the last 10 min."""
    runs = _read(data_dir, CHECKER_RUNS, _RUN_COLUMNS).to_pylist()
    if not runs:
        return CheckerFigures(stall_after_ms=stall_after_ms)
    finished = [_epoch_ms(run["finished_at"]) for run in runs]
    last_index = max(range(len(runs)), key=lambda i: (finished[i], runs[i]["batch_id"]))
    last = runs[last_index]
    return CheckerFigures(
        last_batch_ms=finished[last_index],
        last_batch_id=last["batch_id"],
        last_batch_source=last["source"],
        lag_records=last["lag_records"],
        batches_recent=sum(1 for at in finished if now_ms - at <= RECENT_WINDOW_MS),
        stall_after_ms=stall_after_ms,
    )


def _read(data_dir: str, name: str, columns: Sequence[str]) -> pa.Table:
    """Columns of table ``name`` (live files only); ReportError naming the table or directory when it cannot."""
    if "://" not in data_dir and not Path(data_dir).is_dir():
        raise ReportError(f"data directory {data_dir} does not exist (give --data-dir or set checker.data_dir)")
    uri = table_uri(data_dir, name)
    try:
        return read_table(data_dir, name, columns=list(columns))
    except TableError:
        raise ReportError(f"no Delta table {name!r} at {uri}: is {data_dir} the checker's data directory?") from None
    except (DeltaError, OSError, pa.ArrowException) as error:
        raise ReportError(f"cannot read Delta table {name!r} at {uri}: {error}") from error


def _epoch_ms(moment: datetime) -> int:
    """Epoch milliseconds of a timezone-aware time (the tables' timestamps are UTC)."""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return (moment - _EPOCH) // _ONE_MS
