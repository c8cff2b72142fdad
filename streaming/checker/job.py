"""The streaming checker: Kafka events → fetch stage → stateful processor → Delta tables.

:func:`start_checker` runs on the driver: it registers the Kafka source, builds the query
(``mapInArrow`` fetch stage, ``transformWithState`` keyed by ledger with processing-time timers
and the RocksDB state store, ``foreachBatch`` sink) and starts it with its checkpoint. Nothing in
it assumes local mode: under ``spark-submit`` the fetch stage runs one task per Kafka partition
range and the processor one task per shuffle partition, on whatever executors the cluster gives.
"""

from __future__ import annotations

import json
import logging
import math
import threading
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql.functions import expr
from pyspark.sql.streaming.query import StreamingQuery

from scrutiny.connectors.bookies.fetch import FetchConfig, fetch_config_from_settings
from scrutiny.connectors.kafka.config import producer_kwargs
from scrutiny.connectors.kafka.events import Publisher
from scrutiny.connectors.kafka.ticks import TickSender
from scrutiny.connectors.zookeeper.client import zookeeper_target
from scrutiny.core.backoff import Backoff
from scrutiny.core.ledger_tracker import RecheckPolicy, TrackerConfig
from scrutiny.settings.loader import Settings
from scrutiny.settings.sections import CheckerSection
from scrutiny.streaming.checker.buckets import BUCKET_EXPRESSION
from scrutiny.streaming.checker.config import JobConfig
from scrutiny.streaming.checker.metrics import JobMetrics
from scrutiny.streaming.checker.open_gauges import OpenGauges
from scrutiny.streaming.checker.orphan_sweep import OrphanSweep, job_sweep
from scrutiny.streaming.checker.prepare import PREPARED_DDL, PrepareEvents
from scrutiny.streaming.checker.processor import LedgerProcessor
from scrutiny.streaming.checker.records import NARROW_DDL
from scrutiny.streaming.checker.replay import BatchOutputs, ReplayHandle
from scrutiny.streaming.checker.sink import BatchSink, BatchSummary
from scrutiny.streaming.checker.timer_wake import TimerCalendar, Waker
from scrutiny.streaming.checker.verified_counts import VerifiedCounts
from scrutiny.streaming.checkpoint_files import CheckpointFiles
from scrutiny.streaming.delta_writer import CheckerTables
from scrutiny.streaming.kafka_source import FORMAT, check_checkpoint_source, kafka_source_options
from scrutiny.streaming.table_upkeep import TableUpkeep

log = logging.getLogger(__name__)

APP_ID = "scrutiny-checker"
#: The file in the checkpoint directory that names its stream.
STREAM_ID_FILE = "scrutiny-stream-id"


def job_config(settings: Settings, fetch: FetchConfig | None = None, *, source: str = "stream") -> JobConfig:
    """The executors' configuration from the settings."""
    checker = settings.checker
    retry = RecheckPolicy(
        backoff=Backoff(initial_s=checker.retry_initial_seconds, maximum_s=checker.retry_max_seconds),
        max_retries=checker.retry_attempts,
    )
    return JobConfig(
        zookeeper=settings.zookeeper,
        ledgers_root=ledgers_root(settings),
        racks_path=settings.watcher.racks_path,
        fetch=fetch or fetch_config_from_settings(settings.bookies),
        tracker=TrackerConfig(
            verdict=settings.verdict_config,
            retry=retry,
            confirm_interval_ms=round(checker.exists_check_seconds * 1000),
            reverify_interval_ms=round(checker.reverify_interval * 1000),
            overdue_grace_ms=round(checker.check_overdue_grace_seconds * 1000),
            mark_grace_ms=round(checker.under_replication_mark_grace_seconds * 1000),
            recovery_stalled_ms=round(checker.recovery_stalled_grace_seconds * 1000),
        ),
        source=source,
        fetch_timeout_s=checker.fetch_timeout_seconds,
        cluster_ttl_s=checker.cluster_cache_seconds,
        reverify_per_task=reverify_per_task(checker),
        reverify_spacing_ms=round(checker.trigger_seconds * 1000),
    )


