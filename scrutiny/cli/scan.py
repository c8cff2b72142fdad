"""``scrutiny scan``: a one-shot check of every ledger (fsck style), on Spark in batch mode, with an opt-in fix.

Walks ZooKeeper once, checks the selected ledgers with the streaming checker's rules (``--fast``: metadata only;
``--deep``, the default: also the bookies' entry listings), writes the findings to the checker's Delta tables (source
``scan``) and prints the health summary of what it found, ending in ``Status: HEALTHY`` or ``Status: UNHEALTHY``.
Exit code 0 when healthy, 1 when a violation is at or above ``--fail-on``, 2 on errors and when stopped before the
end (Ctrl-C or SIGTERM stop it safely: the Spark job is cancelled, the chunks written stay; the last line is then
``Status: INTERRUPTED``). Progress goes to standard error. docs/scan.md documents it all.
"""

from __future__ import annotations

import argparse
import logging
import math
import signal
import sys
import time
from collections.abc import Callable
from typing import Any, TextIO

from pyspark.sql import SparkSession

from scrutiny.cli.commands import COMMAND_HELP
from scrutiny.cli.common import (
    InputError,
    add_config_argument,
    add_summary_arguments,
    checked_directory,
    configure_logging,
    positive_count_argument,
    print_json,
    stop_on_signals,
)
from scrutiny.core.health_summary import (
    Figures,
    OpenViolation,
    as_json_dict,
    exit_code,
    field_line,
    render,
    summarize,
)
from scrutiny.core.ledger_scan import ScanMode, parse_ledger_selection
from scrutiny.core.terminal_text import terminal_safe
from scrutiny.core.utc_text import format_duration_ms
from scrutiny.core.vocabulary import Severity
from scrutiny.settings.loader import Settings, load_settings
from scrutiny.streaming.scan.fix import FixOptions, check_fix_options, fix_json, fix_lines, run_fix
from scrutiny.streaming.scan.held import HeldSurvey
from scrutiny.streaming.scan.job import ScanResult, ScanRun, probe_zookeeper
from scrutiny.streaming.scan.snapshot import DEFAULT_CHUNK_SIZE, ScanOptions
from scrutiny.streaming.session import build_spark_session


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``scan``."""
    scan = commands.add_parser(
        "scan",
        help=COMMAND_HELP["scan"],
        description=(
            "Exit code 0 when healthy, 1 when a violation is at or above --fail-on, 2 on errors or when stopped early."
        ),
    )
    depth = scan.add_mutually_exclusive_group()
    depth.add_argument("--fast", action="store_true", help="metadata only: ask no bookie")
    depth.add_argument("--deep", action="store_true", help="also ask the bookies for their entries (the default)")
    scan.add_argument("--ledgers", metavar="RANGE", help="ledger ids: N, A-B, A-, -B, comma-separated (default: all)")
    scan.add_argument("--bookie", metavar="ID", help="only ledgers with this bookie in an ensemble")
    add_summary_arguments(scan)
    scan.add_argument("--data-dir", metavar="DIR", help="the tables' directory (default: checker.data_dir)")
    scan.add_argument(
        "--chunk-size",
        type=positive_count_argument,
        default=DEFAULT_CHUNK_SIZE,
        metavar="N",
        help=f"ledgers per Spark job and table batch (default: {DEFAULT_CHUNK_SIZE})",
    )
    scan.add_argument("--fix", action="store_true", help="mark ledgers with missing replicas under-replicated")
    scan.add_argument("--dry-run", action="store_true", help="with --fix: print the plan, change nothing")
    scan.add_argument("--force", action="store_true", help="with --fix: mark even when auto-recovery is disabled")
    add_config_argument(scan)
    scan.set_defaults(handler=_run)


def _run(args: argparse.Namespace) -> int:
    configure_logging(logging.WARNING)
    settings = load_settings(args.config)
    mode = ScanMode.FAST if args.fast else ScanMode.DEEP
    fix = FixOptions(enabled=args.fix, dry_run=args.dry_run, force=args.force)
    check_fix_options(fix, mode)
    if args.bookie is not None and not args.bookie.strip():
        raise InputError("--bookie is empty: give a bookie id, or leave it out for every bookie")
    data_dir = args.data_dir if args.data_dir is not None else settings.checker.data_dir
    if "://" not in data_dir:  # a local one: it must be a directory, or not exist yet
        checked_directory(data_dir, "data directory")
    options = ScanOptions(
        mode=mode,
        selection=parse_ledger_selection(args.ledgers),
        bookie=args.bookie,
        chunk_size=args.chunk_size,
        data_dir=args.data_dir,
    )
    started = time.monotonic()
    probe_zookeeper(settings)  # before the JVM starts: a wrong address fails in seconds
    running = SparkSession.getActiveSession()  # a session of the caller's (in-process use) is not ours to stop
    spark = build_spark_session(
        "scrutiny-scan",
        master=settings.checker.spark_master or None,
        ui=settings.checker.spark_ui,
        conf={
            "spark.sql.shuffle.partitions": str(settings.checker.shuffle_partitions),
            "spark.ui.showConsoleProgress": "false",  # the scan shows its own progress
        },
    )
    run = ScanRun(spark, settings, options)
    progress = ProgressLine(sys.stderr)
    with stop_on_signals(_stop_safely(run.stop, progress)):
        result = run.run(progress.update)
        fixed = None
        if fix.enabled and not result.interrupted:
            fixed = run_fix(spark, settings, result, fix, data_dir=run.data_dir)
        # Spark stops before the summary: what its cancelled tasks log must not follow the last line.
        if running is None:
            spark.stop()
    progress.done()
    summary = summarize(
        (_open_violation(row) for row in result.violations),
        Figures(
            ledgers_checked=result.checked,
            seconds_taken=time.monotonic() - started,
            now_ms=int(time.time() * 1000),
            interrupted=_interruption(result),
        ),
        fail_on=Severity(args.fail_on),
        worst=args.worst,
    )
    if args.format == "json":
        document = as_json_dict(summary)
        document["scan"] = scan_json(result, run.data_dir)
        document["fix"] = None if fixed is None else fix_json(fixed)
        print_json(document)
    else:
        lines = scan_lines(result, run.data_dir, settings, selection=_selection(run.options))
        if fixed is not None:
            lines += ["", *fix_lines(fixed)]
        print(terminal_safe("\n".join([*lines, "", render(summary)]), keep_newlines=True), flush=True)
    return exit_code(summary)


def _interruption(result: ScanResult) -> str | None:
    if not result.interrupted:
        return None
    if result.walked:
        return f"the scan was stopped after {result.examined} of {result.selected} ledgers; their findings are written"
    return (
        f"the scan was stopped after {result.examined} ledgers, before its ZooKeeper walk ended ({result.selected} "
        "selected by then); their findings are written"
    )


def _open_violation(row: dict[str, Any]) -> OpenViolation:
    return OpenViolation.from_mapping({**row, "first_seen": int(row["at"].timestamp() * 1000)})


def _selection(options: ScanOptions) -> str:
    """``--ledgers`` and ``--bookie`` as given back (``all`` when neither restricts the scan)."""
    chosen = options.selection.describe()
    return chosen if options.bookie is None else f"{chosen}, with bookie {options.bookie}"


def scan_lines(result: ScanResult, data_dir: str, settings: Settings, *, selection: str = "all") -> list[str]:
    """The scan's own figures, aligned like the summary below them."""
    examined = f"{result.examined} of {result.selected}"
    skipped = result.examined - result.checked
    rate = result.examined / result.check_seconds if result.check_seconds > 0 else 0.0
    rows = [
        ("Scan", f"{result.scan_id} ({result.mode.value})"),
        ("ZooKeeper", settings.zookeeper.metadata_uri or settings.zookeeper.connect),
        ("Ledgers in ZooKeeper", str(result.ledgers_in_zookeeper)),
        ("Ledgers selected", f"{result.selected} ({selection})"),
        ("Ledgers examined", examined),
        ("Skipped (open, unsealed)", str(skipped)),
        ("Bookie requests", str(result.rpcs)),
        ("Violations resolved", str(result.resolved)),
        ("Read / check time", f"{result.read_seconds:.3f} s / {result.check_seconds:.3f} s ({_ledger_rate(rate)})"),
        ("Tables", f"{data_dir} ({result.batches} batches, source scan)"),
    ]
    lines = [field_line(label, value) for label, value in rows]
    if result.held is not None:
        lines += held_lines(result.held)
    lines += [f"WARNING: {warning}" for warning in result.warnings]
    return lines


