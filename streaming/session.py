"""The Spark session the job, the scan and the tests use: one place for the settings Spark needs here.

``build_spark_session`` runs on the driver before anything else. It never changes the master of a
session given by ``spark-submit`` (a cluster's master comes from there); with no master configured it
runs ``local[*]``. What it always sets:

* the RocksDB state store provider (``transformWithState`` needs it), with changelog checkpoints
  (a micro-batch commits the changes, not a snapshot of the store) and no row counting;
* the Spark UI off unless ``ui`` is true;
* the driver's thread stack at 16 MB (``query.stop()`` can overflow the default one);
* unless ``PYSPARK_PYTHON`` says otherwise, the driver's own Python for the Python workers (which
  must import this package) when the master is local or named here (not by ``spark-submit``);
* Python workers forked by :mod:`~scrutiny.streaming.worker_daemon` (PySpark's worker code imported once);
* Arrow for pandas conversions, and a session time zone of UTC (every time in the tables is UTC);
* Delta Lake's session extension and catalog (the tables are written with delta-spark), with one task to
  rebuild a table's state from its small log;
* a connection to PySpark's accumulator port that is not Spark's logged as one warning, not a traceback;
* SIGINT and SIGTERM ignored by the JVM (a signal to the process group reaches only the Python side, which stops
  Spark in order);
* the jars of Spark's Kafka source and of Delta Lake (:func:`extra_jars`) by path in ``spark.jars``, so starting a
  session never resolves anything and never needs the network.

With ``log_file``, everything the JVM writes goes to that file instead of the terminal: its log lines
(``conf/spark-log4j2.properties``), what it and the Python workers it starts write to standard error, and no console
progress bar. This takes effect only when this call starts the JVM.
"""

from __future__ import annotations

import logging
import os
import signal
import socketserver
import sys
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

import pyspark
from pyspark import SparkContext
from pyspark.errors import PySparkRuntimeError
from pyspark.sql import SparkSession

from scrutiny.paths import SPARK_FILE_LOGGING, SPARK_JARS

log = logging.getLogger(__name__)

ROCKSDB_PROVIDER = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"

BASE_CONF: Mapping[str, str] = {
    "spark.sql.streaming.stateStore.providerClass": ROCKSDB_PROVIDER,
    # Commit a changelog per micro-batch instead of a full RocksDB snapshot (snapshots in the background).
    "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true",
    # No row counting: it costs a read before every write.
    "spark.sql.streaming.stateStore.rocksdb.trackTotalNumberOfRows": "false",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.sql.session.timeZone": "UTC",
    # The JVM's first compiler only (C1): its work here is small next to the Python workers' (the Kafka reads, the
    # state store, moving rows to and from Python), and the optimizing compiler (C2) kept compiling each batch's
    # generated code for minutes, a sixth to a tenth of the checker's CPU (bench/README.md, "The JVM's compilers").
    # C1 alone reserves a 48 MB code cache: a long-running job's generated code gets the tiered default's 240 MB+.
    "spark.driver.extraJavaOptions": "-Xss16m -XX:TieredStopAtLevel=1 -XX:ReservedCodeCacheSize=256m",
    "spark.sql.shuffle.partitions": "4",
    # A micro-batch only when Kafka has new records: with processing-time timers Spark would otherwise run one every
    # trigger, idle or not. The checker's driver publishes a TICK when a timer is due (streaming/checker/timer_wake).
    "spark.sql.streaming.noDataMicroBatches.enabled": "false",
    # Delta Lake's SQL (MERGE, CREATE TABLE ... USING delta) and its catalog (jars from .jvm/spark).
    "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
    "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
    # The tables' logs are small (a checkpoint every 10 commits): one task rebuilds a table's state, not 50.
    "spark.databricks.delta.snapshotPartitions": "1",
    # Python workers forked from a daemon that imported PySpark's worker code once (streaming/worker_daemon.py).
    "spark.python.daemon.module": "scrutiny.streaming.worker_daemon",
}


