"""The job's ``foreachBatch`` sink: one micro-batch's records into the Delta tables, exactly once.

Runs on the driver after Spark has computed the batch. It collects the processor's output as
Arrow (violations and checks are small next to the events), separates the bookkeeping records
("stats" from the fetch stage, "retry" when a re-check is scheduled) from the table records, and
hands the rest to :class:`~scrutiny.streaming.delta_writer.CheckerTables`, which writes each table with Delta's
idempotent-write identifiers (the stream's app id and the batch id): a batch that Spark re-runs after a crash is
written once, Delta itself skipping the tables that already hold it. Before the first table is written, the batch's
output is kept in the checkpoint directory, so that a batch Spark re-runs returns exactly these records and the
states they were made from (:mod:`scrutiny.streaming.checker.replay`): what the tables that skip it hold and what the
others get are one and the same run.
"""

from __future__ import annotations

import json
import logging
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame

from scrutiny.connectors.tables.schemas import CHECKER_RUNS, RunRecord, output_table
from scrutiny.streaming.checker.metrics import JobMetrics
from scrutiny.streaming.checker.open_gauges import OpenGauges
from scrutiny.streaming.checker.records import STATE_RECORD, widen_table
from scrutiny.streaming.checker.replay import BatchOutputs
from scrutiny.streaming.checker.timer_wake import TimerCalendar, Waker
from scrutiny.streaming.checker.verified_counts import VerifiedCounts
from scrutiny.streaming.delta_writer import CheckerTables

log = logging.getLogger(__name__)

_TABLE_RECORDS = ("violation", "resolved", "check")


@dataclass
class BatchSummary:
    """What the last batch did, for the live display and the tests.

    ``compute_seconds``: Spark computing the batch (events to records); ``seconds``: writing the tables;
    ``resolutions``: the resolved violations by category (``resolved`` counts them all).
    """

    batch_id: int = -1
    events: int = 0
    checks: int = 0
    verdicts: dict[str, int] = field(default_factory=dict)
    violations: dict[str, int] = field(default_factory=dict)
    resolved: int = 0
    resolutions: dict[str, int] = field(default_factory=dict)
    rpcs: int = 0
    retries_pending: int = 0
    seconds: float = 0.0
    compute_seconds: float = 0.0


