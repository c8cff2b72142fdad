"""The cost-bound fuzz run at length: hostile inputs for every decoder and for the verdict, and what each cost.

Run from the repository root::

    .venv/bin/python -m bench.input_cost_bench                  # 20 s per target (under 3 minutes)
    .venv/bin/python -m bench.input_cost_bench --seconds 120    # longer
    .venv/bin/python -m bench.input_cost_bench --json           # the table, then the figures as JSON

The targets and their input generators are tests/support/input_cost.py (the suite runs the same ones briefly in
tests/core/test_input_cost.py). Each target is fed inputs of growing scale (1 to ``--max-scale`` elements:
bookies, groups, JSON levels, escapes), mostly well-formed and shaped to be expensive, some with a byte flipped,
cut or inserted, until its time is up. Per target it prints the inputs tried, how many ended in the project's own
error, the bytes, the slowest input (its time and size: the verdict's cost budget caps any one input), and over the
inputs of at least 16 KiB the worst time per KiB against their median per KiB, measured in the same run: work
linear in the bytes keeps that ratio small, whatever the scale. Any error other than
the project's own stops the run with the input that caused it (saved under ``--crash-dir``).
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from tests.support.input_cost import TARGETS, Run, Target, run_one

SCALES = (1, 3, 10, 30, 100, 300, 1000, 3000, 10000)
#: Inputs at least this large give the time per KiB (smaller ones are dominated by fixed costs).
LARGE_BYTES = 16 * 1024


@dataclass(frozen=True)
class Figures:
    """What one target's run measured."""

    target: str
    inputs: int
    refused: int
    kib: float
    slowest_ms: float
    slowest_kib: float
    large_inputs: int
    worst_ms_per_kib: float
    median_ms_per_kib: float

    @property
    def flatness(self) -> float:
        """The worst time per KiB of the large inputs over their median: small when the cost is linear."""
        return self.worst_ms_per_kib / self.median_ms_per_kib if self.median_ms_per_kib else 0.0


def measure(target: Target, *, seconds: float, max_scale: int, seed: int, crash_dir: Path) -> Figures:
    """Feed ``target`` inputs of every scale up to ``max_scale`` in turn for ``seconds``."""
    rng = random.Random(seed)
    scales = [s for s in SCALES if s <= max_scale] or [max_scale]
    runs: list[Run] = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        data = target.make(rng, scales[len(runs) % len(scales)])
        try:
            runs.append(run_one(target, data))
        except Exception:
            crash_dir.mkdir(parents=True, exist_ok=True)
            path = crash_dir / f"{target.name.replace(' ', '-')}-{len(runs)}.bin"
            path.write_bytes(data)
            print(f"{target.name}: crashed on the input saved in {path}", file=sys.stderr)
            raise
    slowest = max(runs, key=lambda r: r.seconds)
    large = [r.ms_per_kib for r in runs if r.size >= LARGE_BYTES] or [0.0]
    return Figures(
        target=target.name,
        inputs=len(runs),
        refused=sum(r.refused for r in runs),
        kib=sum(r.size for r in runs) / 1024,
        slowest_ms=slowest.seconds * 1000,
        slowest_kib=slowest.size / 1024,
        large_inputs=sum(r.size >= LARGE_BYTES for r in runs),
        worst_ms_per_kib=max(large),
        median_ms_per_kib=statistics.median(large),
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=20.0, help="time per target (default 20)")
    parser.add_argument("--max-scale", type=int, default=10000, help="largest scale fed (default 10000)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--target", action="append", help="only these targets (by name; repeatable)")
    parser.add_argument("--crash-dir", type=Path, default=Path("bench-crashes"))
    parser.add_argument("--json", action="store_true", help="also print the figures as JSON")
    args = parser.parse_args(argv)
    targets = [t for t in TARGETS if not args.target or t.name in args.target]
    print(
        f"{'target':24} {'inputs':>7} {'refused':>7} {'KiB':>9} {'slowest ms':>10} {'at KiB':>8}"
        f" {'large':>6} {'worst ms/KiB':>12} {'median ms/KiB':>13} {'ratio':>6}"
    )
    figures: list[Figures] = []
    for target in targets:
        f = measure(target, seconds=args.seconds, max_scale=args.max_scale, seed=args.seed, crash_dir=args.crash_dir)
        figures.append(f)
        print(
            f"{f.target:24} {f.inputs:7d} {f.refused:7d} {f.kib:9.0f} {f.slowest_ms:10.1f} {f.slowest_kib:8.1f}"
            f" {f.large_inputs:6d} {f.worst_ms_per_kib:12.3f} {f.median_ms_per_kib:13.4f} {f.flatness:6.1f}",
            flush=True,
        )
    if args.json:
        print(json.dumps([asdict(f) for f in figures], indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
