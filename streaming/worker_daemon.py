"""Spark's Python daemon, with PySpark's worker code imported once, before it forks the workers.

Spark's daemon (``pyspark.daemon``) forks one process per Python worker and each worker then imports
``pyspark.worker`` (and the SQL modules behind it, ~0.3 s of CPU) afresh: the daemon leaves it to the worker because
a module might start threads when imported, and a fork copies no thread. ``pyspark.worker`` starts none and imports
neither pandas nor pyarrow (a test checks both), so this daemon imports it first and
every worker it forks has it already; a worker Spark starts again after its idle minute (a quiet checker's next
micro-batch) begins at once. Everything else is Spark's own daemon. The session names this module in
``spark.python.daemon.module`` (``streaming/session.py``); the package the workers import must then be installed
where they run, as it must for the checker's own code.
"""

from __future__ import annotations

import pyspark.worker  # noqa: F401  (imported here, before the forks, on purpose)
from pyspark.daemon import manager

if __name__ == "__main__":
    manager()
