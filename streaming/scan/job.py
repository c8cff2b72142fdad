"""A one-shot scan on Spark in batch mode: one ZooKeeper walk, every selected ledger checked, tables written.

The driver reads the cluster from ZooKeeper (:mod:`~scrutiny.streaming.scan.snapshot`: registrations, racks, marks),
looks up which violations the tables hold open, then walks the ledgers and checks them in chunks as the walk hands
them on (their passwords taken out of their metadata: the tasks never see one), so the driver's memory does not grow
with the cluster: each chunk is one Spark job (:class:`~scrutiny.streaming.scan.tasks.ScanLedgers` over
``mapInArrow``) whose records are written to the checker's Delta tables as one batch with source ``scan`` (exactly
once per scan id, like the streaming checker's batches). A stop request (:meth:`ScanRun.stop`, e.g. Ctrl-C) cancels
the running Spark job and ends the scan between chunks: the chunks written before stay, each complete; nothing is
half written. Ledgers gone from ZooKeeper have their open violations resolved only by a scan whose walk ran to the
end.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime

import pyarrow as pa
from pyspark.errors import PySparkException
from pyspark.sql import SparkSession

from scrutiny.connectors.tables.delta import TableError
from scrutiny.connectors.tables.health import TableReadError
from scrutiny.connectors.tables.orphan_rows import read_sightings
from scrutiny.connectors.tables.schemas import OPEN_VIOLATIONS, RunRecord, output_table
from scrutiny.connectors.zookeeper.client import close_zookeeper_client, start_zookeeper_client, zookeeper_target
from scrutiny.connectors.zookeeper.cluster_cache import CachedClusterReader, ClusterCacheError
from scrutiny.core.errors import ScrutinyError
from scrutiny.core.ledger_scan import ScanItem, ScanMode, ScanStep, gone
from scrutiny.core.ledger_tracker import ViolationKey
from scrutiny.settings.loader import Settings
from scrutiny.streaming.checker.job import job_config
from scrutiny.streaming.checker.orphan_judge import OrphanJudge
from scrutiny.streaming.checker.records import NARROW_DDL, Record, widen_table
from scrutiny.streaming.delta_writer import CheckerTables, read_delta
from scrutiny.streaming.scan.held import JUDGE_BATCH, HeldSurvey, survey_held_ledgers
from scrutiny.streaming.scan.progress import ProgressListener
from scrutiny.streaming.scan.snapshot import (
    Progress,
    ScanOptions,
    ScanSnapshot,
    WalkError,
    ZooKeeperSnapshot,
    open_snapshot,
)
from scrutiny.streaming.scan.tasks import INPUT_SCHEMA, SOURCE, ScanConfig, ScanLedgers, encode_keys, step_records
from scrutiny.streaming.table_upkeep import TableUpkeep

log = logging.getLogger(__name__)

#: How often the driver looks at a running chunk's progress (and at a stop request).
_POLL_S = 0.25
_TABLE_RECORDS = ("violation", "resolved", "check")


class ScanError(ScrutinyError):
    """The scan cannot run: ZooKeeper unreachable, an unreadable table, a Spark job that failed."""


@dataclass
class ScanResult:
    """What a scan did and found (``violations``: the violation records it wrote)."""

    scan_id: str
    mode: ScanMode
    started_ms: int
    ledgers_in_zookeeper: int = 0
    selected: int = 0
    examined: int = 0
    checked: int = 0
    resolved: int = 0
    rpcs: int = 0
    batches: int = 0
    violations: list[Record] = field(default_factory=list)
    interrupted: bool = False
    #: Whether the ZooKeeper walk ran to its end (a scan stopped before has counted only the ledgers met so far).
    walked: bool = False
    warnings: list[str] = field(default_factory=list)
    #: What the agents' bookies hold without metadata (a deep scan of every ledger that ran to the end; else None).
    held: HeldSurvey | None = None
    read_seconds: float = 0.0
    check_seconds: float = 0.0


class ScanRun:
    """One scan; :meth:`run` does it, :meth:`stop` (any thread, e.g. a signal handler) ends it safely."""

    def __init__(self, spark: SparkSession, settings: Settings, options: ScanOptions) -> None:
        if options.chunk_size < 1:
            raise ScanError(f"the chunk size must be at least 1, got {options.chunk_size}")
        self.spark = spark
        self.settings = settings
        self.options = options
        self.scan_id = f"scan-{datetime.now(UTC):%Y%m%dT%H%M%SZ}-{uuid.uuid4().hex[:8]}"
        self.data_dir = options.data_dir or settings.checker.data_dir
        self._stopping = threading.Event()
        self._checker_tables: CheckerTables | None = None

    def stop(self) -> None:
        """Cancel the running Spark job and end the scan before the next chunk.

        Safe in a signal handler: the cancel goes to the JVM from a thread of its own, since the interrupted thread
        may be in the middle of a call on its own connection to the JVM (py4j refuses a call inside a call).
        """
        self._stopping.set()
        threading.Thread(target=self._cancel_jobs, name="scan-cancel", daemon=True).start()

    def _cancel_jobs(self) -> None:
        try:
            self.spark.sparkContext.cancelAllJobs()
        except Exception as error:  # the session may be stopping too
            log.debug("cancelling the scan's Spark jobs: %s", error)

    def run(self, progress: Progress | None = None) -> ScanResult:
        """Read the cluster, walk the ledgers chunk by chunk, check each chunk and write the tables; the figures."""
        report = progress or (lambda phase, done, total: None)
        result = ScanResult(self.scan_id, self.options.mode, int(time.time() * 1000))
        prior = read_open_keys(self.spark, self.data_dir)
        with open_snapshot(self.settings, self.options, prior, report) as zookeeper:
            snapshot = zookeeper.snapshot
            result.warnings += snapshot.warnings
            if not self._stopping.is_set():
                self._check_chunks(zookeeper, result, report)
            result.ledgers_in_zookeeper, result.selected = snapshot.ledgers_in_zookeeper, snapshot.selected
            result.read_seconds = snapshot.read_seconds
        result.walked = snapshot.walked
        result.interrupted = self._stopping.is_set() or not snapshot.walked or result.examined < snapshot.selected
        if not result.interrupted and snapshot.gone:
            rows = [r for lid, keys in snapshot.gone.items() for r in _gone_records(lid, keys)]
            self._write(self._tables(), result.batches, rows, started=datetime.now(UTC), examined=0, result=result)
        if not result.interrupted and self.options.surveys_held:
            try:
                judge = self._orphan_judge(snapshot, self._tables(), result)
                result.held = self._survey_held(snapshot, self._config(snapshot), report, judge)
            except (ClusterCacheError, TableError) as error:
                result.warnings.append(f"what the bookies hold without metadata was not surveyed: {error}")
            except (PySparkException, TableReadError) as error:  # the orphan_sightings table unreadable or unwritable
                result.warnings.append(f"the orphan sightings were not read or written: {_first_line(error)}")
        return result

    def _check_chunks(self, zookeeper: ZooKeeperSnapshot, result: ScanResult, report: Progress) -> None:
        """Check the walk's chunks one by one until the walk ends or a stop request (then between chunks)."""
        snapshot = zookeeper.snapshot
        tables = self._tables()
        config = self._config(snapshot)
        clock = time.monotonic()
        read_before = snapshot.read_seconds
        report("ledgers checked", 0, None)
        try:
            self._check_walked(zookeeper, tables, config, result, report)
        except WalkError as error:
            raise ScanError(f"{error}; the {result.examined} ledgers checked before are in the tables") from error
        result.check_seconds = time.monotonic() - clock - (snapshot.read_seconds - read_before)

    def _check_walked(
        self,
        zookeeper: ZooKeeperSnapshot,
        tables: CheckerTables,
        config: ScanConfig,
        result: ScanResult,
        report: Progress,
    ) -> None:
        """The loop of :meth:`_check_chunks`: a Spark job and a table batch per chunk of the walk."""
        snapshot = zookeeper.snapshot

        def total() -> int | None:
            return snapshot.selected if snapshot.walked else None

        for batch_id, chunk in enumerate(zookeeper.chunks(self.options.chunk_size)):
            if self._stopping.is_set():
                break
            started = datetime.now(UTC)
            checked_before = result.examined
            finished_in_chunk = 0

            def finished(ledgers: int, before: int = checked_before, size: int = len(chunk)) -> None:
                nonlocal finished_in_chunk
                finished_in_chunk += ledgers
                report("ledgers checked", before + min(finished_in_chunk, size), total())

            rows = self._check(chunk, config, finished)
            if rows is None:
                break
            self._write(tables, batch_id, rows, started=started, examined=len(chunk), result=result)
            report("ledgers checked", result.examined, total())

    def _tables(self) -> CheckerTables:
        """The checker's tables, written with this scan's application id (created on first use)."""
        if self._checker_tables is None:
            checker = self.settings.checker
            self._checker_tables = CheckerTables(
                self.spark,
                self.data_dir,
                app_id=f"scrutiny-{self.scan_id}",
                conflict_attempts=checker.write_conflict_attempts,
                upkeep=TableUpkeep.of(checker),
            )
            self._checker_tables.ensure_tables()
        return self._checker_tables

    def _orphan_judge(self, snapshot: ScanSnapshot, tables: CheckerTables, result: ScanResult) -> OrphanJudge:
        """The survey's judge of ``ORPHAN_LEDGER`` (:class:`~scrutiny.streaming.checker.orphan_judge.OrphanJudge`):
        what it judged is written when the survey ends (:meth:`_survey_held`), the findings and resolutions as a batch
        of their own, or sooner once :data:`~scrutiny.streaming.scan.held.JUDGE_BATCH` of them wait."""

        def write(rows: list[Record]) -> None:
            self._write(tables, result.batches, rows, started=datetime.now(UTC), examined=0, result=result)

        judge = OrphanJudge(
            self.spark,
            self.data_dir,
            read=lambda: (read_sightings(self.data_dir), snapshot.open_orphans),
            grace_ms=round(self.settings.checker.orphan_grace_seconds * 1000),
            conflict_attempts=self.settings.checker.write_conflict_attempts,
            source=SOURCE,
            write=write,
            max_pending=JUDGE_BATCH,
        )
        judge.load()
        return judge

    def _survey_held(
        self, snapshot: ScanSnapshot, config: ScanConfig, report: Progress, judge: OrphanJudge
    ) -> HeldSurvey:
        """What the agents' bookies hold without metadata (:mod:`~scrutiny.streaming.scan.held`), judged by ``judge``:
        one write of all the bookies' ranges at the end (a write per range costs seconds of Delta commits per bookie),
        sooner when the judge's ``max_pending`` findings and resolutions wait."""
        listed = 0

        def more(ledgers: int) -> None:
            nonlocal listed
            listed += ledgers
            report("held ledgers listed", listed, None)

        target = zookeeper_target(self.settings.zookeeper)
        reader = CachedClusterReader(self.settings.zookeeper, target.ledgers_root)
        try:
            survey = survey_held_ledgers(
                snapshot.registrations,
                config.fetch,
                snapshot.known,
                reader.ledgers_present,
                only_bookie=self.options.bookie,
                progress=more,
                judge=judge,
            )
        finally:
            reader.close()
        judge.flush()
        return survey

    def _config(self, snapshot: ScanSnapshot) -> ScanConfig:
        job = job_config(self.settings, source=SOURCE)
        return ScanConfig(
            mode=self.options.mode,
            tracker=job.tracker,
            fetch=job.fetch,
            cluster=snapshot.cluster,
            registrations=snapshot.registrations,
            fetch_timeout_s=job.fetch_timeout_s,
            lost_bookies=snapshot.lost_bookies,
        )

    def _check(self, chunk: list[ScanItem], config: ScanConfig, finished: Callable[[int], None]) -> list[Record] | None:
        """The chunk's records (None when the scan was stopped while Spark ran it).

        With a local master, ``finished(n)`` is called as the tasks report ledgers finished (see
        :mod:`~scrutiny.streaming.scan.progress`) while the job runs in a thread of its own.
        """
        partitions = max(1, min(self.spark.sparkContext.defaultParallelism, math.ceil(len(chunk) / 100)))
        frame = self.spark.createDataFrame(input_table(chunk)).repartition(partitions)
        local = (self.spark.sparkContext.master or "").startswith("local")
        try:
            with contextlib.ExitStack() as stack:
                listener = stack.enter_context(ProgressListener()) if local else None
                if listener is not None:
                    config = replace(config, progress_to=listener.address)
                pool = stack.enter_context(ThreadPoolExecutor(max_workers=1, thread_name_prefix="scan-job"))
                job = pool.submit(frame.mapInArrow(ScanLedgers(config), NARROW_DDL).toArrow)
                while not job.done():
                    if listener is None:
                        time.sleep(_POLL_S)
                    elif reported := listener.receive(_POLL_S):
                        finished(reported)
                output = job.result()
        except Exception as error:
            if self._stopping.is_set():
                return None
            raise ScanError(f"the scan's Spark job failed: {_first_line(error)}") from error
        if self._stopping.is_set():
            return None
        return widen_table(output)

    def _write(
        self,
        tables: CheckerTables,
        batch_id: int,
        rows: list[Record],
        *,
        started: datetime,
        examined: int,
        result: ScanResult,
    ) -> None:
        rpcs = sum(_stat(r, "rpcs") for r in rows if r["record"] == "stats")
        records = [r for r in rows if r["record"] in _TABLE_RECORDS]
        found = [r for r in records if r["record"] == "violation"]
        checks = sum(1 for r in records if r["record"] == "check")
        resolved = sum(1 for r in records if r["record"] == "resolved")
        run = RunRecord(
            run_id=self.scan_id,
            started_at=started,
            finished_at=datetime.now(UTC),
            events=examined,
            ledgers_checked=checks,
            violations=len(found),
            resolved=resolved,
            rpcs=rpcs,
            source=SOURCE,
        )
        tables.write_batch(batch_id, output_table(records), run)
        result.batches += 1
        result.examined += examined
        result.checked += checks
        result.resolved += resolved
        result.rpcs += rpcs
        result.violations += found


