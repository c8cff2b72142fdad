"""What an idle checker's heartbeat row costs to write: through Delta Lake on Spark, and through delta-rs
(``checker.runs_by_delta_rs``).

Run from the repository root::

    .venv/bin/python -m bench.heartbeat_write_bench               # 30 rounds (~4 min)
    .venv/bin/python -m bench.heartbeat_write_bench --rounds 60   # past compact_min_files: Spark takes a row over

A local Spark session (``local[2]``, the product's settings) and two writers as the streaming job makes them
(``scrutiny.streaming.checker.job.job_tables`` with the default ``[checker]`` settings: state prefetch on,
auto compaction at ``compact_min_files``), one with the quiet batches' rows through delta-rs, one without, each on its
own data directory. Each round writes one quiet batch (no records: only its ``checker_runs`` row, as an idle
checker's heartbeat) to each writer in turn, so the JVM's warm-up falls on both alike. Each write's figure is the CPU
of this whole process tree (the Python driver, where delta-rs runs, Spark's JVM and its Python workers) from the
write's start until ``--settle`` seconds after it ends, so that what the write leaves to background threads (the state
prefetch, Delta's post-commit work) counts; the same tree's CPU over ``--settle`` seconds of nothing is printed
beside, as the floor. The medians of the rounds after the first ``--warmup`` are printed with their ratio, and the
Spark jobs each write ran. Nothing is asserted: exit 0.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from functools import partial
from pathlib import Path

from bench.checker_bench import bench_session
from bench.cpu_meter import CpuMeter
from bench.delta_write_bench import Driver
from scrutiny.connectors.tables.schemas import RunRecord, empty_output
from scrutiny.settings.sections import CheckerSection
from scrutiny.streaming.checker.job import job_tables

APP = "heartbeat-write-bench"


def _run_record() -> RunRecord:
    now = datetime.now(UTC)
    return RunRecord("heartbeat-write-bench", now, now, events=1)


def _tree_cpu(seconds: float, work: Callable[[], object] | None = None) -> float:
    """CPU seconds of this process tree while ``work()`` runs and ``seconds`` after."""
    meter = CpuMeter(os.getpid(), period_s=0.05).start()
    if work is not None:
        work()
    time.sleep(seconds)
    return meter.stop()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--rounds", type=int, default=30, help="quiet batches written by each writer (30)")
    parser.add_argument("--warmup", type=int, default=5, help="first rounds not counted (5)")
    parser.add_argument("--settle", type=float, default=3.0, help="seconds after each write that count (3)")
    args = parser.parse_args(argv)
    spark = bench_session("heartbeat-write-bench")
    checker = CheckerSection()
    driver = Driver(spark)
    try:
        with tempfile.TemporaryDirectory(prefix="heartbeat-write-bench-") as tmp:
            writers = {
                label: job_tables(
                    spark, replace(checker, data_dir=str(Path(tmp) / label), runs_by_delta_rs=quiet), app_id=APP
                )
                for label, quiet in (("Delta Lake on Spark", False), ("delta-rs", True))
            }
            cpus: dict[str, list[float]] = {label: [] for label in writers}
            jobs: dict[str, list[int]] = {label: [] for label in writers}
            floors: list[float] = []
            for batch in range(args.rounds):
                for label, tables in writers.items():
                    before = driver.jobs()
                    cpu = _tree_cpu(args.settle, partial(tables.write_batch, batch, empty_output(), _run_record()))
                    if batch >= args.warmup:
                        cpus[label].append(cpu)
                        jobs[label].append(driver.jobs() - before)
                floors.append(_tree_cpu(args.settle))
            for tables in writers.values():
                tables.close()
    finally:
        spark.stop()
    print(f"{'heartbeat row written by':<22} {'CPU per write':>14} {'Spark jobs':>11}")
    medians = {label: statistics.median(values) for label, values in cpus.items()}
    for label, cpu in medians.items():
        print(f"{label:<22} {cpu:13.3f}s {statistics.median(jobs[label]):>11}")
    print(f"{'(nothing, the floor)':<22} {statistics.median(floors):13.3f}s")
    spark_s, rs_s = medians.values()
    counted = max(0, args.rounds - args.warmup)
    print(f"CPU per heartbeat row, Spark / delta-rs: {spark_s / max(rs_s, 1e-3):.1f}x (medians of {counted} rounds)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