def build_spark_session(
    app_name: str = "scrutiny",
    *,
    master: str | None = None,
    ui: bool = False,
    conf: Mapping[str, str] | None = None,
    log_file: str | Path | None = None,
) -> SparkSession:
    """A started (or the running) Spark session with :data:`BASE_CONF`, ``conf`` on top.

    ``master`` None keeps what ``spark-submit`` or ``spark.master`` gives and falls back to
    ``local[*]``. Loopback is used for the driver when no ``SPARK_LOCAL_IP`` is set and the
    master is local.
    """
    builder = SparkSession.builder.appName(app_name)
    chosen = master or os.environ.get("SCRUTINY_SPARK_MASTER")
    if chosen is None and "spark.master" not in (conf or {}) and not _submitted():
        chosen = "local[*]"
    if chosen is not None:
        builder = builder.master(chosen)
    if chosen is not None and chosen.startswith("local"):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # workers must import this package
    elif chosen is not None and not _submitted():
        # A cluster master named here, not by spark-submit: PySpark takes the workers' Python from
        # PYSPARK_PYTHON only (else "python3"), for the executors and for the driver-side workers
        # that plan the Kafka source. This interpreter imports the package; set PYSPARK_PYTHON when
        # the executors' machines have it elsewhere.
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    settings = {**BASE_CONF, "spark.ui.enabled": "true" if ui else "false", **(conf or {})}
    jars = [str(jar) for jar in extra_jars()]
    if jars:
        settings["spark.jars"] = ",".join([*jars, *filter(None, [settings.get("spark.jars", "")])])
    if log_file is not None:
        settings["spark.ui.showConsoleProgress"] = "false"
        settings["spark.driver.extraJavaOptions"] = " ".join(
            (
                settings["spark.driver.extraJavaOptions"],
                f"-Dlog4j2.configurationFile=file:{SPARK_FILE_LOGGING}",
                f"-Dscrutiny.log.file={Path(log_file).resolve()}",
            )
        )
    for key, value in settings.items():
        builder = builder.config(key, value)
    session = _launch(builder, log_file)
    _quiet_state_server(session)
    accumulator_server_logs_strangers(getattr(session.sparkContext, "_accumulatorServer", None))
    return session


#: Starts of the JVM tried before giving up (see :func:`_launch`).
JVM_START_ATTEMPTS = 3


def _launch(builder: SparkSession.Builder, log_file: str | Path | None) -> SparkSession:
    """``builder.getOrCreate()``, trying the JVM's start again when it exited before it began.

    PySpark starts its JVM from a forked child that runs Python before ``exec``; on a loaded machine, with other
    threads of the process busy (gRPC's, say), that child was seen to die before starting the JVM
    (``JAVA_GATEWAY_EXITED``). Nothing had started then, so starting again is safe; any other error is raised at once.
    """
    for attempt in range(1, JVM_START_ATTEMPTS + 1):
        try:
            with _jvm_stderr_to(log_file), _jvm_ignores_stop_signals():
                return builder.getOrCreate()
        except PySparkRuntimeError as error:
            if error.getCondition() != "JAVA_GATEWAY_EXITED" or attempt == JVM_START_ATTEMPTS:
                raise
            log.warning(
                "Spark's JVM exited before it started (attempt %d of %d); starting it again",
                attempt,
                JVM_START_ATTEMPTS,
            )
            time.sleep(attempt)
    raise AssertionError("unreachable")


@contextmanager
def _jvm_stderr_to(log_file: str | Path | None) -> Iterator[None]:
    """While the JVM starts, file descriptor 2 is ``log_file``: the JVM and its children inherit it, we do not."""
    if log_file is None or SparkContext._gateway is not None:  # no file, or the JVM runs already
        yield
        return
    sys.stderr.flush()
    saved = os.dup(2)
    with open(log_file, "ab") as target:
        os.dup2(target.fileno(), 2)
    try:
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