def read_open_keys(spark: SparkSession, data_dir: str) -> dict[int, list[ViolationKey]]:
    """The violations ``open_violations`` holds open, by ledger (no table yet: none); read by Spark."""
    try:
        rows = (
            read_delta(spark, data_dir, OPEN_VIOLATIONS)
            .where("resolved_at IS NULL")
            .select("ledger_id", "category", "bookie", "segment_first_entry")
            .collect()
        )
    except TableError:
        return {}
    except PySparkException as error:
        raise ScanError(f"cannot read the open violations under {data_dir}: {_first_line(error)}") from error
    out: dict[int, list[ViolationKey]] = {}
    for row in rows:
        segment = row["segment_first_entry"]
        key = (row["category"], row["bookie"] or "", -1 if segment is None else segment)
        out.setdefault(row["ledger_id"], []).append(key)
    return out


def probe_zookeeper(settings: Settings, *, timeout_s: float = 15.0) -> None:
    """Fail early and clearly: ZooKeeper reachable and the ledgers root there (a scan of nothing is no HEALTHY)."""
    target = zookeeper_target(settings.zookeeper)
    client = start_zookeeper_client(settings.zookeeper, timeout_s=timeout_s)
    try:
        if client.exists(target.ledgers_root) is None:
            raise ScanError(
                f"no ledgers root {target.ledgers_root} in ZooKeeper at {target.hosts}: "
                "check zookeeper.connect / ledgers_root (or metadata_uri)"
            )
    finally:
        close_zookeeper_client(client)


