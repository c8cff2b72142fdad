"""What a table's file count costs every idempotent write, and what compaction and the retention of replaced files
give back (``checker.compact_min_files``, ``checker.removed_file_retention_hours``).

Run from the repository root::

    .venv/bin/python -m bench.table_upkeep_bench                 # 10,000 files, 12 rounds (~3 min)
    .venv/bin/python -m bench.table_upkeep_bench --files 40000   # a day and more of a busy checker's batches

A local Spark session (``local[2]``, the product's settings) writes one ``violations`` table of ``--files`` one-row
files in one commit (what that many micro-batches leave without compaction), and copies it twice. One copy is
compacted by Delta's OPTIMIZE and keeps the replaced files in its state (Delta's default retention, a week); the
other is compacted with the retention already past (``delta.deletedFileRetentionDuration`` of one second, then the
appends up to the log's next checkpoint, which drops them). A fourth table holds a few files. Each round makes one
idempotent append (``txnAppId``/``txnVersion``, as every micro-batch writes) to each of the four tables in turn, so
the JVM's warm-up falls on all of them alike; the medians are printed with each table's ratio to the small one.
Nothing is asserted: exit 0.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
from delta.tables import DeltaTable
from deltalake import DeltaTable as LogReader
from pyspark.sql import SparkSession

from bench.delta_write_bench import Driver, output
from scrutiny.connectors.tables.schemas import VIOLATIONS, violation_rows
from scrutiny.streaming.delta_writer import append_rows, ensure_table, location
from scrutiny.streaming.session import build_spark_session
from scrutiny.streaming.table_upkeep import RETENTION_PROPERTY

APP = "table-upkeep-bench"
#: Appends that take a table's log to its next checkpoint (Delta's default interval: 10 commits).
CHECKPOINT_COMMITS = 10


@dataclass(frozen=True)
class Row:
    """One table's medians over the rounds."""

    label: str
    files: int
    wall_s: float
    cpu_s: float


def _rows(count: int) -> pa.Table:
    one = violation_rows(output(1), batch_id=1, source="stream")
    return pa.concat_tables([one] * count) if count > 1 else one


def _many_files(spark: SparkSession, data: Path, files: int) -> None:
    """``violations`` under ``data`` with ``files`` files of one row each, added in one commit."""
    ensure_table(spark, data, VIOLATIONS)
    frame = spark.createDataFrame(_rows(files))
    frame.write.format("delta").mode("append").option("maxRecordsPerFile", 1).save(location(data, VIOLATIONS))


def _compact(spark: SparkSession, data: Path, *, retention_past: bool) -> None:
    if retention_past:  # the writer's own way of setting it on an existing table
        ensure_table(spark, data, VIOLATIONS, properties={RETENTION_PROPERTY: "interval 1 seconds"})
    DeltaTable.forPath(spark, location(data, VIOLATIONS)).optimize().executeCompaction()
    if retention_past:
        time.sleep(1.5)
        for version in range(CHECKPOINT_COMMITS):
            append_rows(spark, data, VIOLATIONS, _rows(1), txn=(f"{APP}-settle", version))


def prepare(spark: SparkSession, root: Path, files: int) -> dict[str, Path]:
    """The four tables' data directories under ``root``, by label."""
    tables = {
        f"{files:,} files (no compaction)": root / "many",
        "compacted, replaced files kept (a week)": root / "kept",
        "compacted, replaced files past retention": root / "expired",
        "a few files": root / "few",
    }
    many, kept, expired, few = tables.values()
    _many_files(spark, many, files)
    shutil.copytree(many, kept)
    shutil.copytree(many, expired)
    _compact(spark, kept, retention_past=False)
    _compact(spark, expired, retention_past=True)
    _many_files(spark, few, 4)
    return tables


def run(spark: SparkSession, files: int, rounds: int) -> list[Row]:
    """The medians of ``rounds`` idempotent appends to each table (the first two rounds not counted)."""
    driver = Driver(spark)
    rows = _rows(1)
    with tempfile.TemporaryDirectory(prefix="table-upkeep-bench-") as tmp:
        tables = prepare(spark, Path(tmp), files)
        walls: dict[str, list[float]] = {label: [] for label in tables}
        cpus: dict[str, list[float]] = {label: [] for label in tables}
        for version in range(rounds + 2):
            for label, data in tables.items():
                meter = driver.cpu_meter().start()
                start = time.perf_counter()
                append_rows(spark, data, VIOLATIONS, rows, txn=(APP, version))
                wall, cpu = time.perf_counter() - start, meter.stop()
                if version >= 2:  # the first two rounds warm the JVM up
                    walls[label].append(wall)
                    cpus[label].append(cpu)
        counts = {label: len(LogReader(location(data, VIOLATIONS)).file_uris()) for label, data in tables.items()}
    return [
        Row(label, counts[label], statistics.median(walls[label]), statistics.median(cpus[label])) for label in tables
    ]


def report(rows: Sequence[Row]) -> str:
    few = rows[-1]
    lines = [f"{'table':<44} {'live files':>10} {'wall':>8} {'CPU':>8} {'CPU vs few':>10}"]
    for row in rows:
        ratio = row.cpu_s / max(few.cpu_s, 0.001)
        lines.append(f"{row.label:<44} {row.files:>10,} {row.wall_s:7.3f}s {row.cpu_s:7.3f}s {ratio:9.2f}x")
    many, kept = rows[0], rows[1]
    per_file = (many.cpu_s - few.cpu_s) / max(many.files - few.files, 1) * 1e6
    per_replaced = (kept.cpu_s - few.cpu_s) / max(many.files, 1) * 1e6
    lines.append(f"an idempotent append's CPU per file: {per_file:.1f} µs live, {per_replaced:.1f} µs replaced")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--files", type=int, default=10_000, help="files of the uncompacted table (10,000)")
    parser.add_argument("--rounds", type=int, default=12, help="measured appends to each table (12)")
    args = parser.parse_args(argv)
    spark = build_spark_session("table-upkeep-bench", master="local[2]", conf={"spark.sql.shuffle.partitions": "2"})
    try:
        print(report(run(spark, args.files, args.rounds)))
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
