"""A table creation that never committed: what a crash mid-``CREATE`` leaves, and clearing it.

Delta Lake makes a table's ``_delta_log`` folder (and its ``_staged_commits`` folder) before it writes the first
commit, through a hidden temporary file it renames into place. A process killed between the two leaves a log with no
version in it. Delta's catalog then counts the path as a table that exists, so ``CREATE TABLE IF NOT EXISTS`` does
nothing, and every read or write of the table fails with ``DELTA_TABLE_NOT_FOUND`` — for good: a checker started again
after such a crash would fail its first batch every time.

Nothing in such a log was ever committed (no reader could have seen it), so removing it loses nothing. Only hidden
files (Delta's temporaries and Hadoop's checksums of them) and empty folders are removed, one by one; a log holding any
other file is left as it is. The file system is Spark's own (Hadoop's, with the session's settings), so this works
wherever the table does. Another process creating the same table at that moment loses its temporary file and its
create fails (its batch is run again); a commit that lands meanwhile makes the removal of the folder fail instead, so
nothing committed is ever removed.
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import SparkSession

__all__ = ["clear_uncommitted_log"]

LOG_DIR = "_delta_log"


def clear_uncommitted_log(spark: SparkSession, uri: str) -> bool:
    """Remove the ``_delta_log`` of table ``uri`` when no commit ever reached it; True when one was removed."""
    context = spark.sparkContext
    jvm = context._jvm
    if jvm is None:  # pragma: no cover - a started session always has its JVM
        return False
    log_path = jvm.org.apache.hadoop.fs.Path(uri.rstrip("/") + "/" + LOG_DIR)
    fs = log_path.getFileSystem(context._jsc.hadoopConfiguration())
    if not fs.exists(log_path):
        return False
    files = _files(fs, log_path)
    if any(not path.getName().startswith(".") for path in files):
        return False  # a commit, a checkpoint or anything else Delta did not leave half-made
    for path in files:
        fs.delete(path, False)
    for status in fs.listStatus(log_path):
        if status.isDirectory():
            fs.delete(status.getPath(), False)  # empty now; one that filled meanwhile refuses (an error)
    return bool(fs.delete(log_path, False))  # refuses (an error) if a commit appeared meanwhile


def _files(fs: Any, root: Any) -> list[Any]:
    found = fs.listFiles(root, True)
    paths = []
    while found.hasNext():
        paths.append(found.next().getPath())
    return paths