def input_table(items: list[ScanItem]) -> pa.Table:
    """The chunk as the tasks' input (:data:`~scrutiny.streaming.scan.tasks.INPUT_SCHEMA`)."""
    return pa.Table.from_pydict(
        {
            "ledger_id": [i.ledger_id for i in items],
            "version": [i.version for i in items],
            "data": [i.data for i in items],
            "mark_replicas": [None if i.mark is None else list(i.mark.replicas) for i in items],
            "mark_ctime": [None if i.mark is None else i.mark.ctime_ms for i in items],
            "open_keys": [encode_keys(list(i.open_keys)) for i in items],
            "written_ms": [i.written_ms for i in items],
            "decode_error": [i.decode_error or None for i in items],
            "lock_bookie": [None if i.lock is None else i.lock.bookie for i in items],
            "lock_since_ms": [None if i.lock is None else i.lock.since_ms for i in items],
        },
        schema=INPUT_SCHEMA,
    )


def _gone_records(ledger_id: int, keys: tuple[ViolationKey, ...]) -> list[Record]:
    return step_records(ledger_id, ScanStep((gone(keys),)), int(time.time() * 1000))


def _stat(row: Record, name: str) -> int:
    details = row.get("details")
    return int(json.loads(details).get(name, 0)) if isinstance(details, str) else 0


def _first_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return text[0] if text else type(error).__name__
