"""Spark's Python daemon, with PySpark's worker code and the checker's own imported once, before it forks the workers.

Spark's daemon (``pyspark.daemon``) forks one process per Python worker and each worker then imports
``pyspark.worker`` (and the SQL modules behind it, ~0.3 s of CPU) afresh: the daemon leaves it to the worker because
a module might start threads when imported, and a fork copies no thread. ``pyspark.worker`` starts none and imports
neither pandas nor pyarrow (a test checks both), so this daemon imports it first and
every worker it forks has it already; a worker Spark starts again after its idle minute (a quiet checker's next
micro-batch) begins at once. So do the checker's modules of :data:`PRELOADED` (about half of the ~0.6 s a new
worker spent importing the checker's code): those that start no thread and import none of numpy, pyarrow, pandas or
grpc (the test checks that too). The rest (the stages' modules, which need pyarrow, and the bookie clients, which
need grpc) each worker imports itself, after the fork.

A new worker's first task also adds Spark's files directory to its path, and PySpark then calls
``importlib.invalidate_caches()``, which in Python 3.11 makes every zip importer read its archive's directory again:
the importers of ``pyspark.zip``'s packages (14 to 16 once the worker code is imported) each parse its ~1,500-entry
directory, ~0.1 s of CPU per new worker, for archives that do not change while Spark runs. The daemon makes a zip
importer read its archive again only when the file changed (its size or modification time), which is what the
re-read is for.

The workers' garbage collector: a stage's task holds its whole partition range (thousands of events, their metadata,
answers and states) until it ends, and the collector's default (a young collection every 700 allocations, a full one
whenever a quarter more objects survived) then scans that heap and every imported module again and again: about a
fifth of the fetch stage's CPU in ``bench/fetch_bench.py``. The daemon freezes what it imported (``gc.freeze``: never
scanned again, and its pages stay shared with the workers) and makes the young collections rarer
(:data:`GC_THRESHOLDS`); the workers inherit both. PySpark's daemon also collects in full after every task of a reused
worker, over what the worker imported after the fork (pyarrow, grpc, the stages' modules: ~70 ms a task in a fetch
worker); so each worker, once its first task is done and collected, freezes what survived it too (those modules, its
clients and caches: :func:`freeze_after_first_task`). Garbage in cycles waits a little longer (at most some 10,000
allocations) to be freed; an object alive after the first task that later becomes garbage in a cycle is never freed
(a first task's leftovers: bounded, once a worker). Everything else is Spark's own daemon. The session names this
module in ``spark.python.daemon.module`` (``streaming/session.py``); the package the workers import must then be
installed where they run, as it must for the checker's own code.
"""

from __future__ import annotations

import gc
import importlib
import os
import socket
import sys
import weakref
import zipimport

import pyspark.daemon
import pyspark.worker  # imported here, before the forks, on purpose
from pyspark.daemon import manager

#: The checker's modules the daemon imports before the forks (with what they import).
PRELOADED = (
    "pyspark.sql.streaming.stateful_processor",
    "scrutiny.core.ledger_tracker",
    "scrutiny.connectors.kafka.events",
    "scrutiny.connectors.zookeeper.cluster_cache",
    "scrutiny.streaming.checker.answer_codec",
    "scrutiny.proto.bookie_agent_pb2",
    "scrutiny.proto.bookkeeper_protocol_pb2",
)
#: The workers' collector thresholds (``gc.set_threshold``): a young collection every 10,000 allocations, not 700; the
#: older generations as Python has them.
GC_THRESHOLDS = (10_000, 10, 10)
#: What :func:`preload` imported (the workers show it: their ``__main__`` is this module).
preloaded: list[str] = []

_reread_directory = zipimport.zipimporter.invalidate_caches
#: Each zip importer's archive as it was when its directory was last read (size, modification time).
_read_as: weakref.WeakKeyDictionary[zipimport.zipimporter, tuple[int, int] | None] = weakref.WeakKeyDictionary()


def _archive_stamp(archive: str) -> tuple[int, int] | None:
    try:
        stat = os.stat(archive)
    except OSError:
        return None
    return stat.st_size, stat.st_mtime_ns


def _reread_if_changed(importer: zipimport.zipimporter) -> None:
    """``zipimporter.invalidate_caches``, skipped while the archive is the one whose directory the importer read."""
    stamp = _archive_stamp(importer.archive)
    if stamp is not None and _read_as.get(importer) == stamp:
        return
    _reread_directory(importer)
    _read_as[importer] = stamp


def keep_zip_directories() -> None:
    """Make :func:`importlib.invalidate_caches` re-read a zip archive's directory only when the archive changed."""
    for importer in list(sys.path_importer_cache.values()):
        if isinstance(importer, zipimport.zipimporter):
            _read_as[importer] = _archive_stamp(importer.archive)
    zipimport.zipimporter.invalidate_caches = _reread_if_changed  # type: ignore[method-assign,assignment]


def preload() -> None:
    """Import :data:`PRELOADED`; a module that does not import is left to the workers (they then say why)."""
    for name in PRELOADED:
        try:
            importlib.import_module(name)
        except Exception as error:  # the daemon must start: a worker importing the module reports the error
            print(f"worker daemon: {name} not imported before the forks ({error!r})", file=sys.stderr)
        else:
            preloaded.append(name)


def tune_collector() -> None:
    """Freeze every object made so far (the imports) out of the collector's scans, and set :data:`GC_THRESHOLDS`."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)


def freeze_after_first_task() -> None:
    """Make each forked worker collect and freeze what survives its first task (see the module's docstring): PySpark's
    daemon runs a worker's tasks through ``pyspark.daemon.worker``, looked up at each task."""
    run_task = pyspark.daemon.worker
    frozen = False  # each worker's own: the fork copies it unset

    def worker(sock: socket.socket, authenticated: bool) -> int:
        nonlocal frozen
        code = run_task(sock, authenticated)
        if not frozen:
            frozen = True
            gc.collect()
            gc.freeze()
        return code

    pyspark.daemon.worker = worker


if __name__ == "__main__":
    preload()
    keep_zip_directories()
    tune_collector()
    freeze_after_first_task()
    manager()
