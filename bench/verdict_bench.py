"""Benchmarks of the ledger verdict and of the listing bytes, all ratios measured in one run.

Run from the repository root::

    .venv/bin/python -m bench.verdict_bench            # full run (under ~2 minutes)
    .venv/bin/python -m bench.verdict_bench --quick    # short run (under ~20 s)
    .venv/bin/python -m bench.verdict_bench --json     # the table, then the figures as JSON

Every ledger is closed, E=5, AQ=2, one segment, WQ=2 or 3, with 10^3, 10^6 or 10^9 entries.
What is timed (median of repeated ``time.perf_counter_ns`` timings, garbage collector off
while timing, repetitions adapted to the cost of one call):

* ``compute_verdict`` on a healthy ledger whose answers are each bookie's compact listing;
* the naive per-entry reference (:func:`tests.support.reference.reference_replicas`) on the same
  ledger, with holdings as Python sets built beforehand (not timed), at 10^3 and 10^6 only;
* ``compute_verdict`` when the listings are in BookKeeper's one-group-per-run form;
* ``compute_verdict`` on a 10^6-entry (and a 10^9-entry) ledger with one wiped bookie;
* ``decode_listing`` of one bookie's 10^6-entry listing, per-run form against compact form,
  next to the listing sizes (bytes) of both forms;
* ``compute_verdict`` on a healthy 10^9-entry ledger whose bookies each describe their entries
  with P overlapping periodic groups, for growing P: the time per group should stay flat (the
  cost is linear in the groups). The listing decoders reject such groups, but ``compute_verdict``
  is a library function that takes any consistent groups.

Targets are printed as PASS or MISS, never asserted: the run exits 0 either way.
"""

from __future__ import annotations

import argparse
import datetime
import gc
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from functools import partial

from scrutiny.core.ledger_metadata import LedgerMetadata, Segment, build_ledger_metadata
from scrutiny.core.listing_codec import (
    GROUP_SIZE,
    HEADER_SIZE,
    decode_listing,
    decode_listing_compact,
    encode_listing,
    encode_listing_per_run,
)
from scrutiny.core.sequence_groups import SequenceGroup, per_run
from scrutiny.core.striping import expected_groups
from scrutiny.core.verdict import BookieAnswer, Verdict, compute_verdict
from tests.support.reference import Holdings, reference_replicas

ENSEMBLE = 5
ACK_QUORUM = 2
WRITE_QUORUMS = (2, 3)
BOOKIES = tuple(f"bookie-{index}:3181" for index in range(ENSEMBLE))
SIZES = (10**3, 10**6, 10**9)
#: Sizes at which the naive reference finishes in reasonable time.
REFERENCE_SIZES = (10**3, 10**6)
#: Sizes at which the per-run (Java) form of the listings is built and timed.
PER_RUN_SIZES = (10**3, 10**6)
#: Sizes of the ledger with one wiped bookie.
WIPED_SIZES = (10**6, 10**9)
#: Overlapping groups per bookie in the overlapping-groups benchmark (full run, quick run).
OVERLAP_GROUPS = (500, 1000, 2000, 4000)
OVERLAP_GROUPS_QUICK = (500, 2000)
#: The bookie (index in the ensemble) wiped, and the one whose listing is encoded and decoded.
WIPED_INDEX = 2
LISTING_INDEX = 0
NOW_MS = 10**13

TARGET_HEALTHY_1E9_US = 1000.0
TARGET_SPEEDUP_1E6 = 1000.0


@dataclass(frozen=True, slots=True)
class Timing:
    """The median of ``reps`` timings of one call, in nanoseconds, with the fastest and slowest."""

    median_ns: int
    min_ns: int
    max_ns: int
    reps: int

    @property
    def median_us(self) -> float:
        """The median in microseconds."""
        return self.median_ns / 1000


@dataclass(frozen=True, slots=True)
class Budget:
    """How long each measurement may take: the sample budget and the repetition bounds."""

    budget_ns: int
    min_reps: int
    max_reps: int


FULL = Budget(budget_ns=1_000_000_000, min_reps=5, max_reps=2000)
QUICK = Budget(budget_ns=150_000_000, min_reps=1, max_reps=300)


