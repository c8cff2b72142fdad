"""Start-up cost of the command line: whole-process wall time and peak memory of the light commands.

Run from the repository root::

    .venv/bin/python -m bench.startup_bench            # 7 runs of each command (under a minute)
    .venv/bin/python -m bench.startup_bench --runs 15  # more runs
    .venv/bin/python -m bench.startup_bench --quick    # one run of each command (a few seconds)
    .venv/bin/python -m bench.startup_bench --check    # exit 1 when a light command misses a target

Each command runs as a process of its own, one after the other, ``--runs`` times, through the installed
``scrutiny`` script. Its wall time is measured from the fork to the ``os.wait4`` that reaps it, and its peak
resident memory is the ``ru_maxrss`` that ``os.wait4`` returns for it. The kernel counts in a child's
``ru_maxrss`` the memory of the process it was forked from, so the children are not forked from this process
(which has imported part of the project) but from a small launcher process (the interpreter with ``-I -S`` and
the standard library only), forked rather than spawned, whose few MB stay below any child's own peak.

The table gives medians, and the ratio of each median to the baseline measured in the same run, the interpreter
alone (``python -c pass``), so a busy machine moves both. The light commands (``--help``, ``inspect``,
``verdict``) have targets: under 0.3 s and under 80 MB. One heavy command (``run --help``, which imports Spark's
Python side) is shown for contrast, and ``inspect path`` once more with every command's module imported before
the parser is built, as the command line did before it imported only the command that runs. Targets are printed
as PASS or FAIL; the run exits 0 either way unless ``--check`` is given.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from scrutiny.core.ledger_metadata import LedgerState, Segment, build_ledger_metadata, encode_ledger_metadata_v3

WALL_TARGET_S = 0.3
RSS_TARGET_MB = 80.0
DEFAULT_RUNS = 7
#: The command line's entry point, for an interpreter whose ``scrutiny`` script is not installed next to it.
ENTRY_POINT = "import sys; from scrutiny.cli.main import main; sys.exit(main())"
#: Every command's module imported to build the parser, then one command runs: the command line as it was before.
EAGER_ENTRY_POINT = (
    "import sys; from scrutiny.cli.main import build_parser; "
    "args = build_parser().parse_args(sys.argv[1:]); sys.exit(args.handler(args))"
)
#: The launcher: reads one JSON argv a line, forks and execs it (standard streams on /dev/null), reaps it
#: with ``os.wait4`` and answers one JSON line ``[wall seconds, ru_maxrss in KiB, exit code]``.
LAUNCHER = """
import json, os, sys, time
null = os.open(os.devnull, os.O_RDWR)
for line in sys.stdin:
    argv = json.loads(line)
    started = time.perf_counter()
    pid = os.fork()
    if pid == 0:
        try:
            for fd in (0, 1, 2):
                os.dup2(null, fd)
            os.execv(argv[0], argv)
        finally:
            os._exit(127)
    _, status, usage = os.wait4(pid, 0)
    wall = time.perf_counter() - started
    print(json.dumps([wall, usage.ru_maxrss, os.waitstatus_to_exitcode(status)]), flush=True)
"""


@dataclass(frozen=True, slots=True)
class Command:
    """One command line to time; ``light`` ones have the start-up targets."""

    label: str
    argv: tuple[str, ...]
    light: bool


@dataclass(frozen=True, slots=True)
class Sample:
    """One run of a command: its wall time and its peak resident memory."""

    wall_s: float
    rss_mb: float


@dataclass(frozen=True, slots=True)
class Figures:
    """Medians of one command's runs."""

    command: Command
    wall_s: float
    rss_mb: float
    runs: int


class Launcher:
    """A small process that starts each command and reports its wall time and peak memory."""

    def __init__(self) -> None:
        self._process = subprocess.Popen(
            [sys.executable, "-I", "-S", "-c", LAUNCHER],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )

    def run(self, argv: Sequence[str]) -> Sample:
        """Run ``argv`` to its end (output discarded); a command that fails ends the benchmark."""
        assert self._process.stdin is not None and self._process.stdout is not None
        self._process.stdin.write(json.dumps(list(argv)) + "\n")
        self._process.stdin.flush()
        answer = self._process.stdout.readline()
        if not answer:
            raise SystemExit("the launcher ended early")
        wall, maxrss_kib, code = json.loads(answer)
        if code != 0:
            raise SystemExit(f"{' '.join(argv)} exited {code}")
        return Sample(float(wall), maxrss_kib / 1024)  # ru_maxrss is in KiB on Linux

    def close(self) -> None:
        """End the launcher (it stops at the end of its input)."""
        if self._process.stdin is not None:
            self._process.stdin.close()
        self._process.wait(timeout=30)

    def __enter__(self) -> Launcher:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.close()