class BatchSink:
    """The callable given to ``foreachBatch``."""

    def __init__(
        self,
        tables: CheckerTables,
        *,
        run_id: str,
        source: str = "stream",
        metrics: JobMetrics | None = None,
        lag: Callable[[], int | None] = lambda: None,
        on_batch: Callable[[BatchSummary], None] | None = None,
        outputs: BatchOutputs | None = None,
        verified: VerifiedCounts | None = None,
        gauges: OpenGauges | None = None,
        calendar: TimerCalendar | None = None,
        waker: Waker | None = None,
    ) -> None:
        self.tables = tables
        self.outputs = outputs
        self.verified = verified
        self.gauges = gauges
        self.calendar = calendar
        self.waker = waker
        # When the last batch ended: the next one starts later, so its timers due by then fire in it. 0 before the
        # first batch of a run, which may be one Spark runs again with its first run's (earlier) time.
        self._previous_end_ms = 0
        self.run_id = run_id
        self.source = source
        self.metrics = metrics or JobMetrics()
        self.lag = lag
        self.on_batch = on_batch
        self.pending: set[int] = set()
        self.last = BatchSummary()

    def __call__(self, frame: DataFrame, batch_id: int) -> None:
        """Write batch ``batch_id`` (called by Spark; a re-run of a written batch writes nothing twice)."""
        started = datetime.now(UTC)
        if self.waker is not None:
            self.waker.batch_started()
        clock = time.monotonic()
        output = frame.toArrow()
        computed = time.monotonic() - clock
        clock = time.monotonic()
        if self.outputs is not None:
            self.outputs.keep(batch_id, output)  # before any table: a crash from here on replays this output
        rows = widen_table(output.filter(pc.field("record") != STATE_RECORD))
        if self.calendar is not None and self.calendar.apply(rows, batch_not_before_ms=self._previous_end_ms):
            self.calendar.keep()
        stats = _figures([r for r in rows if r["record"] == "stats"])
        self._track_retries(rows)
        records = output_table([r for r in rows if r["record"] in _TABLE_RECORDS])
        summary = _summary(batch_id, records, stats, len(self.pending))
        run = RunRecord(
            run_id=self.run_id,
            started_at=started,
            finished_at=datetime.now(UTC),
            events=summary.events,
            ledgers_checked=summary.checks,
            violations=sum(summary.violations.values()),
            resolved=summary.resolved,
            rpcs=summary.rpcs,
            retries_pending=summary.retries_pending,
            lag_records=self.lag(),
            source=self.source,
        )
        rejected = [r for r in rows if r["record"] == "rejected"]
        ages = None
        if self.verified is not None:
            self.verified.apply(batch_id, rows)
            ages = self.verified.table_rows(time.time_ns() // 1_000_000, batch_id=batch_id, run_id=self.run_id)
        result = self.tables.write_batch(batch_id, records, run, rejected=rejected, ages=ages)
        if self.verified is not None:
            self.verified.keep()
        if self.outputs is not None:
            self.outputs.forget_before(batch_id)
        summary.seconds = time.monotonic() - clock
        summary.compute_seconds = computed
        if self.gauges is not None:
            self.gauges.refresh(changed=bool(summary.violations or summary.resolved))
        self._previous_end_ms = time.time_ns() // 1_000_000
        if self.waker is not None:
            self.waker.batch_done()
        if CHECKER_RUNS in result.skipped:
            log.info("batch %d was already written (a re-run after a restart): figures not counted again", batch_id)
            return
        self._report_rejected(rejected)
        self._publish(summary, run)

    def _track_retries(self, rows: list[dict[str, object]]) -> None:
        for row in rows:
            ledger = row["ledger_id"]
            assert isinstance(ledger, int)
            if row["record"] == "retry":
                self.pending.add(ledger)
            elif row["record"] in ("check", "forgotten"):
                self.pending.discard(ledger)

    def _report_rejected(self, rejected: list[dict[str, object]]) -> None:
        """Count the records of the topic the checker skipped, and say where the first of them is."""
        for reason, count in Counter(str(r["reason"]) for r in rejected).items():
            self.metrics.rejected.labels(reason).inc(count)
        if rejected:
            first = rejected[0]
            log.warning(
                "skipped %d record(s) of the topic that the checker cannot use (table rejected_events); first:"
                " partition %s offset %s, %s: %s",
                len(rejected),
                first["kafka_partition"],
                first["kafka_offset"],
                first["reason"],
                first["details"],
            )

    def _publish(self, summary: BatchSummary, run: RunRecord) -> None:
        m = self.metrics
        m.batch_duration.observe(summary.seconds)
        m.events.inc(summary.events)
        for verdict, count in summary.verdicts.items():
            m.checks.labels(verdict).inc(count)
        m.rpcs.inc(summary.rpcs)
        m.retries_pending.set(summary.retries_pending)
        for category, count in summary.violations.items():
            m.violations.labels(category).inc(count)
        for category, count in summary.resolutions.items():
            m.resolved.labels(category).inc(count)
        if run.lag_records is not None:
            m.lag.set(run.lag_records)
        m.last_batch.set(time.time())
        if self.verified is not None:
            now_ms = time.time_ns() // 1_000_000
            for age in self.verified.classes(now_ms):
                m.verified_ledgers.labels(age.name).set(age.ledgers)
            oldest = self.verified.current.oldest_ms()
            m.oldest_verification_age.set(0 if oldest is None else (now_ms - oldest) / 1000)
        m.batch_id.set(summary.batch_id)
        self.last = summary
        if self.on_batch is not None:
            self.on_batch(summary)


def _figures(stats: list[dict[str, object]]) -> dict[str, int]:
    totals: dict[str, int] = {}
    for row in stats:
        details = row.get("details")
        for name, value in json.loads(details if isinstance(details, str) else "{}").items():
            totals[name] = totals.get(name, 0) + int(value)
    return totals


def _summary(batch_id: int, records: pa.Table, stats: dict[str, int], pending: int) -> BatchSummary:
    kinds = records.column("record").to_pylist()
    categories = records.column("category").to_pylist()
    verdicts = records.column("verdict").to_pylist()
    return BatchSummary(
        batch_id=batch_id,
        events=stats.get("events", 0),
        checks=kinds.count("check"),
        verdicts=_counts(v for k, v in zip(kinds, verdicts, strict=True) if k == "check" and v is not None),
        violations=_counts(c for k, c in zip(kinds, categories, strict=True) if k == "violation" and c is not None),
        resolved=kinds.count("resolved"),
        resolutions=_counts(c for k, c in zip(kinds, categories, strict=True) if k == "resolved" and c is not None),
        rpcs=stats.get("rpcs", 0),
        retries_pending=pending,
    )


def _counts(values: Iterable[str]) -> dict[str, int]:
    return dict(Counter(values))
