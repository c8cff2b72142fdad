"""Start-up cost of the command line: whole-process wall time and peak memory of the light commands.

Run from the repository root::

    .venv/bin/python -m bench.startup_bench            # 7 runs of each command
    .venv/bin/python -m bench.startup_bench --runs 3   # fewer runs
    .venv/bin/python -m bench.startup_bench --check    # exit 1 when a light command misses its targets

Each command runs as a process of its own, one after the other, ``--runs`` times; for each run the wall time is
measured around the process and its peak resident memory is the kernel's ``ru_maxrss`` of that child (``os.wait4``).
The table gives medians, and the ratio of each median time to the baseline measured in the same run: the interpreter
alone (``python -c pass``), so a busy machine moves both. The light commands (``--help``, ``inspect``, ``verdict``)
have targets: under 0.3 s and under 80 MB. One heavy command (``run --help``, which imports Spark's Python side) is
shown for contrast, and ``inspect path`` once more with every command's module imported first, as the parser was
built before it imported only the command that runs (the figure before). Targets are printed as PASS or MISS; the
run exits 0 unless ``--check`` is given.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from scrutiny.core.ledger_metadata import LedgerState, Segment, build_ledger_metadata, encode_ledger_metadata_v3

WALL_TARGET_S = 0.3
RSS_TARGET_MB = 80.0
ENTRY_POINT = "from scrutiny.cli.main import main; raise SystemExit(main())"
#: The parser as it was built before commands were imported lazily: every command module imported, then one runs.
EAGER_ENTRY_POINT = (
    "import sys; from scrutiny.cli.main import build_parser; "
    "args = build_parser(None).parse_args(sys.argv[1:]); raise SystemExit(args.handler(args))"
)


@dataclass(frozen=True, slots=True)
class Command:
    """One command line to time; ``light`` ones have the start-up targets."""

    label: str
    argv: tuple[str, ...]
    light: bool


@dataclass(frozen=True, slots=True)
class Figures:
    """Medians of one command's runs."""

    command: Command
    wall_s: float
    rss_mb: float


def commands(metadata_file: Path) -> list[Command]:
    """The baseline, the light commands and one heavy command (interpreter arguments included)."""
    cli = (sys.executable, "-c", ENTRY_POINT)
    return [
        Command("python -c pass (baseline)", (sys.executable, "-c", "pass"), light=False),
        Command("scrutiny --help", (*cli, "--help"), light=True),
        Command("scrutiny inspect path --ledger-id 5", (*cli, "inspect", "path", "--ledger-id", "5"), light=True),
        Command("scrutiny inspect metadata FILE", (*cli, "inspect", "metadata", str(metadata_file)), light=True),
        Command("scrutiny verdict --help", (*cli, "verdict", "--help"), light=True),
        Command("scrutiny run --help (heavy)", (*cli, "run", "--help"), light=False),
        Command(
            "inspect path, every command imported",
            (sys.executable, "-c", EAGER_ENTRY_POINT, "inspect", "path", "--ledger-id", "5"),
            light=False,
        ),
    ]


def measure_once(argv: Sequence[str]) -> tuple[float, float]:
    """(wall seconds, peak RSS in MB) of one process running ``argv`` to its end (output discarded)."""
    started = time.perf_counter()
    process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(process.pid, 0)
    wall = time.perf_counter() - started
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} exited {process.returncode}")
    return wall, usage.ru_maxrss / 1024  # ru_maxrss is in KiB on Linux


def measure(command: Command, runs: int) -> Figures:
    """Medians of ``runs`` runs of ``command``."""
    samples = [measure_once(command.argv) for _ in range(runs)]
    return Figures(
        command,
        statistics.median(wall for wall, _ in samples),
        statistics.median(rss for _, rss in samples),
    )


def table(results: Sequence[Figures]) -> tuple[list[str], bool]:
    """The printed lines, and whether every light command met both targets."""
    baseline = results[0].wall_s
    lines = [
        f"{'command':40} {'wall (median)':>14} {'x baseline':>11} {'peak RSS':>10}  targets (< {WALL_TARGET_S} s, "
        f"< {RSS_TARGET_MB:.0f} MB)"
    ]
    met = True
    for figures in results:
        verdict = ""
        if figures.command.light:
            ok = figures.wall_s < WALL_TARGET_S and figures.rss_mb < RSS_TARGET_MB
            met = met and ok
            verdict = "PASS" if ok else "MISS"
        lines.append(
            f"{figures.command.label:40} {figures.wall_s:>12.3f} s {figures.wall_s / baseline:>10.1f}x "
            f"{figures.rss_mb:>7.1f} MB  {verdict}"
        )
    return lines, met


def main(argv: Sequence[str] | None = None) -> int:
    """Measure, print the table, and with ``--check`` exit 1 when a light command misses a target."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7, help="runs of each command (default 7)")
    parser.add_argument("--check", action="store_true", help="exit 1 when a light command misses its targets")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as scratch:
        metadata_file = Path(scratch) / "L0005"
        metadata = build_ledger_metadata(
            ensemble_size=3,
            write_quorum=2,
            ack_quorum=2,
            segments=[Segment(0, ("bk1:3181", "bk2:3181", "bk3:3181"))],
            state=LedgerState.CLOSED,
            last_entry_id=99,
            length=9_900,
        )
        metadata_file.write_bytes(encode_ledger_metadata_v3(metadata))
        measure_once(commands(metadata_file)[1].argv)  # warm the file cache once, untimed
        results = [measure(command, max(1, args.runs)) for command in commands(metadata_file)]
    lines, met = table(results)
    print(f"Start-up of the command line: medians of {max(1, args.runs)} runs each, {os.cpu_count()} cores")
    print("\n".join(lines))
    return 1 if args.check and not met else 0


if __name__ == "__main__":
    sys.exit(main())