def cli_argv() -> tuple[str, ...]:
    """How to start the command line: the ``scrutiny`` script next to this interpreter, else its entry point."""
    script = Path(sys.executable).with_name("scrutiny")
    if script.is_file() and os.access(script, os.X_OK):
        return (str(script),)
    return (sys.executable, "-c", ENTRY_POINT)


def commands(metadata_file: Path) -> list[Command]:
    """The baseline first, then the light commands, one heavy command, and the former eager start."""
    cli = cli_argv()
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


def write_metadata(path: Path) -> None:
    """A closed ledger's metadata in the v3 format (E=3, WQ=2, AQ=2, 100 entries), as ZooKeeper stores it."""
    metadata = build_ledger_metadata(
        ensemble_size=3,
        write_quorum=2,
        ack_quorum=2,
        segments=[Segment(0, ("bk1:3181", "bk2:3181", "bk3:3181"))],
        state=LedgerState.CLOSED,
        last_entry_id=99,
        length=9_900,
    )
    path.write_bytes(encode_ledger_metadata_v3(metadata))


def measure(launcher: Launcher, command: Command, runs: int) -> Figures:
    """Medians of ``runs`` runs of ``command``."""
    samples = [launcher.run(command.argv) for _ in range(runs)]
    return Figures(
        command,
        statistics.median(sample.wall_s for sample in samples),
        statistics.median(sample.rss_mb for sample in samples),
        runs,
    )


def meets_targets(figures: Figures) -> bool:
    """Whether a command's medians are under both start-up targets."""
    return figures.wall_s < WALL_TARGET_S and figures.rss_mb < RSS_TARGET_MB


def table(results: Sequence[Figures]) -> tuple[list[str], bool]:
    """The printed lines (the baseline is the first row), and whether every light command met both targets."""
    baseline = results[0]
    lines = [
        f"{'command':38} {'wall (median)':>13} {'x baseline':>10} {'peak RSS':>10} {'x baseline':>10}  "
        f"targets (< {WALL_TARGET_S} s, < {RSS_TARGET_MB:.0f} MB)"
    ]
    met = True
    for figures in results:
        verdict = ""
        if figures.command.light:
            ok = meets_targets(figures)
            met = met and ok
            verdict = "PASS" if ok else "FAIL"
        lines.append(
            f"{figures.command.label:38} {figures.wall_s:>11.3f} s {figures.wall_s / baseline.wall_s:>9.1f}x "
            f"{figures.rss_mb:>7.1f} MB {figures.rss_mb / baseline.rss_mb:>9.1f}x  {verdict}".rstrip()
        )
    return lines, met


def main(argv: Sequence[str] | None = None) -> int:
    """Measure, print the table, and with ``--check`` return 1 when a light command misses a target."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--runs", type=int, default=DEFAULT_RUNS, help=f"runs of each command (default {DEFAULT_RUNS})")
    parser.add_argument("--quick", action="store_true", help="one run of each command")
    parser.add_argument("--check", action="store_true", help="exit 1 when a light command misses a target")
    args = parser.parse_args(argv)
    runs = 1 if args.quick else max(1, args.runs)
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as scratch, Launcher() as launcher:
        metadata_file = Path(scratch) / "L0005"
        write_metadata(metadata_file)
        to_run = commands(metadata_file)
        if not args.quick:  # one untimed run of each first: its files are in the page cache for every timed run
            for command in to_run:
                launcher.run(command.argv)
        results = [measure(launcher, command, runs) for command in to_run]
    lines, met = table(results)
    print(
        f"Start-up of the command line: medians of {runs} run{'s' if runs > 1 else ''} of each command, "
        f"{os.cpu_count()} cores, load average {load:.1f} at the start; entry point {' '.join(cli_argv())}"
    )
    print("\n".join(lines))
    return 1 if args.check and not met else 0


if __name__ == "__main__":
    sys.exit(main())
