"""A simulated cluster, the watcher and the checker, wired on the test session's servers.

:func:`running_checker` yields a :class:`Harness` whose cluster runs in its own event-loop thread,
whose watcher publishes to a fresh topic and whose checker writes Delta tables under a temporary
directory; everything is stopped afterwards, whatever happens. :func:`streaming_job` runs the watcher and the
checker alone, on whatever cluster the settings name (real bookies, for instance).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Callable, Coroutine, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from kazoo.client import KazooClient
from pyspark.sql import SparkSession

from scrutiny.connectors.tables.delta import read_table
from scrutiny.services.embedded import embedded_settings
from scrutiny.settings.loader import Settings
from scrutiny.simulator.cluster import SimCluster
from scrutiny.simulator.model import Scenario
from scrutiny.streaming.checker.job import RunningChecker, start_checker
from scrutiny.watcher.metrics import WatcherMetrics
from scrutiny.watcher.wiring import watcher_from_settings

#: (ledger, category, bookie or None)
ViolationId = tuple[int, str, str | None]


#: ``settings_for(scenario)`` (a fixture of the end-to-end tests): the scenario's settings, with a fresh
#: two-partition topic and the test's own directory.
SettingsFor = Callable[[Scenario], Settings]

#: How long a test waits for a new query's first batch.
FIRST_BATCH_S = 180.0


@dataclass
class StreamingJob:
    """The running checker and the tables it writes: what a test reads and waits for."""

    settings: Settings
    checker: RunningChecker

    def table(self, name: str) -> list[dict[str, Any]]:
        """A table's rows (empty before the table exists)."""
        try:
            return list(read_table(self.settings.checker.data_dir, name).to_pylist())
        except Exception:  # not written yet
            return []

    def open_ids(self) -> set[ViolationId]:
        """Open violations as (ledger, category, bookie)."""
        return {
            (r["ledger_id"], r["category"], r["bookie"])
            for r in self.table("open_violations")
            if r["resolved_at"] is None
        }

    def resolved_ids(self) -> set[ViolationId]:
        """Resolved violations as (ledger, category, bookie)."""
        return {
            (r["ledger_id"], r["category"], r["bookie"])
            for r in self.table("open_violations")
            if r["resolved_at"] is not None
        }

    def wait(self, check: Callable[[], bool], timeout_s: float, what: str) -> None:
        """Poll ``check`` until true; fail naming ``what`` (and the query's error, if any)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            error = self.checker.query.exception()
            assert error is None, f"the checker query failed: {error}"
            if check():
                return
            time.sleep(0.5)
        raise AssertionError(f"timed out after {timeout_s} s waiting for {what}; open: {sorted(self.open_ids())}")

    def wait_first_batch(self) -> None:
        """Wait for the query's first batch: on a loaded machine it can wait for task slots a stopped query's tasks
        still hold, for a Kafka read, and for the first Delta commits (well over a minute on two busy cores)."""
        self.wait(lambda: bool(self.table("checker_runs")), FIRST_BATCH_S, "the first batch")


@dataclass
class Harness(StreamingJob):
    """What a test drives and reads on a simulated cluster."""

    cluster: SimCluster
    loop: asyncio.AbstractEventLoop

    def run(self, coroutine: Coroutine[Any, Any, None]) -> None:
        """Run a coroutine on the cluster's loop (e.g. ``cluster.stop()``)."""
        asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout=60)


def harness_settings(base: Settings, scenario: Scenario, chroot: str, topic: str, tmp: Path) -> Settings:
    """The test servers (ZooKeeper confined to ``chroot``), a fresh topic and directory, quick retries."""
    settings = embedded_settings(base, scenario, base.zookeeper.connect + chroot, base.kafka.bootstrap_servers)
    return quick_checker(settings, topic, tmp)


