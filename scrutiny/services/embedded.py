"""The embedded default of ``scrutiny run``: everything on this machine, in one process tree.

:class:`EmbeddedStack` brings up, in order, a local Spark session (first, so that its JVM starts
before any gRPC thread of the simulated bookies exists), the embedded ZooKeeper and Kafka
broker (``scrutiny services``, reused when already running), a simulated BookKeeper cluster from a
scenario (the demo by default: faults that change over time), the watcher, and the checker on the
Spark session; :meth:`EmbeddedStack.close` takes them down in reverse order and stops only
what it started. Each run simulates a new cluster, so it starts with an empty event topic (a broker that was
already running keeps the topic of an earlier run: it is deleted first) and a fresh checkpoint (``<checkpoint_dir>``,
emptied first), while the Delta tables accumulate across runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
import socket
import threading
from collections.abc import Coroutine
from dataclasses import replace
from pathlib import Path
from typing import Any

from kazoo.client import KazooClient

from scrutiny.connectors.kafka.config import admin_kwargs
from scrutiny.connectors.kafka.publisher import delete_topic
from scrutiny.connectors.zookeeper.client import start_zookeeper_client
from scrutiny.paths import SCENARIOS_DIR
from scrutiny.services.local_stack import EmbeddedServices, default_state_dir
from scrutiny.services.scenario_settings import scenario_checker_settings, simulated_write_cache
from scrutiny.settings.loader import Settings
from scrutiny.simulator.cluster import SimCluster
from scrutiny.simulator.model import Scenario
from scrutiny.streaming.checker.job import RunningChecker, start_checker
from scrutiny.streaming.checker.metrics import JobMetrics
from scrutiny.streaming.session import build_spark_session
from scrutiny.watcher.daemon import Watcher
from scrutiny.watcher.metrics import WatcherMetrics
from scrutiny.watcher.wiring import watcher_from_settings

log = logging.getLogger(__name__)

DEMO_SCENARIO = SCENARIOS_DIR / "demo.toml"


def embedded_settings(base: Settings, scenario: Scenario, zookeeper: str, kafka: str) -> Settings:
    """``base`` pointed at the embedded servers, with the scenario's checker assumptions and write cache."""
    assumed = simulated_write_cache(scenario_checker_settings(base, scenario), scenario)
    return replace(
        assumed,
        zookeeper=replace(
            base.zookeeper, connect=zookeeper, metadata_uri="", ledgers_root=scenario.cluster.ledgers_root
        ),
        kafka=replace(base.kafka, bootstrap_servers=kafka, partitions=min(base.kafka.partitions, 4)),
        watcher=replace(assumed.watcher, racks_path=scenario.cluster.racks_path),
        checker=replace(assumed.checker, checkpoint_dir=str(Path(base.checker.checkpoint_dir).parent / "embedded")),
    )


class EmbeddedStack:
    """Services, simulated cluster, watcher and checker (see the module docstring)."""

    def __init__(
        self,
        base: Settings,
        scenario: Scenario,
        *,
        services_dir: Path | None = None,
        metrics: JobMetrics | None = None,
        log_file: Path | None = None,
    ) -> None:
        self.base = base
        self.log_file = log_file
        self.metrics = metrics
        self.scenario = scenario
        self.services = EmbeddedServices(services_dir or Path(base.services.state_dir or default_state_dir()))
        self.settings: Settings | None = None
        self.cluster: SimCluster | None = None
        self.checker: RunningChecker | None = None
        self.watcher: Watcher | None = None
        self._loop = asyncio.new_event_loop()
        self._loop_thread = threading.Thread(target=self._loop.run_forever, name="simulated-cluster", daemon=True)
        self._client: KazooClient | None = None
        self._watcher_stop = threading.Event()
        self._watcher_thread: threading.Thread | None = None

    def start(self) -> Settings:
        """Bring everything up; returns the settings the parts use. Partial starts are undone on error."""
        try:
            return self._start()
        except BaseException:
            self.close()
            raise

    def _start(self) -> Settings:
        # Spark first: PySpark starts its JVM with a fork that runs Python in the child, which can
        # crash while the simulated bookies' gRPC threads are busy (the JVM then never starts).
        checker_settings = self.base.checker
        spark = build_spark_session(
            "scrutiny-embedded",
            master=checker_settings.spark_master or "local[2]",
            ui=checker_settings.spark_ui,
            conf={"spark.sql.shuffle.partitions": str(checker_settings.shuffle_partitions)},
            log_file=self.log_file,
        )
        log.info("starting the embedded ZooKeeper and Kafka broker under %s", self.services.state_dir)
        endpoints = self.services.up(progress=lambda line: log.info("%s", line)).endpoints
        settings = embedded_settings(self.base, self.scenario, endpoints.zookeeper, endpoints.kafka)
        self.settings = settings
        if delete_topic(admin_kwargs(settings.kafka), settings.kafka.topic):
            log.info("deleted the events of an earlier run (topic %s)", settings.kafka.topic)
        self._client = start_zookeeper_client(settings.zookeeper, timeout_s=30, hosts=endpoints.zookeeper)
        self._loop_thread.start()
        self.cluster = SimCluster(self.scenario, self._client, replace=True)
        log.info("starting the simulated cluster %r (%d ledgers)", self.scenario.name, len(self.scenario.ledgers))
        self._run(self.cluster.start())
        self._loop.call_soon_threadsafe(self.cluster.start_schedule)  # a task on the cluster's loop
        self.watcher = watcher_from_settings(settings, f"embedded-{socket.gethostname()}", WatcherMetrics())
        self._watcher_thread = threading.Thread(
            target=self.watcher.run, args=(self._watcher_stop,), name="watcher", daemon=True
        )
        self._watcher_thread.start()
        checkpoint = Path(settings.checker.checkpoint_dir)
        if checkpoint.exists():
            shutil.rmtree(checkpoint)  # the topic is new: old offsets mean nothing
        log.info("starting the checker (Spark %s)", spark.version)
        self.checker = start_checker(spark, settings, metrics=self.metrics)
        return settings

    def _run(self, coroutine: Coroutine[Any, Any, None]) -> None:
        asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(timeout=300)

    def close(self) -> None:
        """Stop the checker, the watcher, the cluster and the services this stack started."""
        if self.checker is not None:
            with contextlib.suppress(Exception):
                self.checker.stop()
        self._watcher_stop.set()
        if self._watcher_thread is not None:
            self._watcher_thread.join(timeout=30)
        if self.watcher is not None:
            with contextlib.suppress(Exception):
                self.watcher.zk.stop()
                self.watcher.zk.close()
        if self.cluster is not None and self._loop.is_running():
            with contextlib.suppress(Exception):
                self._run(self.cluster.stop())
        if self._loop.is_running():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._loop_thread.join(timeout=10)
        if self._client is not None:
            with contextlib.suppress(Exception):
                self._client.stop()
                self._client.close()
        self.services.stop_started()
