"""A class-data sharing archive for the suite's Spark drivers: each starts from classes already parsed and verified.

The suite starts Spark's driver JVM about a hundred times (its own session, and every ``scrutiny run`` or ``scan``
a test starts as a process), and each start loads and verifies some 20,000 classes from pyspark's jars. The JVM can
dump the classes an application loaded into an archive when it exits (``-XX:ArchiveClassesAtExit``) and map that
archive at the next start (``-XX:SharedArchiveFile``). Measured on a driver that writes, merges and reads a Delta
table: 42-44 s of CPU and 34 s of wall time without the archive, 29-32 s and 21-23 s with it.

:func:`ensure_archive` makes the archive once per machine and set of jars (in ``.jvm/cds/``, keyed by the Java
runtime, pyspark's jars, the extra Spark jars and this module), by running :func:`train` in a process of its own
(90-105 s here). A JVM whose archive does not match its class path ignores it and starts as before; a
failed training leaves no archive and the suite runs without one.

Run ``python -m tests.support.spark_class_archive`` to make (or find) the archive and print its path.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyspark

from scrutiny.paths import JVM_DIR, PROJECT_ROOT
from scrutiny.streaming.session import build_spark_session, extra_jars

ARCHIVE_DIR = JVM_DIR / "cds"
#: How long the training may take before the suite gives up on it and runs without an archive.
TRAINING_TIMEOUT_S = 300.0
#: The JVM's messages about the archive (a mismatched class path, classes it cannot archive) stay out of the logs.
QUIET = "-Xlog:cds=off -Xlog:cds+dynamic=off"
#: How the training tells which JVM to wait for.
JVM_PID_PREFIX = "training driver pid: "


def _java_version() -> str:
    done = subprocess.run(["java", "-version"], capture_output=True, text=True, timeout=60, check=False)
    return done.stderr


def archive_key() -> str:
    """What the archive depends on: a change to any of these makes a new one."""
    digest = hashlib.sha256(_java_version().encode())
    jars = sorted((Path(pyspark.__file__).parent / "jars").glob("*.jar")) + extra_jars()
    for jar in jars:
        digest.update(f"{jar.name}:{jar.stat().st_size}\n".encode())
    digest.update(Path(__file__).read_bytes())
    return digest.hexdigest()[:16]


def archive_path() -> Path:
    """Where the archive for today's Java runtime and jars is (or will be)."""
    return ARCHIVE_DIR / f"spark-driver-{archive_key()}.jsa"


def archive_options(archive: Path | None) -> str:
    """The driver's JVM options that map ``archive`` (none without one)."""
    return f"{QUIET} -XX:SharedArchiveFile={archive}" if archive is not None else ""


def ensure_archive(submit_args: Callable[[str], str]) -> Path | None:
    """The archive, made now if missing by a driver started with ``submit_args(extra driver options)``; None if it
    cannot be made."""
    target = archive_path()
    if target.exists():
        return target
    ARCHIVE_DIR.mkdir(parents=True, exist_ok=True)
    for stale in ARCHIVE_DIR.glob("spark-driver-*"):
        stale.unlink()
    partial = target.with_suffix(f".{os.getpid()}.partial")
    training_log = ARCHIVE_DIR / "training.log"
    env = {**os.environ, "PYSPARK_SUBMIT_ARGS": submit_args(f"{QUIET} -XX:ArchiveClassesAtExit={partial}")}
    started = time.monotonic()
    print(f"\nspark class archive: training a driver once for {target.name} ...", file=sys.stderr, flush=True)
    try:
        with training_log.open("w") as out:
            done = subprocess.run(
                [sys.executable, "-m", "tests.support.spark_class_archive", "--train"],
                cwd=PROJECT_ROOT,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                timeout=TRAINING_TIMEOUT_S,
                check=False,
            )
    except subprocess.TimeoutExpired:
        done = None
    # The JVM writes the archive as it exits, after the Python side has: a JVM still running holds a partial file.
    exited = done is not None and done.returncode == 0 and _wait_for_exit(training_log)
    if not exited or not partial.exists():
        partial.unlink(missing_ok=True)
        print(f"spark class archive: training failed, see {training_log}", file=sys.stderr, flush=True)
        return None
    partial.rename(target)
    print(f"spark class archive: made in {time.monotonic() - started:.0f} s", file=sys.stderr, flush=True)
    return target


def _wait_for_exit(training_log: Path) -> bool:
    """Whether the training's JVM (its pid in ``training_log``) exited within :data:`TRAINING_TIMEOUT_S`."""
    lines = training_log.read_text(errors="replace").splitlines()
    pids = [line.removeprefix(JVM_PID_PREFIX) for line in lines if line.startswith(JVM_PID_PREFIX)]
    if not pids:
        return False
    deadline = time.monotonic() + TRAINING_TIMEOUT_S
    while Path(f"/proc/{pids[0]}").exists():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)
    return True


def train() -> None:
    """What the suite's drivers do, in small: Delta appends, a MERGE, reads, a stateful stream and an Arrow step."""
    spark = build_spark_session("class-archive-training", master="local[2]")
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    print(f"{JVM_PID_PREFIX}{jvm.java.lang.ProcessHandle.current().pid()}", flush=True)
    with tempfile.TemporaryDirectory(prefix="spark-class-archive-") as work:
        table = f"{work}/table"
        spark.range(20).selectExpr("id", "id % 3 AS bucket").write.format("delta").save(table)
        spark.range(10, 30).selectExpr("id", "id % 5 AS bucket").createOrReplaceTempView("changes")
        spark.sql(
            f"MERGE INTO delta.`{table}` t USING changes s ON t.id = s.id "
            "WHEN MATCHED THEN UPDATE SET bucket = s.bucket WHEN NOT MATCHED THEN INSERT *"
        )
        spark.read.format("delta").load(table).groupBy("bucket").count().collect()

        def doubled(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
            for batch in batches:
                yield pa.RecordBatch.from_arrays([pc.multiply(batch.column("id"), 2)], names=["id"])

        spark.read.format("delta").load(table).select("id").mapInArrow(doubled, "id long").toArrow()

        counts = f"{work}/counts"
        for part in range(3):  # three files, one micro-batch each
            spark.range(part * 10, part * 10 + 10).write.mode("append").json(f"{work}/incoming")
        (
            spark.readStream.schema("id long")
            .option("maxFilesPerTrigger", 1)
            .json(f"{work}/incoming")
            .selectExpr("id % 4 AS key")
            .groupBy("key")
            .count()
            .writeStream.outputMode("update")
            .option("checkpointLocation", f"{work}/checkpoint")
            .foreachBatch(lambda frame, _: frame.write.format("delta").mode("append").save(counts))
            .trigger(availableNow=True)
            .start()
            .awaitTermination(int(TRAINING_TIMEOUT_S))
        )
        spark.read.format("delta").load(counts).count()
    spark.stop()


if __name__ == "__main__":
    if sys.argv[1:] == ["--train"]:
        train()
    else:
        from tests.support.servers import short_lived_spark

        print(ensure_archive(short_lived_spark))
