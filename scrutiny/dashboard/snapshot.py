"""The dashboard's snapshot: what one refresh of the page shows, as plain frozen dataclasses.

A :class:`DashboardSnapshot` holds one section per panel of the page (:mod:`.data` reads them);
a section that is ``None`` has no data yet and the page shows :data:`NO_DATA` for it. Nothing here reads or draws.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Final

from scrutiny.core.vocabulary import Severity

__all__ = [
    "NO_DATA",
    "SEVERITIES",
    "BookieHealth",
    "CategoryCount",
    "CheckerHealth",
    "Coverage",
    "VerificationAge",
    "Latency",
    "MissingReplica",
    "Overview",
    "RunPoint",
    "Segment",
    "DashboardSnapshot",
    "StuckLedger",
    "Timeline",
    "WorstLedger",
]

#: Severities worst first, as the page lists them.
SEVERITIES: Final = (Severity.CRITICAL.value, Severity.WARNING.value, Severity.INFO.value)
#: What the page shows for a section that is None.
NO_DATA: Final = "no data yet"


@dataclass(frozen=True, slots=True)
class Overview:
    """Open violations in numbers; ``status`` is ``HEALTHY`` unless some open violation is critical."""

    status: str
    open_total: int
    ledgers_affected: int
    by_severity: Mapping[str, int]
    data_loss_ledgers: int


@dataclass(frozen=True, slots=True)
class CategoryCount:
    """One row of the ``open_violations_by_category`` view."""

    category: str
    severity: str
    open_count: int
    ledgers: int


@dataclass(frozen=True, slots=True)
class Timeline:
    """First detections and resolutions per bucket of ``bucket_seconds``, oldest first, empty buckets included."""

    bucket_seconds: int
    starts: tuple[datetime, ...]
    detected: tuple[int, ...]
    resolved: tuple[int, ...]
    source: str  # the table the counts come from


@dataclass(frozen=True, slots=True)
class Segment:
    """One ensemble of a ledger: from ``first_entry`` on, entries are striped over ``bookies``."""

    first_entry: int
    bookies: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class MissingReplica:
    """A bookie lacking entries it should hold (an open ``MISSING_REPLICA``); ``ranges`` empty when not recorded."""

    bookie: str
    segment_first_entry: int | None
    entry_count: int | None
    ranges: str


@dataclass(frozen=True, slots=True)
class WorstLedger:
    """A ledger among the worst (ranked as ``scrutiny report`` ranks them) with its evidence."""

    ledger_id: int
    worst_severity: str
    data_loss: bool
    entries_affected: int | None
    first_seen: datetime
    pulsar_topic: str | None
    categories: tuple[str, ...]
    missing: tuple[MissingReplica, ...]
    ensemble: tuple[Segment, ...]
    quorum: str | None  # "E 3, WQ 2, AQ 2" when recorded


@dataclass(frozen=True, slots=True)
class BookieHealth:
    """One row of the ``violations_per_bookie`` view."""

    bookie: str
    open_count: int
    ledgers: int
    critical: int
    warning: int
    info: int
    entries: int


@dataclass(frozen=True, slots=True)
class ClusterFinding:
    """An open finding of the cluster rather than of a ledger (``BOOKIE_LOST``, ``AUTORECOVERY_DISABLED``,
    ``NO_AUDITOR``: ledger id -1 in the tables)."""

    category: str
    severity: str
    bookie: str | None
    first_seen: datetime
    details: str | None


@dataclass(frozen=True, slots=True)
class StuckLedger:
    """One row of the ``under_replication_age`` view."""

    ledger_id: int
    bookie: str | None
    pulsar_topic: str | None
    first_seen: datetime
    age_hours: float
    details: str | None


@dataclass(frozen=True, slots=True)
class Coverage:
    """The ``check_coverage`` view; ``coverage`` (0..1) is None when no ledger is closed."""

    window_hours: float
    closed_ledgers: int
    verified_ledgers: int
    unverified_ledgers: int
    coverage: float | None
    oldest_verification: datetime | None


@dataclass(frozen=True, slots=True)
class VerificationAge:
    """One row of the ``verification_age`` view: the ledgers whose last verification is in one age class."""

    age_class: str
    age_from_seconds: float
    age_to_seconds: float | None
    ledgers: int
    oldest_verification: datetime | None
    measured_at: datetime


@dataclass(frozen=True, slots=True)
class Latency:
    """The ``detection_latency`` view: percentiles of close-to-verdict latency (None when there is no check)."""

    window_hours: float
    checks: int
    p50_ms: int | None
    p90_ms: int | None
    p99_ms: int | None
    max_ms: int | None


@dataclass(frozen=True, slots=True)
class CheckerHealth:
    """The ``checker_health`` view for the streaming job, and whether it looks stalled."""

    last_run_id: str
    last_batch_id: int
    last_batch_at: datetime
    seconds_since_last_batch: float
    last_duration_ms: int
    last_lag_records: int | None
    batches_per_minute: float
    events_last_hour: int
    checks_last_hour: int
    violations_last_hour: int
    stalled: bool


@dataclass(frozen=True, slots=True)
class RunPoint:
    """One recent batch of the streaming job (``checker_runs``)."""

    batch_id: int
    finished_at: datetime
    duration_ms: int
    events: int
    ledgers_checked: int
    lag_records: int | None


@dataclass(frozen=True, slots=True)
class DashboardSnapshot:
    """Everything the page shows, as of ``generated_at``; a section that is None has no data yet."""

    data_dir: str
    generated_at: datetime
    missing_tables: tuple[str, ...] = ()
    problems: tuple[str, ...] = ()
    overview: Overview | None = None
    cluster: tuple[ClusterFinding, ...] | None = None
    categories: tuple[CategoryCount, ...] | None = None
    timeline: Timeline | None = None
    worst: tuple[WorstLedger, ...] | None = None
    bookies: tuple[BookieHealth, ...] | None = None
    under_replication: tuple[StuckLedger, ...] | None = None
    coverage: Coverage | None = None
    verification_ages: tuple[VerificationAge, ...] | None = None
    latency: Latency | None = None
    checker: CheckerHealth | None = None
    runs: tuple[RunPoint, ...] | None = None