def reverify_per_task(checker: CheckerSection) -> int:
    """Each task's share of ``checker.reverify_max_per_second`` per micro-batch (0: no limit): a batch starts at
    most every ``trigger_seconds``, and the stateful step runs ``shuffle_partitions`` tasks."""
    if checker.reverify_max_per_second <= 0:
        return 0
    return max(1, math.ceil(checker.reverify_max_per_second * checker.trigger_seconds / checker.shuffle_partitions))


def job_tables(spark: SparkSession, checker: CheckerSection, *, app_id: str) -> CheckerTables:
    """The streaming job's writer of its tables, as ``[checker]`` sets it up (under ``checker.data_dir``)."""
    return CheckerTables(
        spark,
        checker.data_dir,
        app_id=app_id,
        conflict_attempts=checker.write_conflict_attempts,
        prefetch_state=checker.prefetch_table_state,
        upkeep=TableUpkeep.of(checker),
        runs_by_delta_rs=checker.runs_by_delta_rs,
        findings_by_delta_rs=checker.findings_by_delta_rs,
    )


def ledgers_root(settings: Settings) -> str:
    """The ledgers root: from ``metadata_uri`` when set, else ``ledgers_root``."""
    return zookeeper_target(settings.zookeeper).ledgers_root


@dataclass
class RunningChecker:
    """A started checker query and its sink."""

    query: StreamingQuery
    sink: BatchSink
    waker: Waker | None = None
    sweep: OrphanSweep | None = None
    batches: int = 0
    idle_since: float = field(default_factory=time.monotonic)
    write_seconds: list[float] = field(default_factory=list)
    compute_seconds: list[float] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def on_batch(self, summary: BatchSummary) -> None:
        """Called by the sink after each written batch."""
        with self._lock:
            self.batches += 1
            self.write_seconds = [*self.write_seconds[-99:], summary.seconds]
            self.compute_seconds = [*self.compute_seconds[-99:], summary.compute_seconds]
            if summary.events or summary.checks or summary.retries_pending:
                self.idle_since = time.monotonic()

    def lag(self) -> int | None:
        """Events in Kafka beyond what the last batch read (None before the first progress report)."""
        return lag_records(self.query.lastProgress)

    def stop(self) -> None:
        """Stop the query (the current batch is finished or abandoned; the checkpoint stays consistent)."""
        if self.sweep is not None:
            self.sweep.stop()
        if self.waker is not None:
            self.waker.stop()
        self.query.stop()
        self.sink.tables.close()


def checkpoint_stream_id(spark: SparkSession, checkpoint: str) -> str:
    """The id of the stream a checkpoint belongs to, made when the checkpoint is new.

    Batch ids restart at 0 with a new checkpoint, so the tables' exactly-once record is kept per
    stream (``app_id`` = :data:`APP_ID` + this id), never shared by two checkpoints. A local path
    is used as is; a URI (``hdfs://``, ``s3a://``, ``file://``...) goes through Hadoop's file system,
    as Spark's own checkpoint does.
    """
    files = CheckpointFiles(spark, checkpoint)
    made = (uuid.uuid4().hex[:16] + "\n").encode("ascii")
    return files.create_once(STREAM_ID_FILE, made).decode("ascii").strip()


def _replay_handle(outputs: BatchOutputs) -> ReplayHandle | None:
    """The handle of the batch to run again from its kept output, when the last run stopped inside one."""
    replay = outputs.interrupted()
    if replay is not None:
        log.info(
            "batch %d was interrupted after its output was kept: it runs again from that output (%d bytes),"
            " asking nobody",
            replay.batch_id,
            len(replay.kept),
        )
    return replay


def lag_records(progress: Mapping[str, Any] | None) -> int | None:
    """Records between the source's end offset of a progress report and its latest offset, over all partitions.

    None when the report has no source offsets (before the first batch, or offsets that do not parse).
    """
    sources = (progress or {}).get("sources") or []
    if not sources:
        return None
    try:
        latest = _partition_offsets(json.loads(sources[0].get("latestOffset") or "null"))
        done = _partition_offsets(json.loads(sources[0].get("endOffset") or "null"))
    except (TypeError, ValueError, AttributeError):
        return None
    if latest is None:
        return None
    return sum(max(0, offset - (done or {}).get(partition, 0)) for partition, offset in latest.items())