def held_lines(survey: HeldSurvey) -> list[str]:
    """What the agents' bookies hold without metadata: a total, then a line per bookie that holds some or was not
    listed."""
    with_some = [b for b in survey.bookies if b.count]
    summary = f"{survey.total} on {len(with_some)} of {len(survey.bookies)} bookies listed through their agents"
    if survey.orphans:
        summary += f", {survey.orphans} past the orphan grace (ORPHAN_LEDGER)"
    lines = [field_line("Held without metadata", summary)]
    for found in with_some:
        named = ", ".join(str(h.ledger_id) for h in found.ledgers)
        more = ", ..." if found.count > len(found.ledgers) else ""
        orphans = f", {found.orphans} orphans" if found.orphans else ""
        lines.append(f"  {found.bookie}: {found.count} of {found.listed} ledgers held{orphans} (ledgers {named}{more})")
    lines += [f"  {bookie}: not listed ({why})" for bookie, why in sorted(survey.not_listed.items())]
    return lines


def held_json(survey: HeldSurvey | None) -> dict[str, object] | None:
    """The survey for ``--format json`` (key ``scan.held_without_metadata``; None when no survey ran)."""
    if survey is None:
        return None
    return {
        "total": survey.total,
        "orphans": survey.orphans,
        "bookies": {
            found.bookie: {
                "listed": found.listed,
                "count": found.count,
                "orphans": found.orphans,
                "ledgers": [
                    {
                        "ledger_id": h.ledger_id,
                        "first_entry_id": h.first_entry_id,
                        "last_entry_id": h.last_entry_id,
                        "has_ledger_record": h.has_ledger_record,
                        "limbo": h.limbo,
                    }
                    for h in found.ledgers
                ],
            }
            for found in survey.bookies
        },
        "not_listed": dict(sorted(survey.not_listed.items())),
    }


