"""What one Delta write of the checker's tables costs on Spark, with and without Delta's idempotent-write identifiers.

Run from the repository root::

    .venv/bin/python -m bench.delta_write_bench            # 15 writes of each kind (~1 min)
    .venv/bin/python -m bench.delta_write_bench --quick    # 4 of each
    .venv/bin/python -m bench.delta_write_bench --warm 250 # after 250 idempotent appends not measured (~4 min)

A local Spark session (``local[2]``, the product's :data:`~scrutiny.streaming.session.BASE_CONF`) writes a
two-row batch to the ``violations`` table in a temporary directory, the way the streaming job's sink does
(:func:`~scrutiny.streaming.delta_writer.append_rows`): with ``txnAppId``/``txnVersion`` (every micro-batch's
write), without them (for comparison only: the product always sets them), again with a version already held (a
replayed batch, which Delta skips), and one whole batch of :class:`~scrutiny.streaming.delta_writer.CheckerTables`
(violations, ledger_checks and the ``open_violations`` MERGE at once, then ``checker_runs``). For each it prints the
median wall time, the median CPU time of the driver's JVM and its Python workers (``/proc``), and the Spark jobs the
write ran (the scheduler's job counter before and after). Ratios compare figures of the same run. Nothing is
asserted: exit 0. :func:`run` takes a running session, so a test can use its own.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
from pyspark.sql import SparkSession

from bench.cpu_meter import CpuMeter
from scrutiny.connectors.tables.schemas import VIOLATIONS, RunRecord, output_table, violation_rows
from scrutiny.streaming.delta_writer import CheckerTables, append_rows, ensure_table
from scrutiny.streaming.session import build_spark_session

APP = "delta-write-bench"


@dataclass(frozen=True)
class Figure:
    """Medians of one kind of write."""

    label: str
    wall_s: float
    cpu_s: float
    jobs: int


class Driver:
    """The session's JVM: the CPU seconds of its process tree (the JVM and its Python workers) and its Spark jobs."""

    def __init__(self, spark: SparkSession) -> None:
        context = spark.sparkContext
        self._scheduler = context._jsc.sc().dagScheduler()
        self._pid = int(context._jvm.ProcessHandle.current().pid())  # type: ignore[union-attr]

    def cpu_meter(self) -> CpuMeter:
        """A meter of the tree's CPU (sampled, so a Python worker Spark stops during a write counts as last seen)."""
        return CpuMeter(self._pid, period_s=0.05)

    def jobs(self) -> int:
        return int(self._scheduler.nextJobId())


def measure(driver: Driver, label: str, write: Callable[[int], object], times: int) -> Figure:
    """``write(i)`` for i in range(times), timed one by one; the medians."""
    walls, cpus, jobs = [], [], []
    for i in range(times):
        meter, job = driver.cpu_meter().start(), driver.jobs()
        start = time.perf_counter()
        write(i)
        walls.append(time.perf_counter() - start)
        cpus.append(meter.stop())
        jobs.append(driver.jobs() - job)
    return Figure(label, statistics.median(walls), statistics.median(cpus), int(statistics.median(jobs)))


def output(batch: int) -> pa.Table:
    """A batch as the checker gives it: one violation and the check of its ledger."""
    at = datetime(2026, 1, 1, tzinfo=UTC)
    common = {"ledger_id": batch, "at": at}
    return output_table(
        [
            {**common, "record": "violation", "category": "NO_REPLICA", "severity": "critical", "entry_count": 1},
            {**common, "record": "check", "verdict": "VIOLATED", "violation_count": 1},
        ]
    )


#: The app id of the unmeasured idempotent appends of ``--warm``.
WARM_UP_APP = f"{APP}-warm-up"


def warm_up(spark: SparkSession, data: Path, rows: pa.Table, times: int) -> None:
    """``times`` idempotent appends of ``rows`` to ``violations`` under ``data`` (versions 0 … times - 1 of
    :data:`WARM_UP_APP`), not measured: the JVM compiles the write path as a long-running checker's has."""
    for version in range(times):
        append_rows(spark, data, VIOLATIONS, rows, txn=(WARM_UP_APP, version))


def run(spark: SparkSession, times: int, warm: int = 0) -> list[Figure]:
    """Each kind of write ``times`` times with ``spark`` (left running), in a temporary directory, after ``warm``
    idempotent appends that are not measured (a long-running checker's JVM has compiled Spark's and Delta's code)."""
    driver = Driver(spark)
    with tempfile.TemporaryDirectory(prefix="delta-write-bench-") as tmp:
        data = Path(tmp)
        ensure_table(spark, data, VIOLATIONS)
        rows = violation_rows(output(1), batch_id=1, source="stream")
        append_rows(spark, data, VIOLATIONS, rows)  # warm-up
        warm_up(spark, data, rows, warm)

        def batch_txn(i: int) -> None:
            append_rows(spark, data, VIOLATIONS, rows, txn=(APP, 1000 + i))

        figures = [
            measure(driver, "append with txnAppId/txnVersion", batch_txn, times),
            measure(driver, "append without them", lambda i: append_rows(spark, data, VIOLATIONS, rows), times),
            measure(driver, "append of a batch already held", lambda i: batch_txn(0), times),
        ]
        tables = CheckerTables(spark, data / "tables", app_id=APP)
        tables.ensure_tables()
        run_at = datetime.now(UTC)

        def whole_batch(i: int) -> None:
            record = RunRecord("bench", run_at, run_at)
            tables.write_batch(i, output(i), record)

        whole_batch(0)  # warm-up
        figures.append(
            measure(driver, "a whole batch (3 tables at once, then checker_runs)", lambda i: whole_batch(i + 1), times)
        )
    return figures


def report(figures: Sequence[Figure]) -> str:
    lines = [f"{'write':<52} {'wall':>8} {'CPU':>8} {'jobs':>5}"]
    lines += [f"{f.label:<52} {f.wall_s:7.3f}s {f.cpu_s:7.3f}s {f.jobs:5d}" for f in figures]
    with_txn, without = figures[0], figures[1]
    lines.append(
        f"idempotent append / plain append: {with_txn.cpu_s / max(without.cpu_s, 0.01):.2f}x the CPU,"
        f" {with_txn.jobs - without.jobs} more Spark jobs (the table's state rebuilt to read its transactions)"
    )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="4 writes of each kind instead of 15")
    parser.add_argument(
        "--warm", type=int, default=0, help="idempotent appends made first and not measured (a warm JVM: 250)"
    )
    args = parser.parse_args(argv)
    spark = build_spark_session("delta-write-bench", master="local[2]", conf={"spark.sql.shuffle.partitions": "2"})
    try:
        print(report(run(spark, 4 if args.quick else 15, args.warm)))
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