def _partition_offsets(document: object) -> dict[str, int] | None:
    """Partition -> offset of the Kafka source's offset JSON (``{"topic": {"0": 42, ...}}``, one topic)."""
    if not isinstance(document, dict) or len(document) != 1:
        return None
    inner = next(iter(document.values()))
    return {str(k): int(v) for k, v in inner.items()} if isinstance(inner, dict) else None


def start_checker(
    spark: SparkSession,
    settings: Settings,
    *,
    fetch: FetchConfig | None = None,
    metrics: JobMetrics | None = None,
    run_id: str | None = None,
) -> RunningChecker:
    """Build and start the streaming query; returns at once (the query runs in Spark's threads)."""
    checker = settings.checker
    config = job_config(settings, fetch)
    options = kafka_source_options(
        settings.kafka,
        starting_offsets=checker.starting_offsets,
        fail_on_data_loss=checker.fail_on_data_loss,
        max_offsets_per_trigger=checker.max_offsets_per_trigger,
        fetch_wait_ms=checker.kafka_fetch_wait_ms,
    )
    checkpoint = (
        checker.checkpoint_dir if "://" in checker.checkpoint_dir else str(Path(checker.checkpoint_dir).resolve())
    )
    check_checkpoint_source(checkpoint, settings.kafka.topic)
    stream_id = checkpoint_stream_id(spark, checkpoint)
    outputs = BatchOutputs(CheckpointFiles(spark, checkpoint))
    replay = _replay_handle(outputs)
    raw = spark.readStream.format(FORMAT).options(**options).load()
    prepared = raw.select("partition", "offset", "key", "value").mapInArrow(PrepareEvents(config, replay), PREPARED_DDL)
    checked = (
        prepared.withColumn("bucket", expr(BUCKET_EXPRESSION))
        .groupBy("bucket")
        .transformWithState(LedgerProcessor(config, replay), NARROW_DDL, outputMode="Append", timeMode="ProcessingTime")
    )
    tables = job_tables(spark, checker, app_id=f"{APP_ID}-{stream_id}")
    verified = None
    if checker.reverify_interval > 0:
        verified = VerifiedCounts(
            outputs.files,
            interval_ms=config.tracker.reverify_interval_ms,
            grace_ms=config.tracker.overdue_grace_ms,
            table_every_s=checker.verification_ages_seconds,
        )
    metrics = metrics or JobMetrics()
    gauges = OpenGauges(metrics, checker.data_dir, every_s=checker.open_violation_gauges_seconds)
    gauges.refresh(changed=True)  # what is open from the start, before the first batch
    calendar = TimerCalendar(outputs.files)
    waker = _waker(settings, calendar, stream_id, config.ledgers_root) if checker.wake_on_timers else None
    sink = BatchSink(
        tables,
        run_id=run_id or stream_id,
        metrics=metrics,
        outputs=outputs,
        verified=verified,
        gauges=gauges,
        calendar=calendar,
        waker=waker,
    )
    query = (
        checked.writeStream.queryName("scrutiny_checker")
        .foreachBatch(sink)
        .option("checkpointLocation", checkpoint)
        .trigger(processingTime=f"{checker.trigger_seconds} seconds")
        .start()
    )
    running = RunningChecker(query, sink, waker)
    sink.lag = running.lag
    sink.on_batch = running.on_batch
    if waker is not None:
        waker.alive = lambda: bool(query.isActive)
        waker.start()
    if checker.orphan_sweep_seconds > 0:
        tables.ensure_tables()  # here, not by the sweep's thread while the first batch creates them too
        running.sweep = job_sweep(
            spark,
            settings,
            fetch=config.fetch,
            ledgers_root=config.ledgers_root,
            run_id=run_id or stream_id,
            lag=running.lag,
        )
        running.sweep.start()
    log.info("checker started: query %s, tables under %s", query.id, checker.data_dir)
    return running


def _waker(settings: Settings, calendar: TimerCalendar, stream_id: str, root: str) -> Waker:
    """The thread that publishes the checker's TICKs (:mod:`~.timer_wake`)."""
    publisher = Publisher(watcher_id=f"checker-{stream_id}", epoch=0, ledgers_root=root)
    send = TickSender(producer_kwargs(settings.kafka, "scrutiny-checker-wake"), settings.kafka.topic, publisher)
    return Waker(calendar, send, idle_s=settings.checker.idle_batch_seconds, close=send.close)
