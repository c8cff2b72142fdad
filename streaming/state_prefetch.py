"""A Delta table's state rebuilt between writes, so that the next idempotent write does not wait for it.

An idempotent write (``txnAppId``/``txnVersion``) asks Delta which version the app id last committed, and Delta 4.4
answers from the table's whole reconstructed state: three Spark jobs over the last checkpoint and the commits after
it, about 0.45 s on two cores for a small table, more as its files grow. The commit that makes a new version leaves
that version's state unbuilt, so every micro-batch paid for it at the start of each of its writes, on the path from
a close to its row.

:class:`StatePrefetch` rebuilds it after each write instead, on a thread of its own, while the job waits for its
next trigger or computes the next batch. It warms Delta's own cache (the state of the snapshot this JVM last saw of
the table) and decides nothing: the write still asks Delta, which answers from the state if it is built and builds
it if not (a write that comes while the state is being built waits for it rather than building it twice). Whatever
goes wrong here (a table another writer moved on, a stopped session) costs only the head start: it is logged at
debug level and the write builds the state itself, as without a prefetch.
"""

from __future__ import annotations

import logging
import threading
from collections import deque

from pyspark.sql import SparkSession

__all__ = ["StatePrefetch"]

log = logging.getLogger(__name__)


class StatePrefetch:
    """Builds the state of the tables it is given, one at a time in the order asked, on a daemon thread.

    ``prepared`` maps each table's location to the last version whose state it built.
    """

    def __init__(self, spark: SparkSession) -> None:
        self._spark = spark
        self._queue: deque[str] = deque()
        self._busy = False
        self._changed = threading.Condition()
        self._thread: threading.Thread | None = None
        self._closed = False
        self.prepared: dict[str, int] = {}

    def request(self, uri: str) -> None:
        """Build the state of the table at ``uri`` soon (a request already waiting for it is enough)."""
        with self._changed:
            if self._closed or uri in self._queue:
                return
            self._queue.append(uri)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="delta-state-prefetch", daemon=True)
                self._thread.start()
            self._changed.notify_all()

    def wait(self, timeout: float | None = None) -> bool:
        """Wait until every request so far is done; False if ``timeout`` seconds passed first."""
        with self._changed:
            return self._changed.wait_for(lambda: not self._queue and not self._busy, timeout)

    def close(self) -> None:
        """Take no more requests and drop those waiting (the one being built finishes)."""
        with self._changed:
            self._closed = True
            self._queue.clear()
            self._changed.notify_all()

    def _run(self) -> None:
        while True:
            with self._changed:
                self._changed.wait_for(lambda: bool(self._queue) or self._closed)
                if self._closed:
                    return
                uri = self._queue.popleft()
                self._busy = True
            try:
                version = self._build(uri)
                if version is not None:
                    self.prepared[uri] = version
            except Exception as error:  # the write builds the state itself
                log.debug("no head start for the state of %s: %s", uri, str(error).split("\n", 1)[0])
            finally:
                with self._changed:
                    self._busy = False
                    self._changed.notify_all()

    def _build(self, uri: str) -> int | None:
        """Build the state of the last snapshot this JVM holds of the table at ``uri``; its version (None: no table)."""
        jvm = self._spark.sparkContext._jvm
        assert jvm is not None
        delta_log = jvm.org.apache.spark.sql.delta.DeltaLog.forTable(self._spark._jsparkSession, uri)
        snapshot = delta_log.unsafeVolatileSnapshot()
        version = int(snapshot.version())
        if version < 0:
            return None
        snapshot.numOfSetTransactions()  # the app ids' versions: Delta computes the whole state for them
        return version