def scan_json(result: ScanResult, data_dir: str) -> dict[str, object]:
    """The scan's own figures for ``--format json`` (key ``scan``)."""
    return {
        "scan_id": result.scan_id,
        "mode": result.mode.value,
        "ledgers_in_zookeeper": result.ledgers_in_zookeeper,
        "ledgers_selected": result.selected,
        "ledgers_examined": result.examined,
        "ledgers_skipped": result.examined - result.checked,
        "bookie_requests": result.rpcs,
        "violations_found": len(result.violations),
        "violations_resolved": result.resolved,
        "read_seconds": round(result.read_seconds, 3),
        "check_seconds": round(result.check_seconds, 3),
        "batches_written": result.batches,
        "data_dir": data_dir,
        "interrupted": result.interrupted,
        "warnings": list(result.warnings),
        "held_without_metadata": held_json(result.held),
    }


class ProgressLine:
    """Progress on standard error: one rewritten line on a terminal, a line per step otherwise."""

    def __init__(self, stream: TextIO, *, every_s: float = 1.0) -> None:
        self.stream = stream
        self.tty = stream.isatty()
        self.every_s = every_s
        self._last = -math.inf
        self._phase = ""
        self._started = time.monotonic()
        self._open = False

    def update(self, phase: str, done: int, total: int | None) -> None:
        """Show ``done`` (of ``total``) for ``phase``; rate-limited, but a phase's first and last steps always show."""
        now = time.monotonic()
        if phase != self._phase:
            self._phase, self._started = phase, now
        elif not (total is not None and done >= total) and now - self._last < self.every_s:
            return
        self._last = now
        text = self._count(phase, done, now) if total is None else self._bar(phase, done, total, now)
        if self.tty:
            self.stream.write(f"\r\033[K{text}")
            self._open = True
        else:
            self.stream.write(text + "\n")
        self.stream.flush()

    def _count(self, phase: str, done: int, now: float) -> str:
        elapsed = now - self._started
        return f"scan: {phase} {done}" + (f" ({_rate(done / elapsed)})" if done and elapsed > 0 else "")

    def _bar(self, phase: str, done: int, total: int, now: float) -> str:
        share = done / total if total else 1.0
        filled = int(share * 30)
        elapsed = now - self._started
        rate = done / elapsed if elapsed > 0 else 0.0
        eta = f", {format_duration_ms(int((total - done) / rate * 1000))} left" if rate > 0 and done < total else ""
        return f"scan: [{'#' * filled}{'.' * (30 - filled)}] {done}/{total} {phase} ({_rate(rate)}{eta})"

    def note(self, text: str) -> None:
        """A line of its own (e.g. that the scan is stopping)."""
        self.done()
        self.stream.write(f"scan: {text}\n")
        self.stream.flush()

    def done(self) -> None:
        """End the rewritten line, if any."""
        if self._open:
            self.stream.write("\n")
            self.stream.flush()
            self._open = False


def _ledger_rate(per_second: float) -> str:
    """``2408 ledgers/s``, ``0.2 ledgers/s``, ``4.5 ledgers/min``: a small scan's rate is not "0 ledgers/s"."""
    number, _, unit = _rate(per_second).partition("/")
    return f"{number} ledgers/{unit}"


def _rate(per_second: float) -> str:
    """A rate people can read, never a misleading "0/s": ``1936/s``, ``2.5/s``, ``4.5/min``."""
    if per_second >= 10:
        return f"{per_second:.0f}/s"
    if per_second >= 0.1 or per_second == 0:
        return f"{per_second:.1f}/s"
    return f"{per_second * 60:.1f}/min"


def _stop_safely(stop: Callable[[], None], progress: ProgressLine) -> Callable[[int], None]:
    """What a signal does to a scan: cancel the running chunk; a second SIGINT then interrupts at once."""

    def on_signal(signum: int) -> None:
        progress.note("stopping safely: cancelling the running chunk (Ctrl-C again to abort at once)")
        signal.signal(signal.SIGINT, signal.default_int_handler)
        stop()

    return on_signal