def _timed(fn: Callable[[], object]) -> int:
    """One call's duration in nanoseconds, with the garbage collector off (as ``timeit`` does)."""
    gc.disable()
    try:
        start = time.perf_counter_ns()
        fn()
        return time.perf_counter_ns() - start
    finally:
        gc.enable()


def measure(fn: Callable[[], object], budget: Budget) -> Timing:
    """Median timing of ``fn``, the number of calls adapted to the cost of the first one.

    A first call warms caches up. When it is cheap it is discarded and enough calls to fill the
    budget are timed (within the bounds); when it is slow it counts as the first sample and only
    the minimum number of calls is made.
    """
    gc.collect()
    first = _timed(fn)
    if first * max(budget.min_reps, 1) >= budget.budget_ns:
        samples = [first] + [_timed(fn) for _ in range(budget.min_reps - 1)]
    else:
        reps = max(budget.min_reps, min(budget.max_reps, budget.budget_ns // max(first, 1)))
        samples = [_timed(fn) for _ in range(reps)]
    return Timing(int(statistics.median(samples)), min(samples), max(samples), len(samples))


def ledger(entries: int, write_quorum: int) -> LedgerMetadata:
    """A closed one-segment ledger of ``entries`` entries (ids 0 to entries-1), E=5, AQ=2."""
    return build_ledger_metadata(
        ensemble_size=ENSEMBLE,
        write_quorum=write_quorum,
        ack_quorum=ACK_QUORUM,
        segments=[Segment(0, BOOKIES)],
        last_entry_id=entries - 1,
        length=100 * entries,
    )


def stripes(entries: int, write_quorum: int) -> list[list[SequenceGroup]]:
    """The entries each bookie of the ensemble must hold, as compact groups (the healthy listings)."""
    return [expected_groups(index, ENSEMBLE, write_quorum, 0, entries - 1) for index in range(ENSEMBLE)]


def answers_of(listings: Sequence[Sequence[SequenceGroup]]) -> dict[str, BookieAnswer]:
    """Each bookie's answer: a listing of these groups."""
    return {bookie: BookieAnswer.listing(list(groups)) for bookie, groups in zip(BOOKIES, listings, strict=True)}


def holdings_of(listings: Sequence[Sequence[SequenceGroup]]) -> dict[str, Holdings]:
    """Each bookie's holdings as a Python set of entry ids (the reference's input)."""
    held: dict[str, Holdings] = {}
    for bookie, groups in zip(BOOKIES, listings, strict=True):
        entries: set[int] = set()
        for group in groups:
            for first, last in group.run_bounds():
                entries.update(range(first, last + 1))
        held[bookie] = entries
    return held


def run_count(groups: Sequence[SequenceGroup]) -> int:
    """How many runs the groups hold: the number of groups of the per-run form (arithmetic)."""
    return sum(group.runs for group in groups)


def power(entries: int) -> str:
    """``10^k`` for a power of ten, else the number."""
    exponent = len(str(entries)) - 1
    return f"10^{exponent}" if entries == 10**exponent else str(entries)


def verdict_label(verdict: Verdict) -> str:
    """The verdict and, when violated, the worst category."""
    if verdict.violations:
        return f"{verdict.verdict.value} ({verdict.violations[0].category.value})"
    return verdict.verdict.value


@dataclass(frozen=True, slots=True)
class HealthyRow:
    """Healthy ledger, compact listings: the core's time and the reference's, when run."""

    entries: int
    write_quorum: int
    groups: int
    core: Timing
    verdict: str
    reference: Timing | None
    reference_worst: str | None

    @property
    def speedup(self) -> float | None:
        """Reference time over core time."""
        return None if self.reference is None else self.reference.median_ns / self.core.median_ns


@dataclass(frozen=True, slots=True)
class PerRunRow:
    """Healthy ledger, listings in BookKeeper's one-group-per-run form."""

    entries: int
    write_quorum: int
    groups: int
    per_run: Timing
    compact: Timing
    verdict: str

    @property
    def ratio(self) -> float:
        """Per-run time over compact time."""
        return self.per_run.median_ns / self.compact.median_ns

    @property
    def ns_per_group(self) -> float:
        """Per-run time per listed group."""
        return self.per_run.median_ns / self.groups


@dataclass(frozen=True, slots=True)
class WipedRow:
    """One bookie answers ENOLEDGER: the verdict is a violation, at the cost of a healthy one."""

    entries: int
    write_quorum: int
    healthy: Timing
    wiped: Timing
    verdict: str

    @property
    def ratio(self) -> float:
        """Wiped time over healthy time."""
        return self.wiped.median_ns / self.healthy.median_ns


@dataclass(frozen=True, slots=True)
class SizeRow:
    """One bookie's listing bytes, compact against per-run (the per-run size computed, checked when built)."""

    entries: int
    compact_groups: int
    compact_bytes: int
    runs: int
    per_run_bytes: int
    per_run_built: bool

    @property
    def ratio(self) -> float:
        """Per-run bytes over compact bytes."""
        return self.per_run_bytes / self.compact_bytes


@dataclass(frozen=True, slots=True)
class DecodeRow:
    """Decode time of one bookie's listing in both forms."""

    entries: int
    compact_bytes: int
    per_run_bytes: int
    compact: Timing
    per_run: Timing
    per_run_merged: Timing

    @property
    def ratio(self) -> float:
        """Per-run decode time over compact decode time."""
        return self.per_run.median_ns / self.compact.median_ns


@dataclass(frozen=True, slots=True)
class OverlapRow:
    """A healthy ledger whose bookies each list their entries as ``groups_per_bookie`` overlapping groups."""

    groups_per_bookie: int
    timing: Timing
    verdict: str

    @property
    def ns_per_group(self) -> float:
        """Verdict time per listed group (all bookies)."""
        return self.timing.median_ns / (self.groups_per_bookie * ENSEMBLE)


@dataclass
class Results:
    """Everything measured in one run."""

    healthy: list[HealthyRow]
    per_run: list[PerRunRow]
    wiped: list[WipedRow]
    sizes: list[SizeRow]
    decode: list[DecodeRow]
    overlap: list[OverlapRow]


def progress(message: str) -> None:
    """A progress note on stderr (the table goes to stdout)."""
    print(f"  ... {message}", file=sys.stderr, flush=True)


def bench_verdicts(budget: Budget, *, quick: bool) -> tuple[list[HealthyRow], list[PerRunRow], list[WipedRow]]:
    """Time the core on healthy, per-run and wiped ledgers, and the reference where it is practical.

    With ``quick`` the per-run form at 10^6 entries (seconds per call) is timed for WQ=2 only.
    """
    healthy: list[HealthyRow] = []
    per_runs: list[PerRunRow] = []
    wiped_rows: list[WipedRow] = []
    for write_quorum in WRITE_QUORUMS:
        for entries in SIZES:
            progress(f"WQ={write_quorum}, {power(entries)} entries")
            md = ledger(entries, write_quorum)
            listings = stripes(entries, write_quorum)
            answers = answers_of(listings)
            outcome = compute_verdict(md, answers, now_ms=NOW_MS)
            core = measure(partial(compute_verdict, md, answers, now_ms=NOW_MS), budget)
            reference: Timing | None = None
            worst: str | None = None
            if entries in REFERENCE_SIZES:
                held = holdings_of(listings)  # built before, never timed
                worst = reference_replicas(md, held).worst or "none"
                reference = measure(partial(reference_replicas, md, held), budget)
                del held
            groups = sum(len(g) for g in listings)
            healthy.append(HealthyRow(entries, write_quorum, groups, core, verdict_label(outcome), reference, worst))
            if entries in PER_RUN_SIZES and not (quick and entries >= 10**6 and write_quorum != 2):
                java = [per_run(groups_) for groups_ in listings]
                java_answers = answers_of(java)
                java_outcome = compute_verdict(md, java_answers, now_ms=NOW_MS)
                java_timing = measure(partial(compute_verdict, md, java_answers, now_ms=NOW_MS), budget)
                per_runs.append(
                    PerRunRow(
                        entries,
                        write_quorum,
                        sum(len(g) for g in java),
                        java_timing,
                        core,
                        verdict_label(java_outcome),
                    )
                )
                del java, java_answers
            if entries in WIPED_SIZES:
                damaged = dict(answers)
                damaged[BOOKIES[WIPED_INDEX]] = BookieAnswer.no_ledger()
                wiped_outcome = compute_verdict(md, damaged, now_ms=NOW_MS)
                wiped = measure(partial(compute_verdict, md, damaged, now_ms=NOW_MS), budget)
                wiped_rows.append(WipedRow(entries, write_quorum, core, wiped, verdict_label(wiped_outcome)))
            gc.collect()
    return healthy, per_runs, wiped_rows


def bench_listings(budget: Budget) -> tuple[list[SizeRow], list[DecodeRow]]:
    """Listing sizes of one bookie of a healthy E=5/WQ=2 ledger, and decode times at 10^6 entries."""
    sizes: list[SizeRow] = []
    decodes: list[DecodeRow] = []
    for entries in SIZES:
        progress(f"listing of {power(entries)} entries")
        groups = stripes(entries, 2)[LISTING_INDEX]
        compact = encode_listing(groups)
        runs = run_count(groups)
        per_run_bytes = HEADER_SIZE + GROUP_SIZE * runs
        built = entries < 10**9  # the 10^9 per-run listing (4.8 GB, 2×10^8 groups) is never built
        if built:
            java = encode_listing_per_run(groups)
            if len(java) != per_run_bytes:
                print(f"warning: per-run listing is {len(java)} bytes, formula says {per_run_bytes}", file=sys.stderr)
            per_run_bytes = len(java)
            if entries == 10**6:
                compact_timing = measure(partial(decode_listing, compact), budget)
                java_timing = measure(partial(decode_listing, java), budget)
                merged_timing = measure(partial(decode_listing_compact, java), budget)
                decodes.append(DecodeRow(entries, len(compact), len(java), compact_timing, java_timing, merged_timing))
            del java
        sizes.append(
            SizeRow(entries, (len(compact) - HEADER_SIZE) // GROUP_SIZE, len(compact), runs, per_run_bytes, built)
        )
    return sizes, decodes


def overlapping_listing(entries: int, groups: int) -> list[SequenceGroup]:
    """Every entry of ``[0, entries)`` as ``groups`` single-entry groups of period ``groups``, all overlapping.

    Each group covers one residue modulo ``groups`` over the whole ledger, so every group is
    open at once: the shape that made a naive union cost grow with the square of the groups.
    """
    return [SequenceGroup(r, r + ((entries - 1 - r) // groups) * groups, 1, groups) for r in range(groups)]


def bench_overlap(budget: Budget, *, quick: bool) -> list[OverlapRow]:
    """A healthy 10^9-entry E=5/WQ=2 ledger whose bookies' entries are P overlapping groups each, for growing P."""
    rows: list[OverlapRow] = []
    entries = 10**9
    md = ledger(entries, 2)
    for count in OVERLAP_GROUPS_QUICK if quick else OVERLAP_GROUPS:
        progress(f"{count} overlapping groups per bookie")
        groups = count - count % ENSEMBLE  # a multiple of E keeps the groups periodic modulo the ensemble
        listing = overlapping_listing(entries, groups)
        answers = {bookie: BookieAnswer.listing(listing) for bookie in BOOKIES}
        outcome = compute_verdict(md, answers, now_ms=NOW_MS)
        rows.append(
            OverlapRow(
                groups, measure(partial(compute_verdict, md, answers, now_ms=NOW_MS), budget), verdict_label(outcome)
            )
        )
    return rows


def fmt_us(timing: Timing) -> str:
    """A median in µs with the number of repetitions."""
    return f"{timing.median_us:,.1f} µs (n={timing.reps})"


def fmt_ratio(value: float) -> str:
    """A ratio as ``1,234×``, with decimals when small."""
    return f"{value:,.0f}×" if value >= 100 else f"{value:,.2f}×"


def table(headers: Sequence[str], rows: Sequence[Sequence[str]], right: Sequence[bool]) -> str:
    """An aligned text table; ``right`` says which columns are right-aligned."""
    widths = [max([len(h), *(len(r[i]) for r in rows)]) for i, h in enumerate(headers)]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(c.rjust(w) if r else c.ljust(w) for c, w, r in zip(cells, widths, right, strict=True)).rstrip()

    rule = "  ".join("-" * w for w in widths)
    return "\n".join(["  " + line(headers), "  " + rule, *("  " + line(r) for r in rows)])


def render(results: Results, quick: bool, elapsed_s: float) -> str:
    """The whole report: header, one table per benchmark, and one PASS/MISS line per target."""
    out: list[str] = []
    now = datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z")
    out.append("Scrutiny verdict benchmark" + (" (--quick)" if quick else ""))
    out.append(
        f"  {now}; Python {platform.python_version()} on {platform.machine()}, {os.cpu_count()} CPUs; "
        f"closed ledgers, E={ENSEMBLE}, AQ={ACK_QUORUM}, one segment"
    )
    out.append(
        "  times: median of n timings (time.perf_counter_ns, gc off while timing); "
        "every ratio is between figures of this run"
    )
    out.append("")
    out.append("1. Healthy ledger, answers = each bookie's compact listing: core verdict vs naive per-entry reference")
    rows = []
    for h in results.healthy:
        if h.reference is None:
            reference, speedup = f"n/a (would expand {power(h.entries)} entries)", "n/a"
        else:
            reference = fmt_us(h.reference)
            speedup = fmt_ratio(h.speedup or 0.0)
        rows.append(
            [power(h.entries), str(h.write_quorum), str(h.groups), fmt_us(h.core), h.verdict, reference, speedup]
        )
    out.append(
        table(
            ["entries", "WQ", "groups", "core verdict", "verdict", "reference (sets)", "reference/core"],
            rows,
            [True, True, True, True, False, True, True],
        )
    )
    out.append("  groups: listed groups over all 5 bookies; reference: holdings sets built before, not timed")
    out.append("")
    out.append(
        "2. Healthy ledger, listings in BookKeeper's one-group-per-run form (per_run): merging is linear in groups"
    )
    rows = [
        [
            power(p.entries),
            str(p.write_quorum),
            f"{p.groups:,}",
            fmt_us(p.per_run),
            f"{p.compact.median_us:,.1f} µs",
            fmt_ratio(p.ratio),
            f"{p.ns_per_group:,.0f} ns",
            p.verdict,
        ]
        for p in results.per_run
    ]
    out.append(
        table(
            [
                "entries",
                "WQ",
                "groups",
                "per-run verdict",
                "compact verdict",
                "per-run/compact",
                "per group",
                "verdict",
            ],
            rows,
            [True, True, True, True, True, True, True, False],
        )
    )
    out.append("")
    out.append(f"3. One wiped bookie (bookie {WIPED_INDEX} answers ENOLEDGER) vs the healthy ledger")
    rows = [
        [power(w.entries), str(w.write_quorum), fmt_us(w.healthy), fmt_us(w.wiped), fmt_ratio(w.ratio), w.verdict]
        for w in results.wiped
    ]
    out.append(
        table(
            ["entries", "WQ", "healthy verdict", "wiped verdict", "wiped/healthy", "verdict"],
            rows,
            [True, True, True, True, True, False],
        )
    )
    out.append("")
    out.append(f"4. Listing bytes of one bookie (index {LISTING_INDEX}) of a healthy E=5/WQ=2 ledger")
    rows = [
        [
            power(s.entries),
            str(s.compact_groups),
            f"{s.compact_bytes:,} B",
            f"{s.runs:,}",
            f"{s.per_run_bytes:,} B" + ("" if s.per_run_built else " (computed: 64 + 24 × runs)"),
            fmt_ratio(s.ratio),
        ]
        for s in results.sizes
    ]
    out.append(
        table(
            ["entries", "compact groups", "compact", "runs", "per-run (BookKeeper)", "per-run/compact"],
            rows,
            [True, True, True, True, True, True],
        )
    )
    for d in results.decode:
        out.append(
            f"  decode_listing at {power(d.entries)}: per-run ({d.per_run_bytes:,} B) {fmt_us(d.per_run)}, "
            f"compact ({d.compact_bytes:,} B) {fmt_us(d.compact)}: per-run/compact {fmt_ratio(d.ratio)}"
        )
        out.append(
            f"  decode_listing_compact of the per-run listing (merged while decoding, what the checker uses): "
            f"{fmt_us(d.per_run_merged)}, {d.per_run.median_us / d.per_run_merged.median_us:,.2f}× faster"
        )
    out.append("")
    out.append("5. Healthy 10^9-entry ledger, each bookie's entries given as P overlapping groups (library callers)")
    smallest = results.overlap[0] if results.overlap else None
    rows = [
        [
            f"{o.groups_per_bookie:,}",
            fmt_us(o.timing),
            f"{o.ns_per_group:,.0f} ns",
            fmt_ratio(o.ns_per_group / smallest.ns_per_group) if smallest else "n/a",
            o.verdict,
        ]
        for o in results.overlap
    ]
    out.append(
        table(
            ["P per bookie", "verdict time", "per group", "per group vs first row", "verdict"],
            rows,
            [True, True, True, True, False],
        )
    )
    out.append("  linear cost: the time per group stays about flat as P grows (a quadratic cost would grow with P)")
    out.append("")
    out.append("Targets")
    out.extend(target_lines(results))
    out.append(f"  (run took {elapsed_s:.1f} s)")
    return "\n".join(out)


def target_lines(results: Results) -> list[str]:
    """One PASS/MISS line per target, over both write quorums."""
    lines: list[str] = []
    billion = [h for h in results.healthy if h.entries == 10**9]
    if billion:
        ok = all(h.core.median_us < TARGET_HEALTHY_1E9_US for h in billion)
        figures = ", ".join(f"WQ={h.write_quorum} {h.core.median_us:,.1f} µs" for h in billion)
        lines.append(f"  {'PASS' if ok else 'MISS'}  healthy 10^9-entry ledger verdict < 1 ms: {figures}")
    million = [h for h in results.healthy if h.entries == 10**6 and h.speedup is not None]
    if million:
        ok = all((h.speedup or 0.0) >= TARGET_SPEEDUP_1E6 for h in million)
        figures = ", ".join(f"WQ={h.write_quorum} {fmt_ratio(h.speedup or 0.0)}" for h in million)
        lines.append(f"  {'PASS' if ok else 'MISS'}  core ≥ 1000× faster than the reference at 10^6 entries: {figures}")
    return lines


def as_json(results: Results, quick: bool) -> dict[str, object]:
    """The figures as plain JSON values (timings in ns, ratios as floats)."""

    return {
        "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "quick": quick,
        "ensemble": ENSEMBLE,
        "ack_quorum": ACK_QUORUM,
        "healthy": [{**asdict(h), "speedup": h.speedup} for h in results.healthy],
        "per_run": [{**asdict(p), "ratio": p.ratio, "ns_per_group": p.ns_per_group} for p in results.per_run],
        "wiped": [{**asdict(w), "ratio": w.ratio} for w in results.wiped],
        "sizes": [{**asdict(s), "ratio": s.ratio} for s in results.sizes],
        "decode": [{**asdict(d), "ratio": d.ratio} for d in results.decode],
        "overlap": [{**asdict(o), "ns_per_group": o.ns_per_group} for o in results.overlap],
    }


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmarks, print the table (and JSON with ``--json``); always exits 0."""
    parser = argparse.ArgumentParser(prog="python -m bench.verdict_bench", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--quick", action="store_true", help="fewer repetitions, per-run form at 10^6 for WQ=2 only (under ~20 s)"
    )
    parser.add_argument("--json", action="store_true", help="also print the figures as JSON")
    args = parser.parse_args(argv)
    budget = QUICK if args.quick else FULL
    started = time.perf_counter()
    healthy, per_runs, wiped = bench_verdicts(budget, quick=args.quick)
    sizes, decodes = bench_listings(budget)
    overlap = bench_overlap(budget, quick=args.quick)
    results = Results(healthy, per_runs, wiped, sizes, decodes, overlap)
    print(render(results, args.quick, time.perf_counter() - started))
    if args.json:
        print(json.dumps(as_json(results, args.quick), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
