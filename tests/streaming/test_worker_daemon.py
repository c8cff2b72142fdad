"""Spark's Python workers are forked from a daemon that imported PySpark's worker code and the checker's once,
safely."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from scrutiny.streaming.session import BASE_CONF
from scrutiny.streaming.worker_bytecode import pyspark_archive
from scrutiny.streaming.worker_daemon import GC_THRESHOLDS, PRELOADED

DAEMON = "scrutiny.streaming.worker_daemon"

#: What the daemon holds before it forks: the worker's code and the checker's preloaded modules, and no thread nor
#: any module known to start threads (or, for grpc, to hold state a fork must not copy).
BEFORE_THE_FORKS = f"""
import os, sys, threading
import {DAEMON} as daemon
daemon.preload()
print("pyspark.worker" in sys.modules, threading.active_count(), len(os.listdir("/proc/self/task")),
      tuple(daemon.preloaded) == daemon.PRELOADED and all(name in sys.modules for name in daemon.PRELOADED),
      sorted(m for m in ("pyarrow", "pandas", "numpy", "grpc") if m in sys.modules))
"""


@pytest.mark.unit
def test_the_daemon_imports_the_worker_code_and_starts_no_thread_before_forking() -> None:
    lib = pyspark_archive().parent
    path = os.pathsep.join([str(pyspark_archive()), *map(str, lib.glob("py4j-*.zip"))])  # the workers' path
    done = subprocess.run(
        [sys.executable, "-c", BEFORE_THE_FORKS],
        env={**os.environ, "PYTHONPATH": path},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert done.stdout.strip().split(maxsplit=4) == ["True", "1", "1", "True", "[]"], done.stderr


@pytest.mark.unit
def test_every_session_names_the_daemon() -> None:
    assert BASE_CONF["spark.python.daemon.module"] == DAEMON


def _parent_command(_: object) -> str:
    return Path(f"/proc/{os.getppid()}/cmdline").read_bytes().replace(b"\0", b" ").decode()


@pytest.mark.integration
def test_the_session_s_python_workers_are_forked_by_the_daemon(spark: SparkSession) -> None:
    parents = set(spark.sparkContext.parallelize(range(4), 2).map(_parent_command).collect())
    assert parents and all(f"-m {DAEMON} pyspark.worker" in parent for parent in parents), parents
    # and each one has the modules the daemon imported before forking it (its __main__ is the daemon's)
    preloads = set(
        spark.sparkContext.parallelize(range(4), 2)
        .map(lambda _: tuple(getattr(__import__("sys").modules["__main__"], "preloaded", ())))
        .collect()
    )
    assert preloads == {PRELOADED}, preloads
    # and runs with the daemon's collector: its imports frozen out of the scans, young collections rarer
    collectors = set(
        spark.sparkContext.parallelize(range(4), 2)
        .map(lambda _: (__import__("gc").get_threshold(), __import__("gc").get_freeze_count() > 10_000))
        .collect()
    )
    assert collectors == {(GC_THRESHOLDS, True)}, collectors
    tasks = set(
        spark.sparkContext.parallelize(range(4), 2)
        .map(lambda _: __import__("sys").modules["pyspark.daemon"].worker.__qualname__)
        .collect()
    )
    assert tasks == {"freeze_after_first_task.<locals>.worker"}, tasks


#: A zip importer of the daemon reads its archive's directory again only once the archive changed.
ZIP_DIRECTORIES = """
import importlib, sys, zipfile, zipimport
archive = sys.argv[1]
with zipfile.ZipFile(archive, "w") as z:
    z.writestr("first_module.py", "VALUE = 1")
sys.path.insert(0, archive)
import first_module
from scrutiny.streaming import worker_daemon
reads = []
original = zipimport._read_directory
zipimport._read_directory = lambda path: reads.append(path) or original(path)
worker_daemon.keep_zip_directories()
importlib.invalidate_caches()
unchanged = len(reads)
with zipfile.ZipFile(archive, "a") as z:
    z.writestr("second_module.py", "VALUE = 2")
importlib.invalidate_caches()
import second_module
print(unchanged, len(reads), first_module.VALUE, second_module.VALUE)
"""


@pytest.mark.unit
def test_zip_importers_read_their_archive_again_only_when_it_changed(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", ZIP_DIRECTORIES, str(tmp_path / "modules.zip")],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert done.stdout.split() == ["0", "1", "1", "2"], done.stderr


#: A worker freezes what survives its first task, after collecting, and only then.
FIRST_TASK = """
import gc, sys
import pyspark.daemon
from scrutiny.streaming import worker_daemon
kept = []
def task(sock, authenticated):
    kept.extend(object() for _ in range(1000))  # survives the task
    garbage = []
    garbage.append(garbage)  # a cycle, dropped by the task: collected, not frozen
    return 7
pyspark.daemon.worker = task
worker_daemon.freeze_after_first_task()
before = gc.get_freeze_count()
codes = [pyspark.daemon.worker(None, True)]
after_first = gc.get_freeze_count()
codes.append(pyspark.daemon.worker(None, True))
print(codes, after_first - before >= 1000, gc.get_freeze_count() == after_first, gc.garbage == [])
"""


@pytest.mark.unit
def test_a_worker_freezes_what_survives_its_first_task_and_no_more() -> None:
    done = subprocess.run([sys.executable, "-c", FIRST_TASK], capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout.split() == ["[7,", "7]", "True", "True", "True"], done.stderr