#: The signals that ask a command to stop (Ctrl-C, ``kill``, ``timeout``, systemd).
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


@contextmanager
def _jvm_ignores_stop_signals() -> Iterator[None]:
    """While the JVM starts, SIGINT and SIGTERM are ignored, so the JVM starts with them ignored and keeps them so.

    A signal sent to the whole process group (``timeout``, systemd, Ctrl-C) then reaches only the Python side, which
    stops its work and then Spark in order, instead of the JVM dying under the running jobs (a py4j traceback and a
    wrong exit code). An ignored disposition survives ``exec`` and the JVM installs no handler over it. Only when this
    call starts the JVM, from the main thread (signal dispositions are set there); a signal in the second or so of the
    JVM's start is not seen.
    """
    if SparkContext._gateway is not None or threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {signum: signal.signal(signum, signal.SIG_IGN) for signum in STOP_SIGNALS}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            if handler is not None:  # None: set outside Python, cannot be put back from here
                signal.signal(signum, handler)


def extra_jars(directory: Path = SPARK_JARS) -> list[Path]:
    """The jars of ``directory`` (``.jvm/spark``, named ``artifactId.jar``) that pyspark does not ship already.

    pyspark's own jars are the versions its Spark was built with, so a library both have (Scala, Hadoop, Jackson,
    Parquet, logging) stays pyspark's; what remains is what Spark lacks: the Kafka source, Delta Lake, kafka-clients.
    Empty when ``scripts/setup`` has not resolved them.
    """
    shipped = _artifacts_of(Path(pyspark.__file__).parent / "jars")
    return sorted(jar for jar in directory.glob("*.jar") if jar.stem not in shipped)


def _artifacts_of(jars_dir: Path) -> set[str]:
    """The artifact names of ``name-1.2.3.jar`` files (the name ends before the first ``-<digit>`` after it)."""
    names: set[str] = set()
    for jar in jars_dir.glob("*.jar"):
        parts = jar.stem.split("-")
        cut = next((i for i in range(1, len(parts)) if parts[i][:1].isdigit()), len(parts))
        names.add("-".join(parts[:cut]))
    return names


#: Logs a WARN for every key whose state is read before it was ever written: every new ledger.
STATE_SERVER_LOGGER = "org.apache.spark.sql.execution.python.streaming.TransformWithStateInPySparkStateServer"


def _quiet_state_server(session: SparkSession) -> None:
    """Only errors from the state server's logger in this JVM (executors elsewhere: their own log4j2.properties)."""
    jvm = session.sparkContext._jvm
    if jvm is None:
        return
    log4j = jvm.org.apache.logging.log4j
    log4j.core.config.Configurator.setLevel(STATE_SERVER_LOGGER, log4j.Level.ERROR)


def accumulator_server_logs_strangers(server: socketserver.BaseServer | None) -> None:
    """One warning line, not a traceback on standard error, when something else connects to PySpark's accumulator port.

    The driver's accumulator server (``server``; None: none to change) listens on a loopback port; a client of anything
    else that once had that port (a ZooKeeper or Kafka client retrying a stopped server, say) can connect to it and
    send bytes that are not Spark's token. PySpark refuses them and goes on serving, but ``socketserver`` prints the
    refusal's traceback, which reads like a crash in a command's output.
    """
    if server is None:
        return

    def handle_error(request: object, client_address: object) -> None:
        error = sys.exc_info()[1]
        log.warning("ignored a connection to Spark's accumulator port from %s: %r", client_address, error)

    server.handle_error = handle_error  # type: ignore[method-assign]


def _submitted() -> bool:
    """True when running under spark-submit (which passes the master to the driver)."""
    return "PYSPARK_GATEWAY_PORT" in os.environ or "SPARK_MASTER" in os.environ