def quick_checker(settings: Settings, topic: str, tmp: Path) -> Settings:
    """``settings`` with a fresh topic and directory, quick triggers and retries: what the end-to-end tests run."""
    return replace(
        settings,
        kafka=replace(settings.kafka, topic=topic, partitions=2),
        # A micro-batch at least every 5 s for the tests that wait for batches without events (timers wake the job
        # themselves); one a second kept a core busy with empty batches.
        watcher=replace(settings.watcher, tick_interval_seconds=5),
        checker=replace(
            settings.checker,
            data_dir=str(tmp / "data"),
            checkpoint_dir=str(tmp / "checkpoint"),
            trigger_seconds=0.5,
            retry_initial_seconds=0.5,
            retry_max_seconds=1.0,
            retry_attempts=2,
            fetch_timeout_seconds=3.0,
            cluster_cache_seconds=0.5,
            shuffle_partitions=2,
            orphan_sweep_seconds=0.0,  # on where a test asks for it: its Spark writes would come at any moment
        ),
        bookies=replace(settings.bookies, request_timeout_seconds=1.0),
    )


@dataclass
class SimulatedCluster:
    """A running simulated cluster (on its own event loop) and the watcher publishing its changes."""

    cluster: SimCluster
    loop: asyncio.AbstractEventLoop


@contextmanager
def running_watcher(settings: Settings, watcher_id: str = "test-watcher") -> Iterator[None]:
    """A watcher publishing the settings' cluster to their topic, in a thread, stopped and closed on exit.

    A new one knows no earlier state: it starts with a full snapshot.
    """
    stop = threading.Event()
    watcher = watcher_from_settings(settings, watcher_id, WatcherMetrics())
    watcher_thread = threading.Thread(target=watcher.run, args=(stop,), name="watcher", daemon=True)
    try:
        watcher_thread.start()
        yield
    finally:
        stop.set()
        if watcher_thread.is_alive():
            watcher_thread.join(timeout=30)
        watcher.zk.stop()
        watcher.zk.close()


@contextmanager
def simulated_cluster(
    zk_client: KazooClient, settings: Settings, scenario: Scenario, *, schedule: bool = False, watch: bool = True
) -> Iterator[SimulatedCluster]:
    """The scenario's cluster (its schedule running if asked) and a watcher to its topic (if asked); stopped on exit."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="sim-cluster", daemon=True)
    thread.start()
    cluster = SimCluster(scenario, zk_client, replace=True)
    try:
        asyncio.run_coroutine_threadsafe(cluster.start(), loop).result(timeout=120)
        if schedule:
            loop.call_soon_threadsafe(cluster.start_schedule)
        with running_watcher(settings) if watch else contextlib.nullcontext():
            yield SimulatedCluster(cluster, loop)
    finally:
        asyncio.run_coroutine_threadsafe(cluster.stop(), loop).result(timeout=120)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10)


@contextmanager
def running_checker(
    spark: SparkSession,
    zk_client: KazooClient,
    settings: Settings,
    scenario: Scenario,
    *,
    schedule: bool = True,
    watch: bool = True,
) -> Iterator[Harness]:
    """Cluster (running its schedule unless told not to), watcher (unless told not to) and checker, stopped on exit."""
    with simulated_cluster(zk_client, settings, scenario, schedule=schedule, watch=watch) as simulated:
        harness = Harness(settings, start_checker(spark, settings), simulated.cluster, simulated.loop)
        try:
            yield harness
        finally:
            harness.checker.stop()  # the one running now (a test may have restarted it)
            wait_for_idle_spark(spark)


def wait_for_idle_spark(spark: SparkSession, timeout_s: float = 120.0) -> None:
    """Wait until no Spark job runs any more: a stopped query's tasks may outlive ``stop()`` (a Kafka read under
    way), and would hold the task slots the next test's query needs, or read a topic its fixture then deletes."""
    tracker = spark.sparkContext.statusTracker()
    deadline = time.monotonic() + timeout_s
    while tracker.getActiveJobsIds() and time.monotonic() < deadline:
        time.sleep(0.2)


@contextmanager
def streaming_job(spark: SparkSession, settings: Settings) -> Iterator[StreamingJob]:
    """The watcher (a thread) and the checker on ``settings``' cluster, whatever it is; both stopped on exit."""
    with running_watcher(settings):
        job = StreamingJob(settings, start_checker(spark, settings))
        try:
            yield job
        finally:
            job.checker.stop()
            wait_for_idle_spark(spark)
